"""HTTP client for one outside renderer: idempotent submit, one classified status look (`observe`, which
never raises for HTTP trouble) and result download that never carries the API credential to a signed
URL. Translates httpx errors to docfence.providers.errors at this boundary."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import httpx

from docfence.core.clock import Clock, SystemClock
from docfence.providers.config import JsonPath, ProviderConfig, origin
from docfence.providers.errors import (
    ProviderDownloadFailed,
    ProviderMalformed,
    ProviderRedirectRefused,
    ProviderRejected,
    ProviderUnavailable,
)
from docfence.providers.observation import (
    MAX_REASON_CHARS,
    MAX_STATUS_CHARS,
    Observation,
    ObservationKind,
    safe_text,
)

log = logging.getLogger("docfence.providers")

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_JOB_ID = 200


def parse_retry_after(value: str | None, *, now: datetime, cap_s: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), clamped to [0, cap_s];
    None when absent or unparseable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000" means UTC without a claim of local time
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    return min(max(seconds, 0.0), cap_s)


def _read_capped(resp: httpx.Response, limit: int) -> bytes | None:
    """The body of a streamed response, or None once it grows past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _is_safe_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.username


class ProviderClient:
    """Talks to one provider. Two httpx clients: `_api` carries the credential, `_plain` never does
    (downloads of signed URLs). Neither reads proxies or .netrc from the environment."""

    def __init__(
        self,
        config: ProviderConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 15,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        self.config = config
        self._timeout_s = float(timeout_s)
        self._clock: Clock = clock or SystemClock()
        self._sleep = sleep
        common: dict[str, Any] = {"timeout": timeout_s, "follow_redirects": False, "trust_env": False}
        self._api = httpx.Client(transport=transport, headers=config.auth_headers(), **common)
        self._plain = httpx.Client(transport=transport, **common)
        self._status_path = JsonPath.parse(config.status_path)
        self._job_id_path = JsonPath.parse(config.job_id_path)
        self._reason_path = JsonPath.parse(config.reason_path) if config.reason_path else None
        self._result_path = JsonPath.parse(config.result_url_path) if config.result_url_path else None

    def close(self) -> None:
        self._api.close()
        self._plain.close()

    def __enter__(self) -> ProviderClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- submit -------------------------------------------------------------------------------------

    def submit(
        self, data: bytes, *, idempotency_key: str, filename: str, fields: dict[str, str] | None = None
    ) -> str:
        """Create a provider job and return its id. Retries transport errors, 5xx, 409 and 429 with the
        SAME idempotency key, so the provider creates at most one job; without an idempotency header
        nothing is retried. Raises ProviderRejected (4xx), ProviderMalformed, ProviderUnavailable."""
        if not idempotency_key or len(idempotency_key) > 255 or not idempotency_key.isprintable():
            raise ValueError("idempotency_key must be 1-255 printable characters")
        headers: dict[str, str] = {}
        if self.config.idempotency_header:
            headers[self.config.idempotency_header] = idempotency_key
        attempts = self.config.submit_max_attempts if self.config.idempotency_header else 1
        body = self._submit_body(data, filename, fields or {})
        for attempt in range(1, attempts + 1):
            wait = self._submit_once(headers, body, last=attempt == attempts)
            if isinstance(wait, str):
                log.info("provider submit accepted provider_job_id=%s", wait)
                return wait
            self._sleep(wait if wait is not None else self._backoff(attempt))
        raise ProviderUnavailable("the provider kept failing the submit")  # pragma: no cover

    def _submit_body(self, data: bytes, filename: str, fields: dict[str, str]) -> dict[str, Any]:
        if self.config.submit_style == "json":
            doc = {**fields, self.config.file_field: base64.b64encode(data).decode(), "filename": filename}
            return {"json": doc}
        return {"files": {self.config.file_field: (filename, data, "application/pdf")}, "data": fields}

    def _submit_once(
        self, headers: dict[str, str], body: dict[str, Any], *, last: bool
    ) -> str | float | None:
        """The job id, or how long to wait before retrying (None: use backoff). Raises when done."""
        try:
            resp = self._api.post(self.config.submit_url, headers=headers, **body)
        except httpx.HTTPError as exc:
            if last:
                raise ProviderUnavailable(f"submit failed: {type(exc).__name__}") from exc
            return None
        code = resp.status_code
        if resp.is_success:
            return self._job_id(resp.content)
        if code in (409, 429) or code >= 500:
            if last:
                raise ProviderUnavailable(f"submit answered HTTP {code} on every attempt")
            cap = self.config.poll.retry_after_cap_s
            return parse_retry_after(resp.headers.get("retry-after"), now=self._clock.now(), cap_s=cap)
        raise ProviderRejected(f"submit rejected with HTTP {code}")

    def _job_id(self, content: bytes) -> str:
        try:
            value = self._job_id_path.get(json.loads(content))
        except (ValueError, LookupError, RecursionError) as exc:
            raise ProviderMalformed("the submit answer carries no job id") from exc
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ProviderMalformed("the submit answer's job id is not a string")
        text = str(value)
        if not text or len(text) > _MAX_JOB_ID or not text.isprintable():
            raise ProviderMalformed("the submit answer's job id is empty, too long or unprintable")
        return text

    def _backoff(self, attempt: int) -> float:
        policy = self.config.poll
        return float(min(policy.initial_delay_s * policy.backoff_factor ** (attempt - 1), policy.max_delay_s))

    # -- observe ------------------------------------------------------------------------------------

    def status_url(self, provider_job_id: str) -> str:
        return self.config.status_url.replace("{id}", quote(provider_job_id, safe=""))

    def observe(self, provider_job_id: str, *, timeout_s: float | None = None) -> Observation:
        """One status GET, classified. Never raises for HTTP-level trouble."""
        url = self.status_url(provider_job_id)
        timeout = self._timeout_s if timeout_s is None else min(timeout_s, self._timeout_s)
        try:
            with self._api.stream("GET", url, timeout=timeout) as resp:
                if not resp.is_success:
                    return self._http_observation(provider_job_id, resp)
                body = _read_capped(resp, self.config.max_status_bytes)
        except httpx.HTTPError as exc:
            log.debug(
                "provider status transport error provider_job_id=%s: %s", provider_job_id, type(exc).__name__
            )
            return Observation(provider_job_id, ObservationKind.TRANSPORT_ERROR, self._clock.now())
        now = self._clock.now()
        if body is None:
            return Observation(provider_job_id, ObservationKind.MALFORMED, now, http_status=resp.status_code)
        return self._classify(provider_job_id, body, resp.status_code, url, now)

    def _http_observation(self, provider_job_id: str, resp: httpx.Response) -> Observation:
        now = self._clock.now()
        kind = ObservationKind.RATE_LIMITED if resp.status_code == 429 else ObservationKind.HTTP_ERROR
        retry_after = parse_retry_after(
            resp.headers.get("retry-after"), now=now, cap_s=self.config.poll.retry_after_cap_s
        )
        return Observation(
            provider_job_id, kind, now, http_status=resp.status_code, retry_after_s=retry_after
        )

    def _classify(self, job_id: str, body: bytes, code: int, url: str, now: datetime) -> Observation:
        malformed = Observation(job_id, ObservationKind.MALFORMED, now, http_status=code)
        try:
            doc = json.loads(body)
            raw = self._status_path.get(doc)
        except (ValueError, LookupError, RecursionError):
            return malformed
        if not isinstance(raw, str):
            return malformed
        status = safe_text(raw, MAX_STATUS_CHARS)
        seen = Observation(job_id, ObservationKind.RUNNING, now, status=status, http_status=code)
        cfg = self.config
        if raw in cfg.running:
            return seen
        if raw in cfg.succeeded:
            result_url = self._result_url(job_id, doc, url)
            if result_url is None:
                return Observation(job_id, ObservationKind.MALFORMED, now, status=status, http_status=code)
            return replace(seen, kind=ObservationKind.SUCCEEDED, result_url=result_url)
        if raw in cfg.failed:
            return replace(seen, kind=ObservationKind.FAILED, reason=self._reason(doc))
        return replace(seen, kind=ObservationKind.UNKNOWN_STATUS)

    def _reason(self, doc: Any) -> str | None:
        if self._reason_path is None:
            return None
        try:
            return safe_text(self._reason_path.get(doc), MAX_REASON_CHARS)
        except LookupError:
            return None

    def _result_url(self, job_id: str, doc: Any, status_url: str) -> str | None:
        if self.config.result_url_template is not None:
            return self.config.result_url_template.replace("{id}", quote(job_id, safe=""))
        assert self._result_path is not None
        try:
            value = self._result_path.get(doc)
        except LookupError:
            return None
        if not isinstance(value, str) or not value:
            return None
        url = urljoin(status_url, value)
        return url if _is_safe_url(url) else None

    # -- download -----------------------------------------------------------------------------------

    def download_result(self, result_url: str) -> bytes:
        """Fetch the result, following redirects by hand. The credential goes only on the first hop,
        only when `result_auth` is set and that hop is on an API origin; every redirect target (the
        signed URL) is fetched by the client that has no credential. Raises ProviderDownloadFailed,
        ProviderRedirectRefused, ProviderUnavailable."""
        if not _is_safe_url(result_url):
            raise ProviderRedirectRefused("the result URL is not an absolute http(s) URL")
        url = result_url
        use_auth = self.config.result_auth and origin(url) in self.config.api_origins()
        for _hop in range(self.config.max_redirects + 1):
            client = self._api if use_auth else self._plain
            try:
                with client.stream("GET", url) as resp:
                    if resp.status_code not in _REDIRECTS:
                        return self._download_body(resp)
                    url = _redirect_target(url, resp.headers.get("location"))
            except httpx.HTTPError as exc:
                raise ProviderUnavailable(f"result download failed: {type(exc).__name__}") from exc
            use_auth = False  # a redirect target never receives the credential, whatever its origin
        raise ProviderRedirectRefused("too many redirects")

    def _download_body(self, resp: httpx.Response) -> bytes:
        if not resp.is_success:
            raise ProviderDownloadFailed(f"result download answered HTTP {resp.status_code}")
        body = _read_capped(resp, self.config.max_result_bytes)
        if body is None:
            raise ProviderDownloadFailed("the result exceeds max_result_bytes")
        return body


def _redirect_target(current: str, location: str | None) -> str:
    if not location:
        raise ProviderRedirectRefused("a redirect without a Location")
    target = urljoin(current, location)
    if not _is_safe_url(target):
        raise ProviderRedirectRefused("a redirect to a non-http(s) URL or one carrying credentials")
    if urlsplit(current).scheme == "https" and urlsplit(target).scheme != "https":
        raise ProviderRedirectRefused("a redirect that downgrades https to http")
    return target

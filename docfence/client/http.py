"""DocfenceClient: the httpx client of the docfence API, with a bounded `wait()` and a verifying download.

The signed-URL download goes through a second httpx client that has no Authorization header at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from docfence.client.download import stream_to
from docfence.client.errors import ArtifactMissing, PollTimeout, TransportError
from docfence.client.models import BatchView, JobPage, JobView
from docfence.client.wire import Document, form_options, job_from, raise_for_status, settled, upload_part
from docfence.core.clock import monotonic

__all__ = ["FIRST_DELAY_S", "MAX_DELAY_S", "DocfenceClient", "Document", "raise_for_status"]

FIRST_DELAY_S = 0.25
MAX_DELAY_S = 4.0


# `docfence serve` closes a connection idle for [server].keep_alive_s (5 s by default), as does httpx's
# own default expiry: a request sent on a reused connection just as the server closes it fails with
# "connection reset". Idle connections are let go well before the server's default closes them.
KEEPALIVE_EXPIRY_S = 2.0


class DocfenceClient:
    """Talks to one docfence server with one API key. Use as a context manager or call close()."""

    def __init__(
        self, base_url: str, api_key: str, *, transport: httpx.BaseTransport | None = None,
        timeout_s: float = 30.0, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = monotonic, jitter: Callable[[], float] = random.random,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._sleep, self._clock, self._jitter = sleep, clock, jitter
        limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self._http = httpx.Client(base_url=self.base_url, transport=transport, timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {api_key}"}, follow_redirects=False,
                                  limits=limits)
        # Never carries credentials: signed URLs are bearer tokens themselves.
        self._public = httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=False,
                                    limits=limits)

    def close(self) -> None:
        self._http.close()
        self._public.close()

    def __enter__(self) -> DocfenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls -----------------------------------------------------------------------------------
    def submit(
        self, path_or_bytes: Document, *, idempotency_key: str | None = None,
        document_class: str | None = None, mode: str | None = None,
        watermark: Mapping[str, Any] | None = None, deadline_s: float | None = None,
        label: str | None = None, password: str | None = None, wait_s: float | None = None,
        marks: Sequence[Mapping[str, Any]] | None = None, recipient: str | None = None,
        purpose: str | None = None, reference: str | None = None,
    ) -> JobView:
        """Upload a PDF and create a job (the same idempotency key and request return the same job).

        `label`: your own tag (search with `list_jobs(label=...)`). `password`: the PDF's, sealed by the
        server beside the input and used by the render only. `wait_s`: answer once the job ended or
        that long (capped by the server) ran out; `JobView.terminal` tells which. `marks` replaces the
        class's marks; recipient, purpose and reference fill the marks' fields."""
        data = form_options(document_class=document_class, mode=mode, deadline_s=deadline_s,
                        watermark=watermark, label=label, password=password)
        if marks is not None:
            data["marks"] = json.dumps([dict(m) for m in marks])
        for name, value in (("recipient", recipient), ("purpose", purpose), ("reference", reference)):
            if value is not None:
                data[name] = value
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        params = {"wait": f"{wait_s:g}"} if wait_s else None
        timeout = self.timeout_s + wait_s if wait_s else None
        with contextlib.ExitStack() as stack:
            response = self._request("POST", "/v1/jobs", files={"file": upload_part(path_or_bytes, stack)},
                                     data=data, headers=headers, params=params, timeout=timeout)
        return job_from(response)

    def submit_batch(
        self, documents: Sequence[Document], *, items: Sequence[Mapping[str, Any]] | None = None,
        partial: bool = False, document_class: str | None = None, mode: str | None = None,
        watermark: Mapping[str, Any] | None = None, deadline_s: float | None = None, label: str | None = None,
    ) -> BatchView:
        """Submit many PDFs in one request, committed in one transaction. `items`: one mapping per
        document (document_class, mode, deadline_s, watermark, idempotency_key, label, password)
        over the batch-wide options. Default all or nothing (an invalid item raises with its
        `items[i].<field>`); `partial=True` answers refused items per item and commits the others."""
        data = form_options(document_class=document_class, mode=mode, deadline_s=deadline_s,
                        watermark=watermark, label=label)
        if items is not None:
            data["items"] = json.dumps([dict(item) for item in items])
        with contextlib.ExitStack() as stack:
            files = [("file", upload_part(doc, stack)) for doc in documents]
            response = self._request("POST", "/v1/jobs/batch", files=files, data=data,
                                     params={"partial": "true"} if partial else None)
        return BatchView.from_json(response.json())

    def list_jobs(
        self, *, state: str | None = None, document_class: str | None = None, mode: str | None = None,
        created_after: datetime | None = None, created_before: datetime | None = None,
        label: str | None = None, filename: str | None = None, limit: int = 50, cursor: str | None = None,
    ) -> JobPage:
        """One page of your tenant's jobs, newest first; pass `page.next_cursor` as `cursor` for the
        next. Times need a time zone; label and filename match exactly."""
        params: dict[str, str] = {"limit": str(limit)}
        for name, value in (("state", state), ("document_class", document_class), ("mode", mode),
                            ("label", label), ("filename", filename), ("cursor", cursor)):
            if value:
                params[name] = value
        for name, when in (("created_after", created_after), ("created_before", created_before)):
            if when is not None:
                params[name] = when.isoformat()
        return JobPage.from_json(self._request("GET", "/v1/jobs", params=params).json())

    def iter_jobs(self, *, cursor: str | None = None, **filters: Any) -> Iterator[JobView]:
        """Every job under `list_jobs` filters, page after page (each page one request), from `cursor`
        (default: the newest)."""
        while True:
            page = self.list_jobs(cursor=cursor, **filters)
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get(self, job_id: str, *, wait_s: float | None = None, timeout_s: float | None = None) -> JobView:
        params = {"wait": f"{wait_s:g}"} if wait_s else None
        return job_from(self._request("GET", f"/v1/jobs/{job_id}", params=params, timeout=timeout_s))

    def cancel(self, job_id: str, *, reason: str | None = None) -> JobView:
        """Cancel a queued or rendering job; `reason` (free text, at most 200 characters) is audited."""
        params = {"reason": reason} if reason else None
        return job_from(self._request("POST", f"/v1/jobs/{job_id}/cancel", params=params))

    def delete(self, job_id: str, *, request_id: str, reason: str | None = None) -> JobView:
        """Remove every byte of a job (needs the tenant admin key), keeping its metadata as a tombstone;
        `request_id` names the deletion request it fulfils and `reason` says why (both audited)."""
        params = {"request_id": request_id, **({"reason": reason} if reason else {})}
        return job_from(self._request("DELETE", f"/v1/jobs/{job_id}", params=params))

    def events(self, job_id: str) -> dict[str, Any]:
        """The audit timeline (`events`) and attempt history (`attempts`) of a job."""
        body: dict[str, Any] = self._request("GET", f"/v1/jobs/{job_id}/events").json()
        return body

    # -- reports ---------------------------------------------------------------------------------
    def request_report(
        self, subject: str, period: str, template: str, data: Mapping[str, Any], *,
        variant: str | None = None, document_class: str | None = None, processor: str = "local",
        watermark: Mapping[str, Any] | None = None, supersede: bool = False,
    ) -> dict[str, Any]:
        """Request a report of `subject` for `period` from `template` ("id@version"). The same request
        again returns the first; different data for a current request is a Conflict unless
        `supersede` (see `supersede_report`)."""
        body: dict[str, Any] = {"subject": subject, "period": period, "template": template,
                                "data": dict(data), "processor": processor, "supersede": supersede}
        if variant is not None:
            body["variant"] = variant
        if document_class is not None:
            body["document_class"] = document_class
        if watermark is not None:
            body["watermark"] = dict(watermark)
        answer: dict[str, Any] = self._request("POST", "/v1/report-requests", json=body).json()
        return answer

    def supersede_report(self, subject: str, period: str, template: str, data: Mapping[str, Any],
                         **options: Any) -> dict[str, Any]:
        """Replace the current request of subject, period and template (its job ended) with corrected
        data; the old request and its jobs stay as evidence, linked by `supersedes`."""
        return self.request_report(subject, period, template, data, supersede=True, **options)

    def get_report(self, request_id: str) -> dict[str, Any]:
        """The report request with its state, revision links and jobs."""
        answer: dict[str, Any] = self._request("GET", f"/v1/report-requests/{request_id}").json()
        return answer

    def retry_report(self, request_id: str) -> JobView:
        """A new job for a report request whose last job failed or was canceled."""
        return job_from(self._request("POST", f"/v1/report-requests/{request_id}/retry"))

    # -- webhooks (a tenant admin key) -----------------------------------------------------------
    def create_webhook_endpoint(self, url: str, events: Sequence[str] = ("*",), *,
                                description: str | None = None) -> dict[str, Any]:
        """A new endpoint of the key's tenant; the answer's `secret` (whsec_...) is shown this once."""
        body = {"url": url, "events": list(events), "description": description}
        answer: dict[str, Any] = self._request("POST", "/v1/webhooks/endpoints", json=body).json()
        return answer

    def list_webhook_endpoints(self) -> list[dict[str, Any]]:
        """The tenant's endpoints, disabled ones included (never their secrets)."""
        answer: list[dict[str, Any]] = self._request("GET", "/v1/webhooks/endpoints").json()
        return answer

    def rotate_webhook_secret(self, endpoint_id: str) -> dict[str, Any]:
        """A new signing secret, shown this once; the old one signs alongside it for a grace period."""
        answer: dict[str, Any] = self._request(
            "POST", f"/v1/webhooks/endpoints/{endpoint_id}/rotate-secret").json()
        return answer

    def disable_webhook_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        """No more deliveries to it; its pending ones fail as `endpoint_disabled`."""
        answer: dict[str, Any] = self._request("DELETE", f"/v1/webhooks/endpoints/{endpoint_id}").json()
        return answer

    def capabilities(self) -> dict[str, Any]:
        body: dict[str, Any] = self._request("GET", "/v1/capabilities").json()
        return body

    # -- wait ------------------------------------------------------------------------------------
    def wait(self, job_id: str, *, budget_s: float = 45.0) -> JobView:
        """Poll until the job is terminal, within a finite budget.

        Backoff 250 ms doubling to 4 s with up to 25% jitter, never shorter than the server's Retry-After.
        Returns the succeeded job; raises JobFailed, JobCanceled, ArtifactMissing, UnknownState, or
        PollTimeout (this caller's budget ran out: not a job failure; the job id is on the error).
        """
        until = self._clock() + budget_s
        delay, last = FIRST_DELAY_S, None
        while True:
            remaining = until - self._clock()
            if remaining <= 0:
                raise PollTimeout(job_id, last)
            try:
                last = self.get(job_id, timeout_s=min(self.timeout_s, max(remaining, 0.05)))
            except TransportError as exc:
                if until - self._clock() <= 0:
                    raise PollTimeout(job_id, last) from exc
                raise
            if settled(last):
                return last
            pause = delay + self._jitter() * delay / 4
            if last.retry_after_s is not None:
                pause = max(pause, last.retry_after_s)
            remaining = until - self._clock()
            if pause >= remaining:
                self._sleep(max(remaining, 0.0))
                raise PollTimeout(job_id, last)
            self._sleep(pause)
            delay = min(delay * 2, MAX_DELAY_S)

    # -- download --------------------------------------------------------------------------------
    def download(self, job_id: str, dest: str | os.PathLike[str]) -> Path:
        """Fetch the artifact through its signed URL (no Authorization sent there), verify its sha256
        and write it atomically. `dest` may be a folder (then `<job_id>.pdf` inside it): an existing one,
        or a path ending in a separator (`dl/`), which is created."""
        job = self.get(job_id)
        # A deleted job's artifact is gone: the artifact route answers 410 artifact_gone (raised as Gone).
        if not job.raw.get("deleted_at") and (job.state != "succeeded" or job.artifact is None):
            settled(job)  # raises the job's terminal error, if any
            raise ArtifactMissing(f"job {job_id} has no artifact yet (state {job.state})")
        redirect = self._request("GET", f"/v1/jobs/{job_id}/artifact", expect_redirect=True)
        url = redirect.url.join(redirect.headers["location"])
        raw = os.fspath(dest)
        target = Path(raw)
        if raw.endswith(("/", os.sep)):  # Path() drops the separator that says "a folder"
            target.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            target = target / f"{job_id}.pdf"
        if job.artifact is None:
            raise ArtifactMissing(f"job {job_id} has no artifact (state {job.state})")
        stream_to(self._public, url, target, job.artifact.sha256)
        return target

    # -- public verification (no key is sent) ---------------------------------------------------
    def verify(self, job_id: str, code: str, *, document: str | os.PathLike[str] | bytes | None = None,
               sha256: str | None = None) -> dict[str, Any]:
        """GET /v1/verify/{job_id} (issuer, issue time, sha256, deleted); with `document` (a path or
        bytes) or `sha256`, POST it and answer {"match", "sha256"}. NotFound for anything that is not
        a verifiable document with this code."""
        url, params = f"{self.base_url}/v1/verify/{job_id}", {"c": code}
        try:
            if document is None and sha256 is None:
                response = self._public.get(url, params=params)
            elif isinstance(document, bytes):
                response = self._public.post(url, params=params, files={"file": ("document.pdf", document)})
            elif document is not None:  # hashed here: the server takes a file of a few MB only
                with Path(document).open("rb") as fh:
                    digest = hashlib.file_digest(fh, "sha256").hexdigest()
                response = self._public.post(url, params=params, data={"sha256": digest})
            else:
                response = self._public.post(url, params=params, data={"sha256": str(sha256)})
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach the docfence API at {self.base_url} (verify: "
                                 f"{type(exc).__name__})") from exc
        raise_for_status(response)
        return dict(response.json())

    # -- plumbing --------------------------------------------------------------------------------
    def _request(self, method: str, url: str, *, expect_redirect: bool = False,
                 timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, url, timeout=timeout or self.timeout_s, **kwargs)
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach the docfence API at {self.base_url} ({method} {url}: "
                                 f"{type(exc).__name__})") from exc
        if expect_redirect and response.status_code in (302, 303, 307) and "location" in response.headers:
            return response
        raise_for_status(response)
        return response

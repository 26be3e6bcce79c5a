"""Use cases shared by the API and the CLI: submit, read, cancel, download, API keys and signed URLs.

Handlers call these and never the store; every error raised here carries a stable `code`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from docfence import layout
from docfence.blobs import BlobStore, RegionRouter
from docfence.config import Settings
from docfence.core import tokens
from docfence.core.access import SCOPES, Principal, check_scopes, check_tenant
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import (
    ArtifactGone,
    ArtifactNotReady,
    BlobIntegrityError,
    BlobNotFound,
    ConfigError,
    DocfenceError,
    EmptyUpload,
    Forbidden,
    IllegalTransition,
    InvalidRequest,
    InvalidWatermark,
    JobAlreadyEnded,
    NotFound,
    SignedUrlRevoked,
    Unauthorized,
    UnsupportedUpload,
    UploadTooLarge,
)
from docfence.core.ids import new_id
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.core.records import ApiKey, Artifact, Attempt, AuditEvent, Job, NewJob
from docfence.core.states import JobState
from docfence.observability import metrics
from docfence.store.base import Store
from docfence.store.wakeups import JobEndWatch

log = logging.getLogger(__name__)

KEY_PREFIX = "dfk_"
REASON_CHARS = 200  # a cancel or delete reason, free text kept in the audit event
SNIFF_BYTES = 1024  # a PDF's %PDF- header must start within these first bytes (as PDF readers accept)
_KEY_ID_RE = re.compile(r"[0-9a-f]{12}")
#: Actors that name a process (worker host and pid): anything but a key reference that holds a digit.
_PROCESS_ACTOR_RE = re.compile(r"(?!key:).*[0-9].*")
__all__ = ["SCOPES", "Download", "Forbidden", "InvalidRequest", "JobDetail", "Principal", "Service",
           "SubmitRequest", "Unauthorized", "build_service", "check_reason", "check_tenant",
           "load_signing_secret"]


# -- submissions --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SubmitRequest:
    """What a caller may choose; everything else comes from the document class."""

    document_class: str | None = None
    mode: str | None = None
    deadline_s: float | None = None
    watermark: Mapping[str, Any] | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class JobDetail:
    job: Job
    artifact: Artifact | None


@dataclass(frozen=True)
class Download:
    """An open, verifying stream of one artifact (close it when done)."""

    job_id: str
    attempt: int
    sha256: str
    size: int
    chunks: Iterator[bytes]
    close: Callable[[], None]


class _CappedReader:
    """Reads through to `raw` and raises UploadTooLarge once more than `limit` bytes went by."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self.raw, self.limit, self.total = raw, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.total += len(data)
        if self.total > self.limit:
            raise UploadTooLarge(f"the upload exceeds {self.limit} bytes; nothing was stored")
        return data


class _SniffedPdf:
    """Reads through to `raw` once its first bytes proved a PDF: EmptyUpload (no bytes) or
    UnsupportedUpload (no `%PDF-` within the first SNIFF_BYTES) before anything is stored."""

    def __init__(self, raw: BinaryIO) -> None:
        head = b""
        while len(head) < SNIFF_BYTES:
            chunk = raw.read(SNIFF_BYTES - len(head))
            if not chunk:
                break
            head += chunk
        if not head:
            raise EmptyUpload("the upload is empty; send a PDF file")
        if b"%PDF-" not in head:
            raise UnsupportedUpload(f"the upload is not a PDF: no %PDF- header in its first {SNIFF_BYTES} "
                                    "bytes")
        self.raw, self.head = raw, head

    def read(self, n: int = -1) -> bytes:
        if self.head:
            if n < 0:
                data, self.head = self.head + self.raw.read(), b""
                return data
            data, self.head = self.head[:n], self.head[n:]
            return data
        return self.raw.read(n)


def check_reason(reason: str | None) -> str | None:
    """A caller's free-text reason, trimmed (None when blank); InvalidRequest names the field when it
    is longer than REASON_CHARS or holds control characters (it is shown in timelines)."""
    if reason is None or not reason.strip():
        return None
    text = reason.strip()
    if len(text) > REASON_CHARS:
        raise InvalidRequest(f"reason: at most {REASON_CHARS} characters (got {len(text)})", field="reason")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise InvalidRequest("reason: control characters (newlines, tabs) are not allowed", field="reason")
    return text


def load_signing_secret(settings: Settings) -> bytes:
    """The configured secret, or one generated once and kept (mode 0600) next to the data."""
    if settings.signing_secret:
        return str(settings.signing_secret).encode("utf-8")
    folder = _data_dir(settings.database_url, settings.storage_url)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "signing.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_hex(32).encode("ascii"))
    return path.read_bytes().strip()


def _data_dir(database_url: str, storage_url: str) -> Path:
    if database_url.startswith("sqlite:///"):
        return Path(database_url[len("sqlite:///") :]).parent
    if storage_url.startswith("file:"):
        return Path(storage_url[len("file:") :].removeprefix("//")).parent
    raise ConfigError("set DOCFENCE_SIGNING_SECRET: API servers without a local data folder must share one")


class Service:
    """The use cases. One instance per process; thread-safe as long as the store is."""

    def __init__(self, settings: Settings, store: Store, router: RegionRouter, *, clock: Clock | None = None,
                 signing_secret: bytes | None = None) -> None:
        self.settings, self.store, self.router = settings, store, router
        self.clock = clock or SystemClock()
        self._secret = signing_secret or load_signing_secret(settings)
        # SQLite has one writer: queueing writers here, not in SQLite's sleeping busy handler, keeps
        # a burst of submits from starving the threadpool that status reads also need.
        self._writes = threading.BoundedSemaphore(1 if getattr(store, "dialect", "") == "sqlite" else 32)

    # -- submit ----------------------------------------------------------------------------------
    def submit(self, principal: Principal, stream: BinaryIO, request: SubmitRequest) -> tuple[Job, bool]:
        """Store the upload under a pre-chosen job id, then create (or find) the job.

        Raises UploadTooLarge (nothing stored), RegionNotApproved (before any byte is stored),
        InvalidRequest, IdempotencyConflict. A duplicate submission returns the first job.
        """
        principal.require("jobs.submit")
        tenant = check_tenant(principal.tenant)
        policy = self._policy(request)
        blobs = self.router.for_region(policy.region)
        job_id = new_id()
        key = layout.input_key(tenant, job_id)
        limit = int(self.settings.max_upload_bytes)
        sniffed = _SniffedPdf(stream)
        info = blobs.put_stream(key, _CappedReader(sniffed, limit), max_bytes=limit)
        new = NewJob(
            tenant=tenant, policy=policy, input_key=key, input_sha256=info.sha256, input_bytes=info.bytes,
            idempotency_key=request.idempotency_key, request_hash=_request_hash(info.sha256, policy, request),
            actor=principal.actor, job_id=job_id,
        )
        try:
            with self._writes:
                job, created = self.store.submit(new)
        except BaseException:
            blobs.delete(key)
            raise
        if job.input_key != key:
            blobs.delete(key)  # an earlier identical submission already owns its input
        log.info("job %s submitted (created=%s, attempt %d)", job.id, created, job.attempt)
        return job, created

    def _policy(self, request: SubmitRequest) -> JobPolicy:
        """The frozen policy of a submission; InvalidWatermark (400) for a bad watermark spec,
        InvalidRequest (422) for anything else the caller chose wrongly."""
        watermark = None
        if request.watermark is not None:
            try:
                base = self.settings.document_class(request.document_class).watermark
            except ConfigError as exc:
                raise InvalidRequest(exc.message, field=exc.field) from exc
            watermark = _watermark(base, request.watermark)
        try:
            cls = self.settings.document_class(request.document_class)
            mode = request.mode or self.store.class_modes().get(cls.name)
            if mode is not None:
                mode = Mode(mode).value
            overrides: dict[str, Any] = {}
            if request.deadline_s is not None:
                overrides["deadline_s"] = request.deadline_s
            if watermark is not None:
                overrides["watermark"] = watermark
            policy: JobPolicy = self.settings.policy_for(cls.name, mode_override=mode, **overrides)
            return policy
        except ConfigError as exc:
            raise InvalidRequest(exc.message, field=exc.field) from exc
        except (ValueError, TypeError) as exc:
            raise InvalidRequest(f"invalid request: {exc}") from exc

    # -- reads and cancel -----------------------------------------------------------------------
    def get(self, principal: Principal, job_id: str) -> JobDetail:
        principal.require("jobs.read")
        return self.describe(self._visible(principal, job_id))

    def describe(self, job: Job) -> JobDetail:
        """The job with its artifact record once succeeded (the caller already may see the job)."""
        artifact = self.store.artifact(job.id) if job.state is JobState.SUCCEEDED else None
        return JobDetail(job, artifact)

    def watch_job_end(self, job_id: str, *, on_wake: Callable[[], None] | None = None) -> JobEndWatch:
        """A subscription to the announcement that `job_id` ended, for long-polls (close it when done).

        Start it before reading the job, then re-read with `get` (which also checks the caller may
        see the job) whenever it wakes: wakes are hints, sent only for committed transitions, and
        reveal nothing by themselves. `on_wake` runs in the store's listener thread: keep it instant.
        """
        return self.store.watch_job_end((job_id,), on_wake=on_wake)

    def cancel(self, principal: Principal, job_id: str, *, reason: str | None = None) -> Job:
        """Cancel a queued or rendering job. Cancelling a canceled job again returns it unchanged (the
        caller's wish already holds); a succeeded or failed job raises JobAlreadyEnded (409). `reason`
        (free text, at most REASON_CHARS) is recorded in the audit event as `details.note`."""
        principal.require("jobs.cancel")
        note = check_reason(reason)
        job = self._visible(principal, job_id)
        if not job.terminal:
            try:
                with self._writes:
                    canceled = self.store.cancel(job.id, actor=principal.actor, note=note)
            except IllegalTransition:
                job = self.store.get(job.id)  # it ended between the read and the fenced update
            else:
                metrics.record_terminal(canceled)
                return canceled
        if job.state is JobState.CANCELED:
            return job
        raise JobAlreadyEnded(f"job {job.id} already ended as {job.state.value}; there is nothing to cancel")

    def delete(self, principal: Principal, job_id: str, request_id: str, *, reason: str | None = None) -> Job:
        """Remove every byte of the job (input, all attempts, artifact) and keep its metadata as a
        tombstone; a running attempt is canceled first. Needs the tenant admin (jobs.delete); audited
        with who asked, the request id and the free-text `reason` (`details.note`)."""
        from docfence.maintenance.deletion import DeletionService

        principal.require("jobs.delete")
        note = check_reason(reason)
        job = self._visible(principal, job_id)
        if not re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", request_id):
            raise InvalidRequest("the deletion request id must be 1-128 letters, digits or ._:-",
                                 field="request_id")
        with self._writes:
            DeletionService(self.store, self.router).delete_job(
                job.id, actor=principal.actor, request_id=request_id, note=note)
        return self.store.get(job.id)

    def events(self, principal: Principal, job_id: str) -> tuple[list[AuditEvent], list[Attempt]]:
        """The job's timeline and attempts; worker hosts and pids appear only to operators (others see
        a stable alias per worker, so attempts can still be told apart)."""
        principal.require("jobs.read")
        job = self._visible(principal, job_id)
        events, attempts = self.store.audit_events(job.id), self.store.attempts(job.id)
        if principal.allows("ops.workers"):
            return events, attempts
        return ([replace(e, actor=self.worker_alias(e.actor)) for e in events],
                [replace(a, worker=self.worker_alias(a.worker)) for a in attempts])

    def worker_alias(self, actor: str) -> str:
        """`actor` unless it names a process (host and pid): then `worker-<10 hex>`, keyed by the signing
        secret so the alias cannot be reversed by guessing hosts and pids."""
        if actor is None or not _PROCESS_ACTOR_RE.fullmatch(actor):
            return actor
        return "worker-" + hmac.new(self._secret, actor.encode(), hashlib.sha256).hexdigest()[:10]

    def _visible(self, principal: Principal, job_id: str) -> Job:
        """Another tenant's job is indistinguishable from a missing one."""
        try:
            job = self.store.get(job_id)
        except NotFound:
            raise NotFound(f"no job {job_id}") from None
        if job.tenant != principal.tenant:
            raise NotFound(f"no job {job_id}")
        return job

    def store_ready(self) -> bool:
        try:
            self.store.now()
        except DocfenceError:
            return False
        return True

    # -- artifacts and signed URLs ----------------------------------------------------------------
    def artifact_url_token(self, principal: Principal, job_id: str) -> str:
        """A short-lived token for `/v1/signed/{token}`; binds job, attempt, sha256, expiry and key."""
        principal.require("jobs.read")
        job = self._visible(principal, job_id)
        artifact = self._live_artifact(job)
        expires = int(self.clock.now().timestamp() + float(self.settings.signed_url_ttl_s))
        return tokens.sign({"j": job.id, "a": artifact.attempt, "s": artifact.sha256, "e": expires,
                            "k": principal.key_id}, self._secret)

    def open_signed(self, token: str) -> Download:
        """Verify the token, record a "download" audit event and open a verifying stream.

        Raises SignedUrlInvalid (tampered), SignedUrlExpired, SignedUrlRevoked (the minting key was
        revoked), ArtifactGone (deleted since signing). The stream never yields the artifact's last
        bytes unless every byte matched the recorded sha256 (see `_verified`)."""
        payload = tokens.verify(token, self._secret, self.clock.now().timestamp())
        minted_by = self.store.get_api_key(str(payload.get("k", "")))
        if minted_by is None or minted_by.revoked_at is not None:
            raise SignedUrlRevoked()
        try:
            job = self.store.get(str(payload["j"]))
        except NotFound:
            raise ArtifactGone() from None
        artifact = self._live_artifact(job)
        if artifact.attempt != payload["a"] or artifact.sha256 != payload["s"]:
            raise ArtifactGone("the artifact this link named is no longer published")
        try:
            blobs = self.router.for_region(job.region)
            reader = blobs.open_read(artifact.key, expected_sha256=artifact.sha256)
        except BlobNotFound:
            raise ArtifactGone() from None
        with self._writes:
            self.store.record_event("download", actor=f"key:{payload['k']}", job_id=job.id,
                                    details={"attempt": artifact.attempt, "bytes": artifact.bytes})
        log.info("job %s attempt %d artifact downloaded", job.id, artifact.attempt)
        return Download(job.id, artifact.attempt, artifact.sha256, artifact.bytes,
                        self._verified(job, artifact, reader.iter_chunks()), reader.close)

    def _verified(self, job: Job, artifact: Artifact, chunks: Iterator[bytes]) -> Iterator[bytes]:
        """Yield `chunks` one behind: the last chunk is released only once every byte was hashed, the
        count and the sha256 match the artifact record. On a mismatch nothing more is sent, the
        mismatch is audited ("download_integrity_failed") and BlobIntegrityError aborts the response,
        so a client never receives a complete body of bad bytes."""
        digest, sent, held = hashlib.sha256(), 0, None
        try:
            for chunk in chunks:
                digest.update(chunk)
                if held is not None:
                    sent += len(held)
                    yield held
                held = chunk
            total = sent + len(held or b"")
            if total != artifact.bytes or digest.hexdigest() != artifact.sha256:
                raise BlobIntegrityError(f"job {job.id} artifact does not match its sha256")
        except BlobIntegrityError:
            with self._writes:
                self.store.record_event("download_integrity_failed", actor="api", job_id=job.id,
                                        reason="sha256_mismatch",
                                        details={"attempt": artifact.attempt, "bytes_sent": sent})
            log.error("job %s attempt %d artifact failed its sha256; download aborted", job.id,
                      artifact.attempt)
            raise
        if held is not None:
            yield held

    def _live_artifact(self, job: Job) -> Artifact:
        if job.deleted_at is not None:
            raise ArtifactGone()
        if job.state is not JobState.SUCCEEDED:
            raise ArtifactNotReady(f"job {job.id} is {job.state.value}; it has no artifact")
        artifact = self.store.artifact(job.id)
        if artifact is None:
            raise ArtifactNotReady(f"job {job.id} has no artifact")
        if artifact.deleted_at is not None:
            raise ArtifactGone()
        return artifact

    # -- API keys ---------------------------------------------------------------------------------
    def create_api_key(self, tenant: str, scopes: tuple[str, ...], *, name: str = "",
                       actor: str = "cli") -> tuple[ApiKey, str]:
        """Returns the record and the full key `dfk_<id>_<secret>`; only sha256(secret) is stored."""
        check_tenant(tenant)
        scopes = check_scopes(tuple(scopes))
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        record = self.store.insert_api_key(key_id, tenant=tenant, name=name or key_id, scopes=tuple(scopes),
                                           key_hash=_hash_secret(secret), actor=actor)
        return record, f"{KEY_PREFIX}{key_id}_{secret}"

    def authenticate(self, presented: str | None) -> Principal:
        """Raises Unauthorized for a missing, malformed, unknown, wrong or revoked key."""
        if not presented or not presented.startswith(KEY_PREFIX):
            raise Unauthorized()
        key_id, _, secret = presented[len(KEY_PREFIX) :].partition("_")
        if not _KEY_ID_RE.fullmatch(key_id) or not secret:
            raise Unauthorized()
        record = self.store.get_api_key(key_id)
        if record is None or record.revoked_at is not None:
            raise Unauthorized()
        if not hmac.compare_digest(_hash_secret(secret), record.key_hash):
            raise Unauthorized()
        return Principal(record.id, record.tenant, record.scopes)

    def revoke_api_key(self, key_id: str, *, actor: str = "cli") -> ApiKey:
        return self.store.revoke_api_key(key_id, actor=actor)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        return self.store.list_api_keys(tenant)


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _watermark(base: WatermarkSpec, given: Mapping[str, Any]) -> WatermarkSpec:
    """The class's spec with the caller's fields; InvalidWatermark (400) names the field at fault."""
    try:
        return WatermarkSpec.from_mapping(given, base)
    except ConfigError as exc:
        raise InvalidWatermark(exc.message, field="watermark") from None


def _request_hash(input_sha256: str, policy: JobPolicy, request: SubmitRequest) -> str:
    """Same bytes + same caller choices = same request (class mode changes do not create conflicts)."""
    chosen = {"document_class": policy.document_class, "mode": request.mode,
              "deadline_s": request.deadline_s, "watermark": dict(request.watermark or {})}
    canonical = json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{input_sha256}\n{canonical}".encode()).hexdigest()


def build_service(
    settings: Settings, store: Store | None = None, blobs: RegionRouter | BlobStore | None = None,
    *, clock: Clock | None = None,
) -> Service:
    """Wire a Service from settings; `blobs` may be a router or one store serving every region."""
    if store is None:
        from docfence.store.base import open_store

        store = open_store(settings.database_url)
    if blobs is None:
        router = RegionRouter.from_config(settings.region_urls())
    elif isinstance(blobs, RegionRouter):
        router = blobs
    else:
        router = RegionRouter({region: blobs for region in settings.region_urls()})
    return Service(settings, store, router, clock=clock)

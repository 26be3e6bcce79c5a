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
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

from docfence import storage_keys as layout
from docfence.blobs import BlobStore, RegionRouter
from docfence.blobs.sealed import PasswordSeal, load_key
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
    Forbidden,
    IllegalTransition,
    InvalidRequest,
    InvalidWatermark,
    JobAlreadyEnded,
    NotFound,
    RegionNotApproved,
    RequestError,
    SignedUrlRevoked,
    Unauthorized,
)
from docfence.core.fields import CALLER_FIELDS, check_value
from docfence.core.ids import new_id
from docfence.core.marks import HIDDEN, MarkRules, blank_marks, resolve_fields, resolve_marks
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.core.records import ApiKey, Artifact, Attempt, AuditEvent, Job, NewJob
from docfence.core.states import JobState
from docfence.faults import fault_point
from docfence.intake import (
    MAX_BATCH_ITEMS,
    MAX_LIST_LIMIT,
    BatchOutcome,
    CappedReader,
    JobQuery,
    SniffedPdf,
    Staged,
    check_label,
    check_password,
    clean_filename,
    decode_cursor,
    encode_cursor,
    item_error,
)
from docfence.observability import metrics
from docfence.store.base import Store
from docfence.store.wakeups import JobEndWatch
from docfence.verification import Verifier

log = logging.getLogger(__name__)

KEY_PREFIX = "dfk_"
STAGE_THREADS = 8  # a batch's uploads written (and fsynced) at once
REASON_CHARS = 200  # a cancel or delete reason, free text kept in the audit event
_KEY_ID_RE = re.compile(r"[0-9a-f]{12}")
#: Actors that name a process (worker host and pid): anything but a key reference that holds a digit.
_PROCESS_ACTOR_RE = re.compile(r"(?!key:).*[0-9].*")
__all__ = ["SCOPES", "BatchOutcome", "Download", "Forbidden", "InvalidRequest", "JobDetail", "JobQuery",
           "Principal", "Service", "SubmitRequest", "Unauthorized", "build_service", "check_reason",
           "check_tenant",
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
    label: str | None = None  # the caller's tag, searchable (GET /v1/jobs?label=); never logged
    filename: str | None = None  # the upload's original name (folders are dropped); never logged
    password: str | None = field(default=None, repr=False)  # the PDF's; sealed beside the input only
    marks: Sequence[Mapping[str, Any]] | None = None  # the job's own marks, within its class's rules
    recipient: str | None = None  # the dynamic fields a caller gives (core/fields.py)
    purpose: str | None = None
    reference: str | None = None


@dataclass(frozen=True)
class JobDetail:
    job: Job
    artifact: Artifact | None
    recipient_visible: bool = False  # the caller may see the marks' recipient, purpose and reference


@dataclass(frozen=True)
class Download:
    """An open, verifying stream of one artifact (close it when done)."""

    job_id: str
    attempt: int
    sha256: str
    size: int
    chunks: Iterator[bytes]
    close: Callable[[], None]


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
    folder = settings.data_folder()
    if folder is None:
        raise ConfigError("set DOCFENCE_SIGNING_SECRET: API servers without a local data folder must "
                          "share one", field="signing_secret")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "signing.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_hex(32).encode("ascii"))
    return path.read_bytes().strip()


class Service:
    """The use cases. One instance per process; thread-safe as long as the store is."""

    def __init__(self, settings: Settings, store: Store, router: RegionRouter, *, clock: Clock | None = None,
                 signing_secret: bytes | None = None) -> None:
        self.settings, self.store, self.router = settings, store, router
        self.clock = clock or SystemClock()
        self._secret = signing_secret or load_signing_secret(settings)
        self.verifier = Verifier(settings, store, self._secret)  # verification codes and /v1/verify
        # SQLite has one writer: queueing writers here, not in SQLite's sleeping busy handler, keeps
        # a burst of submits from starving the threadpool that status reads also need.
        self._writes = threading.BoundedSemaphore(1 if getattr(store, "dialect", "") == "sqlite" else 32)
        self._seal: PasswordSeal | None = None  # loaded on the first password (its key may be remote-only)

    # -- submit ----------------------------------------------------------------------------------
    def submit(self, principal: Principal, stream: BinaryIO, request: SubmitRequest) -> tuple[Job, bool]:
        """Store the upload (and its sealed password) under a pre-chosen job id, then create (or find)
        the job.

        Raises UploadTooLarge (nothing stored), RegionNotApproved (before any byte is stored),
        InvalidRequest, IdempotencyConflict. A duplicate submission returns the first job.
        """
        principal.require("jobs.submit")
        tenant = check_tenant(principal.tenant)
        staged = self._stage_upload(tenant, principal.actor, stream, request)
        try:
            with self._writes:
                job, created = self.store.submit(staged.new)
        except BaseException:
            staged.discard()
            raise
        if job.id != staged.new.job_id:
            staged.discard()  # an earlier identical submission already owns its input
        log.info("job %s submitted (created=%s, attempt %d)", job.id, created, job.attempt)
        return job, created

    def submit_batch(self, principal: Principal, uploads: Sequence[tuple[BinaryIO, SubmitRequest]], *,
                     partial: bool = False) -> list[BatchOutcome]:
        """Many submissions committed in ONE store transaction; one answer per item, in order.

        Whole (default): any refused item refuses the batch with that item's error, its field named
        `items[i].<field>`, and nothing is stored. `partial`: refused items are answered with their
        error and every other item is committed. An item may replay an earlier identical submission.
        """
        principal.require("jobs.submit")
        tenant = check_tenant(principal.tenant)
        if not 1 <= len(uploads) <= MAX_BATCH_ITEMS:
            raise InvalidRequest(f"a batch holds 1-{MAX_BATCH_ITEMS} documents, not {len(uploads)}",
                                 field="file")
        staged = self._stage_all(tenant, principal.actor, uploads)
        try:
            for index, item in enumerate(staged):
                if isinstance(item, BaseException) and not isinstance(item, RequestError | RegionNotApproved):
                    raise item  # storage or store trouble: the whole batch fails, nothing is kept
                if isinstance(item, DocfenceError) and not partial:
                    raise item_error(index, len(uploads), item) from None
            outcomes = self._commit_batch([BatchOutcome(i, error=item) if isinstance(item, DocfenceError)
                                           else item for i, item in enumerate(staged)], partial)
        except BaseException:
            for item in staged:
                if isinstance(item, Staged):
                    item.discard()
            raise
        log.info("batch of %d submitted (%d created)", len(uploads), sum(o.created for o in outcomes))
        return outcomes

    def _stage_all(self, tenant: str, actor: str,
                   uploads: Sequence[tuple[BinaryIO, SubmitRequest]]) -> list[Staged | BaseException]:
        """Every upload staged (or the error that refused it), in order. Uploads are written and
        fsynced by STAGE_THREADS at once: the file system coalesces their syncs, which dominate."""
        modes = self.store.class_modes()  # one read for the batch, not one per document

        def one(upload: tuple[BinaryIO, SubmitRequest]) -> Staged | BaseException:
            try:
                return self._stage_upload(tenant, actor, upload[0], upload[1], modes)
            except BaseException as exc:  # handed back in order; submit_batch decides
                return exc

        with ThreadPoolExecutor(max_workers=min(STAGE_THREADS, len(uploads))) as pool:
            return list(pool.map(one, uploads))

    def _commit_batch(self, staged: list[Staged | BatchOutcome], partial: bool) -> list[BatchOutcome]:
        ready = [item for item in staged if isinstance(item, Staged)]
        with self._writes:
            answers = iter(self.store.submit_many([item.new for item in ready], all_or_nothing=not partial))
        outcomes = []
        for index, item in enumerate(staged):
            if isinstance(item, BatchOutcome):
                outcomes.append(item)
                continue
            answer = next(answers)
            if isinstance(answer, DocfenceError):
                item.discard()
                outcomes.append(BatchOutcome(index, error=answer))
                continue
            job, created = answer
            if job.id != item.new.job_id:
                item.discard()
            outcomes.append(BatchOutcome(index, job=job, created=created))
        return outcomes

    def _stage_upload(self, tenant: str, actor: str, stream: BinaryIO, request: SubmitRequest,
                      modes: Mapping[str, str] | None = None) -> Staged:
        """Check the request, then store the upload (sniffed, capped) and its sealed password under a
        new job id: the NewJob to commit, and how to remove those bytes should it not be committed.
        `modes`: the class modes already read (a batch reads them once)."""
        label, password = check_label(request.label), check_password(request.password)
        policy = self._policy(request, modes)
        blobs = self.router.for_region(policy.region)
        job_id = new_id()
        key = layout.input_key(tenant, job_id)
        limit = int(self.settings.max_upload_bytes)
        info = blobs.put_stream(key, CappedReader(SniffedPdf(stream), limit), max_bytes=limit)
        try:
            policy = self._with_fields(policy, request, job_id=job_id, tenant=tenant, sha256=info.sha256)
            issued = self.verifier.issue(policy, job_id, info.sha256)  # its verification URL, if any
        except BaseException:
            blobs.delete(key)
            raise
        staged = Staged(NewJob(  # the request hash covers the policy before its job's verification URL
            tenant=tenant, policy=issued, input_key=key, input_sha256=info.sha256, input_bytes=info.bytes,
            idempotency_key=request.idempotency_key, request_hash=_request_hash(info.sha256, policy, request),
            actor=actor, job_id=job_id, label=label, filename=clean_filename(request.filename),
            sealed_password=password is not None,
        ), blobs, layout.job_prefix(tenant, job_id))
        if password is not None:
            try:
                self._password_seal().seal(blobs, staged.prefix, password)
            except BaseException:
                staged.discard()
                raise
        fault_point("after_input_upload")  # a crash here leaves bytes no job row names (staging GC)
        return staged

    def _password_seal(self) -> PasswordSeal:
        if self._seal is None:
            self._seal = PasswordSeal(load_key(self.settings))
        return self._seal

    def _policy(self, request: SubmitRequest, modes: Mapping[str, str] | None = None) -> JobPolicy:
        """The frozen policy of a submission; InvalidWatermark (400) for a bad watermark spec, marks or
        field value, InvalidRequest (422) for anything else the caller chose wrongly."""
        try:
            cls = self.settings.document_class(request.document_class)
        except ConfigError as exc:
            raise InvalidRequest(exc.message, field=exc.field) from exc
        watermark, more = _marks(cls.mark_rules, cls.watermark, request)
        try:
            mode = request.mode or (self.store.class_modes() if modes is None else modes).get(cls.name)
            if mode is not None:
                mode = Mode(mode).value
            overrides: dict[str, Any] = {}
            if request.deadline_s is not None:
                overrides["deadline_s"] = request.deadline_s
            overrides.update(watermark=watermark, marks=more, fields={})
            policy: JobPolicy = self.settings.policy_for(cls.name, mode_override=mode, **overrides)
            return policy
        except ConfigError as exc:
            raise InvalidRequest(exc.message, field=exc.field) from exc
        except (ValueError, TypeError) as exc:
            raise InvalidRequest(f"invalid request: {exc}") from exc

    def _with_fields(self, policy: JobPolicy, request: SubmitRequest, *, job_id: str, tenant: str,
                     sha256: str) -> JobPolicy:
        """The policy with its field values frozen: the caller's, the job's own, the issue time."""
        rules = self.settings.document_class(policy.document_class).mark_rules
        values = resolve_fields(rules, _caller_fields(request), job_id=job_id, tenant=tenant,
                                issued_at=self.clock.now())
        return policy.evolve(fields={**values, "sha8": sha256[:8]})

    # -- reads and cancel -----------------------------------------------------------------------
    def get(self, principal: Principal, job_id: str) -> JobDetail:
        principal.require("jobs.read")
        return self.describe(self._visible(principal, job_id), principal)

    def get_submitted(self, principal: Principal, job_id: str) -> JobDetail:
        """The job this caller just submitted, re-read while `POST /v1/jobs?wait=` waits: a submit-only
        key may see what it submitted (as the submit answer shows it), not other jobs (`get`)."""
        principal.require("jobs.submit")
        return self.describe(self._visible(principal, job_id), principal)

    def list_jobs(self, principal: Principal, query: JobQuery) -> tuple[list[JobDetail], str | None]:
        """The key's tenant's jobs under the filters, newest first (created_at, then id), `limit` per
        page, and the cursor of the next page (None on the last). Stable under concurrent inserts."""
        principal.require("jobs.read")
        if not 1 <= query.limit <= MAX_LIST_LIMIT:
            raise InvalidRequest(f"limit must be in [1, {MAX_LIST_LIMIT}]", field="limit")
        jobs = self.store.list_jobs(
            tenant=check_tenant(principal.tenant), state=JobState(query.state) if query.state else None,
            mode=query.mode, document_class=query.document_class, created_after=query.created_after,
            created_before=query.created_before, label=query.label, filename=query.filename,
            limit=query.limit, after=decode_cursor(query.cursor) if query.cursor else None)
        nxt = encode_cursor(jobs[-1]) if len(jobs) == query.limit else None
        return [self.describe(job, principal) for job in jobs], nxt

    def describe(self, job: Job, principal: Principal | None = None) -> JobDetail:
        """The job with its artifact record once succeeded (the caller already may see the job); the
        marks' recipient only when `principal` may see it (core/access.py: jobs.recipient)."""
        artifact = self.store.artifact(job.id) if job.state is JobState.SUCCEEDED else None
        visible = principal is not None and principal.allows("jobs.recipient")
        return JobDetail(job, artifact, visible)

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
        if not principal.allows("jobs.recipient"):
            events = [replace(e, details={k: HIDDEN if k in CALLER_FIELDS else v
                                          for k, v in e.details.items()}) for e in events]
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


def _marks(rules: MarkRules, base: WatermarkSpec,
           request: SubmitRequest) -> tuple[WatermarkSpec, tuple[WatermarkSpec, ...]]:
    """The job's marks (the class's, the caller's watermark over the first, or the caller's own list)
    with the caller's field values checked; InvalidWatermark (400) names the field at fault."""
    try:
        first, more = resolve_marks(rules, base, given_watermark=request.watermark, given_marks=request.marks)
        caller = {name: check_value(name, value) for name, value in _caller_fields(request).items()}
        blank = blank_marks((first, *more), {**caller, "job_id": "x", "tenant": "x", "date": "x"})
        if blank:
            raise ConfigError(f"mark {blank[0]} draws nothing once its fields are filled (give "
                              f"{', '.join(CALLER_FIELDS)} as its text needs)", field="marks")
        _drawable((first, *more), caller)
    except ConfigError as exc:
        where = exc.field if exc.field in CALLER_FIELDS else ("marks" if request.marks is not None
                                                              else "watermark")
        raise InvalidWatermark(exc.message, field=where) from None
    return first, more


def _drawable(marks: tuple[WatermarkSpec, ...], caller: Mapping[str, str]) -> None:
    """Images decoded and converted, and the caller's values laid out, now as the render will: a logo
    or a recipient no installed font can draw fails the submission (naming the field), not the job."""
    from docfence.engines.mark_art import check_image
    from docfence.engines.outline_text import outline_text

    used = {name for spec in marks for name in spec.fields}
    for name, value in caller.items():
        if name in used and value.strip():
            try:
                outline_text(value)
            except ConfigError:
                raise ConfigError(f"{name} holds a character no installed font can draw",
                                  field=name) from None
    for spec in marks:
        if spec.image is not None:
            check_image(spec.image)


def _caller_fields(request: SubmitRequest) -> dict[str, str]:
    given = {"recipient": request.recipient, "purpose": request.purpose, "reference": request.reference}
    return {name: value for name, value in given.items() if value is not None}


def _request_hash(input_sha256: str, policy: JobPolicy, request: SubmitRequest) -> str:
    """Same bytes + same caller choices = same request (class mode changes do not create conflicts).
    A label, and whether a password came, count only when given (so older keys keep their hash); the
    filename never does, nor the password itself (no digest of it is ever stored)."""
    chosen: dict[str, Any] = {"document_class": policy.document_class, "mode": request.mode,
                              "deadline_s": request.deadline_s, "watermark": dict(request.watermark or {})}
    if request.label:
        chosen["label"] = request.label
    if request.password:
        chosen["password"] = True
    if request.marks is not None:  # only when given: requests from before marks keep their hash
        chosen["marks"] = [dict(m) for m in request.marks]
    chosen.update(_caller_fields(request))
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

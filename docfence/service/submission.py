"""Submitting documents: one upload or a batch, each stored (with its sealed password) under a
pre-chosen job id before its job row is committed; the frozen policy a submission gets. The bytes are
removed only when the store's answer proves nothing committed: an answer that never came keeps them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from docfence import storage_keys as layout
from docfence.blobs.base import BlobInfo, BlobStore, Readable
from docfence.blobs.envelope import DataKey, SealingReader, sealed_size
from docfence.blobs.sealed import PasswordSeal, load_key, seal_under
from docfence.core.access import Principal, check_tenant
from docfence.core.errors import (
    BlobError,
    ConfigError,
    DocfenceError,
    IdempotencyConflict,
    InvalidRequest,
    RegionNotApproved,
    RequestError,
    StoreConflict,
)
from docfence.core.ids import new_id
from docfence.core.marks import resolve_fields
from docfence.core.policy import JobPolicy, Mode
from docfence.core.records import Job, NewJob
from docfence.faults import fault_point
from docfence.intake import (
    MAX_BATCH_ITEMS,
    BatchOutcome,
    CappedReader,
    SniffedPdf,
    Staged,
    check_label,
    check_password,
    clean_filename,
    item_error,
)
from docfence.observability.metrics import count_encryption_failure
from docfence.service.artifacts_keys import job_keys
from docfence.service.base import ServiceState
from docfence.service.request_policy import SubmitRequest, caller_fields, checked_marks, request_hash

log = logging.getLogger(__name__)

STAGE_THREADS = 8  # a batch's uploads written (and fsynced) at once


class Submission(ServiceState):
    """submit, submit_batch: uploads checked, stored and committed as jobs."""

    def submit(self, principal: Principal, stream: BinaryIO, request: SubmitRequest) -> tuple[Job, bool]:
        """Store the upload (and its sealed password) under a pre-chosen job id, then create (or find)
        the job.

        Raises UploadTooLarge (nothing stored), RegionNotApproved (before any byte is stored),
        InvalidRequest, IdempotencyConflict. A duplicate submission returns the first job. When the
        store's answer is lost (StoreUnavailable, anything but a definite refusal) the upload is kept:
        the job may have committed, and a retry with the same idempotency key finds it.
        """
        principal.require("jobs.submit")
        tenant = check_tenant(principal.tenant)
        staged = self._stage_upload(tenant, principal.actor, stream, request)
        try:
            with self._writes:
                job, created = self.store.submit(staged.new)
        except BaseException as exc:
            _settle_unanswered([staged], exc)
            raise
        if job.id != staged.new.job_id:
            _discard([staged])  # an earlier identical submission already owns its input
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
            items = _batch_items(staged, partial)
        except BaseException:  # refused before the store was asked: nothing can have committed
            _discard([item for item in staged if isinstance(item, Staged)])
            raise
        outcomes = self._commit_batch(items, partial)
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
        """Commit the staged items in one store call; each item's bytes go when its answer refuses it
        (or a definite refusal of the whole call), and stay when the answer was lost."""
        ready = [item for item in staged if isinstance(item, Staged)]
        try:
            with self._writes:
                answers = iter(self.store.submit_many([item.new for item in ready],
                                                      all_or_nothing=not partial))
        except BaseException as exc:
            _settle_unanswered(ready, exc)
            raise
        outcomes = []
        for index, item in enumerate(staged):
            if isinstance(item, BatchOutcome):
                outcomes.append(item)
                continue
            answer = next(answers)
            if isinstance(answer, DocfenceError):
                _discard([item])  # refused in its own place: this item did not commit
                outcomes.append(BatchOutcome(index, error=answer))
                continue
            job, created = answer
            if job.id != item.new.job_id:
                _discard([item])  # an earlier identical submission already owns its input
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
        try:
            data_key, row = job_keys(self).new_key(tenant, job_id)  # wrapped: committed with the job row
        except DocfenceError as exc:  # the KEK unreadable, KMS refusing or unreachable
            count_encryption_failure("wrap", exc.code)
            raise
        info = _put_input(blobs, key, CappedReader(SniffedPdf(stream), limit), limit, data_key,
                          self.settings.encryption.chunk_size)
        try:
            policy = self._with_fields(policy, request, job_id=job_id, tenant=tenant, sha256=info.sha256)
            issued = self.verifier.issue(policy, job_id, info.sha256)  # its verification URL, if any
        except BaseException:
            blobs.delete(key)
            raise
        staged = Staged(NewJob(  # the request hash covers the policy before its job's verification URL
            tenant=tenant, policy=issued, input_key=key, input_sha256=info.sha256, input_bytes=info.bytes,
            idempotency_key=request.idempotency_key, request_hash=request_hash(info.sha256, policy, request),
            actor=actor, job_id=job_id, label=label, filename=clean_filename(request.filename),
            sealed_password=password is not None,
            data_key_provider=row.provider, data_key_kek_id=row.kek_id, data_key_wrapped=row.wrapped,
        ), blobs, layout.job_prefix(tenant, job_id))
        if password is not None:
            try:
                self._seal_password(blobs, staged.prefix, password, data_key)
            except BaseException:
                staged.discard()
                raise
        fault_point("after_input_upload")  # a crash here leaves bytes no job row names (staging GC)
        return staged

    def _seal_password(self, blobs: BlobStore, prefix: str, password: str, data_key: DataKey | None) -> None:
        """Seal the password as the job's row will say: under its data key, or (a row naming no key
        provider: `seal_new_jobs` off) with password.key, which only such jobs need."""
        if data_key is not None:
            seal_under(blobs, prefix, password, data_key)
            return
        if self._seal is None:
            self._seal = PasswordSeal(load_key(self.settings))
        self._seal.seal(blobs, prefix, password)

    def _policy(self, request: SubmitRequest, modes: Mapping[str, str] | None = None) -> JobPolicy:
        """The frozen policy of a submission; InvalidWatermark (400) for a bad watermark spec, marks or
        field value, InvalidRequest (422) for anything else the caller chose wrongly."""
        try:
            cls = self.settings.document_class(request.document_class)
        except ConfigError as exc:
            raise InvalidRequest(exc.message, field=exc.field) from exc
        watermark, more = checked_marks(cls.mark_rules, cls.watermark, request)
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
        values = resolve_fields(rules, caller_fields(request), job_id=job_id, tenant=tenant,
                                issued_at=self.clock.now())
        return policy.evolve(fields={**values, "sha8": sha256[:8]})


def _put_input(blobs: BlobStore, key: str, source: Readable, limit: int, data_key: DataKey | None,
               chunk_size: int) -> BlobInfo:
    """Store an upload, sealed under the job's data key as it streams (plaintext when there is none);
    the answer names the plaintext's sha256 and size: what the job, its URL and a retry name."""
    if data_key is None:
        return blobs.put_stream(key, source, max_bytes=limit)
    sealing = SealingReader(source, data_key, key, chunk_size=chunk_size)
    blobs.put_stream(key, sealing, max_bytes=sealed_size(limit, chunk_size))
    return BlobInfo(key, sealing.info.plaintext_sha256, sealing.info.plaintext_bytes)


def _batch_items(staged: Sequence[Staged | BaseException], partial: bool) -> list[Staged | BatchOutcome]:
    """Each item staged, or (partial) answered with the request error that refused it. Raises the
    first storage or store error (the whole batch fails), or (whole) the first refused item's error
    as the batch's."""
    items: list[Staged | BatchOutcome] = []
    for index, item in enumerate(staged):
        if isinstance(item, Staged):
            items.append(item)
        elif not isinstance(item, RequestError | RegionNotApproved):
            raise item
        elif not partial:
            raise item_error(index, len(staged), item) from None
        else:
            items.append(BatchOutcome(index, error=item))
    return items


def refused_uncommitted(exc: BaseException) -> bool:
    """Whether `exc`, raised by the store's submit, proves that nothing was committed: the store
    refused the request (its idempotency key names another request, the job id exists), the database
    rolled the transaction back (StoreConflict), or the request itself was refused. Anything else (a
    connection lost before the answer, a plain StoreError, an exception nobody expected, an interrupt)
    leaves the outcome unknown: the job row may exist."""
    return isinstance(exc, IdempotencyConflict | StoreConflict | RequestError | RegionNotApproved)


def _settle_unanswered(staged: Sequence[Staged], exc: BaseException) -> None:
    """After the store's submit raised `exc`: remove the uploads when it proves nothing committed,
    else keep them (and say so), since a job that did commit needs its input; the orphan sweep
    (maintenance.staging) removes the bytes of job ids that never got a row."""
    if refused_uncommitted(exc):
        _discard(staged)
        return
    code = exc.code if isinstance(exc, DocfenceError) else type(exc).__name__
    for item in staged:
        log.warning("job %s: the outcome of its submission is unknown (%s); its upload is kept (a retry "
                    "with the same idempotency key finds the job; the orphan sweep removes the bytes if "
                    "no job committed)", item.new.job_id, code,
                    extra={"job_id": item.new.job_id, "attempt": 0})


def _discard(staged: Sequence[Staged]) -> None:
    """Remove each upload's bytes; one that cannot be removed now is left to the orphan sweep, so the
    caller's own error (the reason for the discard) is the one raised."""
    for item in staged:
        try:
            item.discard()
        except BlobError as exc:
            log.warning("job %s: its uncommitted upload could not be removed (%s); the orphan sweep will",
                        item.new.job_id, exc.code, extra={"job_id": item.new.job_id, "attempt": 0})

"""The worker's side of envelope encryption: the job's data key unwrapped (retried through a key service
outage, which spends no attempt), its input and PDF password opened (the input into the job's private
scratch folder), its output sealed as it is staged. A row naming no key provider: plaintext objects and
a password sealed with password.key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from docfence.blobs.base import BlobInfo, BlobStore, translated_os_errors
from docfence.blobs.envelope import DataKey, SealingReader, open_stream, sealed_size
from docfence.blobs.kek.jobs import JobKeys, RowKey
from docfence.blobs.sealed import PasswordSeal, fetch_sealed, open_under
from docfence.core.errors import BlobError, BlobIntegrityError, BlobNotFound, ConfigError
from docfence.core.records import Job
from docfence.observability.metrics import count_encryption_failure
from docfence.storage_keys import job_prefix
from docfence.worker.outages import OutageRetry


def data_key(keys: JobKeys, job: Job, retry: OutageRetry) -> DataKey | None:
    """The job's data key (None: a plaintext job); an unreachable key service is retried like the
    object store, a key that does not open (destroyed, corrupt) fails the attempt (BlobIntegrityError).
    A provider this worker cannot open (its key file, its KMS key) is this worker's BlobError, as a
    password key is: the attempt is retryable by another worker, and the message names the setting."""
    row = RowKey(job.tenant, job.id, job.data_key_provider, job.data_key_kek_id, job.data_key_wrapped)
    try:
        return retry.call("unwrapping the data key", lambda: keys.key_for(row))
    except BlobIntegrityError as exc:
        count_encryption_failure("unwrap", exc.code)
        raise
    except ConfigError as exc:  # not retried within the attempt: nothing here will change
        count_encryption_failure("unwrap", exc.code)
        raise BlobError(exc.message) from None


def fetch_input(store: BlobStore, job: Job, key: DataKey | None, target: Path, retry: OutageRetry) -> None:
    """The job's input, plaintext, at `target` (its scratch folder: never shared storage), checked
    against the input's sha256. A full scratch disk is storage_full (retried, as any storage outage)."""
    input_key = job.input_key
    if input_key is None:
        raise BlobNotFound("the job has no input")

    def copy() -> None:
        with translated_os_errors("write the job's scratch copy"):
            if key is None:
                target.write_bytes(store.get(input_key, expected_sha256=job.input_sha256))
                return
            with store.open_read(input_key) as reader, target.open("wb") as sink:
                try:
                    open_stream(reader, sink, key, input_key, expected_sha256=job.input_sha256)
                except BlobIntegrityError as exc:  # tampered, truncated or under another key
                    count_encryption_failure("open", exc.code)
                    raise

    retry.call("reading the input into the scratch folder", copy)


def put_output(store: BlobStore, object_key: str, output: Path, key: DataKey | None, max_bytes: int,
               chunk_size: int) -> BlobInfo:
    """Upload `output` to `object_key`, sealed under `key` when there is one; the answer names the
    plaintext's sha256 and size (what the artifact row, signed URLs and /v1/verify name)."""
    with output.open("rb") as fh:
        if key is None:
            return store.put_stream(object_key, fh, max_bytes=max_bytes)
        sealing = SealingReader(fh, key, object_key, chunk_size=chunk_size)
        store.put_stream(object_key, sealing, max_bytes=sealed_size(max_bytes, chunk_size))
    info = sealing.info
    return BlobInfo(object_key, info.plaintext_sha256, info.plaintext_bytes)


def password(store: BlobStore, job: Job, key: DataKey | None, retry: OutageRetry,
             legacy: Callable[[], PasswordSeal]) -> str | None:
    """The job's PDF password, for its render process only (never logged or stored): opened under the
    job's data key, or with password.key (`legacy()`, loaded only then) when its row names no key
    provider. Reading the blob is retried through a storage outage like the input; a key that does not
    open it is not retried within the attempt (BlobIntegrityError, or the password key's BlobError)."""
    if not job.sealed_password:
        return None
    prefix = job_prefix(job.tenant, job.id)
    token = retry.call("reading the sealed password", lambda: fetch_sealed(store, prefix))
    if token is None:
        return None
    if key is not None:
        try:
            return open_under(token, key, prefix)
        except BlobIntegrityError as exc:  # tampered, or sealed under another key
            count_encryption_failure("open", exc.code)
            raise
    if job.data_key_provider is not None:  # a provider with no key: key_for raised before this
        raise BlobIntegrityError(f"job {job.id}'s data key is missing")
    try:
        seal = legacy()
    except ConfigError as exc:  # this worker cannot open passwords: its job must not hang
        raise BlobError(exc.message) from None
    return seal.open(token)

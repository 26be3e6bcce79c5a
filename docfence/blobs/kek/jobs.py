"""A job's data key from the fields of its row (provider, key-encryption key id, wrapped key), and the
reads and writes of one job's objects that follow them: sealed when the row names a provider, plaintext
(a job stored before encryption) when it does not. Knows jobs only by those plain fields."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from docfence.blobs.base import BlobReader, BlobStore
from docfence.blobs.envelope import DataKey, open_chunks, seal_bytes
from docfence.blobs.kek import KeyProvider, KeyRing, WrappedKey, open_key_provider
from docfence.config.encryption import EncryptionConfig
from docfence.core.errors import BlobIntegrityError


class KeyedRow(Protocol):
    """What a job's row (core.records.Job) carries of its key."""

    @property
    def tenant(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def data_key_provider(self) -> str | None: ...
    @property
    def data_key_kek_id(self) -> str | None: ...
    @property
    def data_key_wrapped(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RowKey:
    """The key fields of one job's row. `provider` None: plaintext; `wrapped` None with a provider:
    the key was destroyed (the job's bytes were deleted), so nothing of it can be read."""

    tenant: str
    job_id: str
    provider: str | None
    kek_id: str | None
    wrapped: str | None

    @classmethod
    def of(cls, row: KeyedRow) -> RowKey:
        """The key fields of a job's row."""
        return cls(row.tenant, row.id, row.data_key_provider, row.data_key_kek_id, row.data_key_wrapped)

    @property
    def context(self) -> dict[str, str]:
        return {"tenant": self.tenant, "job": self.job_id}


class JobKeys:
    """Data keys for jobs: a new one per submission, and the one a row names, unwrapped by the
    configured key provider (opened on first use, so a process that never touches a job's bytes needs
    no key file). Thread-safe."""

    def __init__(self, config: EncryptionConfig, data_folder: Path | None, *,
                 provider: KeyProvider | None = None) -> None:
        self.config, self._folder = config, data_folder
        self._provider, self._lock = provider, threading.Lock()

    @property
    def provider(self) -> KeyProvider:
        with self._lock:
            if self._provider is None:
                c = self.config
                opened = [open_key_provider(
                    name, data_folder=self._folder, kek_file=c.kek_file, kms_key_id=c.kms_key_id,
                    kms_region=c.kms_region, kms_endpoint_url=c.kms_endpoint_url)
                    for name in (c.provider, *c.previous_providers)]
                # previous providers still unwrap the rows a rewrap pass has not moved yet
                self._provider = opened[0] if len(opened) == 1 else KeyRing(*opened)
            return self._provider

    def new_key(self, tenant: str, job_id: str) -> tuple[DataKey | None, RowKey]:
        """A fresh data key for a job and the row fields that store it wrapped; (None, a row naming no
        provider) while `seal_new_jobs` is off (a rolling upgrade from a release without encryption)."""
        if not self.config.seal_new_jobs:
            return None, RowKey(tenant, job_id, None, None, None)
        key, wrapped = self.provider.generate({"tenant": tenant, "job": job_id})
        return key, RowKey(tenant, job_id, wrapped.provider, wrapped.key_id,
                           base64.b64encode(wrapped.wrapped).decode("ascii"))

    def key_for(self, row: RowKey) -> DataKey | None:
        """The row's data key; None for a plaintext job. BlobIntegrityError when it was destroyed or
        does not open; BlobError (retryable) when the key service is unreachable."""
        if row.provider is None:
            return None
        if row.wrapped is None:
            raise BlobIntegrityError(f"job {row.job_id}'s data key was destroyed: its bytes are deleted")
        try:
            wrapped = base64.b64decode(row.wrapped, validate=True)
        except ValueError:
            raise BlobIntegrityError(f"job {row.job_id}'s wrapped data key is malformed") from None
        return self.provider.unwrap(WrappedKey(row.provider, row.kek_id or "", wrapped), row.context)


def read_chunks(blobs: BlobStore, object_key: str, key: DataKey | None,
                expected_sha256: str | None) -> tuple[Iterator[bytes], BlobReader]:
    """The plaintext chunks of one object (sealed under `key`, or plaintext when None) and the reader
    to close; `expected_sha256` is the plaintext's, checked after the last chunk."""
    reader = blobs.open_read(object_key, expected_sha256=expected_sha256 if key is None else None)
    if key is None:
        return reader.iter_chunks(), reader
    try:
        return open_chunks(reader, key, object_key, expected_sha256=expected_sha256), reader
    except BaseException:
        reader.close()
        raise


def read_object(blobs: BlobStore, object_key: str, key: DataKey | None,
                expected_sha256: str | None = None) -> bytes:
    """A small object's plaintext (a verification's file match, a read-back)."""
    if key is None:
        return blobs.get(object_key, expected_sha256=expected_sha256)
    chunks, reader = read_chunks(blobs, object_key, key, expected_sha256)
    try:
        return b"".join(chunks)
    finally:
        reader.close()


def put_object(blobs: BlobStore, object_key: str, data: bytes, key: DataKey | None) -> None:
    """Store a small object sealed under `key` (plaintext when None)."""
    blobs.put(object_key, data if key is None else seal_bytes(data, key, object_key))

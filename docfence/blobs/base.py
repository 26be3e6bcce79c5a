"""The narrow BlobStore protocol every artifact backend implements, plus the shared pieces:
key validation (path traversal is impossible by construction), BlobInfo, a verifying reader, and the
one translation of a local I/O error (a full disk is StorageFull, anything else BlobError)."""

from __future__ import annotations

import errno
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol, runtime_checkable

from docfence.core.errors import BlobError, BlobIntegrityError, ConfigError, StorageFull

CHUNK_SIZE = 1024 * 1024
MAX_KEY_LENGTH = 1024  # S3's limit, in bytes; keys are ASCII so characters == bytes
MAX_SEGMENT_LENGTH = 255  # common file-system limit for one path component
# A segment starts with a letter or digit, so no key can name a dot-file: `.`, `..`, `.tmp-*` are impossible.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full device, an exhausted disk quota


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """What a store knows about one object: its key, the sha256 (lower-case hex) of its bytes, its size."""

    key: str
    sha256: str
    bytes: int


class Readable(Protocol):
    """A source for `put_stream`: any binary file-like (BinaryIO, an upload's spooled file, a socket file)."""

    def read(self, size: int, /) -> bytes: ...


class RawReader(Protocol):
    """What BlobReader wraps: an open binary file, or botocore's StreamingBody."""

    def read(self, amt: int | None = ..., /) -> bytes: ...

    def close(self) -> None: ...


@runtime_checkable
class BlobStore(Protocol):
    """Artifact storage. Knows nothing of jobs. Keys are validated with `validate_key`.

    Guarantees shared by every backend (checked by docfence.testing.blob_contract):
    - `put`/`put_stream` are atomic: readers see the old object or the new one, never a mix; on any
      failure nothing new is left behind under the key (nor in listings). Overwriting replaces.
    - A prefix names a folder: `list("t/job-1")` sees `t/job-1/a`, never `t/job-10/a`.
    - Missing objects raise BlobNotFound; a sha256 mismatch on read raises BlobIntegrityError.
    """

    def put(self, key: str, data: bytes) -> BlobInfo: ...

    def put_stream(self, key: str, stream: Readable, *, max_bytes: int) -> BlobInfo:
        """Store `stream` until EOF. More than `max_bytes` raises BlobError; nothing is left behind."""
        ...

    def get(self, key: str, *, expected_sha256: str | None = None) -> bytes: ...

    def open_read(self, key: str, *, expected_sha256: str | None = None) -> BlobReader:
        """A streaming reader; BlobNotFound is raised here, before any byte is served."""
        ...

    def stat(self, key: str) -> BlobInfo | None: ...

    def exists(self, key: str) -> bool: ...

    def modified_at(self, key: str) -> datetime | None:
        """When the object was last written (aware UTC, by the storage's own clock); None when absent.
        Lets a collector tell an upload still waiting for its job row from one that never got one."""
        ...

    def delete(self, key: str) -> bool:
        """Remove the object; False when it was already absent (idempotent)."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under the (non-empty) folder `prefix`; returns how many were removed."""
        ...

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under the folder `prefix` ("" = all), in ascending byte order."""
        ...


def validate_key(key: str) -> str:
    """Return `key` unchanged if it is a safe relative POSIX path, else raise ConfigError.

    Segments are non-empty, start with a letter or digit and use only `A-Za-z0-9._=+-`: no `..`,
    no absolute paths, no backslashes, no dot-files, nothing a file system or S3 would reinterpret.
    """
    if not isinstance(key, str) or not key:
        raise ConfigError("invalid blob key: empty")
    if len(key) > MAX_KEY_LENGTH:
        raise ConfigError("invalid blob key: longer than 1024 characters")
    for segment in key.split("/"):
        if len(segment) > MAX_SEGMENT_LENGTH or not _SEGMENT.fullmatch(segment):
            raise ConfigError(f"invalid blob key: {key!r}")
    return key


def normalize_prefix(prefix: str) -> str:
    """A folder prefix as `a/b/` ("" stays ""); one trailing slash is accepted on input."""
    if prefix == "":
        return ""
    stripped = prefix[:-1] if prefix.endswith("/") else prefix
    return validate_key(stripped) + "/"


def validate_sha256(value: str | None) -> str | None:
    if value is not None and not _SHA256_HEX.fullmatch(value):
        raise ConfigError("expected_sha256 must be 64 lower-case hex characters")
    return value


def check_max_bytes(max_bytes: int) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ConfigError("max_bytes must be a non-negative integer")
    return max_bytes


def too_large(max_bytes: int) -> BlobError:
    # Not retryable in spirit; BlobError is marked retryable (see report: ObjectTooLarge proposal).
    return BlobError(f"object exceeds max_bytes ({max_bytes})")


def read_limited(stream: Readable, max_bytes: int, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """Yield `stream` in chunks; raise BlobError as soon as more than `max_bytes` have been read."""
    total = 0
    while True:
        chunk = stream.read(chunk_size)
        if not chunk:
            return
        total += len(chunk)
        if total > max_bytes:
            raise too_large(max_bytes)
        yield chunk


def os_error(exc: OSError, action: str) -> BlobError:
    """`exc`, raised while doing `action` ("write object 'k'"), as docfence's error: StorageFull ("no
    space left to ...") for a full device or quota, else BlobError (retryable). The message names the
    action and the errno, never a file path (it may be shown to the job's owner)."""
    name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    if exc.errno in NO_SPACE_ERRNOS:
        return StorageFull(f"no space left to {action} ({name})")
    return BlobError(f"cannot {action} ({name})")


@contextmanager
def translated_os_errors(action: str) -> Iterator[None]:
    """Raise an OSError of the block as `os_error(exc, action)` (its cause kept)."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, action) from exc


def verify(key: str, actual_sha256: str, expected_sha256: str | None) -> None:
    if expected_sha256 is not None and actual_sha256 != expected_sha256:
        raise BlobIntegrityError(f"sha256 mismatch reading {key!r}")


class BlobReader:
    """A streaming, verifying reader over one object. When `expected_sha256` is set, reaching EOF with
    other bytes raises BlobIntegrityError (a server streaming the object must then abort the response).
    Use as a context manager, or call `close()`."""

    def __init__(self, key: str, raw: RawReader, size: int, expected_sha256: str | None) -> None:
        self.key = key
        self.size = size
        self._raw = raw
        self._expected = expected_sha256
        self._hash = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        with translated_os_errors(f"read object {self.key!r}"):
            data = self._raw.read() if n < 0 else self._raw.read(n)
        if data:
            self._hash.update(data)
        if not data or n < 0:
            self._finish()
        return data

    def iter_chunks(self, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the object in chunks; the last step verifies the sha256 (see class docstring)."""
        while True:
            chunk = self.read(chunk_size)
            if not chunk:
                return
            yield chunk

    def _finish(self) -> None:
        # Re-checked on every EOF read, so a mismatch cannot be swallowed by a second read.
        verify(self.key, self._hash.hexdigest(), self._expected)

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

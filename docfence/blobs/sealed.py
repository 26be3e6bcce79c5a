"""A job's PDF password, sealed (Fernet: AES-128-CBC + HMAC-SHA256) and kept as a blob beside the job's
input, so it lives exactly as long as the input: deleting the job's bytes (deletion request, retention)
removes it with them. Never in the database, logs or events; only the worker unseals it, for the render."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from docfence.blobs.base import NO_SPACE_ERRNOS, BlobStore, os_error
from docfence.config import Settings
from docfence.core.errors import BlobError, BlobNotFound, ConfigError

KEY_FILE = "password.key"


def password_key(job_prefix: str) -> str:
    """Where a job's sealed password lives (under the job's prefix, so it goes with the job's bytes)."""
    return f"{job_prefix}password.sealed"


def load_key(settings: Settings) -> bytes:
    """DOCFENCE_PASSWORD_KEY, or a key generated once (mode 0600) in the data folder. The API servers
    and workers of one deployment must share it; ConfigError names the setting when there is none."""
    if settings.password_key:
        key = settings.password_key.encode("ascii", "replace")
        _check(key)
        return key
    folder = settings.data_folder()
    if folder is None:
        raise ConfigError("set DOCFENCE_PASSWORD_KEY (a Fernet key, e.g. from "
                          "cryptography.fernet.Fernet.generate_key()): without a local data folder, API "
                          "servers and workers must share one to accept PDF passwords", field="password_key")
    path = folder / KEY_FILE
    try:
        return _key_file(path)
    except OSError as exc:  # a full disk is StorageFull; anything else a data folder to fix
        if exc.errno in NO_SPACE_ERRNOS:
            raise os_error(exc, f"create the password key file {KEY_FILE}") from exc
        raise ConfigError(f"the password key file {str(path)!r} cannot be created or read "
                          f"({type(exc).__name__}); make the data folder writable or set "
                          "DOCFENCE_PASSWORD_KEY", field="password_key") from exc


def _key_file(path: Path) -> bytes:
    """The key in `path`, made on first use. The new key is written whole to a private temporary file
    and linked into place (atomic, and refused when the name exists), so a process starting at the
    same moment reads either no file or the whole key, never an empty one, and all agree on one key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd, tmp = tempfile.mkstemp(prefix=".password-key-", dir=path.parent)  # created 0600
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(Fernet.generate_key())
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    key = path.read_bytes().strip()
    _check(key)
    return key


def _check(key: bytes) -> None:
    try:
        Fernet(key)
    except ValueError:
        raise ConfigError("DOCFENCE_PASSWORD_KEY must be a Fernet key (32 url-safe base64-encoded bytes)",
                          field="password_key") from None


@dataclass(frozen=True)
class PasswordSeal:
    """Seals a password into a job's blob and unseals it; the key never leaves this object."""

    key: bytes = field(repr=False)

    def seal(self, blobs: BlobStore, job_prefix: str, password: str) -> str:
        """Store the sealed password; returns its blob key."""
        where = password_key(job_prefix)
        blobs.put(where, Fernet(self.key).encrypt(password.encode("utf-8")))
        return where

    def unseal(self, blobs: BlobStore, job_prefix: str) -> str | None:
        """The job's password, or None when it was submitted without one (fetch, then open)."""
        token = self.fetch(blobs, job_prefix)
        return None if token is None else self.open(token)

    def fetch(self, blobs: BlobStore, job_prefix: str) -> bytes | None:
        """The sealed blob, or None when the job has none. A storage outage raises the blob store's
        retryable BlobError, so the worker retries it within the attempt as it does the input."""
        try:
            return blobs.get(password_key(job_prefix))
        except BlobNotFound:
            return None

    def open(self, token: bytes) -> str:
        """The password in a sealed blob. BlobError (retryable: another worker may hold the right key)
        when this key does not open it, a key that differs between API server and worker; never an
        outage, so it is not retried within the attempt."""
        try:
            return Fernet(self.key).decrypt(token).decode("utf-8")
        except InvalidToken:
            raise BlobError("the job's sealed password cannot be opened with this DOCFENCE_PASSWORD_KEY "
                            "(the API server and the worker must share it)") from None

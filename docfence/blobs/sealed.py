"""A job's PDF password, sealed and kept as a blob beside the job's input: under the job's own data key
(envelope.seal_bytes) when its row names a key provider, so destroying the key at deletion makes every
copy unreadable; with the installation's Fernet password.key for a job stored before encryption. The
row decides which, never the bytes. Never in the database, logs or events; only the worker unseals it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from docfence.blobs.base import NO_SPACE_ERRNOS, BlobStore, os_error
from docfence.blobs.envelope import DataKey, open_bytes, seal_bytes
from docfence.config import Settings
from docfence.core.errors import BlobError, BlobIntegrityError, BlobNotFound, ConfigError
from docfence.core.private_files import create_once

KEY_FILE = "password.key"


def password_key(job_prefix: str) -> str:
    """Where a job's sealed password lives (under the job's prefix, so it goes with the job's bytes)."""
    return f"{job_prefix}password.sealed"


def seal_under(blobs: BlobStore, job_prefix: str, password: str, key: DataKey) -> str:
    """Store the password sealed under the job's data key (a job whose row names a key provider);
    returns its blob key. password.key plays no part: the data key's destruction is the deletion."""
    where = password_key(job_prefix)
    blobs.put(where, seal_bytes(password.encode("utf-8"), key, where))
    return where


def fetch_sealed(blobs: BlobStore, job_prefix: str) -> bytes | None:
    """The sealed blob, or None when the job has none. A storage outage raises the blob store's
    retryable BlobError, so the worker retries it within the attempt as it does the input."""
    try:
        return blobs.get(password_key(job_prefix))
    except BlobNotFound:
        return None


def open_under(token: bytes, key: DataKey, job_prefix: str) -> str:
    """The password in a blob sealed under the job's data key. BlobIntegrityError (deterministic) when
    it does not open: corrupt, another object's, or sealed under another key."""
    where = password_key(job_prefix)
    plain = open_bytes(token, key, where)
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:
        raise BlobIntegrityError(f"the sealed password {where!r} is not text") from None


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
        create_once(path, Fernet.generate_key(), ".password-key-")
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
    """Seals a password with password.key (a job whose row names no key provider: stored before
    encryption, or while `seal_new_jobs` is off) and unseals it; the key never leaves this object."""

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
        """The sealed blob, or None when the job has none (fetch_sealed)."""
        return fetch_sealed(blobs, job_prefix)

    def open(self, token: bytes) -> str:
        """The password in a sealed blob. BlobError (retryable: another worker may hold the right key)
        when this key does not open it, a key that differs between API server and worker; never an
        outage, so it is not retried within the attempt."""
        try:
            return Fernet(self.key).decrypt(token).decode("utf-8")
        except InvalidToken:
            raise BlobError("the job's sealed password cannot be opened with this DOCFENCE_PASSWORD_KEY "
                            "(the API server and the worker must share it)") from None

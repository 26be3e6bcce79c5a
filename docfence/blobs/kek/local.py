"""The `local` key provider: key-encryption keys in one file in the data folder (kek.key, mode 0600),
generated once, atomically, on first use. Each line is one key; the last is current, older lines keep
data keys wrapped before a rotation readable until a rewrap pass has moved them. Data keys are wrapped
with AES-256-GCM, bound to the key id and the job's context."""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from docfence.blobs.base import NO_SPACE_ERRNOS, os_error
from docfence.blobs.envelope import DataKey
from docfence.blobs.kek.base import Context, WrappedKey, context_bytes, generate_by_wrapping
from docfence.core.errors import BlobIntegrityError, ConfigError
from docfence.core.private_files import create_once, private_dirs

NAME = "local"
KEK_FILE = "kek.key"  # in the data folder, beside password.key and signing.key
_FORMAT = 1  # first byte of a wrapped key
_NONCE_BYTES = 12
_WRAPPED_BYTES = 1 + _NONCE_BYTES + 32 + 16


def _key_id(material: bytes) -> str:
    """A key's id, derived from it (one-way): a line whose id does not match its key is refused."""
    return "kek-" + hashlib.sha256(b"docfence-local-kek\0" + material).hexdigest()[:16]


def _line(material: bytes) -> bytes:
    return f"{_key_id(material)} {base64.urlsafe_b64encode(material).decode('ascii')}\n".encode("ascii")


class LocalKeyProvider:
    """KeyProvider over a key file. Every API server and worker of a deployment must read the same file
    (the embedded default: one host, one data folder). Raises ConfigError at construction when the file
    is readable or writable by group or others, or is not a key file."""

    name = NAME

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._keys = load_key_file(path, create=True)
        self._seen = _identity(path)

    def __repr__(self) -> str:
        return f"LocalKeyProvider({str(self.path)!r})"

    def current_key_id(self) -> str:
        """The file's last key. The file is looked at (one stat) on every call and read again when it
        was replaced, so a rotation reaches every running process at its next wrap: no process keeps
        wrapping with a key a finished rewrap pass is about to retire."""
        with self._lock:
            if _identity(self.path) != self._seen:
                self._reload()
            return next(reversed(self._keys))

    def _reload(self) -> None:
        self._seen = _identity(self.path)
        self._keys = load_key_file(self.path, create=False)

    def generate(self, context: Context) -> tuple[DataKey, WrappedKey]:
        return generate_by_wrapping(self, context)

    def wrap(self, key: DataKey, context: Context) -> WrappedKey:
        key_id = self.current_key_id()
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self._keys[key_id]).encrypt(nonce, key.material, _ad(key_id, context))
        return WrappedKey(NAME, key_id, bytes([_FORMAT]) + nonce + sealed)

    def unwrap(self, wrapped: WrappedKey, context: Context) -> DataKey:
        if wrapped.provider != NAME:
            raise ConfigError(f"the local key provider cannot unwrap a key of provider {wrapped.provider!r}")
        material = self._material(wrapped.key_id)
        blob = wrapped.wrapped
        if len(blob) != _WRAPPED_BYTES or blob[0] != _FORMAT:
            raise BlobIntegrityError("the wrapped data key is malformed")
        nonce, sealed = blob[1 : 1 + _NONCE_BYTES], blob[1 + _NONCE_BYTES :]
        try:
            return DataKey(AESGCM(material).decrypt(nonce, sealed, _ad(wrapped.key_id, context)))
        except InvalidTag:
            raise BlobIntegrityError("the wrapped data key does not open: corrupt, or bound to another "
                                     "job") from None

    def _material(self, key_id: str) -> bytes:
        """The key `key_id`; the file is read again once when it is unknown (another process rotated)."""
        with self._lock:
            if key_id not in self._keys:
                self._reload()
            material = self._keys.get(key_id)
        if material is None:
            raise ConfigError(f"the key-encryption key {key_id} is not in {str(self.path)!r}: restore the "
                              "key file that has it (data keys it wrapped cannot be opened without it)")
        return material


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which file is at `path` now (inode, modification time, size); None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _ad(key_id: str, context: Context) -> bytes:
    return b"docfence/kek/local/v1\0" + key_id.encode("ascii") + b"\0" + context_bytes(context)


# -- the key file -------------------------------------------------------------------------------------------


def load_key_file(path: Path, *, create: bool) -> dict[str, bytes]:
    """key id -> key, oldest first, from `path` (made with one new key when missing and `create`)."""
    try:
        if create and not path.exists():
            private_dirs(path.parent)
            _link_new(path, _line(AESGCM.generate_key(bit_length=256)))
        with open(path, "rb") as fh:
            _check_private(path, os.fstat(fh.fileno()))
            text = fh.read()
    except OSError as exc:
        if exc.errno in NO_SPACE_ERRNOS:
            raise os_error(exc, f"create the key-encryption key file {KEK_FILE}") from exc
        raise ConfigError(f"the key-encryption key file {str(path)!r} cannot be created or read "
                          f"({type(exc).__name__}); make the data folder writable") from exc
    return _parse(path, text)


def _check_private(path: Path, st: os.stat_result) -> None:
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"key-encryption key file {path} is not a regular file")
    if mode & 0o077:
        raise ConfigError(f"key-encryption key file {path} is readable or writable by group or others "
                          f"(mode {mode:04o}): chmod 600 it")


def _parse(path: Path, text: bytes) -> dict[str, bytes]:
    """The keys of a key file; ConfigError names the file and line, never what the line holds."""
    keys: dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            key_id, encoded = line.decode("ascii").split()
            material = base64.urlsafe_b64decode(encoded)
        except (UnicodeDecodeError, ValueError, binascii.Error):
            material, key_id = b"", ""
        if len(material) != 32 or key_id != _key_id(material):
            raise ConfigError(f"key-encryption key file {path}: line {number} is not a key")
        keys[key_id] = material
    if not keys:
        raise ConfigError(f"key-encryption key file {path} holds no key")
    return keys


def _link_new(path: Path, content: bytes) -> None:
    """Write `content` to a private temporary file and link it to `path`; a file already there (made
    by a process starting at the same moment) wins, so every process agrees on one key."""
    create_once(path, content, ".kek-")
    _fsync_dir(path.parent)


def rotate_key_file(path: Path) -> str:
    """Add a new current key to the key file (older keys stay, for unwrapping) and return its id.
    Safe against a concurrent rotation: both new keys are kept. Running LocalKeyProviders wrap with
    the new key from their next wrap on (they watch the file)."""
    with _locked(path) as keys_text:
        material = AESGCM.generate_key(bit_length=256)
        _replace(path, keys_text + _line(material))
    return _key_id(material)


def retire_key(path: Path, key_id: str) -> None:
    """Remove an older key from the key file once no data key is wrapped with it any more (a finished
    rewrap pass): a copy of the file taken later cannot open old database dumps' keys. The current key
    cannot be retired; an unknown id is a no-op (retired already)."""
    with _locked(path) as text:
        keys = _parse(path, text)
        if key_id == next(reversed(keys)):
            raise ConfigError(f"{key_id} is the current key-encryption key: rotate first")
        if key_id not in keys:
            return
        kept = b"".join(_line(material) for kid, material in keys.items() if kid != key_id)
        _replace(path, kept)


def _replace(path: Path, content: bytes) -> None:
    """Atomically make `content` the key file (a private temporary file moved into place)."""
    fd, tmp = tempfile.mkstemp(prefix=".kek-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bytes]:
    """The key file's content, under an exclusive lock on the file that is at `path` now (a rotation
    that replaced it while this one waited is seen: the lock is taken again on the new file)."""
    while True:
        with open(path, "rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            st = os.fstat(fh.fileno())
            if os.stat(path).st_ino != st.st_ino:
                continue  # replaced while waiting: lock the new one
            _check_private(path, st)
            text = fh.read()
            _parse(path, text)
            yield text if text.endswith(b"\n") else text + b"\n"
            return


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["KEK_FILE", "LocalKeyProvider", "load_key_file", "retire_key", "rotate_key_file"]

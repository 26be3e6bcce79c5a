"""LocalBlobStore: artifacts as private files under one root folder. A write goes to a dot-named temp file
in the target folder, is fsynced, moved into place with os.replace, and the folder is fsynced. A full
disk or quota (ENOSPC, EDQUOT) anywhere is StorageFull; any other OS error is BlobError. Folders are
0700 and files 0600 whatever the umask."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from docfence.blobs.base import (
    BlobInfo,
    BlobReader,
    Readable,
    check_max_bytes,
    normalize_prefix,
    os_error,
    read_limited,
    translated_os_errors,
    validate_key,
    validate_sha256,
)
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import BlobError, BlobNotFound, ConfigError
from docfence.core.private_files import PRIVATE_DIR, private_dirs

log = logging.getLogger(__name__)

TEMP_PREFIX = ".tmp-"  # no valid key segment starts with ".", so temp files can never be listed or named
_DIR_MODE = PRIVATE_DIR  # files are created 0600 by mkstemp: objects are private to the service user
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


class LocalBlobStore:
    """BlobStore over a local folder (the embedded default). Safe for concurrent writers on one host."""

    def __init__(self, root: Path, *, clock: Clock | None = None) -> None:
        try:
            private_dirs(root)  # 0700, each missing folder above it too, whatever the umask
        except OSError as exc:
            raise ConfigError(f"blob root {str(root)!r} cannot be created") from exc
        self.root = Path(os.path.realpath(root))
        if self.root == Path(self.root.anchor):
            raise ConfigError("blob root cannot be the file-system root")
        if not self.root.is_dir() or not os.access(self.root, os.W_OK | os.X_OK):
            raise ConfigError(f"blob root {str(root)!r} is not a writable folder")
        self._clock = clock or SystemClock()

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"

    # -- writing ---------------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> BlobInfo:
        return self._write(key, [bytes(data)])

    def put_stream(self, key: str, stream: Readable, *, max_bytes: int) -> BlobInfo:
        return self._write(key, read_limited(stream, check_max_bytes(max_bytes)))

    def _write(self, key: str, chunks: Iterable[bytes]) -> BlobInfo:
        path = self._path(key)
        try:
            fd, tmp = self._open_temp(path.parent)
        except BlobError:
            self._prune_up(path.parent)  # the folders it may have made for the key
            raise
        digest, size, source_errors = hashlib.sha256(), 0, list[BaseException]()
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in _watch(chunks, source_errors):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException as exc:  # too large, a failing source, a full disk: leave nothing behind
            _unlink_quietly(tmp)
            self._prune_up(path.parent)
            if isinstance(exc, OSError) and exc not in source_errors:  # the caller's stream errors pass as-is
                raise os_error(exc, f"write object {key!r}") from exc
            raise
        with translated_os_errors(f"make object {key!r} durable"):
            _fsync_dir(path.parent)
        return BlobInfo(key=key, sha256=digest.hexdigest(), bytes=size)

    def _open_temp(self, folder: Path) -> tuple[int, str]:
        for _ in range(10):
            try:
                self._ensure_dir(folder)
                return tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
            except FileNotFoundError:
                continue  # a concurrent delete pruned the folder after it became empty: create it again
            except NotADirectoryError as exc:
                raise BlobError("key conflicts with an existing object (a key is also a folder)") from exc
            except OSError as exc:  # a full disk fails here too (no inode, no block for the folder)
                raise os_error(exc, "create a temp file in the blob store") from exc
        raise BlobError("blob folder keeps disappearing under concurrent deletes")

    def _ensure_dir(self, folder: Path) -> None:
        current = self.root
        for part in folder.relative_to(self.root).parts:
            current = current / part
            try:
                current.mkdir(mode=_DIR_MODE)
            except FileExistsError:
                # One stat: gone again is FileNotFoundError (a concurrent prune: the caller retries),
                # a file is NotADirectoryError (a real key/folder conflict).
                if not stat.S_ISDIR(os.stat(current).st_mode):
                    raise NotADirectoryError(str(current)) from None
                continue
            _fsync_dir(current.parent)  # make the new folder's entry durable too

    # -- reading ---------------------------------------------------------------------------------------

    def get(self, key: str, *, expected_sha256: str | None = None) -> bytes:
        with self.open_read(key, expected_sha256=expected_sha256) as reader:
            return reader.read()

    def open_read(self, key: str, *, expected_sha256: str | None = None) -> BlobReader:
        validate_sha256(expected_sha256)
        path = self._path(key)
        try:
            raw = open(path, "rb")  # noqa: SIM115 - ownership passes to the BlobReader
        except _MISSING as exc:
            raise BlobNotFound(f"no object {key!r}") from exc
        except OSError as exc:
            raise os_error(exc, f"read object {key!r}") from exc
        try:
            size = os.fstat(raw.fileno()).st_size
        except OSError as exc:
            raw.close()
            raise os_error(exc, f"read object {key!r}") from exc
        return BlobReader(key, raw, size, expected_sha256)

    def stat(self, key: str) -> BlobInfo | None:
        """Size and sha256 of the object, or None. The local sha256 is computed by reading the file."""
        try:
            with self.open_read(key) as reader:
                digest = hashlib.sha256()
                for chunk in reader.iter_chunks():
                    digest.update(chunk)
                return BlobInfo(key=key, sha256=digest.hexdigest(), bytes=reader.size)
        except BlobNotFound:
            return None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def modified_at(self, key: str) -> datetime | None:
        """The file's mtime: when its write was moved into place (a temp file keeps its write time)."""
        try:
            st = os.stat(self._path(key))
        except _MISSING:
            return None
        except OSError as exc:
            raise os_error(exc, f"stat object {key!r}") from exc
        if not stat.S_ISREG(st.st_mode):
            return None
        return datetime.fromtimestamp(st.st_mtime, UTC)

    def list(self, prefix: str = "") -> Iterator[str]:
        folder_prefix = normalize_prefix(prefix)  # validated now, not on first next()
        start = self._path(folder_prefix[:-1]) if folder_prefix else self.root
        return self._walk(start, folder_prefix)

    def _walk(self, folder: Path, rel: str) -> Iterator[str]:
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise os_error(exc, "list the blob store") from exc
        # Sorting a folder as "name/" yields keys in the same ascending byte order S3 lists them in.
        entries.sort(key=lambda e: e.name + "/" if e.is_dir(follow_symlinks=False) else e.name)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from self._walk(Path(entry.path), f"{rel}{entry.name}/")
            elif entry.is_file(follow_symlinks=False):
                yield rel + entry.name

    # -- deleting --------------------------------------------------------------------------------------

    def delete(self, key: str) -> bool:
        path = self._path(key)
        try:
            path.unlink()
        except _MISSING:
            return False
        except OSError as exc:
            raise os_error(exc, f"delete object {key!r}") from exc
        with translated_os_errors(f"make the deletion of {key!r} durable"):
            _fsync_dir(path.parent)
        self._prune_up(path.parent)
        return True

    def delete_prefix(self, prefix: str) -> int:
        folder_prefix = normalize_prefix(prefix)
        if not folder_prefix:
            raise ConfigError("delete_prefix needs a non-empty prefix")
        folder = self._path(folder_prefix[:-1])
        removed, touched = 0, set[Path]()
        for rel in self._walk(folder, folder_prefix):
            path = self.root / rel
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise os_error(exc, f"delete object {rel!r}") from exc
            removed += 1
            touched.add(path.parent)
        with translated_os_errors(f"make the deletion under {folder_prefix!r} durable"):
            for parent in touched:
                _fsync_dir(parent)
        self._prune_down(folder)
        log.info("deleted %d objects under prefix %r", removed, folder_prefix)
        return removed

    def _prune_down(self, folder: Path) -> None:
        for dirpath, _dirs, _files in os.walk(folder, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
        self._prune_up(folder.parent)

    def _prune_up(self, folder: Path) -> None:
        """Remove now-empty folders up to the root, so deleted keys leave no names behind."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return  # not empty (or gone): stop
            folder = folder.parent

    # -- temp files ------------------------------------------------------------------------------------

    def list_stale_temp(self, older_than_s: float) -> builtins.list[str]:
        """Temp files (relative paths) last modified more than `older_than_s` ago: debris of crashed puts."""
        cutoff = self._clock.now().timestamp() - older_than_s
        stale: builtins.list[str] = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if not name.startswith(TEMP_PREFIX):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    if os.stat(path).st_mtime < cutoff:
                        stale.append(os.path.relpath(path, self.root))
                except FileNotFoundError:
                    continue
        return sorted(stale)

    def remove_stale_temp(self, older_than_s: float) -> int:
        """Delete the temp files `list_stale_temp` reports; returns how many were removed."""
        removed = 0
        for rel in self.list_stale_temp(older_than_s):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / rel)
                removed += 1
        return removed

    # -- paths -----------------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        path = self.root / validate_key(key)
        # Keys cannot contain "..", but a symlink planted inside the root could still point outside it.
        if not os.path.realpath(path).startswith(str(self.root) + os.sep):
            raise ConfigError(f"blob key {key!r} escapes the store root")
        return path


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return  # pruned concurrently: nothing left to make durable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _watch(chunks: Iterable[bytes], errors: list[BaseException]) -> Iterator[bytes]:
    """Yield from `chunks`, recording what the source itself raised (to tell it from our own I/O errors)."""
    try:
        yield from chunks
    except BaseException as exc:
        errors.append(exc)
        raise


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)

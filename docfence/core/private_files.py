"""Files and folders private to the service user whatever the umask: folders docfence makes are 0700,
files it makes are 0600 (the database, its WAL and journal, objects, keys, audit exports)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dirs(folder: str | os.PathLike[str]) -> Path:
    """`folder` and each missing folder above it, made 0700 (exactly: the umask only ever takes bits
    away, and a mode it left short is set again). A folder that exists is left as it is: it may be
    shared on purpose (/var/lib). Raises OSError as os.mkdir does; returns `folder` as a Path."""
    target = Path(folder)
    missing: list[Path] = []
    current = target
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR)
        except FileExistsError:  # made at the same moment by another process: it owns its mode
            continue
        os.chmod(path, PRIVATE_DIR)
    return target


def open_private(path: str | os.PathLike[str], flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """A descriptor on `path`, created 0600 when missing. An existing regular file of this user is
    made 0600 as well (what it will hold is as private as a new one); a device or a pipe (/dev/stdout)
    keeps its mode. Raises OSError as os.open does."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        tighten(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def tighten(target: int | str | os.PathLike[str]) -> None:
    """Take group and other bits off a regular file of this user (a descriptor or a path); anything
    else (missing, another user's, not a regular file) is left alone."""
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(target)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not st.st_mode & 0o077:
            return
        mode = stat.S_IMODE(st.st_mode) & ~0o077
        if isinstance(target, int):
            os.fchmod(target, mode)
        else:
            os.chmod(target, mode)


def create_private_file(path: str | os.PathLike[str]) -> bool:
    """Create `path` empty and 0600 unless it exists (then tighten it); True when this call made it.
    For a file another library then opens (SQLite creates its database with the umask, 0644)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        tighten(path)
        return False
    os.close(fd)
    return True


def private_umask() -> int:
    """Add group and other bits to this process's umask (022 becomes 077, 000 becomes 077), so what
    libraries create on their own (prometheus_client's counter files, SQLite's side files, sockets)
    is private too; its children inherit it. Returns the umask it had. For long-running commands,
    before they create anything."""
    old = os.umask(0o077)
    os.umask(old | 0o077)
    return old


def create_once(path: Path, content: bytes, prefix: str) -> None:
    """Make `path` hold `content` unless it exists: written whole to a private (0600) temporary file
    beside it, fsynced and linked into place (atomic, and refused when the name exists), so a process
    starting at the same moment reads either no file or the whole one, and every process agrees on the
    first one made. Raises OSError as the writes do."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)

"""Private temporary folders named after the process that owns them (`<prefix><pid>` or
`<prefix><pid>-<random>`), each holding a lock file its owner keeps locked while it lives, and the
sweep that removes those whose owner is gone: a worker or render process killed with SIGKILL cannot
remove its own, and its folder may hold a copy of a document.

Liveness is the lock (flock: released by the kernel when the owner dies, and seen alike from every pid
namespace sharing the folder, e.g. containers with one /tmp); the pid in the name only decides for a
folder without a lock file (an earlier version's, or one whose owner is between mkdir and locking),
and then only once the folder is older than ORPHAN_MIN_AGE_S."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import tempfile

from docfence.core.clock import utcnow
from docfence.core.process_id import alive

LOCK_NAME = ".owner"
ORPHAN_MIN_AGE_S = 600.0


def make_owned(prefix: str) -> tuple[str, int]:
    """A new private folder (mode 0700) in the temporary folder, named `prefix` + this process's pid +
    "-" + random characters, locked by this process: (path, the lock's descriptor, to keep open)."""
    folder = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
    return folder, hold(folder)


def hold(folder: str) -> int:
    """Lock `folder` as this process's (its lock file, created now): the descriptor to keep open for as
    long as the folder is in use (close-on-exec; a forked child shares the lock). The file is locked
    under a name of its own and only then named LOCK_NAME, so a sweep never finds it unlocked."""
    staged = os.path.join(folder, f"{LOCK_NAME}-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(staged, os.path.join(folder, LOCK_NAME))
    return fd


def remove_orphans(prefix: str, folder: str | None = None) -> list[str]:
    """Remove each folder in `folder` (default: the temporary folder), owned by this user, named `prefix`
    + a pid (alone or followed by "-...") whose owner is gone (see the module docstring); returns their
    names. A symbolic link is never followed or removed."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)(?:-.*)?", re.S)
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or not _ours(entry):
            continue
        state, lock = _lock(entry.path)
        try:
            if state == "held":
                continue  # its owner lives
            if state == "none" and (alive(int(match.group(1))) or _age_s(entry) < ORPHAN_MIN_AGE_S):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
        finally:
            if lock is not None:
                os.close(lock)
    return removed


def _ours(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
    except OSError:
        return False


def _lock(path: str) -> tuple[str, int | None]:
    """("free", descriptor): the folder's lock, now ours (its owner is gone); ("held", None): its owner
    holds it, or it cannot be read; ("none", None): the folder has no lock file."""
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return "none", None
    except OSError:
        return "held", None  # unreadable or a link: leave the folder alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return "held", None
    return "free", fd


def _age_s(entry: os.DirEntry[str]) -> float:
    with contextlib.suppress(OSError):
        return utcnow().timestamp() - entry.stat(follow_symlinks=False).st_mtime
    return 0.0


__all__ = ["LOCK_NAME", "ORPHAN_MIN_AGE_S", "hold", "make_owned", "remove_orphans"]

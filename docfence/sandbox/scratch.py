"""Private temporary folders named after the process that owns them (`<prefix><pid>` or
`<prefix><pid>-<random>`), and the sweep that removes those whose process is gone: a worker or render
process killed with SIGKILL cannot remove its own, and its folder may hold a copy of a document."""

from __future__ import annotations

import os
import re
import shutil
import tempfile


def make_owned(prefix: str) -> str:
    """A new private folder (mode 0700) in the temporary folder, named `prefix` + this process's pid +
    "-" + random characters, so a later `remove_orphans(prefix)` can tell when its owner is gone."""
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def remove_orphans(prefix: str, folder: str | None = None) -> list[str]:
    """Remove each folder in `folder` (default: the temporary folder) named `prefix` + a pid (alone or
    followed by "-...") whose process no longer exists, and owned by this user; returns their names.
    A pid in use (its owner, a zombie not yet reaped, or a process that reused the number) keeps its
    folder; a symbolic link is never followed or removed."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)(?:-.*)?", re.S)
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            ours = entry.is_dir(follow_symlinks=False) \
                and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if not ours:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process number: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or not a pid at all): not ours to judge
    return True


__all__ = ["make_owned", "remove_orphans"]

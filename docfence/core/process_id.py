"""The name a process's metric files carry: its pid plus its pid namespace, so processes of containers
sharing one metrics folder (each may be pid 1) never write one file or fold each other's; and whether a
pid of this namespace still names a process (what files named after a dead one may be cleaned up by)."""

from __future__ import annotations

import os
from functools import cache


@cache
def namespace() -> str:
    """This process's pid namespace: the inode of /proc/self/ns/pid ("0" where there is none)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def process_identifier() -> str:
    """`<pid>-<pid namespace>`: distinct for processes running at once, on this host or in containers."""
    return f"{os.getpid()}-{namespace()}"


def alive(pid: int) -> bool:
    """Whether `pid` names a process in this pid namespace: a zombie or another user's process counts,
    and so does anything that is not a process number (0, negative, too large): never act on those."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True

"""Running fault-run processes with less than root's rights (tests run as root, and root ignores a
read-only folder): the pre-exec steps that drop to another account, or keep root's uid without the
capabilities that override file permissions; and handing folders to an account."""

from __future__ import annotations

import ctypes
import os
import pwd
from collections.abc import Callable
from pathlib import Path

__all__ = ["give_to", "preexec_as", "preexec_unprivileged"]

_PR_CAPBSET_DROP = 24
# CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: what lets root write into a read-only folder
_FILE_OVERRIDES = (1, 2, 3)


def preexec_as(user: str | None) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child `user` (its group too, no supplementary groups); None
    for None (the child stays this process's account)."""
    if user is None:
        return None
    account = pwd.getpwnam(user)
    uid, gid = account.pw_uid, account.pw_gid

    def drop() -> None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return drop


def preexec_unprivileged() -> None:
    """A `preexec_fn`: the child (and everything it starts) keeps its uid but loses, at exec, the
    capabilities that override file permissions, so a folder made read-only is read-only to it.
    Used instead of another account where the interpreter lives in root's private home."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _FILE_OVERRIDES:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) refused")


def give_to(path: Path, user: str) -> None:
    """Make `path` (and everything under it) owned by `user` and its group."""
    account = pwd.getpwnam(user)
    for folder, dirs, files in os.walk(path):
        os.chown(folder, account.pw_uid, account.pw_gid)
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), account.pw_uid, account.pw_gid, follow_symlinks=False)

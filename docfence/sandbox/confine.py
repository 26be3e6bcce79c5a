"""Confinement of one render process (Linux Landlock), applied after the fork and before the task
reads a byte of its document: what a hostile file that took over pdfium could reach.

It may read and execute the interpreter, its libraries, the fonts and a few system files; read its
own input; write its own output, its answer and a private temporary folder. It cannot open another
file (the SQLite database, other jobs' staging or artifacts, the configuration and its keys), connect
or bind a TCP socket (PostgreSQL, S3, the network), reach an abstract Unix socket, or signal a process
outside itself (its worker, the zygote, other jobs' processes). Its subprocesses (the second reader)
and forked pieces inherit all of it. Files opened before the fork (the warm fonts) stay readable.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from py_landlock import AccessFs, Landlock, LandlockError, get_abi_version

# Read-only roots: code, shared libraries, fonts and their caches. /etc only in named parts: it may hold
# docfence's own configuration and keys.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/opt", "/var/cache/fontconfig",
               "/etc/fonts", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
               "/etc/mime.types", "/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/passwd",
               "/etc/group", "/etc/nsswitch.conf", "/etc/poppler", "/proc", "/sys/devices/system/cpu")
DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
DEVICES_WRITE = ("/dev/null",)


@dataclass(frozen=True)
class Confinement:
    """Where one render process may go (see the module docstring)."""

    read_files: Sequence[str]  # its input
    write_files: Sequence[str]  # its output and answer (created before confinement)
    private_dirs: Sequence[str] = ()  # its temporary folder (and the test hook's folder, when set)
    read_roots: Sequence[str] = field(default_factory=lambda: (*SYSTEM_READ, *python_roots()))


def python_roots() -> tuple[str, ...]:
    """The interpreter's prefixes and every folder on sys.path (the venv, the docfence package): a
    render process may still import a module lazily."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[2])}
    roots.update(p for p in sys.path if p)
    home = os.environ.get("HOME")
    if home:
        roots.add(os.path.join(home, ".cache", "fontconfig"))
    return tuple(sorted(roots))


def available() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (too old, or disabled at boot)."""
    try:
        return int(get_abi_version())
    except (LandlockError, OSError):
        return 0


def confine(plan: Confinement) -> int:
    """Restrict this process (and its future children) to `plan`; returns the Landlock ABI applied, or
    0 when the kernel has no Landlock (the process then runs unconfined: the caller reports it)."""
    if available() == 0:
        return 0
    read = AccessFs.READ_FILE | AccessFs.EXECUTE
    write = AccessFs.READ_FILE | AccessFs.WRITE_FILE | AccessFs.TRUNCATE
    everything = AccessFs(0)
    for flag in AccessFs:
        everything |= flag
    rules = Landlock(strict=False)  # drops the rights an older kernel does not know
    for paths, dir_access, file_access in (
            (plan.read_roots, read | AccessFs.READ_DIR, read),
            (DEVICES_READ, AccessFs(0), AccessFs.READ_FILE),
            (DEVICES_WRITE, AccessFs(0), write),
            (plan.read_files, AccessFs(0), AccessFs.READ_FILE),
            (plan.write_files, AccessFs(0), write),
            (plan.private_dirs, everything, write)):
        for path in paths:
            kind = _kind(path)
            access = dir_access if kind == "dir" else file_access
            if kind and access:  # Landlock refuses directory rights on a file, and rules on nothing
                rules.add_path_rule(path, access=access)
    # no TCP port rule: every bind and connect is refused; no scope allowed: signals and abstract Unix
    # sockets reach only this process and its descendants
    try:
        rules.apply()
    except (LandlockError, OSError):
        return 0
    return int(rules.abi_version)


def _kind(path: str) -> str:
    """"dir", "file" (anything else that exists: a device, a regular file) or "" when it is missing."""
    try:
        return "dir" if stat.S_ISDIR(os.stat(path).st_mode) else "file"
    except OSError:
        return ""

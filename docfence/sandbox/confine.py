"""Confinement of one render process, applied after the fork and before the task reads a byte of its
document: what a hostile file that took over pdfium could reach.

Landlock: it may read and execute the interpreter, its libraries, the fonts and a few system files;
read its own input; write its own output, its answer and a private temporary folder. It cannot open
another file (the SQLite database, other jobs' staging or artifacts, the configuration and its keys,
the working folder), read another process's /proc entry (the worker's environment holds its database
URL and credentials; Landlock's own ptrace rule does not cover /proc/PID/environ; its descendants cannot
read their own either), bind or connect a TCP socket, reach an abstract Unix socket, or signal a process
outside itself. seccomp: it cannot create a socket at all (UDP, a pathname Unix socket such as
PostgreSQL's, netlink) nor an io_uring that could, leave its process group (setsid, setpgid), change
a uid or enter a namespace (its process limit's counter stays its own). Its subprocesses (the second
reader) and forked pieces inherit all of it; files opened before the fork stay readable.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import os
import stat
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py_landlock import AccessFs, Landlock, LandlockError, get_abi_version

try:  # a ctypes binding of libseccomp (Debian's libseccomp2): loaded here, in the zygote, once
    import pyseccomp
except (ImportError, OSError, RuntimeError):  # no libseccomp on this machine
    pyseccomp = None

# Read-only roots: code, shared libraries, fonts and their caches. /usr only in those parts (an app is
# often deployed in /usr/src/app, its data folder beside it), /etc only in named parts, /opt and home
# folders not at all: they may hold a deployment's configuration, keys and data.
SYSTEM_READ = ("/usr/bin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/share",
               "/usr/local/bin", "/usr/local/lib", "/usr/local/share", "/lib", "/lib32", "/lib64", "/bin",
               "/sbin", "/var/cache/fontconfig",
               "/etc/fonts", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
               "/etc/mime.types", "/etc/alternatives", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
               "/etc/poppler", "/sys/devices/system/cpu")
DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
DEVICES_WRITE = ("/dev/null",)
DENIED_SYSCALLS = ("socket", "io_uring_setup",  # socketpair() stays: it connects to nothing
                   # the process group the zygote kills is for good (no descendant leaves it), and so
                   # is the real uid or user namespace its process limit is counted by (inherit.py)
                   "setsid", "setpgid", "setuid", "setreuid", "setresuid", "setfsuid", "unshare", "setns")


class ConfinementFailed(Exception):
    """The kernel offers confinement, but applying it failed: the task must not run unconfined."""


@dataclass(frozen=True)
class Confinement:
    """Where one render process may go (see the module docstring)."""

    read_files: Sequence[str]  # its input
    write_files: Sequence[str]  # its output and answer (created before confinement)
    private_dirs: Sequence[str] = ()  # its temporary folder (and the test hook's folder, when set)
    read_roots: Sequence[str] = field(default_factory=lambda: READ_ROOTS)


def python_roots() -> tuple[str, ...]:
    """The standard library, the installed packages (venv or system) and the docfence package itself,
    so a render process may still import a module lazily. Not sys.path as such: `python -m` puts the
    working folder there, which holds the default database and blob folder."""
    roots = {str(Path(__file__).resolve().parents[1])}  # the docfence package, not the folder above it
    for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars) if scheme_vars else sysconfig.get_paths()
        roots.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    home = os.environ.get("HOME")
    if home:
        roots.add(os.path.join(home, ".cache", "fontconfig"))
    return tuple(sorted(roots))


# once, in the zygote: every render process inherits it
READ_ROOTS: tuple[str, ...] = (*SYSTEM_READ, *python_roots())


def available() -> dict[str, Any]:
    """What this kernel and machine can apply: the Landlock ABI (0: none) and whether seccomp can."""
    return dict(_available())


@functools.cache
def _available() -> dict[str, Any]:
    # once per process: the first call binds the syscall through ctypes (~2.8 ms), so a zygote asks
    # before it forks (prepare) and its render processes inherit the answer
    try:
        abi = int(get_abi_version())
    except (LandlockError, OSError):
        abi = 0
    return {"landlock": abi, "sockets": pyseccomp is not None}


def prepare() -> None:
    """Do in a zygote, before it forks, what every confinement repeats: ask the kernel what it offers,
    resolve the shared read rules and compile the socket filter. A render process then only adds its
    own files (setup ~10 -> ~4 ms of CPU). Called again after a later warm-up step, so a folder created
    meanwhile (a font cache) is seen. Never raises: what fails here is built again, and fails, in the
    render process's own confine(), which then refuses to run its task."""
    can = _available()
    _shared_rules.cache_clear()
    with contextlib.suppress(Exception):
        if can["landlock"]:
            _shared_rules(READ_ROOTS)
    with contextlib.suppress(Exception):
        if can["sockets"]:
            _socket_filter()


def confine(plan: Confinement) -> dict[str, Any]:
    """Restrict this process (and its future children) to `plan`; returns what was applied, as
    `available()` says it. Raises ConfinementFailed when something available could not be applied."""
    from docfence.faults import fault_point  # the test hook: inert unless DOCFENCE_FAULTS is set

    fault_point("confine", error=lambda: ConfinementFailed("injected"))
    can = available()
    if can["landlock"]:
        try:
            _apply_landlock(plan)
        except (LandlockError, OSError) as exc:
            raise ConfinementFailed(f"Landlock: {type(exc).__name__}") from exc
    if can["sockets"]:
        try:
            _deny_sockets()
        except Exception as exc:  # pyseccomp raises OSError, and ValueError for a name it lacks
            raise ConfinementFailed(f"seccomp: {type(exc).__name__}") from exc
    return can


_READ = AccessFs.READ_FILE | AccessFs.EXECUTE
_WRITE = AccessFs.READ_FILE | AccessFs.WRITE_FILE | AccessFs.TRUNCATE
_EVERYTHING = functools.reduce(lambda a, b: a | b, AccessFs, AccessFs(0))


def _apply_landlock(plan: Confinement) -> None:
    try:
        _landlock(plan).apply()
    except (FileNotFoundError, NotADirectoryError):
        # a path resolved when the shared rules were built is gone (a font cache removed, a time zone
        # link changed): resolve them again, here, once
        _shared_rules.cache_clear()
        _landlock(plan).apply()


def _landlock(plan: Confinement) -> Landlock:
    own = (f"/proc/{os.getpid()}",)  # its own /proc entry only: another process's environment (the
    # worker's database URL and credentials), memory map and command line stay out of reach
    shared, built_by = _shared_rules(tuple(plan.read_roots))
    # A forked render process owns its copy of the zygote's memory, so it adds its files to the shared
    # rules in place (the zygote's stay as they were; copying them cost ~1.5 ms of copy-on-write per
    # task). The process that built them copies them first, so its next plan starts clean; a process
    # that takes them forgets them, so a second plan of its own (or of a descendant) starts from fresh
    # rules, never from these.
    if os.getpid() == built_by:
        rules = copy.deepcopy(shared)
    else:
        rules = shared
        _shared_rules.cache_clear()
    _add_rules(rules, ((own, AccessFs.READ_FILE | AccessFs.READ_DIR, AccessFs(0)),
                       (plan.read_files, AccessFs(0), AccessFs.READ_FILE),
                       (plan.write_files, AccessFs(0), _WRITE),
                       (plan.private_dirs, _EVERYTHING, _WRITE)))
    # no TCP port rule: every bind and connect is refused; no scope allowed: signals and abstract Unix
    # sockets reach only this process and its descendants
    return rules


@functools.cache
def _shared_rules(read_roots: tuple[str, ...]) -> tuple[Landlock, int]:
    """The rules every render process has (code, libraries, fonts, devices), resolved once, and the
    process that resolved them (which never applies them itself)."""
    rules = Landlock(strict=False)  # drops the rights an older kernel does not know
    _add_rules(rules, ((read_roots, _READ | AccessFs.READ_DIR, _READ),
                       (DEVICES_READ, AccessFs(0), AccessFs.READ_FILE),
                       (DEVICES_WRITE, AccessFs(0), _WRITE)))
    return rules, os.getpid()


def _add_rules(rules: Landlock, groups: Sequence[tuple[Sequence[str], AccessFs, AccessFs]]) -> None:
    for paths, dir_access, file_access in groups:
        for path in paths:
            kind = _kind(path)
            access = dir_access if kind == "dir" else file_access
            if kind and access:  # Landlock refuses directory rights on a file, and rules on nothing
                rules.add_path_rule(path, access=access)


def _deny_sockets() -> None:
    _socket_filter().load()


@functools.cache
def _socket_filter() -> Any:
    """The compiled filter (libseccomp's context), built once and loaded by each render process; loading
    does not change it."""
    assert pyseccomp is not None
    rules = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    return rules


def _kind(path: str) -> str:
    """"dir", "file" (anything else that exists: a device, a regular file) or "" when it is missing."""
    try:
        return "dir" if stat.S_ISDIR(os.stat(path).st_mode) else "file"
    except OSError:
        return ""


def readable_by_render(path: str | os.PathLike[str]) -> bool:
    """Whether a render process could read `path` (it lies under one of its read roots): the worker
    warns when the database, the blob folder or the configuration does."""
    target = Path(path).resolve()
    for root in READ_ROOTS:
        with contextlib.suppress(OSError, ValueError):
            if target.is_relative_to(Path(root).resolve()):
                return True
    return False

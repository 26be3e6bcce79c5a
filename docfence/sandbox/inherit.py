"""What a render process inherits from its zygote: only its task's descriptors (stdin, stdout and stderr
on /dev/null), a file-size limit sized by its job, a process limit the kernel counts for it alone, and a
process group of its own that the zygote, its subreaper, kills when it ends, so no process it starts
outlives it (confine.py's seccomp filter keeps every descendant in that group)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal

from docfence.sandbox.protocol import libc

_PR_SET_CHILD_SUBREAPER = 36
_MAX_FD = 0x7FFF_FFFF  # os.closerange is one close_range(2) call on Linux, whatever the bound
FSIZE_FLOOR_BYTES = 16 * 1024 * 1024  # answer file, lock file, a second reader's copies of a tiny job
# A render process's own real uid when docfence runs as root: + its pid (at most 2**22), so no two live
# render processes share one, and far above the ranges distributions and container runtimes hand out
JOB_UID_BASE = 0x7F00_0000
_CLONE_NEWUSER = 0x1000_0000
_PR_CAPBSET_DROP = 24
_CAP_SETUID, _CAP_SYS_ADMIN, _CAP_SYS_RESOURCE = 7, 21, 24  # the last two exempt a task from NPROC
_CAPABILITY_V3 = 0x2008_0522


def keep_only(keep: set[int], devnull: int) -> None:
    """Point 0, 1 and 2 at `devnull` (the worker's log and terminal are out of reach: a render
    traceback travels in the answer, outcomes.from_exception) and close every other descriptor but
    `keep`: the zygote's epoll and wake-up pipe, its control socket, other tasks' sockets, files."""
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    low = 3
    for fd in sorted(fd for fd in keep if fd >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _MAX_FD)


def file_size_limit(input_bytes: int, max_output_bytes: int) -> int:
    """The largest file a job may write: its output (at most max_output_bytes, which the engines enforce
    after rendering) or a copy of it or of its input (a repair), with a floor for small jobs."""
    return max(max_output_bytes, 2 * input_bytes) + FSIZE_FLOOR_BYTES


def limit_file_size(limit: int) -> None:
    """RLIMIT_FSIZE at `limit`; SIGXFSZ ignored, so a write past it fails with EFBIG (an OSError the
    task answers as a coded outcome) instead of killing the process without an answer."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def own_group(pid: int = 0) -> None:
    """Make `pid` (0: this process) the leader of a process group of its own. Called by both sides of the
    fork, so the group exists before either goes on (the zygote may kill it at once)."""
    with contextlib.suppress(PermissionError, ProcessLookupError):  # the other side got there first
        os.setpgid(pid, 0)


def become_subreaper() -> None:
    """This process adopts its descendants' orphans (PR_SET_CHILD_SUBREAPER): a render process's child
    whose parent died comes back to the zygote, which reaps it, instead of living on under init."""
    if libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_CHILD_SUBREAPER) failed")


def kill_group(pid: int) -> None:
    """SIGKILL every process still in render process `pid`'s group (its leader ended or is ending). The
    group id cannot be reused while any member lives, so this never reaches another process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def process_limit(cores: int | None = None) -> int:
    """How many tasks (processes and threads, itself included) a render process may have at once: per
    usable core a validation piece or a raster range with its two encoder threads (3; the process
    itself runs one), plus the background libqpdf read, poppler's pdfinfo and two spare. A fork or
    thread past it fails with EAGAIN."""
    return 3 * (cores or len(os.sched_getaffinity(0))) + 4


def limit_processes(limit: int) -> str:
    """RLIMIT_NPROC at `limit`, made to count this process's own tasks only; returns how ("uid", "userns")
    or "" when this machine offers neither (then no limit is set: the user's own count would refuse the
    forks validation needs, and root's is not enforced).

    The kernel counts NPROC per real uid (per user namespace), never for uid 0 and never for a task
    with CAP_SYS_ADMIN or CAP_SYS_RESOURCE. As root: a real uid of its own (JOB_UID_BASE + pid; the
    effective uid stays 0, so its files stay readable) and those capabilities and CAP_SETUID dropped,
    also from the bounding set, so pdfinfo exec'd as root gets none back. Otherwise: a user namespace
    of its own, where only its descendants count (entered before the limit is lowered: the kernel
    checks a namespace's tasks against the limit its creator had, at every level above it, and the
    user's other processes count there). confine.py then denies every set*uid call and unshare."""
    if os.geteuid() == 0 and _own_real_uid():
        how = "uid"
    elif not _initial_root() and libc().unshare(_CLONE_NEWUSER) == 0:
        how = "userns"
    else:  # the user's own count: lowering it would refuse the forks validation needs
        return ""
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    return how


def _own_real_uid() -> bool:
    try:
        os.setresuid(JOB_UID_BASE + os.getpid(), -1, -1)
    except OSError:  # no CAP_SETUID, or a container whose namespace does not map that uid
        return False
    _drop_capabilities((_CAP_SETUID, _CAP_SYS_ADMIN, _CAP_SYS_RESOURCE))
    return True


def _initial_root() -> bool:
    """Whether this process is uid 0 of the initial user namespace: a namespace of its own would
    not help (uid 0 is never counted)."""
    if os.getuid() != 0:
        return False
    fd = os.open("/proc/self/uid_map", os.O_RDONLY)
    try:
        return os.read(fd, 64).split()[:2] == [b"0", b"0"]
    finally:
        os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_CapSets = _CapData * 2
# built, and capget called once, in the zygote (prepare): a render process's first ctypes structure and
# call cost ~0.2 ms of copy-on-write and set-up; each render process changes its own copy
_BUFFERS = (_CapHeader(_CAPABILITY_V3, 0), _CapSets())


def _drop_capabilities(caps: tuple[int, ...]) -> None:
    """Drop `caps` from the bounding set and from the effective, permitted and inheritable sets."""
    lib, (header, data) = libc(), _BUFFERS
    header.version, header.pid = _CAPABILITY_V3, 0
    if lib.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    mask = [0xFFFF_FFFF, 0xFFFF_FFFF]
    for cap in caps:
        if lib.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")
        mask[cap // 32] &= ~(1 << (cap % 32))
    for word, keep in zip(data, mask, strict=True):
        word.effective, word.permitted, word.inheritable = (
            word.effective & keep, word.permitted & keep, word.inheritable & keep)
    if lib.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def prepare() -> None:
    """In the zygote, before it forks: resolve the C functions limit_processes calls and read the
    capabilities once, so no render process pays for the set-up."""
    lib, (header, data) = libc(), _BUFFERS
    for name in ("capget", "capset", "prctl", "unshare"):
        getattr(lib, name)
    lib.capget(ctypes.byref(header), data)

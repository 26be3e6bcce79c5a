"""What crosses the sandbox's sockets: small JSON messages on SOCK_SEQPACKET (one send = one message),
a job's socket handed to the zygote with SCM_RIGHTS, the parent-death signal both ends rely on, and the
task's secrets pipe (a password, the signing key): filled by the parent, read only by the render child."""

from __future__ import annotations

import array
import ctypes
import functools
import json
import os
import signal
import socket
from typing import Any

MAX_MESSAGE = 64 * 1024  # control and job messages are small; documents travel as files
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
ZYGOTE_NAME = "docfence-zygote"  # what ps, top and /proc/PID/comm show
RENDER_NAME = "docfence-render"


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise ValueError("sandbox message too large")
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """(message, fds); (None, []) at end of stream. The descriptors arrive close-on-exec (nothing the
    receiver runs inherits them) and are closed here when the message is not one (raises ValueError)."""
    data, fds = _recv_with_fds(sock)
    try:
        message = json.loads(data) if data else None
        if message is not None and not isinstance(message, dict):
            raise ValueError("a sandbox message is a JSON object")
    except BaseException:
        _close_all(fds)
        raise
    if message is None:
        _close_all(fds)
        return None, []
    return message, list(fds)


def _recv_with_fds(sock: socket.socket, max_fds: int = 4) -> tuple[bytes, list[int]]:
    """One message and the descriptors attached to it, received close-on-exec (MSG_CMSG_CLOEXEC:
    socket.recv_fds ignores the flags it is given)."""
    item = array.array("i").itemsize
    data, ancillary, _flags, _addr = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(max_fds * item),
                                                  socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % item])
    return data, list(fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def secrets_pipe(secrets: dict[str, Any]) -> int:
    """A pipe holding a task's secrets (a password, the signing key), written and closed; returns its
    read end, which travels to the zygote with the task's socket and is read only by the render
    process after the fork. So no secret passes through the zygote's memory, which every later render
    process inherits, nor through a file or a command line (docs/security.md)."""
    data = json.dumps(secrets).encode("utf-8")
    read, write = os.pipe2(os.O_CLOEXEC)  # close-on-exec: no process this one runs inherits either end
    try:
        try:
            if len(data) > _pipe_capacity(write):  # never block on a reader that is not there yet
                raise ValueError("sandbox secrets too large")
            written = 0
            while written < len(data):  # fits the pipe, so never blocks
                written += os.write(write, data[written:])
        finally:
            os.close(write)  # the reader sees the end of the secrets, whatever happened
    except BaseException:
        os.close(read)
        raise
    return read


def _pipe_capacity(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, MAX_MESSAGE)


def take_secrets(fd: int | None) -> dict[str, Any]:
    """In the render process: the task's secrets, read from its pipe to the end ({} without one)."""
    if fd is None:
        return {}
    with os.fdopen(fd, "rb") as fh:
        found: dict[str, Any] = json.loads(fh.read())
    return found


def die_with_parent(expected_parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux prctl); exit now if the parent is already gone
    (the death happened between fork/exec and this call)."""
    if libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != expected_parent:
        os._exit(70)


def set_process_name(name: str) -> None:
    """Name this process for operators (`ps -o comm`) and tests (/proc/PID/comm); at most 15 bytes."""
    libc().prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode("ascii")[:15]), 0, 0, 0)


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once: the zygote loads it, so its render processes inherit the handle
    instead of resolving it again in every job."""
    return ctypes.CDLL(None, use_errno=True)

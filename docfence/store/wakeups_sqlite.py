"""SQLite wake-ups between the processes of one host: a folder of Unix datagram sockets next to the
database file (`<db>-wakeups/`). Each process that waits binds one socket there; a process that
commits a transition then sends its announcement to every socket in the folder, removing the sockets
of processes that died.

Sockets are addressed through /proc/self/fd/<folder fd>/<name>, so a deep database path never meets
the 108-byte limit of socket addresses (Linux). Anyone who may write the folder can send a spurious
wake-up, which costs a re-read and nothing else: announcements are hints, the rows are the truth.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from docfence.store.wakeups import Fanout, Listener

WORK_LINE = b"*"  # a datagram is lines: this one for "jobs were queued", every other one a job id
MAX_PAYLOAD = 8192  # bytes per datagram; a long list of ended jobs is split
_DEFAULT_QUEUE = 10

log = logging.getLogger("docfence.store.wakeups")


def socket_dir(db_path: str | os.PathLike[str]) -> Path:
    """Where the processes waiting on this database bind their sockets."""
    return Path(f"{os.fspath(db_path)}-wakeups")


def announce(folder: Path, *, work: bool, ended: Sequence[str]) -> None:
    """Send one committed transaction's announcement to every process waiting on the database.

    Never raises: the transition has committed whatever happens here, and a lost announcement only
    delays a waiter until its safety poll. A receiver whose queue is full is skipped; it notices the
    full queue itself and wakes all its waiters (see _Receiver).
    """
    datagrams = encode(work, ended)
    if not datagrams:
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # nobody ever waited on this database
    except OSError as exc:
        log.debug("cannot open the wake-up folder: %s", exc)
        return
    try:
        names = [n for n in os.listdir(fd) if n.endswith(".sock")]
        if names:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK) as sock:
                for name in names:
                    _send(sock, fd, name, datagrams)
    except OSError as exc:  # e.g. out of file descriptors: the waiters' safety polls cover it
        log.debug("wake-ups could not be sent: %s", exc)
    finally:
        os.close(fd)


def _send(sock: socket.socket, fd: int, name: str, datagrams: list[bytes]) -> None:
    address = _address(fd, name)
    for data in datagrams:
        try:
            sock.sendto(data, address)
        except ConnectionRefusedError:  # nobody is bound: its process died without removing it
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
            return
        except (FileNotFoundError, BlockingIOError):  # closed meanwhile, or its queue is full
            return
        except OSError as exc:
            log.debug("a wake-up could not be sent: %s", exc)
            return


def encode(work: bool, ended: Sequence[str]) -> list[bytes]:
    lines = ([WORK_LINE] if work else []) + [job_id.encode("utf-8") for job_id in ended]
    datagrams: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        if current and size + len(line) + 1 > MAX_PAYLOAD:
            datagrams.append(b"\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        datagrams.append(b"\n".join(current))
    return datagrams


def decode(datagrams: Sequence[bytes]) -> tuple[bool, list[str]]:
    work, ended = False, []
    for data in datagrams:
        for line in data.split(b"\n"):
            if line == WORK_LINE:
                work = True
            elif line:
                ended.append(line.decode("utf-8", "replace"))
    return work, ended


def _address(fd: int, name: str) -> str:
    return f"/proc/self/fd/{fd}/{name}"


@contextlib.contextmanager
def _opened(folder: Path) -> Iterator[int]:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _queue_capacity() -> int:
    """How many datagrams a socket queues before senders get EAGAIN (net.unix.max_dgram_qlen + 1)."""
    try:
        return int(Path("/proc/sys/net/unix/max_dgram_qlen").read_text().strip()) + 1
    except (OSError, ValueError):
        return _DEFAULT_QUEUE + 1


class SocketDirListener(Listener):
    """This process's socket in the database's wake-up folder. `check()`, run before each wait,
    binds a new socket if the file was removed (a clean-up, a recreated folder), since nothing could
    reach the old one; every (re)bind wakes all waiters, as announcements may have been missed."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self._lock = threading.Lock()
        self._receiver: _Receiver | None = None
        self._failing = False

    def start(self) -> None:
        self.check()

    def check(self) -> None:
        receiver = self._receiver
        if receiver is not None and receiver.still_bound():
            return
        with self._lock:
            if self._receiver is not receiver:
                return  # another thread rebound meanwhile
            try:
                self._receiver = _Receiver(self.folder, self.fanout)
            except OSError as exc:
                if not self._failing:
                    log.warning("cannot bind a wake-up socket (%s); waiters poll meanwhile", exc)
                self._failing = True
                return
        self._failing = False
        if receiver is not None:
            receiver.close()
        self.fanout.missed_announcements()

    def socket_path(self) -> Path | None:
        """This process's socket file (fault tests remove it)."""
        receiver = self._receiver
        return receiver.path if receiver is not None else None

    def close(self) -> None:
        with self._lock:
            receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.close()


class _Receiver:
    """One bound socket and the thread that reads it."""

    def __init__(self, folder: Path, fanout: Fanout) -> None:
        self.fanout = fanout
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{os.getpid()}-{secrets.token_hex(6)}.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            with _opened(folder) as fd:
                self.sock.bind(_address(fd, self.path.name))
            st = os.stat(self.path)
        except OSError:
            self.sock.close()
            raise
        self._identity = (st.st_dev, st.st_ino)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="docfence-wakeups", daemon=True)
        self._thread.start()

    def still_bound(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def _run(self) -> None:
        capacity = _queue_capacity()
        while (batch := self._read_batch()) is not None:
            if len(batch) >= capacity:
                # The queue was full at some point, so a sender may have dropped an announcement.
                self.fanout.missed_announcements()
                continue
            work, ended = decode(batch)
            if work:
                self.fanout.work_announced()
            if ended:
                self.fanout.jobs_ended(ended)

    def _read_batch(self) -> list[bytes] | None:
        """Block for one datagram, then take all that is queued (one wake covers a burst of
        commits); None once the socket is closed. We never send empty datagrams: an empty read
        means close() shut the socket down."""
        try:
            batch = [self.sock.recv(MAX_PAYLOAD)]
        except OSError:
            return None
        if self._closing:
            return None
        while batch[-1]:
            try:
                batch.append(self.sock.recv(MAX_PAYLOAD, socket.MSG_DONTWAIT))
            except BlockingIOError:
                break
            except OSError:
                return None
        return batch

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked recv with an empty read
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if self.still_bound():
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.sock.close()

"""Storage faults named and bounded: a full disk or quota is StorageFull ("no space left") wherever a blob
is written (object, stream, sealed password, temp file, the S3 spool), on a real full tmpfs and by
injected ENOSPC/EDQUOT, with nothing left behind; other OS errors stay BlobError. S3 error codes map
to our classes by code, and a black-holed S3 endpoint fails a call with BlobError instead of blocking it."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber
from cryptography.fernet import Fernet

from docfence.blobs import LocalBlobStore
from docfence.blobs.base import os_error
from docfence.blobs.s3 import MIN_PART_SIZE, S3BlobStore, S3Timeouts
from docfence.blobs.sealed import PasswordSeal, password_key
from docfence.config import WorkerConfig
from docfence.core.errors import BlobError, BlobNotFound, ConfigError, StorageFull
from docfence.testing.s3_env import use_dummy_aws

BUCKET = "docfence-test"
REGION = "eu-central-1"
SEAL = PasswordSeal(Fernet.generate_key())


def _files(root: Path) -> list[str]:
    """Every file under `root`, temp files included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _assert_full(exc: BaseException, root: Path | None = None) -> None:
    assert isinstance(exc, StorageFull) and exc.code == "storage_full" and exc.retryable
    assert "no space left" in exc.message
    if root is not None:
        assert str(root) not in exc.message  # names the key and the errno, not where the folder is


# -- a real full disk (a tiny tmpfs) ---------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs with 16 inodes, mounted for the test (the machine's tests run as root)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=16,mode=0700", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_is_storage_full_for_every_kind_of_write_and_leaves_nothing(tiny_disk: Path) -> None:
    store = LocalBlobStore(tiny_disk / "objects")
    big = b"%PDF-" + b"x" * (128 * 1024)
    with pytest.raises(BlobError) as put:
        store.put("jobs/t/j1/input.pdf", big)
    _assert_full(put.value, tiny_disk)
    with pytest.raises(BlobError) as streamed:
        store.put_stream("jobs/t/j1/input.pdf", io.BytesIO(big), max_bytes=len(big))
    _assert_full(streamed.value, tiny_disk)
    assert _files(store.root) == [] and list(store.list()) == []  # no temp file, no object left behind

    filler = tiny_disk / "filler"
    with open(filler, "wb", buffering=0) as out, pytest.raises(OSError) as no_room:
        while True:  # fill the disk to its last byte
            out.write(b"f" * 4096)
    assert no_room.value.errno == errno.ENOSPC
    with pytest.raises(BlobError) as sealed:
        SEAL.seal(store, "jobs/t/j1/", "a password")
    _assert_full(sealed.value, tiny_disk)
    assert _files(store.root) == [] and not store.exists(password_key("jobs/t/j1/"))

    filler.unlink()  # room again: the same writes go through
    assert store.put("jobs/t/j1/input.pdf", b"%PDF-small").bytes == 10
    assert SEAL.unseal(store, "jobs/t/j1/") is None
    SEAL.seal(store, "jobs/t/j1/", "a password")
    assert SEAL.unseal(store, "jobs/t/j1/") == "a password"


def test_no_inode_left_for_a_temp_file_or_a_folder_is_storage_full(tiny_disk: Path) -> None:
    store = LocalBlobStore(tiny_disk / "objects")
    written = 0
    with pytest.raises(BlobError) as full:
        for n in range(32):  # each new job folder costs two inodes (folder + file) of the 16
            store.put(f"jobs/t/j{n}/input.pdf", b"%PDF-1")
            written += 1
    _assert_full(full.value, tiny_disk)
    assert 0 < written < 32
    assert len(list(store.list())) == written and not [f for f in _files(store.root) if ".tmp-" in f]


def test_the_s3_spool_on_a_full_disk_is_storage_full_before_any_request(tiny_disk: Path) -> None:
    """put_stream spools to local disk past one part: that disk filling up is named too."""
    client = _client("http://127.0.0.1:9")  # never reached: the spool fails first
    stub = Stubber(client)
    with stub:  # a request would fail the stub (no responses queued)
        store = S3BlobStore(BUCKET, client=client, spool_dir=tiny_disk, part_size=MIN_PART_SIZE)
        with pytest.raises(BlobError) as full:
            store.put_stream("jobs/t/j1/input.pdf", io.BytesIO(b"x" * (MIN_PART_SIZE + 1)),
                             max_bytes=MIN_PART_SIZE * 2)
        stub.assert_no_pending_responses()
    _assert_full(full.value, tiny_disk)
    assert _files(tiny_disk) == []  # the spool file went with its handle


# -- injected disk errors (every write site, each errno) ---------------------------------------------------


class _FailingFile:
    """A file object whose write raises `err` (as a write to a full disk does)."""

    def __init__(self, real: Any, err: int) -> None:
        self._real, self._err = real, err

    def write(self, data: bytes) -> int:
        raise OSError(self._err, os.strerror(self._err))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._real.close()


SITES = ["write", "fsync", "temp_file", "folder"]


def _inject(monkeypatch: pytest.MonkeyPatch, site: str, err: int) -> list[str]:
    """Make `site` of a local write raise OSError(err); returns a list that records each injection."""
    hit: list[str] = []

    def fail(*_a: Any, **_k: Any) -> Any:
        hit.append(site)
        raise OSError(err, os.strerror(err))

    real_fdopen = os.fdopen
    if site == "write":
        def fdopen(fd: int, *a: Any, **k: Any) -> Any:
            hit.append(site)
            return _FailingFile(real_fdopen(fd, *a, **k), err)
        monkeypatch.setattr("docfence.blobs.local.os.fdopen", fdopen)
    elif site == "fsync":
        monkeypatch.setattr("docfence.blobs.local.os.fsync", fail)
    elif site == "temp_file":
        monkeypatch.setattr("docfence.blobs.local.tempfile.mkstemp", fail)
    else:
        real_mkdir = Path.mkdir

        def mkdir(self: Path, *a: Any, **k: Any) -> None:
            if self.name == "j-new":
                fail()
            real_mkdir(self, *a, **k)
        monkeypatch.setattr(Path, "mkdir", mkdir)
    return hit


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("how", ["put", "put_stream", "seal"])
def test_a_full_disk_at_any_write_site_is_storage_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, site: str, how: str) -> None:
    store = LocalBlobStore(tmp_path / "objects")
    store.put("jobs/t/j-old/input.pdf", b"%PDF-kept")
    hit = _inject(monkeypatch, site, err)
    with pytest.raises(BlobError) as full:
        if how == "put":
            store.put("jobs/t/j-new/input.pdf", b"%PDF-1")
        elif how == "put_stream":
            store.put_stream("jobs/t/j-new/input.pdf", io.BytesIO(b"%PDF-1"), max_bytes=100)
        else:
            SEAL.seal(store, "jobs/t/j-new/", "secret")
    monkeypatch.undo()
    assert hit  # the fault was reached
    _assert_full(full.value, tmp_path)
    assert errno.errorcode[err] in full.value.message
    assert _files(store.root) == ["jobs/t/j-old/input.pdf"]  # nothing new, no temp file


@pytest.mark.parametrize("site", SITES)
def test_other_disk_errors_stay_a_retryable_blob_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site: str) -> None:
    store = LocalBlobStore(tmp_path / "objects")
    hit = _inject(monkeypatch, site, errno.EIO)
    with pytest.raises(BlobError) as failed:
        store.put("jobs/t/j-new/input.pdf", b"%PDF-1")
    monkeypatch.undo()
    assert hit
    assert type(failed.value) is BlobError and failed.value.retryable and "EIO" in failed.value.message
    assert _files(store.root) == []


def test_a_read_error_mid_object_is_a_blob_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalBlobStore(tmp_path / "objects")
    store.put("jobs/t/j1/input.pdf", b"%PDF-1")
    with store.open_read("jobs/t/j1/input.pdf") as reader:
        real = reader._raw
        monkeypatch.setattr(reader, "_raw", _FailingReader())
        with pytest.raises(BlobError) as failed:
            reader.read()
        real.close()
    assert type(failed.value) is BlobError and "EIO" in failed.value.message


class _FailingReader:
    def read(self, *_a: Any) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    def close(self) -> None:
        pass


def test_the_translation_keeps_the_cause_and_no_path() -> None:
    cause = OSError(errno.ENOSPC, "No space left on device", "/srv/docfence/objects/jobs/t/j/.tmp-x")
    full = os_error(cause, "write object 'jobs/t/j/input.pdf'")
    _assert_full(full)
    assert "/srv" not in full.message and "ENOSPC" in full.message
    plain = os_error(OSError(errno.EACCES, "Permission denied"), "write object 'k'")
    assert type(plain) is BlobError and "EACCES" in plain.message


# -- S3: error codes, timeouts ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _dummy_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials; the host's AWS configuration is hidden."""
    use_dummy_aws(monkeypatch)


def _client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("XMinioStorageFull", 507, StorageFull),
    ("XMinioAdminBucketQuotaExceeded", 400, StorageFull),
    ("QuotaExceeded", 403, StorageFull),
    ("SomeVendorsOwnCode", 507, StorageFull),  # Insufficient Storage, whatever the code
    ("NoSuchKey", 404, BlobNotFound),
    ("SlowDown", 503, BlobError),
    ("AccessDenied", 403, BlobError),
])
def test_s3_errors_map_by_code(code: str, status: int, expected: type[BlobError]) -> None:
    client = _client("http://127.0.0.1:9")
    store = S3BlobStore(BUCKET, client=client)
    with Stubber(client) as stub:
        stub.add_client_error("put_object", service_error_code=code, service_message="text never parsed",
                              http_status_code=status)
        with pytest.raises(BlobError) as failed:
            store.put("jobs/t/j1/input.pdf", b"%PDF-1")
        stub.assert_no_pending_responses()
    assert type(failed.value) is expected
    assert expected is BlobNotFound or code in failed.value.message  # the code, for the operator
    if expected is StorageFull:
        _assert_full(failed.value)


def test_every_s3_client_is_bounded_below_the_default_lease() -> None:
    store = S3BlobStore(BUCKET, endpoint_url="http://127.0.0.1:9", region_name=REGION)
    config = store._client.meta.config
    bounds = store.timeouts
    assert (config.connect_timeout, config.read_timeout) == (bounds.connect_s, bounds.read_s)
    assert config.retries["total_max_attempts"] == bounds.max_attempts and config.tcp_keepalive
    backoff_s = 2.0  # botocore's standard retry back-off before the second try is at most ~1 s
    worst = bounds.max_attempts * (bounds.connect_s + bounds.read_s) + backoff_s
    assert worst < WorkerConfig().lease_ttl_s
    for bad in ({"connect_s": 0}, {"read_s": -1}, {"max_attempts": 0}):
        with pytest.raises(ConfigError):
            S3Timeouts(**bad)


class BlackHole:
    """A loopback TCP listener that accepts connections and never answers (a partitioned endpoint)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._arrived = threading.Condition()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with self._arrived:
                self.accepted.append(conn)
                self._arrived.notify_all()

    def connections(self, at_least: int) -> int:
        """How many connections were accepted, once at least `at_least` were (or 10 s went by)."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.accepted) >= at_least, timeout=10)
            return len(self.accepted)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (a close alone does not)
        self._thread.join(timeout=10)
        self._sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    try:
        yield hole
    finally:
        hole.close()


@pytest.mark.parametrize("op", ["get", "put", "exists"])
def test_a_black_holed_s3_endpoint_fails_the_call_with_blob_error(black_hole: BlackHole, op: str) -> None:
    timeouts = S3Timeouts(connect_s=0.5, read_s=0.5, max_attempts=2)
    store = S3BlobStore(BUCKET, endpoint_url=f"http://127.0.0.1:{black_hole.port}", region_name=REGION,
                        timeouts=timeouts)
    with pytest.raises(BlobError) as failed:
        if op == "get":
            store.get("jobs/t/j1/input.pdf")
        elif op == "put":
            store.put("jobs/t/j1/input.pdf", b"%PDF-1")
        else:
            store.exists("jobs/t/j1/input.pdf")
    assert type(failed.value) is BlobError and failed.value.retryable
    assert isinstance(failed.value.__cause__, ReadTimeoutError)  # the read timeout ended it
    assert black_hole.connections(timeouts.max_attempts) == timeouts.max_attempts  # retried, bounded


def test_a_stopped_s3_endpoint_fails_the_call_with_blob_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = S3BlobStore(BUCKET, endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION,
                        timeouts=S3Timeouts(connect_s=0.5, read_s=0.5, max_attempts=1))
    with pytest.raises(BlobError) as failed:
        store.get("jobs/t/j1/input.pdf")
    assert type(failed.value) is BlobError and isinstance(failed.value.__cause__, EndpointConnectionError)


def test_a_body_that_stops_mid_object_is_a_blob_error() -> None:
    """The endpoint sends the headers of a GET, a few bytes, then nothing: the read times out."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        held: list[socket.socket] = []

        def answer_partly() -> None:
            conn, _ = server.accept()
            held.append(conn)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: application/pdf\r\n"
                         b"Last-Modified: Wed, 02 Dec 2026 07:00:00 GMT\r\n\r\n%PDF-")

        thread = threading.Thread(target=answer_partly, daemon=True)
        thread.start()
        store = S3BlobStore(BUCKET, endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION,
                            timeouts=S3Timeouts(connect_s=0.5, read_s=0.5, max_attempts=1))
        try:
            with store.open_read("jobs/t/j1/input.pdf") as reader, pytest.raises(BlobError) as failed:
                reader.read()
        finally:
            thread.join(timeout=10)
            for conn in held:
                conn.close()
    assert type(failed.value) is BlobError and "reading" in failed.value.message

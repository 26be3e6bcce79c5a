"""The BlobStore conformance suite: one class of pytest tests every backend passes unchanged, plus
`run_moto_server`, which runs a real moto S3 server in a subprocess (never an in-process mock)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest

from docfence.blobs.base import BlobInfo, BlobStore
from docfence.blobs.regions import RegionRouter
from docfence.core import clock
from docfence.core.errors import BlobError, BlobIntegrityError, BlobNotFound, ConfigError, RegionNotApproved

ALL_BYTES = bytes(range(256)) * 4
BAD_KEYS = [
    "", "/abs", "../x", "a/../b", "..", ".", "./a", "a/./b", "a//b", "a/", "a\\b", "..\\x",
    ".hidden", "a/.tmp-x", "~root", "a b", "a\x00b", "a\nb", "é", "x" * 256, "a/" * 600 + "a",
]  # fmt: skip


@dataclass(frozen=True)
class BlobHarness:
    """What the suite needs from a backend fixture: the store, and two ways to look behind its back."""

    store: BlobStore
    corrupt: Callable[[str], None]  # change the stored bytes of `key` (same length) without the store
    leftovers: Callable[[], list[str]]  # raw debris: temp files, empty folders, unfinished uploads


class ChunkedStream(io.RawIOBase):
    """A source that answers each read with at most `piece` bytes and can fail after `fail_after`."""

    def __init__(self, data: bytes, piece: int = 7, fail_after: int | None = None) -> None:
        self._data, self._pos, self._piece, self._fail_after = data, 0, piece, fail_after

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._fail_after is not None and self._pos >= self._fail_after:
            raise OSError("source stream broke")
        n = self._piece if size < 0 else min(size, self._piece)
        chunk = self._data[self._pos : self._pos + n]
        self._pos += len(chunk)
        return chunk


class BlobStoreContract:
    """Subclass this in a test module that provides a `blob_harness` fixture (one per backend)."""

    @pytest.fixture
    def store(self, blob_harness: BlobHarness) -> BlobStore:
        return blob_harness.store

    def test_put_get_round_trip(self, store: BlobStore) -> None:
        assert isinstance(store, BlobStore)
        info = store.put("t1/job-1/out.pdf", ALL_BYTES)
        assert info == BlobInfo("t1/job-1/out.pdf", _sha(ALL_BYTES), len(ALL_BYTES))
        assert store.get("t1/job-1/out.pdf") == ALL_BYTES
        assert store.get("t1/job-1/out.pdf", expected_sha256=info.sha256) == ALL_BYTES
        assert store.exists("t1/job-1/out.pdf")
        assert store.stat("t1/job-1/out.pdf") == info

    def test_empty_object(self, store: BlobStore) -> None:
        info = store.put("empty", b"")
        assert info == BlobInfo("empty", _sha(b""), 0)
        assert store.get("empty", expected_sha256=info.sha256) == b""
        assert list(store.list()) == ["empty"]

    def test_open_read_streams_in_chunks(self, store: BlobStore) -> None:
        info = store.put("big", ALL_BYTES)
        with store.open_read("big", expected_sha256=info.sha256) as reader:
            assert reader.size == len(ALL_BYTES)
            chunks = list(reader.iter_chunks(100))
        assert b"".join(chunks) == ALL_BYTES
        assert max(len(c) for c in chunks) <= 100
        with store.open_read("big") as reader:
            assert reader.read(0) == b""
            assert reader.read(10) + reader.read() == ALL_BYTES

    def test_wrong_expected_sha256_is_an_integrity_error(self, store: BlobStore) -> None:
        store.put("a", b"payload")
        with pytest.raises(BlobIntegrityError):
            store.get("a", expected_sha256=_sha(b"other"))
        with pytest.raises(ConfigError):
            store.get("a", expected_sha256="not-a-sha")

    def test_corruption_behind_the_stores_back_is_detected(self, blob_harness: BlobHarness) -> None:
        store = blob_harness.store
        info = store.put("t1/job-1/out.pdf", ALL_BYTES)
        blob_harness.corrupt("t1/job-1/out.pdf")
        with pytest.raises(BlobIntegrityError):
            store.get("t1/job-1/out.pdf", expected_sha256=info.sha256)
        with (
            pytest.raises(BlobIntegrityError),
            store.open_read("t1/job-1/out.pdf", expected_sha256=info.sha256) as reader,
        ):
            for _chunk in reader.iter_chunks(64):
                pass

    def test_missing_object(self, store: BlobStore) -> None:
        store.put("a/b", b"x")
        for key in ("nope", "a/nope", "a", "a/b/c"):  # "a" is a folder, "a/b/c" lies under an object
            with pytest.raises(BlobNotFound):
                store.get(key)
            with pytest.raises(BlobNotFound):
                store.open_read(key)
            assert not store.exists(key)
            assert store.stat(key) is None
            assert store.delete(key) is False

    def test_modified_at_is_when_the_object_was_written(self, store: BlobStore) -> None:
        before = clock.utcnow().replace(microsecond=0) - timedelta(seconds=1)  # S3 keeps whole seconds
        store.put("t1/job-1/input.pdf", b"x")
        written = store.modified_at("t1/job-1/input.pdf")
        assert written is not None and written.tzinfo is not None
        assert before <= written <= clock.utcnow() + timedelta(seconds=1)  # same host, same clock
        for key in ("t1/job-1/nope", "t1/job-1", "t1"):  # absent, and folders, are not objects
            assert store.modified_at(key) is None

    def test_delete_is_idempotent(self, blob_harness: BlobHarness) -> None:
        store = blob_harness.store
        store.put("t1/job-1/out.pdf", b"x")
        store.put("t1/keep", b"y")
        assert store.delete("t1/job-1/out.pdf") is True
        assert store.delete("t1/job-1/out.pdf") is False
        assert not store.exists("t1/job-1/out.pdf")
        with pytest.raises(BlobNotFound):
            store.get("t1/job-1/out.pdf")
        assert list(store.list()) == ["t1/keep"]
        assert blob_harness.leftovers() == []

    def test_delete_prefix_removes_the_folder_and_nothing_else(self, blob_harness: BlobHarness) -> None:
        store = blob_harness.store
        doomed = ["t1/job-1/a", "t1/job-1/sub/b", "t1/job-1/sub/deeper/c"]
        kept = ["t1/job-10/a", "t1/job-1x", "t1/job-2/a", "t2/job-1/a"]
        for key in doomed + kept:
            store.put(key, key.encode())
        assert store.delete_prefix("t1/job-1") == 3
        assert list(store.list()) == sorted(kept)
        assert store.delete_prefix("t1/job-1/") == 0
        assert store.delete_prefix("t2/") == 1
        assert list(store.list()) == sorted(kept[:-1])
        assert all(store.get(k) == k.encode() for k in kept[:-1])
        assert blob_harness.leftovers() == []

    def test_delete_prefix_refuses_everything(self, store: BlobStore) -> None:
        store.put("a", b"x")
        for prefix in ("", "/"):
            with pytest.raises(ConfigError):
                store.delete_prefix(prefix)
        assert store.exists("a")

    def test_list_by_folder_prefix_in_byte_order(self, store: BlobStore) -> None:
        keys = ["a-b", "a/b", "a/c/d", "a.c", "a0", "ab", "b/a", "A"]
        for key in keys:
            store.put(key, b".")
        assert list(store.list()) == sorted(keys)
        assert list(store.list("")) == sorted(keys)
        assert list(store.list("a")) == ["a/b", "a/c/d"]
        assert list(store.list("a/")) == ["a/b", "a/c/d"]
        assert list(store.list("a/c")) == ["a/c/d"]
        assert list(store.list("missing")) == []
        assert list(store.list("a-b")) == []  # an object is not a folder

    def test_overwrite_replaces(self, store: BlobStore) -> None:
        store.put("k", b"first version")
        info = store.put("k", b"second")
        assert store.get("k", expected_sha256=info.sha256) == b"second"
        assert store.stat("k") == BlobInfo("k", _sha(b"second"), 6)
        assert list(store.list()) == ["k"]

    def test_put_stream_round_trip(self, store: BlobStore) -> None:
        info = store.put_stream("s/obj", ChunkedStream(ALL_BYTES), max_bytes=len(ALL_BYTES))
        assert info == BlobInfo("s/obj", _sha(ALL_BYTES), len(ALL_BYTES))
        assert store.get("s/obj", expected_sha256=info.sha256) == ALL_BYTES
        assert store.put_stream("s/empty", io.BytesIO(b""), max_bytes=0).bytes == 0

    def test_put_stream_over_max_bytes_leaves_nothing(self, blob_harness: BlobHarness) -> None:
        store = blob_harness.store
        with pytest.raises(BlobError, match="max_bytes"):
            store.put_stream("big/obj", ChunkedStream(ALL_BYTES), max_bytes=len(ALL_BYTES) - 1)
        assert not store.exists("big/obj")
        assert list(store.list()) == []
        assert blob_harness.leftovers() == []

    def test_failed_put_stream_keeps_the_old_object(self, blob_harness: BlobHarness) -> None:
        store = blob_harness.store
        old = store.put("k/obj", b"old")
        with pytest.raises(BlobError, match="max_bytes"):
            store.put_stream("k/obj", io.BytesIO(ALL_BYTES), max_bytes=10)
        with pytest.raises(OSError, match="source stream broke"):
            store.put_stream("k/obj", ChunkedStream(ALL_BYTES, fail_after=100), max_bytes=10**6)
        assert store.get("k/obj", expected_sha256=old.sha256) == b"old"
        assert list(store.list()) == ["k/obj"]
        assert blob_harness.leftovers() == []

    @pytest.mark.parametrize("key", BAD_KEYS)
    def test_unsafe_keys_are_rejected(self, blob_harness: BlobHarness, key: str) -> None:
        store = blob_harness.store
        calls: list[Callable[[], object]] = [
            lambda: store.put(key, b"x"),
            lambda: store.put_stream(key, io.BytesIO(b"x"), max_bytes=10),
            lambda: store.get(key),
            lambda: store.open_read(key),
            lambda: store.exists(key),
            lambda: store.stat(key),
            lambda: store.delete(key),
        ]
        if key not in ("", "/", "a/"):  # "" and "a/" are valid folder prefixes
            calls += [lambda: store.list(key), lambda: store.delete_prefix(key)]
        for call in calls:
            with pytest.raises(ConfigError):
                call()
        assert list(store.list()) == []
        assert blob_harness.leftovers() == []

    def test_region_router_refuses_unknown_regions(self, store: BlobStore) -> None:
        router = RegionRouter({"eu-central-1": store})
        assert router.for_region("eu-central-1") is store
        assert router.approved() == ["eu-central-1"]
        for region in ("us-east-1", "EU-CENTRAL-1", ""):
            with pytest.raises(RegionNotApproved):
                router.for_region(region)
        with pytest.raises(ConfigError):
            RegionRouter({})


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def run_moto_server(start_timeout_s: float = 30.0) -> Iterator[str]:
    """Run `python -m moto.server` on a free loopback port; yield its endpoint URL; stop it afterwards."""
    last_error = "not started"
    for _ in range(3):  # the free port can be taken between probing and binding: try another
        port = _free_port()
        with tempfile.TemporaryFile() as log:
            args = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                if _wait_until_listening(proc, port, start_timeout_s):
                    yield f"http://127.0.0.1:{port}"
                    return
                log.seek(0)
                last_error = log.read()[-2000:].decode(errors="replace")
            finally:
                _stop(proc)
    raise RuntimeError(f"moto server did not start: {last_error}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_listening(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> bool:
    deadline = clock.monotonic() + timeout_s
    while clock.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)  # polling a child's start-up, not waiting on docfence's own clock
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

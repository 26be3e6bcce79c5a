"""The sealed-object format: round trips around chunk boundaries, every kind of tampering detected
(flipped bytes, cuts at and between chunks, a lost final chunk, reordered, appended and foreign chunks,
another identity, another key), streaming in bounded memory, and sealed objects in a real blob store."""

from __future__ import annotations

import hashlib
import io
import os
import tracemalloc
from pathlib import Path

import pytest

from docfence.blobs import LocalBlobStore
from docfence.blobs.envelope import (
    HEADER_BYTES,
    TAG_BYTES,
    DataKey,
    SealingReader,
    looks_sealed,
    open_bytes,
    open_chunks,
    open_stream,
    plaintext_size,
    seal_bytes,
    seal_stream,
    sealed_size,
)
from docfence.core.errors import BlobError, BlobIntegrityError, ConfigError

CHUNK = 64  # small chunks: many chunk boundaries in a few hundred bytes
ID = "jobs/t1/job-1/input.pdf"
SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 7 * CHUNK + 5, 50 * CHUNK]


@pytest.fixture
def key() -> DataKey:
    return DataKey.generate()


def _chunks(sealed: bytes) -> list[bytes]:
    """The sealed chunks of an object sealed with CHUNK-byte chunks (header excluded)."""
    body, size = sealed[HEADER_BYTES:], CHUNK + TAG_BYTES
    return [body[i : i + size] for i in range(0, len(body), size)]


def _opens(sealed: bytes, key: DataKey, object_id: str = ID) -> bytes:
    return open_bytes(sealed, key, object_id)


# -- round trips ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_around_chunk_boundaries(key: DataKey, size: int) -> None:
    data = os.urandom(size)
    sink = io.BytesIO()
    info = seal_stream(io.BytesIO(data), sink, key, ID, chunk_size=CHUNK)
    sealed = sink.getvalue()
    assert info.plaintext_sha256 == hashlib.sha256(data).hexdigest() and info.plaintext_bytes == size
    assert info.sealed_bytes == len(sealed) == sealed_size(size, CHUNK)
    assert plaintext_size(len(sealed), CHUNK) == size
    assert len(_chunks(sealed)) == max(1, -(-size // CHUNK))
    out = io.BytesIO()
    opened = open_stream(io.BytesIO(sealed), out, key, ID, expected_sha256=info.plaintext_sha256)
    assert out.getvalue() == data and opened.plaintext_bytes == size and opened.sealed_bytes == len(sealed)
    assert b"".join(open_chunks(io.BytesIO(sealed), key, ID)) == data


@pytest.mark.parametrize("read_size", [1, 7, CHUNK + TAG_BYTES, 100_000])
def test_sealing_reader_gives_the_same_object_whatever_the_read_size(key: DataKey, read_size: int) -> None:
    data = os.urandom(5 * CHUNK + 3)
    reader = SealingReader(io.BytesIO(data), key, ID, chunk_size=CHUNK)
    parts = []
    while piece := reader.read(read_size):
        assert len(piece) <= read_size
        parts.append(piece)
    sealed = b"".join(parts)
    assert _opens(sealed, key) == data
    assert reader.info.plaintext_sha256 == hashlib.sha256(data).hexdigest()
    assert reader.info.sealed_bytes == len(sealed)


def test_short_reads_from_a_socket_like_source_are_read_in_full(key: DataKey) -> None:
    class Trickle(io.BytesIO):
        def read(self, size: int | None = -1, /) -> bytes:
            return super().read(min(3, size if size is not None and size >= 0 else 3))

    data = os.urandom(4 * CHUNK + 9)
    sealed = SealingReader(Trickle(data), key, ID, chunk_size=CHUNK).read()
    assert len(sealed) == sealed_size(len(data), CHUNK)
    assert b"".join(open_chunks(Trickle(sealed), key, ID)) == data


def test_no_plaintext_in_the_sealed_object_and_two_seals_differ(key: DataKey) -> None:
    data = b"%PDF-1.7\n" + b"Patient Jane Example, record 4711\n" * 200
    one, two = seal_bytes(data, key, ID), seal_bytes(data, key, ID)
    assert looks_sealed(one) and not looks_sealed(data)
    for needle in (b"%PDF", b"Jane Example", b"4711"):
        assert needle not in one
    assert one != two  # a fresh nonce prefix (and chunk key) per object
    assert _opens(one, key) == _opens(two, key) == data


def test_a_key_is_never_printed(key: DataKey) -> None:
    assert key.material.hex() not in repr(key) and str(key.material) not in repr(key)


def test_bad_arguments_are_refused(key: DataKey) -> None:
    with pytest.raises(ConfigError):
        DataKey(b"short")
    for bad in (0, 15, 17 * 1024 * 1024, True):
        with pytest.raises(ConfigError):
            SealingReader(io.BytesIO(b"x"), key, ID, chunk_size=bad)  # at construction, not on a read
    with pytest.raises(ConfigError):
        SealingReader(io.BytesIO(b"x"), key, ID, max_bytes=-1)


def test_a_reader_whose_source_failed_never_ends_as_a_short_object(key: DataKey) -> None:
    class Breaks:
        def __init__(self) -> None:
            self.calls = 0

        def read(self, size: int, /) -> bytes:
            self.calls += 1
            if self.calls == 3:
                raise OSError("the upload connection broke")
            return b"x" * size

    reader = SealingReader(Breaks(), key, ID, chunk_size=CHUNK)
    with pytest.raises(OSError, match="broke"):
        reader.read(10 * CHUNK)
    with pytest.raises(RuntimeError, match="failed before"):
        reader.read(10 * CHUNK)


def test_the_plaintext_limit_is_enforced_while_sealing(key: DataKey) -> None:
    exact = SealingReader(io.BytesIO(b"x" * 200), key, ID, chunk_size=CHUNK, max_bytes=200).read()
    assert _opens(exact, key) == b"x" * 200
    with pytest.raises(BlobError, match="max_bytes"):
        SealingReader(io.BytesIO(b"x" * 201), key, ID, chunk_size=CHUNK, max_bytes=200).read()


def test_expected_sha256_is_checked(key: DataKey) -> None:
    sealed = seal_bytes(b"abc", key, ID)
    with pytest.raises(BlobIntegrityError, match="sha256"):
        open_bytes(sealed, key, ID, expected_sha256=hashlib.sha256(b"abd").hexdigest())


# -- tampering ------------------------------------------------------------------------------------------


def _sealed(key: DataKey, size: int = 5 * CHUNK + 10, object_id: str = ID) -> tuple[bytes, bytes]:
    data = os.urandom(size)
    return data, seal_bytes(data, key, object_id, chunk_size=CHUNK)


@pytest.mark.parametrize("where", ["magic", "version", "chunk size", "key check", "nonce prefix",
                                   "first chunk", "a middle tag", "last byte"])
def test_a_flipped_byte_anywhere_is_detected(key: DataKey, where: str) -> None:
    _data, sealed = _sealed(key)
    offset = {"magic": 0, "version": 8, "chunk size": 13, "key check": 14, "nonce prefix": 30,
              "first chunk": HEADER_BYTES, "a middle tag": HEADER_BYTES + 3 * (CHUNK + TAG_BYTES) - 1,
              "last byte": len(sealed) - 1}[where]
    tampered = bytearray(sealed)
    tampered[offset] ^= 0x01
    with pytest.raises(BlobIntegrityError):
        _opens(bytes(tampered), key)


@pytest.mark.parametrize("cut", ["header only", "inside the header", "at a chunk boundary",
                                 "between chunk boundaries", "inside the last tag", "everything"])
def test_truncation_is_detected(key: DataKey, cut: str) -> None:
    _data, sealed = _sealed(key)
    length = {"header only": HEADER_BYTES, "inside the header": 20,
              "at a chunk boundary": HEADER_BYTES + 2 * (CHUNK + TAG_BYTES),
              "between chunk boundaries": HEADER_BYTES + 2 * (CHUNK + TAG_BYTES) + 30,
              "inside the last tag": len(sealed) - 3, "everything": 0}[cut]
    with pytest.raises(BlobIntegrityError):
        _opens(sealed[:length], key)


def test_dropping_the_final_chunk_is_named_as_truncation(key: DataKey) -> None:
    _data, sealed = _sealed(key, size=4 * CHUNK)  # four full chunks: the cut leaves whole chunks only
    chunks = _chunks(sealed)
    with pytest.raises(BlobIntegrityError, match="truncated"):
        _opens(sealed[:HEADER_BYTES] + b"".join(chunks[:-1]), key)


def test_appending_after_the_final_chunk_is_detected(key: DataKey) -> None:
    _data, sealed = _sealed(key, size=3 * CHUNK)
    chunks = _chunks(sealed)
    with pytest.raises(BlobIntegrityError, match="after its final chunk"):
        _opens(sealed + chunks[0], key)
    with pytest.raises(BlobIntegrityError):
        _opens(sealed + b"\0", key)


def test_reordered_chunks_are_detected(key: DataKey) -> None:
    _data, sealed = _sealed(key)
    chunks = _chunks(sealed)
    swapped = [chunks[1], chunks[0], *chunks[2:]]
    with pytest.raises(BlobIntegrityError, match="chunk 0"):
        _opens(sealed[:HEADER_BYTES] + b"".join(swapped), key)


def test_a_chunk_from_another_object_under_the_same_key_is_detected(key: DataKey) -> None:
    _a, sealed_a = _sealed(key)
    _b, sealed_b = _sealed(key)
    chunks = _chunks(sealed_a)
    chunks[2] = _chunks(sealed_b)[2]
    with pytest.raises(BlobIntegrityError, match="chunk 2"):
        _opens(sealed_a[:HEADER_BYTES] + b"".join(chunks), key)


def test_a_whole_object_under_another_identity_is_refused(key: DataKey) -> None:
    _data, sealed = _sealed(key, object_id="jobs/t1/job-1/attempts/1/output.pdf")
    with pytest.raises(BlobIntegrityError):
        _opens(sealed, key, "jobs/t1/job-1/attempts/2/output.pdf")
    with pytest.raises(BlobIntegrityError):
        _opens(sealed, key, "jobs/t1/job-2/attempts/1/output.pdf")


def test_another_data_key_is_told_from_tampering_before_any_chunk_is_asked_for(key: DataKey) -> None:
    _data, sealed = _sealed(key)
    with pytest.raises(BlobIntegrityError, match="another data key"):
        open_chunks(io.BytesIO(sealed), DataKey.generate(), ID)  # no next(): a response has not started
    with pytest.raises(BlobIntegrityError, match="not a sealed object"):
        open_chunks(io.BytesIO(b"%PDF-1.7"), key, ID)


def test_a_plaintext_object_is_not_read_as_sealed(key: DataKey) -> None:
    with pytest.raises(BlobIntegrityError, match="not a sealed object"):
        _opens(b"%PDF-1.7\n" + b"x" * 100, key)


def test_a_download_stream_yields_only_authenticated_chunks_before_failing(key: DataKey) -> None:
    data, sealed = _sealed(key, size=6 * CHUNK)
    tampered = bytearray(sealed)
    tampered[HEADER_BYTES + 4 * (CHUNK + TAG_BYTES) + 5] ^= 0x80  # inside chunk 4
    received = []
    with pytest.raises(BlobIntegrityError, match="chunk 4"):
        for piece in open_chunks(io.BytesIO(bytes(tampered)), key, ID):
            received.append(piece)
    assert b"".join(received) == data[: 4 * CHUNK]  # what came out is exactly the authentic prefix


# -- bounded memory -------------------------------------------------------------------------------------


class _Generated:
    """A deterministic stream of `size` bytes made as it is read (never held whole)."""

    def __init__(self, size: int) -> None:
        self._left, self._block = size, hashlib.sha256(b"seed").digest() * 2048  # 64 KiB

    def read(self, size: int, /) -> bytes:
        n = min(size, self._left, len(self._block))
        self._left -= n
        return self._block[:n]


class _Discard:
    def __init__(self) -> None:
        self.count = 0

    def write(self, data: bytes, /) -> int:
        self.count += len(data)
        return len(data)


def _peak_sealing(size: int) -> int:
    tracemalloc.start()
    try:
        seal_stream(_Generated(size), _Discard(), DataKey.generate(), ID)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_object() -> None:
    small, large = _peak_sealing(1 * 1024 * 1024), _peak_sealing(8 * 1024 * 1024)
    assert large < 1024 * 1024  # a few 64 KiB chunks, not the 8 MiB object
    assert large < small * 2 + 64 * 1024


def test_opening_streams_in_bounded_memory(tmp_path: Path) -> None:
    key, path = DataKey.generate(), tmp_path / "sealed"
    with path.open("wb") as out:
        info = seal_stream(_Generated(8 * 1024 * 1024), out, key, ID)
    tracemalloc.start()
    try:
        with path.open("rb") as src:
            opened = open_stream(src, _Discard(), key, ID, expected_sha256=info.plaintext_sha256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert opened.plaintext_bytes == 8 * 1024 * 1024 and peak < 1024 * 1024


# -- in a blob store ------------------------------------------------------------------------------------


def test_a_sealed_object_through_the_local_blob_store(tmp_path: Path, key: DataKey) -> None:
    store = LocalBlobStore(tmp_path / "objects")
    data = b"%PDF-1.7\n" + os.urandom(300_000)
    reader = SealingReader(io.BytesIO(data), key, ID, max_bytes=len(data))
    stored = store.put_stream(ID, reader, max_bytes=sealed_size(len(data)))
    assert reader.info.plaintext_sha256 == hashlib.sha256(data).hexdigest() != stored.sha256
    assert b"%PDF" not in (tmp_path / "objects" / ID).read_bytes()
    with store.open_read(ID, expected_sha256=stored.sha256) as blob:
        assert plaintext_size(blob.size, 64 * 1024) == len(data)
        plain = b"".join(open_chunks(blob, key, ID, expected_sha256=reader.info.plaintext_sha256))
    assert plain == data

"""The sealed-object format: a stream encrypted with AES-256-GCM in authenticated chunks under one data key,
bound to the object's identity (its storage key), so truncation, reordering, appending and chunks moved
between objects are detected. Encrypts and decrypts in bounded memory; knows nothing of jobs or key files.

Layout (all integers big-endian):

    header  magic "\\x89DFENC\\r\\n" (8) | version 1 (1) | reserved 0 (1) | chunk size (4)
            | data key check (16) | nonce prefix (8, random per object)
    chunk i ciphertext of `chunk size` plaintext bytes (fewer, maybe 0, for the last chunk) | GCM tag (16)

Each object gets its own chunk key, HKDF-SHA256(data key, salt = nonce prefix); chunk i is sealed with
nonce = nonce prefix | i (4 bytes) and associated data = sha256(header | object id) | i (8) | final flag
(1). A plaintext of n bytes has max(1, ceil(n / chunk size)) chunks, exactly one of them final (the
last). The key check is HKDF(data key, info="key-check"): a different data key is told from tampering.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from docfence.blobs.base import Readable, check_max_bytes, too_large, validate_sha256
from docfence.core.errors import BlobIntegrityError, ConfigError

MAGIC = b"\x89DFENC\r\n"  # not ASCII, not "%PDF": a sealed object is never mistaken for a document
VERSION = 1
KEY_BYTES = 32  # AES-256
TAG_BYTES = 16
NONCE_PREFIX_BYTES = 8
KEY_CHECK_BYTES = 16
DEFAULT_CHUNK_SIZE = 64 * 1024
MIN_CHUNK_SIZE = 16
MAX_CHUNK_SIZE = 16 * 1024 * 1024  # bounds what a reader allocates for a header it has not yet trusted
MAX_CHUNKS = 2**32 - 1  # the chunk index is 4 bytes of the nonce
_HEADER = struct.Struct(">8sBBI16s8s")
HEADER_BYTES = _HEADER.size  # 38
_AD_TAIL = struct.Struct(">QB")
_INFO_CHUNK_KEY = b"docfence/envelope/v1/chunk-key"
_INFO_KEY_CHECK = b"docfence/envelope/v1/key-check"


class Writable(Protocol):
    """A sink for `seal_stream` / `open_stream`: any binary file-like open for writing."""

    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True, slots=True)
class DataKey:
    """One job's 256-bit data key. Its bytes are never printed (repr) and never stored unwrapped."""

    material: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.material, bytes) or len(self.material) != KEY_BYTES:
            raise ConfigError("a data key is 32 bytes")

    @classmethod
    def generate(cls) -> DataKey:
        """A fresh random key (the operating system's CSPRNG)."""
        return cls(AESGCM.generate_key(bit_length=256))

    def check_value(self) -> bytes:
        """16 bytes that name this key without revealing it (HKDF output): written in every header."""
        return _hkdf(self.material, None, _INFO_KEY_CHECK, KEY_CHECK_BYTES)


@dataclass(frozen=True, slots=True)
class SealInfo:
    """What sealing one object produced: the plaintext's sha256 and size (the ones a job records and a
    download is checked against), and the sealed object's size."""

    plaintext_sha256: str
    plaintext_bytes: int
    sealed_bytes: int


@dataclass(frozen=True, slots=True)
class Header:
    """A parsed header. Not yet authenticated: every chunk's associated data covers it."""

    chunk_size: int
    key_check: bytes
    nonce_prefix: bytes
    raw: bytes

    @classmethod
    def parse(cls, raw: bytes, object_id: str) -> Header:
        if len(raw) < HEADER_BYTES or raw[: len(MAGIC)] != MAGIC:
            raise BlobIntegrityError(f"object {object_id!r} is not a sealed object")
        _magic, version, reserved, chunk_size, check, prefix = _HEADER.unpack(raw[:HEADER_BYTES])
        if version != VERSION or reserved != 0:
            raise BlobIntegrityError(f"object {object_id!r} has unknown sealed format version {version}")
        if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
            raise BlobIntegrityError(f"object {object_id!r} has an invalid chunk size")
        return cls(chunk_size, check, prefix, raw[:HEADER_BYTES])


def looks_sealed(first_bytes: bytes) -> bool:
    """Whether an object starts like a sealed one. For inspection and the migration pass only: whether a
    job's objects are sealed is what its row says, never what the bytes look like."""
    return first_bytes[: len(MAGIC)] == MAGIC


def sealed_size(plaintext_bytes: int, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """The size of the sealed object of a plaintext of `plaintext_bytes` bytes (a blob limit from a
    plaintext limit)."""
    chunks = max(1, -(-plaintext_bytes // chunk_size))
    return HEADER_BYTES + plaintext_bytes + chunks * TAG_BYTES


def plaintext_size(sealed_bytes: int, chunk_size: int) -> int:
    """The plaintext size of a well-formed sealed object of `sealed_bytes` bytes (a download's
    Content-Length); raises BlobIntegrityError when no plaintext seals to that size."""
    body = sealed_bytes - HEADER_BYTES
    full, rest = divmod(body, chunk_size + TAG_BYTES)
    if body < TAG_BYTES or (rest != 0 and rest < TAG_BYTES) or (full == 0 and rest == 0):
        raise BlobIntegrityError("a sealed object of this size cannot exist (truncated)")
    return full * chunk_size + (rest - TAG_BYTES if rest else 0)


# -- sealing ------------------------------------------------------------------------------------------------


class _Cipher:
    """One object's chunk key and associated-data prefix; seals and opens chunk `index`."""

    def __init__(self, key: DataKey, header: Header, object_id: str) -> None:
        self._aead = AESGCM(_hkdf(key.material, header.nonce_prefix, _INFO_CHUNK_KEY, KEY_BYTES))
        self._prefix = header.nonce_prefix
        self._ad = hashlib.sha256(header.raw + object_id.encode("utf-8")).digest()

    def _nonce_ad(self, index: int, final: bool) -> tuple[bytes, bytes]:
        if index > MAX_CHUNKS:
            raise ConfigError("object too large for the sealed format (more than 2**32 - 1 chunks)")
        return self._prefix + index.to_bytes(4, "big"), self._ad + _AD_TAIL.pack(index, final)

    def seal(self, index: int, final: bool, plaintext: bytes) -> bytes:
        nonce, ad = self._nonce_ad(index, final)
        return self._aead.encrypt(nonce, plaintext, ad)

    def open(self, index: int, final: bool, sealed: bytes) -> bytes | None:
        """The plaintext, or None when the chunk does not authenticate as (index, final)."""
        nonce, ad = self._nonce_ad(index, final)
        try:
            return self._aead.decrypt(nonce, sealed, ad)
        except InvalidTag:
            return None


def _new_header(key: DataKey, chunk_size: int) -> Header:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) \
            or not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
        raise ConfigError(f"chunk_size must be an integer in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]")
    check, prefix = key.check_value(), os.urandom(NONCE_PREFIX_BYTES)
    raw = _HEADER.pack(MAGIC, VERSION, 0, chunk_size, check, prefix)
    return Header(chunk_size, check, prefix, raw)


class SealingReader:
    """A `Readable` of the sealed form of `source`, produced as it is read: hand it to a BlobStore's
    `put_stream` (with `max_bytes=sealed_size(limit)`). Holds at most two chunks of plaintext and one
    sealed chunk. `info` is available once EOF was returned. `max_bytes` caps the plaintext: reading
    past it raises BlobError (as `put_stream` does), so nothing is stored. One use: after an error
    every read raises again (a retry makes a new reader over a new source, never a short object)."""

    def __init__(self, source: Readable, key: DataKey, object_id: str, *,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, max_bytes: int | None = None) -> None:
        self._pieces = _sealed_pieces(source, key, object_id, chunk_size, max_bytes, self._done)
        self._buffer = bytearray()
        self._info: SealInfo | None = None
        self._failed: BaseException | None = None

    def _done(self, info: SealInfo) -> None:
        self._info = info

    @property
    def info(self) -> SealInfo:
        if self._info is None:
            raise RuntimeError("SealingReader.info is known only after EOF")
        return self._info

    def read(self, size: int = -1, /) -> bytes:
        if self._failed is not None:
            raise RuntimeError("this SealingReader failed before; seal again from a new source") \
                from self._failed
        try:
            while size < 0 or len(self._buffer) < size:
                piece = next(self._pieces, None)
                if piece is None:
                    break
                self._buffer += piece
        except BaseException as exc:
            self._failed = exc
            raise
        cut = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        out = bytes(self._buffer[:cut])
        del self._buffer[:cut]
        return out


def _sealed_pieces(source: Readable, key: DataKey, object_id: str, chunk_size: int,
                   max_bytes: int | None, done: Callable[[SealInfo], None]) -> Iterator[bytes]:
    """The header, then each sealed chunk; calls `done(SealInfo)` before it ends. Arguments are
    checked now, not on the first read."""
    header = _new_header(key, chunk_size)
    limit = None if max_bytes is None else check_max_bytes(max_bytes)
    return _seal_chunks(source, _Cipher(key, header, object_id), header, limit, done)


def _seal_chunks(source: Readable, cipher: _Cipher, header: Header, limit: int | None,
                 done: Callable[[SealInfo], None]) -> Iterator[bytes]:
    yield header.raw
    digest, total, sealed, index = hashlib.sha256(), 0, HEADER_BYTES, 0
    current = _read_full(source, header.chunk_size)
    while True:
        total += len(current)
        if limit is not None and total > limit:
            raise too_large(limit)
        digest.update(current)
        following = _read_full(source, header.chunk_size) if len(current) == header.chunk_size else b""
        piece = cipher.seal(index, not following, current)
        sealed += len(piece)
        yield piece
        if not following:
            break
        current, index = following, index + 1
    done(SealInfo(digest.hexdigest(), total, sealed))


def seal_stream(source: Readable, sink: Writable, key: DataKey, object_id: str, *,
                chunk_size: int = DEFAULT_CHUNK_SIZE, max_bytes: int | None = None) -> SealInfo:
    """Seal everything `source` yields until EOF into `sink`, in bounded memory."""
    result: list[SealInfo] = []
    for piece in _sealed_pieces(source, key, object_id, chunk_size, max_bytes, result.append):
        sink.write(piece)
    return result[0]


def seal_bytes(data: bytes, key: DataKey, object_id: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> bytes:
    """The sealed form of a small object (a sealed password, a report snapshot)."""
    return SealingReader(_BytesSource(data), key, object_id, chunk_size=chunk_size).read()


# -- opening ------------------------------------------------------------------------------------------------


def open_chunks(source: Readable, key: DataKey, object_id: str, *,
                expected_sha256: str | None = None) -> Iterator[bytes]:
    """The plaintext of a sealed object, chunk by chunk, in bounded memory (two sealed chunks).

    The header is read and checked here, before any chunk is asked for: an object that is not sealed,
    or sealed under another data key, raises BlobIntegrityError before a response has started. Every
    chunk yielded has been authenticated as chunk i of this object under this key. What only the end
    can prove (no chunk missing at the end, nothing appended, the plaintext's sha256 equal to
    `expected_sha256`) raises BlobIntegrityError after the last chunk was yielded: a server streaming
    the plaintext must then abort its response (docfence.service.artifacts holds the last chunk back
    until the iterator ended)."""
    validate_sha256(expected_sha256)
    header = Header.parse(_read_full(source, HEADER_BYTES), object_id)
    if not hmac.compare_digest(header.key_check, key.check_value()):
        raise BlobIntegrityError(f"object {object_id!r} is sealed under another data key")
    return _open_body(source, _Cipher(key, header, object_id), header, object_id, expected_sha256)


def _open_body(source: Readable, cipher: _Cipher, header: Header, object_id: str,
               expected_sha256: str | None) -> Iterator[bytes]:
    digest, piece_size = hashlib.sha256(), header.chunk_size + TAG_BYTES
    index, current = 0, _read_full(source, piece_size)
    while True:
        following = _read_full(source, piece_size) if len(current) == piece_size else b""
        plain = cipher.open(index, not following, current)
        if plain is None:
            raise BlobIntegrityError(_why_not(cipher, index, current, bool(following), object_id))
        digest.update(plain)
        yield plain
        if not following:
            break
        current, index = following, index + 1
    if expected_sha256 is not None and digest.hexdigest() != expected_sha256:
        raise BlobIntegrityError(f"sha256 mismatch reading {object_id!r}")


def _why_not(cipher: _Cipher, index: int, piece: bytes, more: bool, object_id: str) -> str:
    """The message for a chunk that failed: names the cut or the addition when the chunk authenticates
    with the other final flag (opened as non-final when more followed, as final when nothing did)."""
    if cipher.open(index, more, piece) is not None:
        if more:
            return f"sealed object {object_id!r} has data after its final chunk"
        return f"sealed object {object_id!r} is truncated (its final chunk is missing)"
    return (f"sealed object {object_id!r} fails authentication at chunk {index} (corrupt, reordered, "
            "truncated or another object's)")


def open_stream(source: Readable, sink: Writable, key: DataKey, object_id: str, *,
                expected_sha256: str | None = None) -> SealInfo:
    """Open a sealed object from `source` into `sink` (the worker's private scratch file). On
    BlobIntegrityError the sink holds a prefix of authenticated plaintext: the caller discards it."""
    digest, total, counting = hashlib.sha256(), 0, _Counting(source)
    for plain in open_chunks(counting, key, object_id, expected_sha256=expected_sha256):
        sink.write(plain)
        digest.update(plain)
        total += len(plain)
    return SealInfo(digest.hexdigest(), total, counting.count)


def open_bytes(sealed: bytes, key: DataKey, object_id: str, *, expected_sha256: str | None = None) -> bytes:
    """The plaintext of a small sealed object."""
    return b"".join(open_chunks(_BytesSource(sealed), key, object_id, expected_sha256=expected_sha256))


# -- helpers ------------------------------------------------------------------------------------------------


def _hkdf(material: bytes, salt: bytes | None, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(material)


def _read_full(source: Readable, size: int) -> bytes:
    """Exactly `size` bytes, fewer only at EOF: a socket or a StreamingBody may return short reads."""
    first = source.read(size)
    if len(first) == size or not first:
        return first
    parts, have = [first], len(first)
    while have < size:
        more = source.read(size - have)
        if not more:
            break
        parts.append(more)
        have += len(more)
    return b"".join(parts)


class _BytesSource:
    def __init__(self, data: bytes) -> None:
        self._view, self._at = memoryview(data), 0

    def read(self, size: int, /) -> bytes:
        out = bytes(self._view[self._at : self._at + size])
        self._at += len(out)
        return out


class _Counting:
    def __init__(self, source: Readable) -> None:
        self._source, self.count = source, 0

    def read(self, size: int, /) -> bytes:
        data = self._source.read(size)
        self.count += len(data)
        return data

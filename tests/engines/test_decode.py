"""Bounded decoding: every expanding filter decodes as qpdf does, in any order, and a bomb stops at its
budget whatever its chain (the mixed-chain bypass of the old all-Flate check included)."""

from __future__ import annotations

import base64
import binascii
import functools
import io
import random
import zlib

import pikepdf
import pytest

from docfence.core.errors import OverLimits
from docfence.core.policy import JobPolicy
from docfence.engines import decode
from docfence.engines.preflight import early_change, preflight
from docfence.samples import pdfs


def lzw_encode(data: bytes, early: int = 1) -> bytes:
    """A plain LZW encoder (PDF flavour: 9-12 bit codes, early change) to feed the decoder under test."""
    table = {bytes([i]): i for i in range(256)}
    width, bits, acc, out, current = 9, 0, 0, bytearray(), b""

    def emit(code: int) -> None:
        nonlocal bits, acc
        acc, bits = (acc << width) | code, bits + width
        while bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
            acc &= (1 << bits) - 1

    emit(256)
    for byte in data:
        candidate = current + bytes([byte])
        if candidate in table:
            current = candidate
            continue
        emit(table[current])
        table[candidate] = len(table) + 2
        if len(table) + 1 + early >= (1 << width) and width < 12:
            width += 1
        if len(table) + 2 >= 4094:
            emit(256)
            table, width = {bytes([i]): i for i in range(256)}, 9
        current = bytes([byte])
    if current:
        emit(table[current])
    emit(257)
    if bits:
        out.append((acc << (8 - bits)) & 0xFF)
    return bytes(out)


def rl_encode(data: bytes) -> bytes:
    out = bytearray()
    for i in range(0, len(data), 100):
        block = data[i : i + 100]
        if len(set(block)) == 1 and len(block) > 1:
            out += bytes([257 - len(block), block[0]])
        else:
            out += bytes([len(block) - 1]) + block
    return bytes(out + b"\x80")


ENCODERS = {
    "/FlateDecode": zlib.compress,
    "/LZWDecode": lzw_encode,
    "/RunLengthDecode": rl_encode,
    "/ASCIIHexDecode": lambda d: binascii.hexlify(d) + b">",
    "/ASCII85Decode": lambda d: base64.a85encode(d) + b"~>",
}


def _payload(seed: int) -> bytes:
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefgh \n") for _ in range(rng.randint(1, 9))) for _ in range(40)]
    return b"".join(rng.choice(words) for _ in range(30_000)) + b"\0" * 70_000


def _qpdf_decode(raw: bytes, chain: list[str]) -> bytes:
    pdf = pikepdf.new()
    stream = pdf.make_stream(b"")
    stream.write(raw, filter=pikepdf.Array([pikepdf.Name(f) for f in chain]))
    return stream.read_bytes(pikepdf.StreamDecodeLevel.specialized)


@pytest.mark.parametrize(
    "chain",
    [[f] for f in ENCODERS]
    + [["/ASCIIHexDecode", "/FlateDecode", "/FlateDecode"], ["/ASCII85Decode", "/LZWDecode"],
       ["/RunLengthDecode", "/ASCIIHexDecode", "/FlateDecode"], ["/FlateDecode", "/ASCII85Decode"]],
)
def test_every_filter_decodes_like_qpdf(chain: list[str]) -> None:
    data = _payload(len(chain))
    raw = data
    for name in reversed(chain):
        raw = ENCODERS[name](raw)
    assert _qpdf_decode(raw, chain) == data  # the encoders here are right
    assert decode.decoded_size(raw, chain, len(data)) == len(data)
    with pytest.raises(OverLimits):
        decode.decoded_size(raw, chain, len(data) - 1)


def test_lzw_without_early_change_decodes_like_qpdf() -> None:
    data = _payload(9)
    raw = lzw_encode(data, early=0)
    pdf = pikepdf.new()
    stream = pdf.make_stream(b"")
    stream.write(raw, filter=pikepdf.Name.LZWDecode, decode_parms=pikepdf.Dictionary(EarlyChange=0))
    assert stream.read_bytes() == data
    assert decode.decoded_size(raw, ["/LZWDecode"], len(data), [False]) == len(data)
    assert early_change(stream, 1) == [False]
    assert decode.decoded_size(raw, ["/LZWDecode"], 10 * len(data), early_change(stream, 1)) == len(data)


def test_abbreviated_names_and_image_codecs() -> None:
    raw = binascii.hexlify(zlib.compress(b"x" * 5000)) + b">"
    assert decode.decoded_size(raw, ["/AHx", "/Fl", "/DCTDecode"], 10_000) == 5000
    with pytest.raises(decode.UnknownFilter):
        decode.decoded_size(raw, ["/Rot13Decode"], 10)
    with pytest.raises(decode.DecodeError):
        decode.decoded_size(b"\x00garbage", ["/FlateDecode"], 10)


def zeros_zlib(total: int, block: int = 1 << 20) -> bytes:
    """A zlib stream of `total` zeros built from one compressed block: after a full flush deflate keeps no
    history, so the block's compressed form can be repeated (fast, where compressing 1 GiB takes 10 s)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = deflater.compress(b"\0" * block) + deflater.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    adler, zeros = 1, b"\0" * block
    for _ in range(total // block):
        adler = zlib.adler32(zeros, adler)
    return b"\x78\xda" + segment * (total // block) + end + adler.to_bytes(4, "big")


def test_zeros_zlib_is_a_valid_stream() -> None:
    assert zlib.decompress(zeros_zlib(4 << 20)) == b"\0" * (4 << 20)


@functools.cache
def gigabyte_bomb() -> bytes:
    """1 GiB of zeros behind [/ASCIIHexDecode /FlateDecode /FlateDecode]: a few KB on disk."""
    return binascii.hexlify(zlib.compress(zeros_zlib(1 << 30), 9)) + b">"


BOMB_CHAIN = pikepdf.Array([pikepdf.Name.ASCIIHexDecode, pikepdf.Name.FlateDecode, pikepdf.Name.FlateDecode])


def _with_bomb(where: str) -> bytes:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(1)))
    stream = pdf.make_stream(b"")
    stream.write(gigabyte_bomb(), filter=BOMB_CHAIN)
    stream.Type, stream.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
    stream.BBox = pikepdf.Array([0, 0, 1, 1])
    if where == "page":
        pdf.pages[0].obj.Resources.XObject = pikepdf.Dictionary(Bomb=stream)
        pdf.pages[0].contents_add(pdf.make_stream(b"/Bomb Do"))
    else:  # referenced from the catalog, drawn on no page
        pdf.Root.PrivateBomb = stream
    buf = io.BytesIO()
    pdf.save(buf, compress_streams=False)
    return buf.getvalue()


@pytest.mark.parametrize("where", ["page", "catalog"])
def test_mixed_chain_gigabyte_bomb_is_over_limits_at_preflight(where: str) -> None:
    data = _with_bomb(where)
    assert len(data) < 8 * 1024
    with pytest.raises(OverLimits):
        preflight(data, JobPolicy())


def test_declared_length_over_the_limit_is_refused_without_decoding() -> None:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(1)))
    stream = pdf.make_stream(b"")
    stream.write(zlib.compress(b"x" * 400_000), filter=pikepdf.Name.FlateDecode)
    stream.DL = 1 << 40
    pdf.Root.Extra = stream
    buf = io.BytesIO()
    pdf.save(buf)
    with pytest.raises(OverLimits):
        preflight(buf.getvalue(), JobPolicy())


def test_a_wrong_adler32_alone_is_accepted_as_readers_do_but_bad_deflate_is_not() -> None:
    good = zlib.compress(b"hello " * 100)
    wrong_checksum = good[:-4] + bytes(b ^ 0xFF for b in good[-4:])
    assert decode.decoded_size(wrong_checksum, ["/FlateDecode"], 10_000) == 600
    with pytest.raises(decode.DecodeError):
        decode.decoded_size(b"\x78\x9c\xff\xff\xff\xff", ["/FlateDecode"], 10_000)  # block type 3

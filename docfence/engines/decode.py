"""Bounded decoding of stream filter chains: Flate, LZW, RunLength, ASCIIHex and ASCII85 in any order.

Decoding is streamed layer by layer in small chunks, so memory stays bounded whatever the chain, and only
the size of the final output is counted: a chain that would expand past its budget raises OverLimits after
at most `budget` + one chunk of output, however deep or mixed it is. Image codecs (DCT, JPX, CCITT,
JBIG2) end a chain: their output size is bounded by the image's declared dimensions, checked elsewhere.

No library decodes LZW or RunLength incrementally under a byte budget (pikepdf/qpdf decode whole streams
into memory), so those two small decoders are written here.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Iterator

from docfence.core.errors import OverLimits

CHUNK = 64 * 1024
IMAGE_FILTERS = frozenset({"/DCTDecode", "/JPXDecode", "/CCITTFaxDecode", "/JBIG2Decode"})
# Largest output per input byte of each filter: streams too small to exceed a budget are not decoded.
MAX_RATIO = {
    "/FlateDecode": 1032.0,
    "/LZWDecode": 4096.0,
    "/RunLengthDecode": 64.0,
    "/ASCIIHexDecode": 0.5,
    "/ASCII85Decode": 4.0,
}
ABBREVIATIONS = {"/Fl": "/FlateDecode", "/LZW": "/LZWDecode", "/RL": "/RunLengthDecode",
                 "/AHx": "/ASCIIHexDecode", "/A85": "/ASCII85Decode", "/DCT": "/DCTDecode",
                 "/CCF": "/CCITTFaxDecode"}


class DecodeError(ValueError):
    """The encoded data is not valid for its filter."""


class UnknownFilter(DecodeError):
    """The filter is not one of the standard ones."""


def canonical(filters: Iterable[str]) -> list[str]:
    return [ABBREVIATIONS.get(f, f) for f in filters]


def worst_case_size(raw_len: int, filters: list[str]) -> float:
    """An upper bound of the decoded size before any image codec (inf for unknown filters)."""
    size = float(raw_len)
    for name in filters:
        if name in IMAGE_FILTERS:
            break
        size *= MAX_RATIO.get(name, float("inf"))
    return size


def decoded_size(raw: bytes, filters: list[str], budget: int, early_change: list[bool] | None = None) -> int:
    """Bytes the chain produces before any image codec; raises OverLimits past `budget` (never holding
    more than a chunk per layer) and DecodeError when a layer's data is invalid. `early_change[i]` is
    the /EarlyChange of layer i (LZW only; default true, as in the PDF specification)."""
    chain: Iterator[bytes] = iter(raw[i : i + CHUNK] for i in range(0, len(raw), CHUNK))
    for index, name in enumerate(canonical(filters)):
        if name in IMAGE_FILTERS:
            break
        if name == "/LZWDecode":
            early = early_change[index] if early_change and index < len(early_change) else True
            chain = lzw(chain, early=early)
            continue
        decoder = _DECODERS.get(name)
        if decoder is None:
            raise UnknownFilter(name)
        chain = decoder(chain)
    total = 0
    for chunk in chain:
        total += len(chunk)
        if total > budget:
            raise OverLimits("A stream is larger than the configured decompressed size limit.")
    return total


def flate(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Inflate with the zlib header checked but not the Adler-32 after the last block: qpdf and pdfium
    accept a wrong checksum on whole data, so a bound or a refusal must not differ from them there."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    header = b""
    try:
        for chunk in chunks:
            data = chunk
            if len(header) < 2:
                header, data = header + data[: 2 - len(header)], data[2 - len(header) :]
                if len(header) == 2:
                    _check_zlib_header(header)
            while data:
                out = inflater.decompress(data, CHUNK)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if inflater.eof:
                    return  # the checksum and any data after the deflate stream are ignored, as readers do
        while not inflater.eof:
            out = inflater.decompress(b"", CHUNK)  # flush what the last input still holds
            if not out:
                break
            yield out
    except zlib.error as exc:
        raise DecodeError("invalid deflate data") from exc


def _check_zlib_header(header: bytes) -> None:
    cmf, flg = header
    if cmf & 0x0F != 8 or cmf >> 4 > 7 or (cmf * 256 + flg) % 31 or flg & 0x20:  # deflate, no preset dict
        raise DecodeError("invalid deflate data (zlib header)")


def lzw(chunks: Iterator[bytes], early: bool = True) -> Iterator[bytes]:
    """LZW as PDF uses it (MSB-first codes of 9-12 bits, 256 = clear, 257 = end); `early`: the code
    width grows one code early (/EarlyChange 1, the default)."""
    table: list[bytes] = []
    width, bits, acc, previous = 9, 0, 0, b""

    def reset() -> None:
        nonlocal width, previous
        table[:] = [bytes([i]) for i in range(256)] + [b"", b""]
        width, previous = 9, b""

    reset()
    for chunk in chunks:
        out = bytearray()
        for byte in chunk:
            acc, bits = (acc << 8) | byte, bits + 8
            while bits >= width:
                bits -= width
                code, acc = acc >> bits, acc & ((1 << bits) - 1)
                if code == 256:
                    reset()
                    continue
                if code == 257:
                    yield bytes(out)
                    return
                if code < len(table):
                    entry = table[code]
                elif code == len(table) and previous:
                    entry = previous + previous[:1]
                else:
                    raise DecodeError("invalid LZW code")
                if previous and len(table) < 4096:
                    table.append(previous + entry[:1])
                previous = entry
                out += entry
                if len(table) + early >= (1 << width) and width < 12:
                    width += 1
                if len(out) >= CHUNK:
                    yield bytes(out)
                    out.clear()
        if out:
            yield bytes(out)


def run_length(chunks: Iterator[bytes]) -> Iterator[bytes]:
    pending = b""
    for chunk in chunks:
        data, pos, out = pending + chunk, 0, bytearray()
        while pos < len(data):
            length = data[pos]
            if length == 128:
                yield bytes(out)
                return
            need = length + 2 if length < 128 else 2
            if pos + need > len(data):
                break
            if length < 128:
                out += data[pos + 1 : pos + need]
            else:
                out += data[pos + 1 : pos + 2] * (257 - length)
            pos += need
            if len(out) >= CHUNK:
                yield bytes(out)
                out.clear()
        pending = data[pos:]
        if out:
            yield bytes(out)


_WHITESPACE = b" \t\r\n\f\x00"


def ascii_hex(chunks: Iterator[bytes]) -> Iterator[bytes]:
    pending = b""
    for chunk in chunks:
        data = pending + chunk.translate(None, _WHITESPACE)
        end = data.find(b">")
        if end >= 0:
            data = data[:end]
            yield _unhex(data + b"0" if len(data) % 2 else data)
            return
        cut = len(data) - len(data) % 2
        pending = data[cut:]
        yield _unhex(data[:cut])
    if pending:
        yield _unhex(pending + b"0")


def _unhex(data: bytes) -> bytes:
    try:
        return binascii.unhexlify(data)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError("invalid hexadecimal data") from exc


def ascii85(chunks: Iterator[bytes]) -> Iterator[bytes]:
    pending = b""
    for chunk in chunks:
        data = pending + chunk.translate(None, _WHITESPACE)
        if data.startswith(b"<~"):
            data = data[2:]
        end = data.find(b"~>")
        if end >= 0:
            yield _a85(data[:end])
            return
        # decode whole groups only: 'z' stands alone, other groups are five characters
        cut, pos = 0, 0
        while pos < len(data):
            if data[pos : pos + 1] == b"z":
                pos += 1
            elif pos + 5 <= len(data):
                pos += 5
            else:
                break
            cut = pos
        pending = data[cut:]
        yield _a85(data[:cut])
    if pending:
        yield _a85(pending)


def _a85(data: bytes) -> bytes:
    try:
        return base64.a85decode(data)
    except ValueError as exc:
        raise DecodeError("invalid ASCII85 data") from exc


_DECODERS = {
    "/FlateDecode": flate,
    "/LZWDecode": lzw,
    "/RunLengthDecode": run_length,
    "/ASCIIHexDecode": ascii_hex,
    "/ASCII85Decode": ascii85,
}

"""A pyHanko PdfFileReader for signing and its proof, whose cost does not grow with the document: it reads
a classic cross-reference entry when its object is looked up, and a page tree node's /Kids and a hex
string (a signature's /Contents) with one regular expression each; everything else is pyHanko's."""

# Why: pyHanko parses every cross-reference entry, every reference of a /Kids array and every pair of hex
# digits in pure Python: ~45 ms per opening of a dense 2,000-page output (14,000 objects), ~50 ms for its
# flat /Kids (loaded machine), and signing opens the file twice. Why not qpdf: pikepdf opens the same file
# in ~40 ms, as much as the parse it would replace. Anything irregular (an entry not in the fixed 20-byte
# form of ISO 32000-1 7.5.4, a hybrid /XRefStm, strict mode, an xref stream, a /Kids that is not only
# references, a stream object, an encrypted file, anything our reading trips on) goes through pyHanko.

from __future__ import annotations

import binascii
import os
import re
from typing import Any, BinaryIO

from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.decode_limits import DecodeContext, DecodeLimits
from pyhanko.pdf_utils.misc import read_non_whitespace
from pyhanko.pdf_utils.reader import PdfFileReader, _read_header_version, process_data_at_eof
from pyhanko.pdf_utils.xref import (
    ObjStreamRef,
    XRefBuilder,
    XRefCache,
    XRefSection,
    XRefSectionData,
    XRefSectionMetaInfo,
    XRefSectionType,
    _prev,
    parse_xref_stream,
    parse_xref_table,
)

_SUBSECTION = re.compile(rb"[\0\t\n\f\r ]*(\d+)[ ]+(\d+)[ ]*(?:\r\n|\r|\n)")
_TRAILER = re.compile(rb"[\0\t\n\f\r ]*trailer[\0\t\n\f\r ]*")
_ENTRY = re.compile(rb"(\d{10}) (\d{5}) ([nf])(?: \r| \n|\r\n)")
_ENTRY_BYTES = 20  # ISO 32000-1 7.5.4: each entry is exactly 20 bytes long, end of line included
_HEADER_PEEK = 64  # bytes read to find a subsection header or the trailer keyword
_WS = rb"[\0\t\n\f\r ]"
_DICT_OBJECT = re.compile(rb"(\d+)%s+(\d+)%s+obj%s*<<" % (_WS, _WS, _WS))
# possessive: the same matches (no part of a reference can be given back to the next one), but the
# engine keeps no backtracking state per reference (a 2,000-page /Kids: 0.4 ms instead of 1.8, and 50
# fresh memory pages instead of 320, each a page fault in a newly forked render process)
_REFS_ARRAY = re.compile(rb"\[((?:%s*+\d++%s++\d++%s++R)*+)%s*\]" % (_WS, _WS, _WS, _WS))
_REFS_PREFIX = re.compile(rb"\[[\d\0\t\n\f\r R]*")  # what an unfinished array of references holds
_HEX_STRING = re.compile(rb"<([0-9A-Fa-f\0\t\n\f\r ]*)>")
_HEX_PREFIX = re.compile(rb"<[0-9A-Fa-f\0\t\n\f\r ]*")
_WS_RUN = re.compile(rb"[\0\t\n\f\r ]+")
_PEEK = 1 << 14
_REF = re.compile(rb"(\d+)%s+(\d+)%s+R" % (_WS, _WS))


class OnDemandXrefReader(PdfFileReader):
    """PdfFileReader.__init__ (pyHanko 0.38) with one change: the sections are read by
    _OnDemandXRefBuilder. tests/engines/test_signing_reader.py checks that this reader holds the same
    state as pyHanko's and resolves every object of a document to the same offset."""

    def __init__(self, stream: BinaryIO, strict: bool = False) -> None:
        self._security_handler = None
        self.strict = strict
        stream.seek(0, os.SEEK_END)
        self._decode_context = DecodeContext(DecodeLimits(), input_size=stream.tell())
        self.resolved_objects: dict[tuple[int, int], generic.PdfObject] = {}
        self._input_version = None
        self._historical_resolver_cache: dict[int, Any] = {}
        self.stream = stream
        self._header_version = _read_header_version(stream)
        stream.seek(-1, os.SEEK_END)
        builder = _OnDemandXRefBuilder(handler=self, stream=stream, strict=strict,
                                       last_startxref=process_data_at_eof(stream))
        self.xrefs = XRefCache(self, builder.read_xrefs())
        self.last_startxref = builder.last_startxref
        self.trailer = builder.trailer
        self.has_xref_stream = builder.has_xref_stream
        self._embedded_signatures = None

    def _read_object(self, ref: Any, marker: Any, never_decrypt: bool = False,
                     as_metadata_stream: bool = False) -> Any:
        """A plain dictionary (not a stream) by _read_dictionary; anything else, or any object of an
        encrypted file, by pyHanko."""
        # `self.encrypted` would read /Encrypt through this method: the trailer's key says as much
        if isinstance(marker, int) and not as_metadata_stream and "/Encrypt" not in self.trailer:
            try:
                found = _read_dictionary(self, ref, marker)
            except Exception:  # this path decides no error: pyHanko's own reading raises its own
                found = None
            if found is not None:
                return found
        return super()._read_object(ref, marker, never_decrypt=never_decrypt,
                                    as_metadata_stream=as_metadata_stream)


def _read_dictionary(reader: PdfFileReader, ref: Any, offset: int) -> generic.DictionaryObject | None:
    """The dictionary object at `offset`, its entries read as pyHanko's DictionaryObject.read_from_stream
    reads them, except two kinds of value matched whole by a regular expression: a /Kids array of
    references (a page tree node) and a hexadecimal string (a signature's /Contents, ~10 KB that pyHanko
    reads two digits at a time). None (pyHanko reads the object from its start) unless the object is a
    dictionary, not a stream."""
    stream = reader.stream
    stream.seek(offset)
    head = _DICT_OBJECT.match(stream.read(_HEADER_PEEK))
    if head is None or (int(head[1]), int(head[2])) != (ref.idnum, ref.generation):
        return None
    stream.seek(offset + head.end())
    container = generic.Reference(ref.idnum, ref.generation, reader)
    data: dict[Any, Any] = {}
    while True:
        if read_non_whitespace(stream) == b">":
            stream.read(1)
            break
        stream.seek(-1, os.SEEK_CUR)
        key = generic.NameObject.read_from_stream(stream)
        read_non_whitespace(stream, seek_back=True)
        value = _read_refs(reader, stream) if key == "/Kids" else _read_hex(stream)
        if value is None:
            value = generic.read_object(stream, container)
        value.container_ref = container  # as generic.read_object sets it: the object an edit rewrites
        data.setdefault(key, value)  # pyHanko keeps the first of a repeated key too
    if not stream.read(_HEADER_PEEK).lstrip(b"\0\t\n\f\r ").startswith(b"endobj"):
        return None  # a stream: pyHanko reads it
    result = generic.DictionaryObject(data)
    result.container_ref = container
    return result


def _read_refs(reader: PdfFileReader, stream: BinaryIO) -> generic.ArrayObject | None:
    """The array of references at the stream's position (then just after it), or None (position kept)."""
    at = stream.tell()
    found = _match_growing(stream, _REFS_ARRAY, _REFS_PREFIX)
    refs = [(int(i), int(g)) for i, g in _REF.findall(found[1])] if found else []
    if found is None or any(idnum == 0 for idnum, _ in refs):
        stream.seek(at)
        return None
    stream.seek(at + found.end())
    return generic.ArrayObject(generic.IndirectObject(i, g, reader) for i, g in refs)


def _read_hex(stream: BinaryIO) -> Any:
    """The hexadecimal string at the stream's position as pyHanko's read_hex_string_from_stream makes it
    (whitespace ignored, an odd last digit followed by 0), or None (position kept)."""
    at = stream.tell()
    peek = stream.read(2)
    stream.seek(at)
    found = _match_growing(stream, _HEX_STRING, _HEX_PREFIX) if peek[:1] == b"<" != peek[1:] else None
    if found is None:
        stream.seek(at)
        return None
    stream.seek(at + found.end())
    digits = _WS_RUN.sub(b"", found[1])
    return generic.pdf_string(binascii.unhexlify(digits + b"0" * (len(digits) % 2)))


def _match_growing(stream: BinaryIO, whole: re.Pattern[bytes], prefix: re.Pattern[bytes]) -> Any:
    """`whole` matched at the stream's position, reading on while what was read is still a `prefix`."""
    chunk = stream.read(_PEEK)
    found = whole.match(chunk)
    while found is None and len(chunk) % _PEEK == 0 and chunk and prefix.fullmatch(chunk):
        chunk += stream.read(_PEEK)
        found = whole.match(chunk)
    return found


class _OnDemandXRefBuilder(XRefBuilder):
    """pyHanko's section walk (startxref, /Prev chain, error correction) unchanged; a classic table of
    regular layout becomes an _OnDemandTable, an xref stream an _OnDemandStream, instead of being parsed
    entry by entry."""

    def _read_xref_stream(self, declared_startxref: int) -> Any:
        stream = self.stream
        start = stream.tell()
        ref, xref_stream = self._read_xref_stream_object()
        section = None if self.strict else _OnDemandStream.of(xref_stream)
        if section is None:
            stream.seek(start)
            return super()._read_xref_stream(declared_startxref)
        size = int(xref_stream.raw_get("/Size"))
        meta = XRefSectionMetaInfo(xref_section_type=XRefSectionType.STREAM, size=size,
                                   declared_startxref=declared_startxref, start_location=start,
                                   end_location=stream.tell(), stream_ref=ref)
        self.sections.append(XRefSection(meta, section))
        self.trailer.add_trailer_revision(xref_stream)
        return _prev(xref_stream)

    def _read_xref_table(self, declared_startxref: int) -> Any:
        stream = self.stream
        start = stream.tell()
        layout = None if self.strict else _subsections(stream, start)
        if layout is None:
            stream.seek(start)
            return super()._read_xref_table(declared_startxref)
        subsections, end = layout
        stream.seek(end)
        trailer = generic.DictionaryObject.read_from_stream(stream, generic.TrailerReference(self.handler))
        if not isinstance(trailer, generic.DictionaryObject) or "/XRefStm" in trailer:
            stream.seek(start)
            return super()._read_xref_table(declared_startxref)
        meta = XRefSectionMetaInfo(xref_section_type=XRefSectionType.STANDARD,
                                   size=int(trailer.raw_get("/Size")), declared_startxref=declared_startxref,
                                   start_location=start, end_location=end, stream_ref=None)
        self.sections.append(XRefSection(meta, _OnDemandTable(stream, start, subsections)))
        self.trailer.add_trailer_revision(trailer)
        return _prev(trailer)


def _subsections(stream: BinaryIO, at: int) -> tuple[list[tuple[int, int, int]], int] | None:
    """[(first object number, count, offset of its first entry)] of the table at `at` (just after the
    `xref` keyword) and where its trailer dictionary starts; None unless each subsection's first and
    last entries sit where 20-byte entries put them (then pyHanko's tolerant parser reads the table)."""
    found: list[tuple[int, int, int]] = []
    while True:
        stream.seek(at)
        peek = stream.read(_HEADER_PEEK)
        trailer = _TRAILER.match(peek)
        if trailer:
            return (found, at + trailer.end()) if found else None
        header = _SUBSECTION.match(peek)
        if header is None:
            return None
        first, count, entries = int(header[1]), int(header[2]), at + header.end()
        for index in {0, count - 1} if count else ():
            stream.seek(entries + index * _ENTRY_BYTES)
            if not _ENTRY.fullmatch(stream.read(_ENTRY_BYTES)):
                return None
        if any(f < first + count and first < f + c for f, c, _ in found):
            return None  # an object listed twice: pyHanko's parse decides which entry counts
        found.append((first, count, entries))
        at = entries + count * _ENTRY_BYTES


class _OnDemandSection(XRefSectionData):
    """One section's entries, each read when an object is looked up, with the answers pyHanko's
    XRefSectionData.try_resolve gives over pyHanko's parse. Any other use of the section (its sets of
    explicit, freed or stream refs, for difference analysis) parses the whole section with pyHanko's
    parser first, so those answers are pyHanko's own."""

    _FULL = frozenset({"freed", "standard_xrefs", "xrefs_in_objstm", "explicit_refs_in_revision",
                       "obj_streams_used", "hybrid"})

    def __init__(self) -> None:
        # XRefSectionData.__init__ is not called: the attributes it sets are made by _parse_all
        self._parsed = False

    def __getattr__(self, name: str) -> Any:
        if name in _OnDemandSection._FULL and not self.__dict__.get("_parsed", True):
            self._parse_all()
            return getattr(self, name)
        raise AttributeError(name)

    def _parse_all(self) -> None:
        XRefSectionData.__init__(self)
        self.process_entries(self._all_entries(), strict=False)
        self._parsed = True

    def _all_entries(self) -> Any:
        raise NotImplementedError

    def _entry(self, idnum: int) -> tuple[str, Any, int] | None:
        """(kind "n", "f" or "o", location, generation) of `idnum`'s entry; None when the section has
        none, or when an irregular entry sent it through pyHanko's parser (`_parsed` turns true)."""
        raise NotImplementedError

    def try_resolve(self, ref: Any) -> Any:
        entry = None if self._parsed or ref.idnum == 0 else self._entry(ref.idnum)
        if self._parsed:  # parsed for another use, or _entry met an irregular entry
            return super().try_resolve(ref)
        if entry is None:  # not in this section (pyHanko skips object 0 as well)
            raise KeyError(ref)
        kind, location, generation = entry
        if kind == "o" and ref.generation == 0:
            return location
        if kind == "n" and generation == ref.generation:
            return location
        if kind == "f" and ref.generation == generation - 1:  # a free entry names the next generation
            return None
        raise KeyError(ref)


class _OnDemandTable(_OnDemandSection):
    """A classic table's entries, each read from its 20-byte line."""

    def __init__(self, stream: BinaryIO, start: int, subsections: list[tuple[int, int, int]]) -> None:
        super().__init__()
        self._stream, self._start, self._subsections = stream, start, subsections

    def _all_entries(self) -> Any:
        self._stream.seek(self._start)
        return parse_xref_table(self._stream, strict=False)

    def _entry(self, idnum: int) -> tuple[str, Any, int] | None:
        for first, count, entries in self._subsections:
            if first <= idnum < first + count:
                self._stream.seek(entries + (idnum - first) * _ENTRY_BYTES)
                match = _ENTRY.fullmatch(self._stream.read(_ENTRY_BYTES))
                if match is None or int(match[2]) > 0xFFFF:
                    self._parse_all()
                    return None
                return match[3].decode(), int(match[1]), int(match[2])
        return None


class _OnDemandStream(_OnDemandSection):
    """An xref stream's entries, each read from its row of the decoded data. pyHanko decodes the stream
    (zlib, then the PNG predictor in Python: ~40 % of its full parse) at the first lookup, so a proof,
    whose objects all sit in the signature's own update, never decodes the document's older sections."""

    def __init__(self, xref_stream: Any, widths: list[int], index: list[int]) -> None:
        super().__init__()
        self._xref_stream, self._widths, self._index = xref_stream, widths, index
        self._data: bytes | None = None

    @classmethod
    def of(cls, xref_stream: Any) -> _OnDemandStream | None:
        """None (pyHanko parses it) unless /W holds three widths and /Index increasing pairs."""
        widths = [int(w) for w in xref_stream.get("/W", ())]
        index = [int(n) for n in xref_stream.get("/Index", [0, xref_stream.get("/Size")])]
        starts, counts = index[::2], index[1::2]
        if len(widths) != 3 or min(widths) < 0 or len(index) % 2 or min(counts, default=0) < 0:
            return None
        if any(later < start + count
               for start, count, later in zip(starts, counts, starts[1:], strict=False)):
            return None
        return cls(xref_stream, widths, index)

    def _all_entries(self) -> Any:
        return parse_xref_stream(self._xref_stream, strict=False)

    def _rows(self) -> bytes:
        if self._data is None:
            from pyhanko.pdf_utils.decode_limits import DecodePurpose
            from pyhanko.pdf_utils.xref import _expected_xref_stream_size

            expected = _expected_xref_stream_size(self._index, self._widths)
            self._data = bytes(self._xref_stream.read_data(DecodePurpose.XREF_STREAM, expected_size=expected))
        return self._data

    def _entry(self, idnum: int) -> tuple[str, Any, int] | None:
        row = 0
        for first, count in zip(self._index[::2], self._index[1::2], strict=True):
            if first <= idnum < first + count:
                data, at = self._rows(), (row + idnum - first) * sum(self._widths)
                fields = []
                for width, default in zip(self._widths, (1, 0, 0), strict=True):  # ISO 32000-1 table 17:
                    value = data[at:at + width]  # a zero width (or a short last row) means the default
                    fields.append(int.from_bytes(value, "big") if width and len(value) == width else default)
                    at += width
                kind, second, third = fields
                if kind == 1:
                    return ("n", second, third) if third <= 0xFFFF else None  # pyHanko skips those
                if kind == 2:
                    return "o", ObjStreamRef(second, third), 0
                return ("f", None, third) if kind == 0 and third <= 0xFFFF else None  # else: ignored
            row += count
        return None


__all__ = ["OnDemandXrefReader"]

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
from pyhanko.pdf_utils.reader import PdfFileReader, _read_header_version, process_data_at_eof
from pyhanko.pdf_utils.xref import (
    XRefBuilder,
    XRefCache,
    XRefSection,
    XRefSectionData,
    XRefSectionMetaInfo,
    XRefSectionType,
    _prev,
    parse_xref_table,
)

_SUBSECTION = re.compile(rb"[\0\t\n\f\r ]*(\d+)[ ]+(\d+)[ ]*(?:\r\n|\r|\n)")
_TRAILER = re.compile(rb"[\0\t\n\f\r ]*trailer[\0\t\n\f\r ]*")
_ENTRY = re.compile(rb"(\d{10}) (\d{5}) ([nf])(?: \r| \n|\r\n)")
_ENTRY_BYTES = 20  # ISO 32000-1 7.5.4: each entry is exactly 20 bytes long, end of line included
_HEADER_PEEK = 64  # bytes read to find a subsection header or the trailer keyword
_WS = rb"[\0\t\n\f\r ]"
_DICT_OBJECT = re.compile(rb"(\d+)%s+(\d+)%s+obj%s*<<" % (_WS, _WS, _WS))
_REFS_ARRAY = re.compile(rb"\[((?:%s*\d+%s+\d+%s+R)*)%s*\]" % (_WS, _WS, _WS, _WS))
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
        if generic.read_non_whitespace(stream) == b">":
            stream.read(1)
            break
        stream.seek(-1, os.SEEK_CUR)
        key = generic.NameObject.read_from_stream(stream)
        generic.read_non_whitespace(stream, seek_back=True)
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
    """pyHanko's section walk (startxref, /Prev chain, xref streams, error correction) unchanged; a
    classic table of regular layout becomes an _OnDemandTable instead of being parsed entry by entry."""

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


class _OnDemandTable(XRefSectionData):
    """One classic table's entries, each read when an object is looked up (the lookup pyHanko's
    XRefSectionData.try_resolve makes, same answers). Any other use of the section (its sets of
    explicit, freed or stream refs, for difference analysis) parses the whole table with pyHanko's
    parser first, so those answers are pyHanko's own."""

    _FULL = frozenset({"freed", "standard_xrefs", "xrefs_in_objstm", "explicit_refs_in_revision",
                       "obj_streams_used", "hybrid"})

    def __init__(self, stream: BinaryIO, start: int, subsections: list[tuple[int, int, int]]) -> None:
        # XRefSectionData.__init__ is not called: the attributes it sets are made by _parse_all
        self._stream, self._start, self._subsections = stream, start, subsections
        self._parsed = False

    def __getattr__(self, name: str) -> Any:
        if name in _OnDemandTable._FULL and not self.__dict__.get("_parsed", True):
            self._parse_all()
            return getattr(self, name)
        raise AttributeError(name)

    def _parse_all(self) -> None:
        XRefSectionData.__init__(self)
        self._stream.seek(self._start)
        self.process_entries(parse_xref_table(self._stream, strict=False), strict=False)
        self._parsed = True

    def try_resolve(self, ref: Any) -> Any:
        entry = None if self._parsed else self._entry(ref.idnum)
        if self._parsed:  # parsed for another use, or _entry met an irregular entry
            return super().try_resolve(ref)
        if entry is None:  # not in this section (or object 0, which pyHanko skips as well)
            raise KeyError(ref)
        offset, generation, in_use = entry
        if in_use:
            if generation == ref.generation:
                return offset
            raise KeyError(ref)
        if ref.generation == generation - 1:  # a free entry names the next generation
            return None
        raise KeyError(ref)

    def _entry(self, idnum: int) -> tuple[int, int, bool] | None:
        """(offset, generation, in use) of `idnum`'s entry, None when the table has none; an entry
        not in the 20-byte form sends the whole table through pyHanko's parser (`_parsed` turns true)."""
        for first, count, entries in self._subsections:
            if idnum != 0 and first <= idnum < first + count:
                self._stream.seek(entries + (idnum - first) * _ENTRY_BYTES)
                match = _ENTRY.fullmatch(self._stream.read(_ENTRY_BYTES))
                if match is None or int(match[2]) > 0xFFFF:
                    self._parse_all()
                    return None
                return int(match[1]), int(match[2]), match[3] == b"n"
        return None


__all__ = ["OnDemandXrefReader"]

"""The on-demand cross-reference reader signing uses: it must answer every lookup exactly as pyHanko's
own reader does (same offsets, same misses, same trailer), on a plain table, on a file with incremental
updates, on xref streams, and on sections it does not read itself (irregular entries or layout), and
it must hold the same state as pyHanko's PdfFileReader so pyHanko's signer and validator can use it in
its place."""

from __future__ import annotations

import io

import pikepdf
import pytest
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader

from docfence.engines.signing_reader import OnDemandXrefReader, _OnDemandStream, _OnDemandTable
from docfence.samples import pdfs


def _lookup(reader: PdfFileReader, idnum: int, generation: int) -> object:
    try:
        return reader.xrefs[generic.Reference(idnum, generation, reader)]
    except KeyError:
        return "missing"


def _same_answers(data: bytes) -> OnDemandXrefReader:
    full = PdfFileReader(io.BytesIO(data), strict=False)
    lazy = OnDemandXrefReader(io.BytesIO(data))
    assert set(vars(lazy)) == set(vars(full))  # pyHanko's reader state, attribute for attribute
    assert lazy.last_startxref == full.last_startxref
    assert lazy.xrefs.total_revisions == full.xrefs.total_revisions
    assert lazy.trailer.flatten() == full.trailer.flatten()
    size = int(full.trailer["/Size"])
    for idnum in range(size + 2):
        for generation in (0, 1):
            assert _lookup(lazy, idnum, generation) == _lookup(full, idnum, generation), (idnum, generation)
    for revision in range(full.xrefs.total_revisions):
        assert lazy.xrefs.get_xref_container_info(revision) == full.xrefs.get_xref_container_info(revision)
    for idnum in range(1, size):  # every object reads the same (page tree nodes included)
        ref = generic.Reference(idnum, 0, None)
        assert _serialised(lazy, ref) == _serialised(full, ref), idnum
    return lazy


def _serialised(reader: PdfFileReader, ref: generic.Reference) -> bytes:
    """The object as written back, with the reference an edit of it or of its values would rewrite."""
    obj = reader.get_object(ref)
    out = io.BytesIO()
    obj.write_to_stream(out)
    values = obj.values() if isinstance(obj, dict) else ()
    for owned in (obj, *values):
        container = owned.container_ref
        out.write(b" %r" % ((container.idnum, container.generation) if container else None,))
    return out.getvalue()


def _with_update(data: bytes) -> bytes:
    """One incremental update (pyHanko's writer): a second, small table with /Prev."""
    writer = IncrementalPdfFileWriter(io.BytesIO(data))
    writer.root[generic.NameObject("/Lang")] = generic.TextStringObject("en")
    writer.update_root()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_plain_table_is_read_on_demand_with_pyhankos_answers() -> None:
    lazy = _same_answers(pdfs.many_pages(20))
    data = lazy.xrefs.get_xref_data(0)
    assert isinstance(data, _OnDemandTable) and not data._parsed  # no entry parsed up front


def test_an_incremental_update_keeps_both_sections_and_their_answers() -> None:
    lazy = _same_answers(_with_update(pdfs.many_pages(3)))
    assert lazy.xrefs.total_revisions == 2
    assert lazy.root["/Lang"] == "en"
    assert lazy.xrefs.explicit_refs_in_revision(1)  # a whole-section question: pyHanko's parse answers


def test_an_irregular_entry_goes_through_pyhankos_parser() -> None:
    """A 19-byte entry (single-character end of line) breaks the fixed layout: the table is not read on
    demand, and the answers are still pyHanko's."""
    data = pdfs.many_pages(2)
    start = data.rindex(b"\nxref\n") + 1
    table, rest = data[start:].split(b"trailer", 1)
    entries = table.split(b"\n")
    entries[3] = entries[3].rstrip(b" \r")  # '0000000015 00000 n ' -> '0000000015 00000 n'
    moved = b"\n".join(entries) + b"trailer" + rest
    lazy = _same_answers(data[:start] + moved)
    assert not isinstance(lazy.xrefs.get_xref_data(0), _OnDemandTable)


def _with_object_streams(data: bytes) -> bytes:
    buf = io.BytesIO()
    with pikepdf.open(io.BytesIO(data)) as pdf:
        pdf.save(buf, object_stream_mode=pikepdf.ObjectStreamMode.generate)
    return buf.getvalue()


def test_an_xref_stream_is_read_on_demand_with_pyhankos_answers() -> None:
    """Objects in object streams and out of them, free entries, and an update after it (a second
    stream section with /Prev)."""
    data = _with_object_streams(pdfs.many_pages(20))
    lazy = _same_answers(data)
    assert lazy.has_xref_stream and isinstance(lazy.xrefs.get_xref_data(0), _OnDemandStream)
    assert not lazy.xrefs.get_xref_data(0)._parsed
    updated = _same_answers(_with_update(data))
    assert updated.xrefs.total_revisions == 2 and updated.root["/Lang"] == "en"


def test_an_xref_stream_of_unusual_layout_goes_through_pyhankos_parser() -> None:
    """/W with four widths: not the three fields ISO 32000-1 defines, so pyHanko decides."""
    data = _with_object_streams(pdfs.many_pages(2))
    at = data.rindex(b"/W [")
    end = data.index(b"]", at)
    assert data[at:end] == b"/W [ 1 2 1 "  # qpdf's widths for this size
    changed = data[:at] + b"/W [1 2 1 0" + data[end:]
    assert len(changed) == len(data)
    full = PdfFileReader(io.BytesIO(changed), strict=False)
    lazy = OnDemandXrefReader(io.BytesIO(changed))
    assert not isinstance(lazy.xrefs.get_xref_data(0), _OnDemandStream)
    for idnum in range(1, int(full.trailer["/Size"])):
        assert _lookup(lazy, idnum, 0) == _lookup(full, idnum, 0)


@pytest.mark.parametrize("damage", ["free", "another object"])
def test_a_damaged_entry_that_is_looked_up_fails_as_pyhankos_reader_fails(damage: str) -> None:
    """The catalog's entry marked free, or pointing at another object: reading the catalog fails for
    both readers (the lookup does not repair or guess)."""
    data = pdfs.many_pages(2)
    start = data.rindex(b"\nxref\n") + 1
    root = int(PdfFileReader(io.BytesIO(data), strict=False).trailer.raw_get("/Root").idnum)
    header_end = data.index(b"\n", data.index(b"\n", start) + 1) + 1  # after 'xref' and '0 N'
    at = header_end + root * 20
    other = header_end + (root % 3 + 1) * 20  # another in-use object's entry
    damage_bytes = b"0000000000 65535 f \n" if damage == "free" else data[other:other + 20]
    damaged = data[:at] + damage_bytes + data[at + 20:]
    full = PdfFileReader(io.BytesIO(damaged), strict=False)
    lazy = OnDemandXrefReader(io.BytesIO(damaged))
    ref = generic.Reference(root, 0, None)
    assert _lookup(lazy, root, 0) == _lookup(full, root, 0)
    for reader in (full, lazy):
        with pytest.raises(Exception):  # noqa: B017 - pyHanko's own error either way
            obj = reader.get_object(ref)
            assert obj["/Type"] == "/Catalog"


@pytest.mark.parametrize("entries", [b"/Count 2 /Kids [3 0 R%c\n4 0 R] /Type /Pages",
                                     b"/Kids[3 0 R 4 0 R]/Kids[4 0 R]/Type/Pages", b"/Kids [3 0 R 0 0 R]"])
def test_a_page_tree_node_the_fast_read_does_not_cover_is_read_by_pyhanko(entries: bytes) -> None:
    """/Kids with a comment, a repeated /Kids key (pyHanko keeps the first) or object number 0 (pyHanko
    refuses it): the node reads exactly as pyHanko's reader reads it, error included."""
    data = pdfs.many_pages(2)
    pages = PdfFileReader(io.BytesIO(data), strict=False).root.raw_get("/Pages").idnum
    at = data.index(b"<<", data.index(b"\n%d 0 obj" % pages)) + 2
    end = data.index(b">>", at)
    assert len(entries) < end - at
    changed = data[:at] + b" " + entries.ljust(end - at - 1) + data[end:]
    ref = generic.Reference(pages, 0, None)
    answers = []
    for reader in (PdfFileReader(io.BytesIO(changed), strict=False), OnDemandXrefReader(io.BytesIO(changed))):
        try:
            answers.append(_serialised(reader, ref))
        except Exception as exc:
            answers.append(type(exc).__name__.encode())
    assert answers[0] == answers[1]
    assert answers[0].count(b"0 R") >= 2 or b"Error" in answers[0], answers[0]

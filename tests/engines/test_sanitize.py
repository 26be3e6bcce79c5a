"""The sanitiser: active content and hidden data are found, listed, stripped or refused per class; the
residue check proves the output clean (and catches what the sanitiser's walk would miss); visible content
and visible links survive."""

from __future__ import annotations

import io
from pathlib import Path

import pikepdf
import pypdfium2 as pdfium
import pytest
from PIL import ImageChops

from docfence.config import load_settings
from docfence.core.errors import ActiveContentRefused, ConfigError
from docfence.core.policy import JobPolicy, Mode, SanitizePolicy
from docfence.engines import watermark_document
from docfence.engines.sanitize import sanitize
from docfence.engines.sanitize_residue import find_residue
from docfence.samples import pdfs


def _js(pdf: pikepdf.Pdf, code: str = "app.alert('x')") -> pikepdf.Dictionary:
    return pdf.make_indirect(pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String(code)))


def hostile_pdf() -> bytes:
    """The links sample with every kind of active content and hidden data the issue lists."""
    pdf = pikepdf.open(io.BytesIO(pdfs.all_samples()["links"]))
    root = pdf.Root
    root.OpenAction = _js(pdf)
    root.AA = pikepdf.Dictionary(WC=_js(pdf))
    exe = pdf.make_stream(b"MZ\x90\x00 not really an executable")
    exe.Type = pikepdf.Name.EmbeddedFile
    spec = pikepdf.Dictionary(Type=pikepdf.Name.Filespec, F=pikepdf.String("a.exe"),
                              EF=pikepdf.Dictionary(F=exe))
    root.Names = pikepdf.Dictionary(
        JavaScript=pikepdf.Dictionary(Names=pikepdf.Array([pikepdf.String("init"), _js(pdf)])),
        EmbeddedFiles=pikepdf.Dictionary(Names=pikepdf.Array([pikepdf.String("a.exe"), spec])),
    )
    with pdf.open_metadata(set_pikepdf_as_editor=False) as xmp:
        xmp["dc:creator"] = ["Dr. Patient Identifier"]
    root.PrivateJunk = pdf.make_stream(b"left over")
    pdf.docinfo["/Author"] = "Dr. Patient Identifier"
    page = pdf.pages[0].obj
    page.AA = pikepdf.Dictionary(O=pikepdf.Dictionary(S=pikepdf.Name.Launch, F=pikepdf.String("calc.exe")))
    page.PieceInfo = pikepdf.Dictionary(App=pikepdf.Dictionary(Private=pikepdf.String("x")))
    page.Thumb = pdf.make_stream(b"\x00" * 16)
    annots = page.get("/Annots", pikepdf.Array())
    annots.append(pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.FileAttachment, Rect=[10, 10, 20, 20], FS=spec)))
    annots.append(pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=[30, 30, 60, 40],
        A=pikepdf.Dictionary(S=pikepdf.Name.SubmitForm, F=pikepdf.String("http://example.invalid/")))))
    page.Annots = annots
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _uris(pdf: pikepdf.Pdf) -> list[str]:
    return [str(a.A.URI) for p in pdf.pages for a in p.obj.get("/Annots", [])
            if "/A" in a and a.A.get("/S") == pikepdf.Name.URI]


def test_strip_removes_every_kind_and_lists_it() -> None:
    data = hostile_pdf()
    before = pikepdf.open(io.BytesIO(data))
    # the check sees every kind the hostile input holds, each where it is
    assert {f.kind for f in find_residue(before, SanitizePolicy())} == {
        "embedded_file", "info_metadata", "javascript", "launch", "piece_info", "private_data",
        "submit_form", "thumbnail", "xmp_metadata"}
    result = watermark_document(data, JobPolicy())
    out = pikepdf.open(io.BytesIO(result.output))
    assert find_residue(out, SanitizePolicy()) == []
    report = result.validation["sanitize"]
    assert set(report["stripped"]) >= {"javascript", "launch", "submit_form", "embedded_file",
                                       "xmp_metadata", "info_metadata", "thumbnail", "piece_info",
                                       "private_data"}
    assert next(c for c in result.validation["checks"] if c["name"] == "sanitised")["ok"]
    assert b"Patient Identifier" not in result.output and b"MZ\x90" not in result.output
    assert _uris(out) == _uris(before) and _uris(out), "visible URI links stay"


def test_stripping_never_changes_what_a_page_shows() -> None:
    data = hostile_pdf()
    pdf = pikepdf.open(io.BytesIO(data))
    pages = [p.obj for p in pdf.pages]
    sanitize(pdf, pages, SanitizePolicy())
    buf = io.BytesIO()
    pdf.save(buf)
    for before_doc, after_doc in [(pdfium.PdfDocument(data), pdfium.PdfDocument(buf.getvalue()))]:
        for i in range(len(before_doc)):
            a = before_doc[i].render(scale=1, draw_annots=True).to_pil().convert("RGB")
            b = after_doc[i].render(scale=1, draw_annots=True).to_pil().convert("RGB")
            # the file-attachment icon is the only thing allowed to disappear; it sits at 10..20 pt
            diff = ImageChops.difference(a, b).getbbox()
            assert diff is None or (diff[2] <= 22 and a.size[1] - diff[1] <= 22), diff


def test_refuse_names_the_kinds() -> None:
    with pytest.raises(ActiveContentRefused) as info:
        watermark_document(hostile_pdf(), JobPolicy(sanitize=SanitizePolicy(active_content="refuse")))
    assert "javascript" in info.value.message and "launch" in info.value.message


def test_keep_lists_without_changing() -> None:
    policy = JobPolicy(sanitize=SanitizePolicy.keep_all())
    result = watermark_document(hostile_pdf(), policy)
    assert result.validation["sanitize"]["stripped"] == {}
    assert result.validation["sanitize"]["found"]["javascript"] >= 3
    out = pikepdf.open(io.BytesIO(result.output))
    assert b"MZ\x90" in out.Root.Names.EmbeddedFiles.Names[1].EF.F.read_bytes()


def test_link_uris_strip_keeps_the_link_rectangle() -> None:
    data = pdfs.all_samples()["links"]
    before = pikepdf.open(io.BytesIO(data))
    result = watermark_document(data, JobPolicy(sanitize=SanitizePolicy(link_uris="strip")))
    out = pikepdf.open(io.BytesIO(result.output))
    assert _uris(before) and not _uris(out)
    count = sum(len(p.obj.get("/Annots", [])) for p in out.pages)
    assert count == sum(len(p.obj.get("/Annots", [])) for p in before.pages)


def test_residue_check_catches_what_the_walk_does_not_visit() -> None:
    """JavaScript hung where the sanitiser never looks (inside a structure element) still fails the check."""
    pdf = pikepdf.open(io.BytesIO(pdfs.all_samples()["links"]))
    pdf.Root.StructTreeRoot = pikepdf.Dictionary(K=pikepdf.Dictionary(A=_js(pdf)))
    assert [f.kind for f in find_residue(pdf, SanitizePolicy())] == ["javascript"]


def test_residue_check_reads_an_indirect_array_once() -> None:
    """An indirect array that holds itself, or that many objects share, is read once: the scan ends
    complete (not "unscanned" after millions of steps) and still finds what the array holds."""
    pdf = pikepdf.open(io.BytesIO(pdfs.all_samples()["links"]))
    looping = pdf.make_indirect(pikepdf.Array([pikepdf.Dictionary(A=_js(pdf))]))
    looping.append(looping)
    shared = pdf.make_indirect(pikepdf.Array([pikepdf.Dictionary(Kind=pikepdf.Name.Plain)] * 2_000))
    pdf.Root.StructTreeRoot = pikepdf.Dictionary(
        K=looping, Parts=pikepdf.Array([pikepdf.Dictionary(Same=shared) for _ in range(3_000)]))
    assert [f.kind for f in find_residue(pdf, SanitizePolicy())] == ["javascript"]


def test_xfa_is_stripped_by_default_and_raster_output_is_clean() -> None:
    pdf = pikepdf.open(io.BytesIO(pdfs.form()))
    pdf.Root.AcroForm.XFA = pdf.make_stream(b"<xdp:xdp/>")
    pdf.Root.OpenAction = _js(pdf)
    buf = io.BytesIO()
    pdf.save(buf)
    for mode in (Mode.VECTOR, Mode.RASTER):
        result = watermark_document(buf.getvalue(), JobPolicy(mode=mode))
        assert "xfa" in result.validation["sanitize"]["stripped"]
        assert find_residue(pikepdf.open(io.BytesIO(result.output)), SanitizePolicy()) == []


def test_class_policy_from_toml_survives_the_job_round_trip(tmp_path: Path) -> None:
    config = tmp_path / "docfence.toml"
    config.write_text('default_class = "out"\n[classes.out]\nsanitize = { active_content = "refuse" }\n'
                      '[classes.inside]\nsanitize = { active_content = "keep", hidden_data = "keep" }\n')
    settings = load_settings(config, env={})
    out = settings.policy_for("out")
    assert out.sanitize == SanitizePolicy(active_content="refuse")
    assert JobPolicy.from_dict(out.to_dict()).sanitize == out.sanitize
    assert settings.policy_for("inside").sanitize == SanitizePolicy.keep_all()
    with pytest.raises(ConfigError):
        SanitizePolicy(hidden_data="refuse")


def test_looping_outline_is_cut_and_noted() -> None:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(2)))
    first = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("a")))
    second = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("b"), Next=first))
    first.Next = second
    pdf.Root.Outlines = pikepdf.Dictionary(First=first, Last=second, Count=2)
    buf = io.BytesIO()
    pdf.save(buf)
    result = watermark_document(buf.getvalue(), JobPolicy())
    assert any("outline link" in n for n in result.validation["notes"])
    out = pikepdf.open(io.BytesIO(result.output))
    assert "/Next" not in out.Root.Outlines.First.Next

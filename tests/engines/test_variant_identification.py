"""A report rendered as PDF/A-3b or PDF/UA-1 stays one through the class's watermark and sanitiser (the
default class strips hidden data): judged by poppler (`pdfinfo -meta`, `pdffonts`), qpdf, pikepdf's own
PDF/A validator and pikepdf reads of the catalog. The validator's "variant" check proves it, and planted
defects (no XMP, no pdfaid fields, no OutputIntents, no tags, no /Lang, no title, a font program
removed) fail it. An uploaded file carrying docfence's packet still loses it when marked."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pikepdf
import pytest

from docfence import engines
from docfence.core.errors import UnsupportedFeature, ValidationFailed
from docfence.core.policy import JobPolicy, Kind, Mode, SanitizePolicy, WatermarkSpec
from docfence.engines import variant_proof
from docfence.engines.report.render import VARIANTS, render_report, template_hash
from docfence.engines.sanitize_residue import residue_check
from docfence.engines.variant_proof import Identification, packet, prove_variant, write_identification
from docfence.reports.templates import encode_assets
from docfence.samples import pdfs
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.sandbox.report_job import build_snapshot, render_report_job

MARK = WatermarkSpec(text="SYNTHETIC REPORT")
Published = dict[tuple[str, str], tuple[bytes, dict[str, Any]]]  # (variant, hidden_data) -> (bytes, report)
CLAIMS = {"pdf/a-3b": ('pdfaid:part="3"', 'pdfaid:conformance="B"'), "pdf/ua-1": ('pdfuaid:part="1"',)}


def report_policy(hidden_data: str = "strip", **changes: object) -> JobPolicy:
    return JobPolicy(kind=Kind.REPORT, watermark=MARK, sanitize=SanitizePolicy(hidden_data=hidden_data),
                     **changes)  # type: ignore[arg-type]


def snapshot(variant: str | None) -> bytes:
    bundle = load_monthly_bundle()
    return build_snapshot(name=bundle.name, html=bundle.html, css=bundle.css, schema=bundle.schema,
                          assets_b64=encode_assets(bundle), sha256=template_hash(bundle),
                          data=sample_monthly_data(pages=2), variant=variant)


@pytest.fixture(scope="module")
def published() -> Published:
    """(variant, hidden_data) -> (published bytes, validation report) of a watermarked report job."""
    out = {}
    for variant in CLAIMS:
        for hidden in ("strip", "keep"):
            result = render_report_job(snapshot(variant), report_policy(hidden))
            out[variant, hidden] = (result.output, result.validation)
    return out


def tool(tmp_path: Path, data: bytes, *argv: str) -> str:
    path = tmp_path / "report.pdf"
    path.write_bytes(data)
    done = subprocess.run([*argv, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_variant_names_are_the_renderers() -> None:
    assert set(variant_proof.VARIANT_NAMES) == {v for v in VARIANTS if v}


@pytest.mark.parametrize("hidden", ["strip", "keep"])
@pytest.mark.parametrize("variant", sorted(CLAIMS))
def test_identification_survives_watermark_and_sanitiser(
    published: Published, variant: str, hidden: str,
    tmp_path: Path,
) -> None:
    output, validation = published[variant, hidden]
    meta = tool(tmp_path, output, "pdfinfo", "-meta")
    assert all(claim in meta for claim in CLAIMS[variant]), meta
    fonts = tool(tmp_path, output, "pdffonts").splitlines()[2:]
    assert fonts and all(line.split()[-5] == "yes" for line in fonts), fonts  # the "emb" column
    checks = {c["name"]: c for c in validation["checks"]}
    assert validation["ok"] and checks["variant"]["ok"] and checks["variant"]["variant"] == variant
    assert checks["sanitised"]["ok"] and checks["watermark_structure"]["pages_marked"] == 2
    with pikepdf.open(io.BytesIO(output)) as pdf:
        root = pdf.Root
        if variant == "pdf/a-3b":
            assert str(root.OutputIntents[0].S) == "/GTS_PDFA1"
            assert isinstance(root.OutputIntents[0].DestOutputProfile, pikepdf.Stream)
        else:
            assert "dc:title" in meta and "Synthetic Demo Clinic" in meta
            assert bool(root.MarkInfo.Marked) and isinstance(root.StructTreeRoot, pikepdf.Dictionary)
            assert str(root.Lang) == "en" and bool(root.ViewerPreferences.DisplayDocTitle)
            assert "Synthetic Demo Clinic" in tool(tmp_path, output, "pdfinfo")  # the viewer's title
        if hidden == "strip":  # only docfence's identification fields: no producer, no other hidden data
            assert "WeasyPrint" not in meta and "Producer" not in meta
            info = pdf.trailer.get("/Info")
            assert info is None or set(info.keys()) == {"/Title"}
            assert checks["sanitised"]["kept"] and validation["sanitize"]["identification"] == variant


def test_qpdf_finds_no_damage(published: Published,
                              tmp_path: Path) -> None:
    for output, _validation in published.values():
        path = tmp_path / "report.pdf"
        path.write_bytes(output)
        done = subprocess.run(["qpdf", "--check", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "No syntax or stream encoding errors" in done.stdout, done.stdout


def test_pikepdf_pdfa_validator_finds_no_violation(
    published: Published
) -> None:
    """pikepdf's allowlist PDF/A validator (not docfence's): no violation in the published PDF/A-3b
    report, as in the renderer's own output; before the fix the missing /Metadata was one."""
    import pikepdf.pdfa as pdfa
    rendered = render_report(load_monthly_bundle(), sample_monthly_data(pages=2), variant="pdf/a-3b").pdf
    assert pdfa.validate_written(io.BytesIO(rendered), "3b").violations == ()
    for hidden in ("strip", "keep"):
        output, _ = published["pdf/a-3b", hidden]
        assert pdfa.validate_written(io.BytesIO(output), "3b").violations == (), hidden


def _edited(output: bytes, edit: object) -> bytes:
    with pikepdf.open(io.BytesIO(output)) as pdf:
        edit(pdf)  # type: ignore[operator]
        buf = io.BytesIO()
        pdf.save(buf, fix_metadata_version=False)
        return buf.getvalue()


def _drop(key: str) -> object:
    return lambda pdf: pdf.Root.__delitem__(key)


def _unembed(pdf: pikepdf.Pdf) -> None:
    for font in pdf.pages[0].Resources.Font.values():
        descendant = font.DescendantFonts[0] if "/DescendantFonts" in font else font
        for key in ("/FontFile", "/FontFile2", "/FontFile3"):
            if key in descendant.FontDescriptor:
                del descendant.FontDescriptor[key]


def _no_pdfaid(pdf: pikepdf.Pdf) -> None:
    pdf.Root.Metadata = pdf.make_stream(packet(Identification("pdf/ua-1", "x")))


def _untitled(pdf: pikepdf.Pdf) -> None:
    pdf.Root.Metadata = pdf.make_stream(packet(Identification("pdf/ua-1")))


def _unmarked(pdf: pikepdf.Pdf) -> None:
    pdf.Root.MarkInfo.Marked = False


DEFECTS = [
    ("pdf/a-3b", _drop("/Metadata"), "no /Metadata"),
    ("pdf/a-3b", _no_pdfaid, "no pdf/a-3b identification"),
    ("pdf/a-3b", _drop("/OutputIntents"), "/OutputIntents"),
    ("pdf/a-3b", _unembed, "is not embedded"),
    ("pdf/ua-1", _drop("/Metadata"), "no /Metadata"),
    ("pdf/ua-1", _untitled, "dc:title"),
    ("pdf/ua-1", _drop("/StructTreeRoot"), "/StructTreeRoot"),
    ("pdf/ua-1", _unmarked, "/MarkInfo"),
    ("pdf/ua-1", _drop("/Lang"), "/Lang"),
    ("pdf/ua-1", _drop("/ViewerPreferences"), "/DisplayDocTitle"),
    ("pdf/ua-1", _unembed, "is not embedded"),
]


@pytest.mark.parametrize(("variant", "edit", "named"), DEFECTS)
def test_planted_defects_fail_the_variant_check(
    published: Published, variant: str, edit: object, named: str,
) -> None:
    output, _ = published[variant, "strip"]
    assert prove_variant(output, variant)["ok"]
    proof = prove_variant(_edited(output, edit), variant)
    assert not proof["ok"] and any(named in f for f in proof["failures"]), proof


def test_a_render_that_does_not_claim_the_variant_is_not_published() -> None:
    """docfence claims only what its renderer claimed: a plain render passed off as PDF/UA-1 fails."""
    plain = render_report(load_monthly_bundle(), sample_monthly_data(pages=1)).pdf
    with pytest.raises(ValidationFailed) as failed:
        engines.watermark_document(plain, report_policy().evolve(kind=Kind.WATERMARK), variant="pdf/ua-1")
    report = failed.value.report or {}
    variant = next(c for c in report["checks"] if c["name"] == "variant")
    assert not variant["ok"] and "variant" in failed.value.message


def test_raster_class_refuses_a_variant() -> None:
    with pytest.raises(UnsupportedFeature, match="vector"):
        render_report_job(snapshot("pdf/a-3b"), report_policy(mode=Mode.RASTER))


def test_unwatermarked_variant_report_is_proved() -> None:
    result = render_report_job(snapshot("pdf/ua-1"), JobPolicy(kind=Kind.REPORT, watermark=None))
    checks = {c["name"]: c for c in result.validation["checks"]}
    assert result.validation["ok"] and checks["variant"]["ok"]


def test_an_uploaded_file_with_docfences_packet_still_loses_it() -> None:
    """The packet is kept only for a report of a declared variant: an upload (no variant) carrying one
    byte for byte is sanitised like any XMP, and its PDF/A claim does not survive."""
    with pikepdf.open(io.BytesIO(pdfs.many_pages(2))) as pdf:
        write_identification(pdf, Identification("pdf/a-3b"))
        buf = io.BytesIO()
        pdf.save(buf, fix_metadata_version=False)
    result = engines.watermark_document(buf.getvalue(), JobPolicy(watermark=MARK))
    with pikepdf.open(io.BytesIO(result.output)) as out:
        assert "/Metadata" not in out.Root and "/Info" not in out.trailer
    assert "identification" not in result.validation["sanitize"]


def test_residue_check_accepts_only_docfences_exact_packet() -> None:
    """A packet with one field more than docfence writes, or an /Info with more than its title, is
    hidden data like any other."""
    strip = SanitizePolicy()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(1))) as pdf:
        write_identification(pdf, Identification("pdf/ua-1", 'A & <b> "title"'))
        assert residue_check(pdf, strip)["ok"]
        pdf.trailer.Info.Producer = pikepdf.String("leak")
        assert residue_check(pdf, strip)["failures"] == ["info_metadata left at trailer /Info"]
        del pdf.trailer.Info.Producer
        body = packet(Identification("pdf/ua-1", 'A & <b> "title"'))
        pdf.Root.Metadata.write(body.replace(b"</rdf:RDF>", b'<rdf:Description rdf:about="" '
                                                            b'xmlns:pdf="http://ns.adobe.com/pdf/1.3/" '
                                                            b'pdf:Producer="leak"/>\n</rdf:RDF>'))
        left = residue_check(pdf, strip)
        assert not left["ok"] and any("xmp_metadata" in f for f in left["failures"])

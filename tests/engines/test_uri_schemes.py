"""URI schemes by policy (issue 30, L7): javascript:, vbscript:, data: and file: URIs are active content
wherever they sit (link annotations, /OpenAction, /AA, outline items, the catalog's /URI /Base), stripped or
refused per `active_content`, while http, https and mailto links stay under `link_uris = keep`; the
residue check catches an active-scheme link left in an output, and the validation report lists what went."""

from __future__ import annotations

import io

import pikepdf
import pytest

from docfence.core.errors import ActiveContentRefused
from docfence.core.policy import JobPolicy, SanitizePolicy, WatermarkSpec
from docfence.engines import watermark_document
from docfence.engines.sanitize_kinds import uri_scheme
from docfence.engines.sanitize_residue import find_residue
from docfence.engines.validate import validate
from docfence.samples import pdfs

from .helpers import mutate

ACTIVE = {
    "javascript_uri": "javascript:app.alert(1)",
    "vbscript_uri": "VBScript:MsgBox(1)",
    "data_uri": "data:text/html;base64,PHNjcmlwdD4=",
    "file_uri": "file:///etc/passwd",
}
PLAIN = ("https://example.org/docfence", "http://example.org/", "mailto:someone@example.org")


@pytest.mark.parametrize(("raw", "scheme"), [
    (b"javascript:alert(1)", "javascript"),
    (b"JaVaScRiPt:alert(1)", "javascript"),
    (b" \x01\x1f\tjavascript:alert(1)", "javascript"),  # leading spaces and control characters
    (b"java\tscr\nipt:alert(1)", "javascript"),  # tabs and line breaks inside, as browsers drop them
    ("\ufeffjavascript:x".encode("utf-16-be"), "javascript"),  # a UTF-16 text string (BOM)
    (b"file:///etc/passwd", "file"),
    (b"https://example.org/", "https"),
    (b"mailto:a@example.org", "mailto"),
    (b"relative/path.html", None),
    (b"1javascript:x", None),  # not a scheme: a relative reference
])
def test_scheme_is_read_as_readers_read_it(raw: bytes, scheme: str | None) -> None:
    assert uri_scheme(pikepdf.String(raw)) == scheme


def _uri(target: str) -> pikepdf.Dictionary:
    return pikepdf.Dictionary(S=pikepdf.Name.URI, URI=pikepdf.String(target))


def _link(pdf: pikepdf.Pdf, target: str, y: int) -> pikepdf.Dictionary:
    return pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=[40, y, 300, y + 10], Border=[0, 0, 0],
        A=_uri(target)))


def schemes_pdf() -> bytes:
    """The links sample with a link per scheme, and javascript: URIs as open action, page and annotation
    additional actions, an outline item's action and the catalog's base URI."""
    pdf = pikepdf.open(io.BytesIO(pdfs.links()))
    page = pdf.pages[0].obj
    annots = page.Annots
    for y, target in enumerate([*ACTIVE.values(), *PLAIN[1:]]):
        annots.append(_link(pdf, target, 100 + 20 * y))
    annots[0].AA = pikepdf.Dictionary(E=_uri(" javascript:app.alert(2)"))
    page.AA = pikepdf.Dictionary(O=_uri("\x00javascript:app.alert(3)"))
    pdf.Root.OpenAction = _uri("JAVASCRIPT:app.alert(4)")
    item = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("x"), A=_uri("javascript:app.alert(5)")))
    pdf.Root.Outlines = pikepdf.Dictionary(First=item, Last=item, Count=1)
    pdf.Root.URI = pikepdf.Dictionary(Base=pikepdf.String("javascript:app.alert(6)//"))
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _link_uris(pdf: pikepdf.Pdf) -> list[str]:
    return sorted(str(a.A.URI) for p in pdf.pages for a in p.obj.get("/Annots", [])
                  if "/A" in a and a.A.get("/S") == pikepdf.Name.URI)


def test_default_strips_active_schemes_and_keeps_plain_links() -> None:
    data = schemes_pdf()
    before = pikepdf.open(io.BytesIO(data))
    assert {f.kind for f in find_residue(before, SanitizePolicy())} >= set(ACTIVE)
    result = watermark_document(data, JobPolicy())
    out = pikepdf.open(io.BytesIO(result.output))
    assert _link_uris(out) == sorted(PLAIN)  # http, https and mailto links stay links
    assert find_residue(out, SanitizePolicy()) == []
    assert "/OpenAction" not in out.Root and "/AA" not in out.pages[0].obj
    assert "/A" not in out.Root.Outlines.First and "/Base" not in out.Root.URI
    report = result.validation["sanitize"]
    assert report["stripped"]["javascript_uri"] == 6  # link, annot /AA, page /AA, open action, outline, base
    assert report["stripped"]["vbscript_uri"] == report["stripped"]["data_uri"] == 1
    assert report["stripped"]["file_uri"] == 1
    assert "link_uri" not in report["stripped"] and report["found"]["link_uri"] == 3
    assert "catalog /URI /Base" in " ".join(report["stripped_at"])
    assert any("javascript_uri" in n for n in result.validation["notes"])
    sanitised = next(c for c in result.validation["checks"] if c["name"] == "sanitised")
    assert sanitised["ok"] and set(ACTIVE) <= set(sanitised["kinds"])


def test_refuse_names_the_active_schemes() -> None:
    with pytest.raises(ActiveContentRefused) as info:
        watermark_document(schemes_pdf(), JobPolicy(sanitize=SanitizePolicy(active_content="refuse")))
    for kind in ACTIVE:
        assert kind in info.value.message


def test_a_plain_link_is_not_refused() -> None:
    """refuse is about active content: a document with only https links passes a refusing class."""
    result = watermark_document(pdfs.links(), JobPolicy(sanitize=SanitizePolicy(active_content="refuse")))
    assert _link_uris(pikepdf.open(io.BytesIO(result.output))) == [PLAIN[0]]


def test_keep_all_keeps_them_and_lists_them() -> None:
    result = watermark_document(schemes_pdf(), JobPolicy(sanitize=SanitizePolicy.keep_all()))
    assert result.validation["sanitize"]["stripped"] == {}
    assert result.validation["sanitize"]["found"]["javascript_uri"] == 6
    assert "javascript:app.alert(1)" in _link_uris(pikepdf.open(io.BytesIO(result.output)))


def test_validator_catches_a_javascript_link_left_behind() -> None:
    """Planted defect: a clean output whose https link is turned into javascript: fails the residue check."""
    source = pdfs.links()
    clean = watermark_document(source, JobPolicy()).output

    def plant(pdf: pikepdf.Pdf) -> None:
        link = next(a for a in pdf.pages[0].obj.Annots
                    if "/A" in a and a.A.get("/S") == pikepdf.Name.URI)
        link.A.URI = pikepdf.String("\tjavascript:app.alert(1)")

    planted = mutate(clean, plant)
    assert [f.kind for f in find_residue(pikepdf.open(io.BytesIO(planted)), SanitizePolicy())] == [
        "javascript_uri"]
    report = validate(source, planted, WatermarkSpec(), mode="vector", sanitize=SanitizePolicy())
    sanitised = next(c for c in report["checks"] if c["name"] == "sanitised")
    assert not report["ok"] and not sanitised["ok"]
    assert any(f.startswith("javascript_uri left at") for f in sanitised["failures"])

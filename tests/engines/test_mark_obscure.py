"""No mark hides the document's text: a footer or header opaque enough to hide text moves into the free
band of its edge, an opaque overlay with no free space follows the class's `obscure` rule, and the
validator's `text_not_obscured` check fails a planted footer that covers a text line. Fixtures are made
here (a page with a form's text line near its bottom edge); poppler (pdftotext, pdftoppm) judges."""

from __future__ import annotations

import base64
import dataclasses
import io
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pikepdf
import pytest
from PIL import Image, ImageChops

from docfence import engines
from docfence.config import load_settings
from docfence.core.errors import ConfigError, UnsupportedFeature
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import text_boxes
from docfence.engines.mark_art import ArtShop
from docfence.engines.mark_obscure import (
    MIN_CONTRAST,
    MIN_EM_PT,
    MIN_MARGIN_PT,
    can_hide_text,
    fit_marks,
    legible_opacity,
    mark_outline,
    mark_quads,
    text_not_obscured,
)
from docfence.engines.mark_placement import EdgeFitSpec
from docfence.engines.marks import MarkSet
from docfence.engines.preflight import preflight
from docfence.engines.validate import validate
from docfence.engines.vector import apply_vector, save

FORM_LINE = "Form XYZ-1490S version 04/18"
FOOTER = WatermarkSpec.from_mapping({"text": "{recipient} · {date} · {page}/{pages}", "position": "footer",
                                     "opacity": 0.9, "color": (0.25, 0.25, 0.25)})
FIELDS = {"recipient": "Dr. Ada Example", "date": "2026-12-02", "job_id": "local", "tenant": "local"}


def form_page(lines: list[tuple[float, float, float, str]], *, media: tuple[float, ...] = (0, 0, 612, 792),
              rotate: int = 0, pages: int = 1) -> bytes:
    """`pages` Letter pages drawing Helvetica `lines` (x, y, size, text) in user space."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name.Helvetica))
    for _ in range(pages):
        ops = "".join(f"BT /F1 {s:g} Tf {x:g} {y:g} Td ({t}) Tj ET\n" for x, y, s, t in lines)
        page = pikepdf.Dictionary(Type=pikepdf.Name.Page, MediaBox=pikepdf.Array(list(media)),
                                  Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)),
                                  Contents=pdf.make_stream(ops.encode("latin-1")))
        if rotate:
            page.Rotate = rotate
        pdf.pages.append(pikepdf.Page(page))
    out = io.BytesIO()
    pdf.save(out, deterministic_id=True)
    return out.getvalue()


FORM = form_page([(72, 700, 12, "Body text of the form, well above its footer"), (72, 22, 9, FORM_LINE)])


def policy_of(*marks: WatermarkSpec) -> JobPolicy:
    return JobPolicy(watermark=marks[0], marks=marks[1:], fields=FIELDS)


def marked(data: bytes, policy: JobPolicy, rule: str | None = "reduce", *, fit: bool = True
           ) -> tuple[bytes, MarkSet]:
    """The vector engine's output with the marks fitted to the page's text (`fit`), and those marks."""
    opened = preflight(data, policy)
    marks = dataclasses.replace(MarkSet.of(policy), obscure=rule)
    if fit:
        marks = fit_marks(marks, data, None, opened.geometry)
    apply_vector(opened, marks)
    return save(opened.pdf, opened.encrypted), marks


def line_box(data: bytes, tmp_path: Path, first_word: str) -> tuple[float, float, float, float]:
    """(x0, top, x1, bottom) in points, top-left origin, of the line starting with `first_word`, as
    poppler's pdftotext extracts it."""
    path = tmp_path / "words.pdf"
    path.write_bytes(data)
    xml = subprocess.run(["pdftotext", "-bbox", str(path), "-"], capture_output=True, check=True,
                         timeout=60).stdout.decode()
    words = [w for w in ElementTree.fromstring(xml.replace("<!DOCTYPE", "<!--").replace(
        "dtd\">", "dtd\"-->")).iter() if w.tag.endswith("word")]
    start = next(i for i, w in enumerate(words) if w.text == first_word)
    line = [w for w in words[start:] if abs(float(w.get("yMin", 0)) - float(words[start].get("yMin", 0))) < 1]
    return (float(line[0].get("xMin", 0)), float(line[0].get("yMin", 0)),
            float(line[-1].get("xMax", 0)), float(line[0].get("yMax", 0)))


def render(data: bytes, tmp_path: Path, name: str) -> Image.Image:
    path = tmp_path / f"{name}.pdf"
    path.write_bytes(data)
    subprocess.run(["pdftoppm", "-r", "144", "-gray", "-png", "-singlefile", str(path), str(tmp_path / name)],
                   check=True, timeout=60, capture_output=True)
    return Image.open(tmp_path / f"{name}.png").convert("L")


def region_changed(before: Image.Image, after: Image.Image, box: tuple[float, ...]) -> int:
    """Pixels that differ by more than 32 grey levels inside `box` (points, top-left origin), at 144 DPI."""
    area = tuple(round(v * 2) for v in box)
    diff = ImageChops.difference(before.crop(area), after.crop(area))
    return int(diff.point(lambda v: 255 if v > 32 else 0).histogram()[255])


def test_today_a_footer_covers_the_forms_own_line_and_the_validator_fails_it(tmp_path: Path) -> None:
    """The planted defect: the footer drawn where today's layout puts it (18 pt from the edge, 24 pt)
    lies over the form's line; poppler shows the line changed, and the check fails page 1, mark 2."""
    policy = policy_of(WatermarkSpec(), FOOTER)
    output, marks = marked(FORM, policy, fit=False)
    box = line_box(FORM, tmp_path, "Form")
    assert region_changed(render(FORM, tmp_path, "in"), render(output, tmp_path, "out"), box) > 50
    found = text_not_obscured(output, None, marks, preflight(output, policy).geometry)
    assert not found["ok"] and found["pages"] == "1"
    assert found["failures"] == ["page 1: mark 2 (opacity 0.9, legible up to 0.6) covers 1 text objects"]


def test_the_footer_goes_into_the_free_band_below_the_forms_line(tmp_path: Path) -> None:
    policy = policy_of(WatermarkSpec(), FOOTER)
    output, marks = marked(FORM, policy)
    ((page, index, spec),) = marks.fitted
    assert (page, index) == (0, 1) and isinstance(spec, EdgeFitSpec)
    assert MIN_MARGIN_PT <= spec.edge_margin < 18 and 12.0 <= spec.edge_scale * 1000 < 24.0
    before, after = render(FORM, tmp_path, "in"), render(output, tmp_path, "out")
    x0, top, x1, bottom = line_box(FORM, tmp_path, "Form")
    assert region_changed(before, after, (x0, top, x1, bottom)) == 0  # the line reads as before
    assert region_changed(before, after, (0, bottom + 1, 612, 792)) > 200  # the footer is below it
    found = text_not_obscured(output, None, marks, preflight(output, policy).geometry)
    assert found["ok"] and found["fitted"][0].startswith("page 1: mark 2 moved into the free footer band")
    report = validate(FORM, output, marks, mode="vector")
    assert report["ok"], [c for c in report["checks"] if not c["ok"]]


def test_a_page_number_footer_is_fitted_only_on_the_pages_that_need_it() -> None:
    """Pages 1 and 3 have the form line, page 2 not: its footer keeps the configured layout, and the
    structure proof accepts each page's own form (a `{page}` mark is drawn per page)."""
    pdf = pikepdf.open(io.BytesIO(form_page([(72, 22, 9, FORM_LINE)], pages=3)))
    pdf.pages[1].obj.Contents = pdf.make_stream(b"BT /F1 12 Tf 72 700 Td (Page two) Tj ET")
    buf = io.BytesIO()
    pdf.save(buf)
    data = buf.getvalue()
    policy = policy_of(WatermarkSpec(), FOOTER)
    output, marks = marked(data, policy)
    assert [(page, index) for page, index, _ in marks.fitted] == [(0, 1), (2, 1)]
    assert validate(data, output, marks, mode="vector")["ok"]
    found = text_not_obscured(output, None, marks, preflight(output, policy).geometry)
    assert found["ok"] and found["pages"] == "1-3"
    assert found["fitted"][0].startswith("pages 1,3: mark 2 moved into the free footer band")


def test_a_header_on_a_rotated_page_with_offset_boxes_avoids_the_line_at_the_displayed_top(
        tmp_path: Path) -> None:
    """/Rotate 90 and a MediaBox not at the origin: the text boxes are mapped to the displayed page."""
    media = (100, 200, 712, 992)  # 612 x 792 user space; displayed 792 wide, 612 tall
    # the displayed top edge is the user-space left edge (x = 100): a line running up the page near it,
    # its glyphs' tops toward that edge
    data = form_page([], media=media, rotate=90)
    pdf = pikepdf.open(io.BytesIO(data))
    pdf.pages[0].obj.Contents = pdf.make_stream(
        f"BT /F1 9 Tf 0 1 -1 0 122 500 Tm ({FORM_LINE}) Tj ET".encode("latin-1"))
    buf = io.BytesIO()
    pdf.save(buf)
    data = buf.getvalue()
    header = dataclasses.replace(FOOTER, position="header", text="Issued to {recipient}")
    policy = policy_of(WatermarkSpec(), header)
    unfitted, plain = marked(data, policy, fit=False)
    assert not text_not_obscured(unfitted, None, plain, preflight(unfitted, policy).geometry)["ok"]
    output, marks = marked(data, policy)
    assert len(marks.fitted) == 1 and isinstance(marks.fitted[0][2], EdgeFitSpec)
    assert text_not_obscured(output, None, marks, preflight(output, policy).geometry)["ok"]
    x0, top, x1, bottom = line_box(data, tmp_path, "Form")
    assert bottom < 40  # poppler sees the line at the displayed top
    assert region_changed(render(data, tmp_path, "in"), render(output, tmp_path, "out"),
                          (x0, top, x1, bottom)) == 0
    assert validate(data, output, marks, mode="vector")["ok"]


def _with_content(data: bytes, content: bytes, **xobjects: pikepdf.Stream) -> bytes:
    pdf = pikepdf.open(io.BytesIO(data))
    page = pdf.pages[0].obj
    page.Contents = pdf.make_stream(content)
    for name, form in xobjects.items():
        page.Resources.XObject = pikepdf.Dictionary({f"/{name}": pdf.copy_foreign(form)})
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def test_text_a_form_xobject_draws_is_found_where_the_form_puts_it() -> None:
    scratch = pikepdf.open(io.BytesIO(FORM))
    font = scratch.pages[0].obj.Resources.Font.F1
    form = scratch.make_stream(f"BT /F1 4.5 Tf 0 0 Td ({FORM_LINE}) Tj ET".encode("latin-1"),
                               Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form, BBox=[0, 0, 200, 20],
                               Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)))
    data = _with_content(FORM, b"q 2 0 0 2 72 22 cm /Fm Do Q", Fm=form)  # the line as before, via a form
    policy = policy_of(WatermarkSpec(), FOOTER)
    planted, plain = marked(data, policy, fit=False)
    assert not text_not_obscured(planted, None, plain, preflight(planted, policy).geometry)["ok"]
    output, marks = marked(data, policy)
    assert isinstance(marks.fitted[0][2], EdgeFitSpec)
    assert text_not_obscured(output, None, marks, preflight(output, policy).geometry)["ok"]
    assert validate(data, output, marks, mode="vector")["ok"]


def test_the_band_keeps_clear_of_a_rule_line_where_one_holds_the_footer() -> None:
    """A form line 40 pt up and a rule 20 pt up: the footer goes below the rule, not over it."""
    data = _with_content(FORM, f"BT /F1 9 Tf 72 40 Td ({FORM_LINE}) Tj ET 1 w 50 20 m 560 20 l S".encode())
    policy = policy_of(WatermarkSpec(), FOOTER)
    output, marks = marked(data, policy)
    ((_, _, spec),) = marks.fitted
    assert isinstance(spec, EdgeFitSpec) and spec.edge_margin == MIN_MARGIN_PT
    outline = mark_outline(marks.on_page(0, 1)[1])
    geo = preflight(data, policy).geometry[0]
    (quad,) = mark_quads(outline, spec, geo)
    assert max(y for _, y in quad) < 19.5  # below the rule's stroke
    assert text_not_obscured(output, None, marks, preflight(output, policy).geometry)["ok"]


def test_the_outline_placement_uses_is_the_one_the_engine_draws() -> None:
    """A static text, a `{page}` layout and a logo: the extent mark_outline gives is ArtShop's."""
    uri = "data:image/png;base64," + base64.b64encode(_png()).decode()
    logo = WatermarkSpec(image=uri, position="header")
    marks = MarkSet.of(policy_of(WatermarkSpec(text="DRAFT"), FOOTER, logo))
    drawn = marks.on_page(6, 12)
    assert [m.per_page for m in drawn] == [False, True, False]
    for mark in drawn:
        assert mark_outline(mark) == ArtShop(pikepdf.new()).art(mark).outline, mark.index


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGBA", (40, 20), (0, 0, 200, 255)).save(buf, "PNG")
    return buf.getvalue()


def test_a_page_too_large_to_walk_counts_as_text_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_boxes, "_MAX_OBJECTS", 1)
    output, marks = marked(FORM, policy_of(WatermarkSpec(), FOOTER))
    assert [spec.opacity for _, _, spec in marks.fitted] == [0.6]  # no band: reduced
    assert validate(FORM, output, marks, mode="vector")["ok"]


# a page number 6 pt from the edge below the form's line: no band between them holds the footer
NO_BAND = form_page([(72, 6, 9, "Page 1 of 1"), (72, 22, 9, FORM_LINE), (72, 700, 12, "Body text")])


def test_no_free_band_reduce_draws_the_footer_at_its_legible_opacity() -> None:
    policy = policy_of(WatermarkSpec(), FOOTER)
    output, marks = marked(NO_BAND, policy, "reduce")
    ((_, _, spec),) = marks.fitted
    assert not isinstance(spec, EdgeFitSpec) and spec.opacity == legible_opacity(FOOTER) == 0.6
    found = text_not_obscured(output, None, marks, preflight(output, policy).geometry)
    assert found["ok"] and found["fitted"] == ["page 1: mark 2 opacity 0.9 -> 0.6 (legible)"]
    assert validate(NO_BAND, output, marks, mode="vector")["ok"]


def test_no_free_band_refuse_is_a_coded_refusal() -> None:
    with pytest.raises(UnsupportedFeature) as refused:
        marked(NO_BAND, policy_of(WatermarkSpec(), FOOTER), "refuse")
    assert refused.value.code == "unsupported_feature"
    assert "page 1" in refused.value.message and "obscure = refuse" in refused.value.message
    assert FORM_LINE not in refused.value.message  # never the document's text


def test_no_free_band_allow_places_it_as_configured_and_says_so() -> None:
    policy = policy_of(WatermarkSpec(), FOOTER)
    output, marks = marked(NO_BAND, policy, "allow")
    assert marks.fitted == ()
    found = text_not_obscured(output, None, marks, preflight(output, policy).geometry)
    assert found["ok"] and found["allowed"] == ["page 1: mark 2 (opacity 0.9, legible up to 0.6) covers 1 "
                                                "text objects"]
    refused = text_not_obscured(output, None, dataclasses.replace(marks, obscure="refuse"),
                                preflight(output, policy).geometry)
    assert not refused["ok"]


def test_an_opaque_diagonal_over_text_is_reduced_and_a_planted_one_fails() -> None:
    diagonal = WatermarkSpec(text="COPY", opacity=0.9, color=(0.0, 0.0, 0.0))
    page = form_page([(72, y, 12, "A line of body text across the page, left to right") for y in
                      range(100, 700, 40)])
    policy = policy_of(diagonal)
    planted, plain = marked(page, policy, fit=False)
    bad = text_not_obscured(planted, None, plain, preflight(planted, policy).geometry)
    assert not bad["ok"]
    assert bad["failures"][0].startswith("page 1: mark 1 (opacity 0.9, legible up to 0.544)")
    output, marks = marked(page, policy)
    assert [spec.opacity for _, _, spec in marks.fitted] == [0.544]
    assert text_not_obscured(output, None, marks, preflight(output, policy).geometry)["ok"]
    assert validate(page, output, marks, mode="vector")["ok"]


def test_faint_marks_and_policies_from_before_the_rule_read_nothing() -> None:
    """The default mark (0.25 red) cannot hide text: no page is read (the bytes are not even a PDF);
    a policy frozen before `obscure` existed is drawn as configured and its check says why it passes."""
    geos = preflight(FORM, policy_of(WatermarkSpec())).geometry
    faint = dataclasses.replace(MarkSet.of(policy_of(WatermarkSpec())), obscure="refuse")
    assert fit_marks(faint, b"not a pdf", None, geos) is faint
    legacy = dataclasses.replace(MarkSet.of(policy_of(WatermarkSpec(), FOOTER)), obscure=None)
    assert fit_marks(legacy, b"not a pdf", None, geos) is legacy
    output, _ = marked(FORM, policy_of(WatermarkSpec(), FOOTER), None)
    found = text_not_obscured(output, None, legacy, geos)
    assert found["ok"] and found["rule"].startswith("none")


def _wcag(opacity: float, rgb: tuple[float, float, float]) -> float:
    """WCAG 2 contrast of black text on white paper seen through an overlay of `rgb` at `opacity`."""
    def lum(c: tuple[float, ...]) -> float:
        lin = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    paper = tuple(1 - opacity + opacity * v for v in rgb)
    ink = tuple(opacity * v for v in rgb)
    return (lum(paper) + 0.05) / (lum(ink) + 0.05)


@pytest.mark.parametrize(("rgb", "limit"), [((0.0, 0.0, 0.0), 0.544), ((0.25, 0.25, 0.25), 0.6),
                                            ((0.8, 0.0, 0.0), 0.525), ((1.0, 1.0, 1.0), 0.465)])
def test_the_legible_limit_is_the_last_opacity_with_aa_contrast(rgb: tuple[float, float, float],
                                                                 limit: float) -> None:
    spec = WatermarkSpec(color=rgb, opacity=limit)
    assert legible_opacity(spec) == limit and not can_hide_text(spec)
    assert _wcag(limit, rgb) >= MIN_CONTRAST > _wcag(limit + 0.002, rgb)
    assert can_hide_text(dataclasses.replace(spec, opacity=limit + 0.002))
    assert not can_hide_text(WatermarkSpec())  # the default mark never needs the page's text
    assert MIN_EM_PT == 6.0


def test_the_class_key_obscure(tmp_path: Path) -> None:
    config = tmp_path / "docfence.toml"
    config.write_text('[classes.forms]\nobscure = "refuse"\n[classes.plain]\nmode = "vector"\n')
    settings = load_settings(env={"DOCFENCE_CONFIG": str(config)})
    assert settings.document_class("forms").obscure == "refuse"
    assert settings.document_class("plain").obscure == "reduce"
    config.write_text('[classes.forms]\nobscure = "hide"\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(env={"DOCFENCE_CONFIG": str(config)})
    assert refused.value.message == ("[classes.forms]: obscure='hide': allowed: refuse, reduce, allow "
                                     "for class forms")


@pytest.mark.parametrize("mode", ["vector", "raster"])
def test_watermark_document_fits_the_footer_and_its_report_proves_it(mode: str, tmp_path: Path) -> None:
    # lossless pages, so the footer's pixels cannot bleed into the line through the encoding
    policy = policy_of(WatermarkSpec(), FOOTER).evolve(mode=Mode(mode), dpi=100, raster_encoding="png")
    result = engines.watermark_document(FORM, policy)
    (found,) = [c for c in result.validation["checks"] if c["name"] == "text_not_obscured"]
    assert found["ok"] and found["rule"] == "reduce" and found["fitted"][0].startswith("page 1: mark 2 moved")
    x0, top, x1, bottom = line_box(FORM, tmp_path, "Form")
    before, after = render(FORM, tmp_path, "in"), render(result.output, tmp_path, "out")
    assert region_changed(before, after, (0, bottom + 1, 612, 792)) > 200  # the footer, below the line
    line = (x0, top, x1, bottom)
    if mode == "vector":
        assert region_changed(before, after, line) == 0
        return
    # raster: the page is resampled, so it is compared with the same page rasterised without the footer
    bare = render(engines.watermark_document(FORM, policy_of(WatermarkSpec()).evolve(
        mode=Mode.RASTER, dpi=100, raster_encoding="png")).output, tmp_path, "bare")
    old = engines.watermark_document(FORM, policy.evolve(obscure=None)).output
    assert region_changed(bare, after, line) == 0
    assert region_changed(bare, render(old, tmp_path, "old"), line) > 50


def test_watermark_document_refuses_where_the_class_refuses() -> None:
    policy = policy_of(WatermarkSpec(), FOOTER).evolve(obscure="refuse")
    with pytest.raises(UnsupportedFeature):
        engines.watermark_document(NO_BAND, policy)
    assert JobPolicy.from_dict(policy.to_dict()).obscure == "refuse"
    # the default is not stored (the release before the rule refuses fields it does not know): a policy
    # without the field, stored before the rule or by this release, reads as the default
    default = policy.evolve(obscure="reduce").to_dict()
    assert "obscure" not in default and JobPolicy.from_dict(default).obscure == "reduce"

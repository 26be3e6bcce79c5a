"""Several marks per job: dynamic fields (the footer says "7/20" on page 7), static marks shared as one
form, image marks (PNG with alpha, SVG kept vector), raster compositing, and policies frozen before
marks existed. Fixtures are generated in code."""

from __future__ import annotations

import base64
import io

import pikepdf
import pypdfium2 as pdfium
import pytest
from PIL import Image

from docfence import engines
from docfence.core.errors import ConfigError
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines.mark_art import check_image
from docfence.engines.mark_obscure import fit_marks
from docfence.engines.marks import MarkSet
from docfence.engines.outline_text import outline_text
from docfence.engines.preflight import preflight
from docfence.engines.validate import validate
from docfence.engines.vector import apply_vector, save
from docfence.samples import pdfs

FOOTER = "{recipient} · {date} · {job_id} · {page}/{pages}"
VALUES = {"recipient": "Dr. Ada Example", "date": "2026-12-01", "job_id": "job123", "tenant": "acme",
          "sha8": "0123abcd", "datetime": "2026-12-01 09:30 UTC", "purpose": "", "reference": ""}
SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="120" height="60" viewBox="0 0 120 60">'
       b'<rect x="2" y="2" width="116" height="56" rx="8" fill="#1d4ed8"/>'
       b'<circle cx="30" cy="30" r="18" fill="#fbbf24"/></svg>')


def png_logo() -> bytes:
    img = Image.new("RGBA", (60, 30), (0, 0, 0, 0))
    img.paste((20, 120, 40, 255), (5, 5, 55, 25))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def uri(kind: str, data: bytes) -> str:
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def two_marks(**footer: object) -> JobPolicy:
    spec = WatermarkSpec.from_mapping({"text": FOOTER, "position": "footer", "opacity": 0.9, **footer})
    return JobPolicy(watermark=WatermarkSpec(), marks=(spec,), fields=dict(VALUES))


def run(data: bytes, policy: JobPolicy) -> tuple[bytes, dict[str, object]]:
    """The vector engine and the validator as watermark_document runs them: the marks fitted to each
    page's text first (a mark opaque enough to hide it is moved or made fainter), then drawn."""
    opened = preflight(data, policy)
    marks = fit_marks(MarkSet.of(policy), data, None, opened.geometry)
    apply_vector(opened, marks)
    output = save(opened.pdf, opened.encrypted)
    return output, validate(data, output, marks, mode="vector")


def failed(report: dict[str, object]) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["ok"]}  # type: ignore[attr-defined, index]


def drawn_number(page: pikepdf.Page, mark: int = 1) -> str:
    """The page number mark `mark` draws on `page`, read back from the forms its content places in
    order: every form that is the outline of one digit, joined."""
    import re

    form = page.obj.Resources.XObject[f"/DfWm{mark}"]
    digits = {outline_text(d).ops: d for d in "0123456789"}
    names = re.findall(rb"(/[SD]\d+) Do", form.read_bytes())
    return "".join(digits.get(form.Resources.XObject[n.decode()].read_bytes(), "") for n in names)


def test_footer_says_its_page_number_on_every_page_and_validates() -> None:
    data = pdfs.many_pages(20)
    output, report = run(data, two_marks())
    assert report["ok"], failed(report)
    with pikepdf.open(io.BytesIO(output)) as pdf:
        assert [drawn_number(pdf.pages[n]) for n in range(20)] == [str(n + 1) for n in range(20)]
        diagonal = {pdf.pages[i].obj.Resources.XObject.DfWm0.objgen for i in range(20)}
        assert len(diagonal) == 1  # the static mark: one shared form for every page of this geometry
        footers = {pdf.pages[i].obj.Resources.XObject.DfWm1.objgen for i in range(20)}
        assert len(footers) == 20  # the {page} mark: a form per page
        forms = [pdf.pages[i].obj.Resources.XObject.DfWm1 for i in range(20)]
        resources = {form.Resources.objgen for form in forms}
        assert len(resources) == 1 and (0, 0) not in resources  # one shared resource dictionary...
        shared = forms[0].Resources.XObject
        assert sorted(shared.keys()) == ["/D0", "/D1", "/D2", "/D3", "/D4", "/D5", "/D6", "/D7", "/D8", "/D9",
                                         "/S0", "/S1"]  # ...naming the text before, "/20" and ten digits


def _layouts(output: bytes, pages: range) -> set[bytes]:
    """The footer forms' contents of `pages` with every digit name made alike."""
    import re

    with pikepdf.open(io.BytesIO(output)) as pdf:
        forms = [pdf.pages[n].obj.Resources.XObject.DfWm1.read_bytes() for n in pages]
    return {re.sub(rb"/D\d", b"/D#", form) for form in forms}


@pytest.mark.parametrize("text", ["Page {page}", "{page}"])
def test_a_page_number_keeps_its_place_as_its_digits_change(text: str) -> None:
    """Each digit of the page number has a slot as wide as the widest digit: pages whose numbers have as
    many digits lay the line out alike (the footer does not shift from page to page) and differ only in
    the digits they draw."""
    output, report = run(pdfs.many_pages(12), two_marks(text=text))
    assert report["ok"], failed(report)
    with pikepdf.open(io.BytesIO(output)) as pdf:
        assert [drawn_number(pdf.pages[n]) for n in range(12)] == [str(n + 1) for n in range(12)]
    one, two = _layouts(output, range(9)), _layouts(output, range(9, 12))
    assert len(one) == 1 and len(two) == 1 and one != two


def test_digits_of_unequal_widths_are_centred_in_equal_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """A font whose digits are not all as wide (here a "1" 200 units narrower): each digit is drawn
    centred in a slot as wide as the widest, so the layout still holds for every page, and it validates."""
    from docfence.engines import mark_art
    from docfence.engines.outline_text import Outline

    def narrow_one(text: str, start: float = 0.0) -> Outline:
        if text != "1":
            return outline_text(text, start)
        drawn = outline_text(text, start)
        return Outline(drawn.ops, drawn.bbox, drawn.advance - 200)

    monkeypatch.setattr(mark_art, "outline_text", narrow_one)
    output, report = run(pdfs.many_pages(12), two_marks(text="Page {page}"))
    assert report["ok"], failed(report)
    assert len(_layouts(output, range(9))) == 1
    with pikepdf.open(io.BytesIO(output)) as pdf:
        one = pdf.pages[0].obj.Resources.XObject.DfWm1.Resources.XObject.D1.read_bytes()
    assert one == outline_text("1", 100.0).ops != outline_text("1").ops  # moved right by half of 200


def test_marks_keep_to_their_own_pages() -> None:
    data = pdfs.many_pages(6)
    policy = two_marks(pages="2-3")
    output, report = run(data, policy)
    assert report["ok"], failed(report)
    with pikepdf.open(io.BytesIO(output)) as pdf:
        has = [("/DfWm1" in pdf.pages[i].obj.Resources.XObject) for i in range(6)]
    assert has == [False, True, True, False, False, False]


def test_a_policy_frozen_before_marks_loads_and_draws_its_text_literally() -> None:
    stored = JobPolicy(watermark=WatermarkSpec(text="DRAFT {v2}")).to_dict()
    assert "marks" not in stored and "fields" not in stored
    policy = JobPolicy.from_dict(stored)
    assert policy.fields is None and policy.marks == ()
    (mark,) = MarkSet.of(policy).on_page(0, 1)
    assert mark.text == "DRAFT {v2}" and not mark.per_page
    again = JobPolicy.from_dict(two_marks().to_dict())
    assert again == two_marks()


def test_unknown_fields_and_stray_braces_are_refused_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"\{recipent\}"):
        WatermarkSpec.from_mapping({"text": "for {recipent}"})
    with pytest.raises(ConfigError, match="stray"):
        WatermarkSpec.from_mapping({"text": "for {recipient"})
    assert WatermarkSpec.from_mapping({"text": "{{literal}} {page}"}).fields == ("page",)


@pytest.mark.parametrize("kind", ["png", "svg+xml"])
def test_image_marks_validate_in_vector_mode(kind: str) -> None:
    data = pdfs.many_pages(4)
    image = uri(kind, png_logo() if kind == "png" else SVG)
    logo = WatermarkSpec(image=image, position="header", opacity=0.6, font_size=40)
    policy = JobPolicy(watermark=WatermarkSpec(), marks=(logo,), fields=dict(VALUES))
    output, report = run(data, policy)
    assert report["ok"], failed(report)
    with pikepdf.open(io.BytesIO(output)) as pdf:
        art = pdf.pages[0].obj.Resources.XObject.DfWm1.Resources.XObject.DfText
        inner = art.Resources.XObject.DfArt
        if kind == "png":
            assert inner.Subtype == pikepdf.Name.Image and "/SMask" in inner  # alpha kept as a soft mask
        else:
            assert inner.Subtype == pikepdf.Name.Form  # SVG stays vector: paths, no image
            assert b" re" in inner.read_bytes() or b" c\n" in inner.read_bytes()


def test_image_marks_composite_in_raster_mode() -> None:
    data = pdfs.many_pages(3)
    logo = WatermarkSpec(image=uri("svg+xml", SVG), position="center", opacity=1.0, font_size=200)
    policy = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(text="{page}/{pages}"),
                       marks=(logo,), fields=dict(VALUES))
    result = engines.watermark_document(data, policy)
    assert result.validation["ok"]
    doc = pdfium.PdfDocument(result.output)
    try:
        img = doc[1].render(scale=1).to_pil().convert("RGB")
    finally:
        doc.close()
    w, h = img.size
    r, g, b = img.getpixel((w // 2 - 170, h // 2))  # in the logo's blue rectangle, left of its circle
    assert b > 150 and r < 100, (r, g, b)


@pytest.mark.parametrize(("svg", "message"), [
    (b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
     b'<image href="file:///etc/passwd" width="10" height="10"/></svg>', "reference"),
    (b'<svg xmlns="http://www.w3.org/2000/svg" width="90" height="20"><text y="15">Hi</text></svg>', "text"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "width and height"),
    (b"not xml", "well-formed"),
])
def test_unsafe_or_unsupported_svg_is_refused(svg: bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_image(uri("svg+xml", svg))


def test_a_png_that_is_not_a_png_is_refused() -> None:
    with pytest.raises(ConfigError, match="PNG"):
        check_image(uri("png", b"GIF89a not really"))


def test_the_local_cli_builds_marks_and_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import argparse

    from docfence.cli import watermark as cli

    logo = tmp_path / "logo.svg"
    logo.write_bytes(SVG)
    args = argparse.Namespace(text="CONFIDENTIAL", position="diagonal", pages="all", opacity=0.25,
                              mode="vector", dpi=150, owner_password_policy="refuse",
                              timezone="Europe/Berlin",
                              recipient="Dr. Ada Example", purpose=None, reference=None,
                              mark=['{"text": "{recipient} · {page}/{pages}", "position": "footer"}',
                                    f'{{"image": "{logo}", "position": "header"}}'])
    policy = cli.for_file(cli.build_policy(args), b"%PDF-1.4 x")
    assert policy.fields is not None and policy.fields["recipient"] == "Dr. Ada Example"
    assert policy.fields["job_id"] == "local" and len(policy.fields["sha8"]) == 8
    assert policy.marks[1].image is not None and policy.marks[1].image.startswith("data:image/svg+xml")
    args.recipient = None
    with pytest.raises(ConfigError, match="mark 2 draws nothing"):
        cli.build_policy(argparse.Namespace(**{**vars(args), "mark": ['{"text": "{recipient}"}']}))

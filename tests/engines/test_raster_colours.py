"""Raster colours kept: CIEDE2000 against published test data; on a page of black text under a red
mark the text stays black (judged on poppler's render of the input and the output's image as pikepdf
decodes it); a page with more flat colours than 16 entries hold moves up to a larger palette; every
encoding ladder ends in a step taken as it is; the output stays at least 2x smaller than RGB JPEG q85."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
import pikepdf
import pytest
from PIL import Image, ImageFilter, ImageOps

from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import raster, watermark_document
from docfence.engines.colour_difference import (
    COLOUR_BOUND_DE99,
    SAMPLE,
    ciede2000,
    lab,
    percentile_difference,
)
from docfence.engines.geometry import page_geometry
from docfence.engines.mark_pixels import coverage_mask
from docfence.engines.marks import MarkSet
from docfence.samples import pdfs

# Sharma, Wu and Dalal (2005), Table 1: (L1, a1, b1, L2, a2, b2, ΔE00), pairs 1-4, 7, 13, 17-22, 25, 26
SHARMA = [
    (50.0, 2.6772, -79.7751, 50.0, 0.0, -82.7485, 2.0425),
    (50.0, 3.1571, -77.2803, 50.0, 0.0, -82.7485, 2.8615),
    (50.0, 2.8361, -74.0200, 50.0, 0.0, -82.7485, 3.4412),
    (50.0, -1.3802, -84.2814, 50.0, 0.0, -82.7485, 1.0000),
    (50.0, 0.0, 0.0, 50.0, -1.0, 2.0, 2.3669),
    (50.0, 2.4900, -0.0010, 50.0, -2.4900, 0.0009, 7.1792),
    (50.0, 2.5, 0.0, 73.0, 25.0, -18.0, 27.1492),
    (50.0, 2.5, 0.0, 61.0, -5.0, 29.0, 22.8977),
    (50.0, 2.5, 0.0, 56.0, -27.0, -3.0, 31.9030),
    (50.0, 2.5, 0.0, 58.0, 24.0, 15.0, 19.4535),
    (50.0, 2.5, 0.0, 50.0, 3.1736, 0.5854, 1.0000),
    (50.0, 2.5, 0.0, 50.0, 3.2972, 0.0, 1.0000),
    (60.2574, -34.0099, 36.2677, 60.4626, -34.1751, 39.4387, 1.2644),
    (63.0109, -31.0961, -5.8663, 62.8187, -29.7946, -4.0864, 1.2630),
]
DPI = 100  # the resolution the brown text was seen at
BLACK_TEXT = JobPolicy(mode=Mode.RASTER, dpi=DPI, watermark=WatermarkSpec())  # red, 25 %, diagonal


def test_ciede2000_matches_the_published_pairs_both_ways() -> None:
    pairs = np.array(SHARMA)
    first, second, expected = pairs[:, :3], pairs[:, 3:6], pairs[:, 6]
    assert np.abs(ciede2000(first, second) - expected).max() < 1e-4
    assert np.abs(ciede2000(second, first) - expected).max() < 1e-4


def test_lab_of_srgb_white_black_and_red() -> None:
    got = lab(np.array([[255, 255, 255], [0, 0, 0], [255, 0, 0]]))
    assert np.abs(got - [[100.0, 0.0, 0.0], [0.0, 0.0, 0.0], [53.24, 80.09, 67.20]]).max() < 0.01


def test_black_shown_brown_is_far_outside_the_bound() -> None:
    black, brown = lab(np.array([0, 0, 0])), lab(np.array([108, 58, 58]))
    assert float(ciede2000(black, brown)) > 2.5 * COLOUR_BOUND_DE99


def _pixels(colours: list[tuple[int, int, int]], width: int = 100) -> Image.Image:
    img = Image.new("RGB", (width, len(colours) // width))
    img.putdata(colours)
    return img


def test_percentile_counts_every_pixel_and_only_the_kept_ones() -> None:
    before = _pixels([(0, 0, 0)] * 10_000)
    after = _pixels([(0, 0, 0)] * 9_850 + [(108, 58, 58)] * 150)  # 1.5 % moved
    assert percentile_difference(before, before) == 0.0
    assert percentile_difference(before, after) == pytest.approx(27.86, abs=0.01)
    assert percentile_difference(before, after, percentile=98.0) == 0.0
    keep = _pixels([(255, 255, 255)] * 9_800 + [(0, 0, 0)] * 200).convert("L")  # the moved ones left out
    assert percentile_difference(before, after, keep) == 0.0
    assert percentile_difference(before, after, Image.new("L", before.size, 0)) == 0.0


def test_percentile_of_many_changed_pixels_is_the_exact_ones_within_sampling() -> None:
    rng = np.random.default_rng(7)
    before = rng.integers(0, 256, (200, 400, 3), dtype=np.uint8)
    after = np.clip(before.astype(int) + rng.integers(-12, 13, before.shape), 0, 255).astype(np.uint8)
    assert before.shape[0] * before.shape[1] > 4 * SAMPLE  # the sampled branch runs
    exact = np.percentile(ciede2000(lab(before.reshape(-1, 3)), lab(after.reshape(-1, 3))), 99)
    got = percentile_difference(Image.fromarray(before), Image.fromarray(after))
    assert got == pytest.approx(exact, rel=0.03)
    assert got == percentile_difference(Image.fromarray(before), Image.fromarray(after))  # same seed


@pytest.fixture(scope="module")
def black_text() -> tuple[bytes, bytes]:
    data = pdfs.many_pages(1)
    return data, watermark_document(data, BLACK_TEXT).output


def _poppler(data: bytes, tmp: Path) -> Image.Image:
    (tmp / "in.pdf").write_bytes(data)
    subprocess.run(["pdftoppm", "-r", str(DPI), "-png", "-singlefile", str(tmp / "in.pdf"), str(tmp / "p")],
                   check=True, timeout=60)
    return Image.open(tmp / "p.png").convert("RGB")


def _page_image(output: bytes) -> Image.Image:
    with pikepdf.open(io.BytesIO(output)) as pdf:
        return pikepdf.PdfImage(pdf.pages[0].Resources.XObject.DfIm).as_pil_image().convert("RGB")


def test_black_text_under_a_red_mark_stays_black(black_text: tuple[bytes, bytes], tmp_path: Path) -> None:
    """Where poppler draws the input's text solid black, away from the mark, the output's image (as
    pikepdf decodes it) is black within the bound, not brown or gray (the median: two renderers place
    a glyph's edge pixels apart, so some of poppler's black pixels are pdfium's paper)."""
    data, output = black_text
    reference, shown = _poppler(data, tmp_path), _page_image(output)
    width, height = min(reference.width, shown.width), min(reference.height, shown.height)
    reference, shown = reference.crop((0, 0, width, height)), shown.crop((0, 0, width, height))
    with pikepdf.open(io.BytesIO(data)) as pdf:
        geo = page_geometry(pdf.pages[0].obj)
    mark = coverage_mask(geo, MarkSet.of(BLACK_TEXT).on_page(0, 1), (width, height))
    away = ImageOps.invert(mark.point(lambda v: 255 if v else 0).filter(ImageFilter.MaxFilter(9)))
    ink = np.asarray(reference).max(axis=2) <= 16
    counted = ink & (np.asarray(away) > 0)
    assert counted.sum() > 1000, counted.sum()  # enough solid text outside the mark to judge
    black = lab(np.zeros((int(counted.sum()), 3)))
    found = ciede2000(black, lab(np.asarray(shown)[counted]))
    assert np.median(found) <= COLOUR_BOUND_DE99, np.median(found)


def test_black_text_page_stays_twice_smaller_than_rgb_jpeg(black_text: tuple[bytes, bytes]) -> None:
    data, output = black_text
    import pypdfium2 as pdfium

    naive = raster.naive_jpeg_size(pdfium.PdfDocument(data)[0].render(scale=DPI / 72).to_pil())
    assert len(output) * 2 <= naive, (len(output), naive)
    with pikepdf.open(io.BytesIO(output)) as pdf:
        assert int(pdf.pages[0].Resources.XObject.DfIm.BitsPerComponent) == 4  # still a 16-colour page


def _blocks(count: int) -> Image.Image:
    """A page-like image of `count` flat blocks on white, each in its own colour of the 3 x 3 x 3 grid
    of levels 0, 128, 255 (any two at least ~20 apart in ΔE2000)."""
    grid = [(r, g, b) for r in (0, 128, 255) for g in (0, 128, 255) for b in (0, 128, 255)][:-1]
    img = Image.new("RGB", (400, 40 * count + 40), "white")
    for n in range(count):
        img.paste(grid[n], (20, 20 + 40 * n, 380, 50 + 40 * n))
    return img


def test_more_flat_colours_than_sixteen_entries_move_up_to_a_larger_palette() -> None:
    """24 flat blocks (each ~3 % of the page): a 16-colour palette must merge some of them, so the
    page is encoded with 256 entries and every block keeps its colour; 12 blocks keep 16 entries."""
    for count, bits in ((24, 8), (12, 4)):
        img = _blocks(count)
        encoded = raster.encode(img, "palette")
        assert (encoded.colour_space, encoded.bits) == ("/Indexed", bits), count
        pdf = pikepdf.new()
        raster.add_image_page(pdf, encoded, (400.0, img.height))
        shown = pikepdf.PdfImage(pdf.pages[0].Resources.XObject.DfIm).as_pil_image().convert("RGB")
        assert percentile_difference(img, shown) <= COLOUR_BOUND_DE99


def test_each_ladder_ends_in_a_step_taken_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a bound nothing meets, a text page climbs its whole ladder to lossless RGB, and a photo-like
    page to lossless too; an explicit JPEG policy stays JPEG."""
    monkeypatch.setattr(raster, "_ENGINE_DE99", -1.0)
    import pypdfium2 as pdfium

    text = raster._render(pdfium.PdfDocument(pdfs.many_pages(1)), 0, 36)
    noise = Image.merge("RGB", [Image.effect_noise(text.size, 100) for _ in range(3)])
    assert raster.classify(text) == "gray" and raster.classify(noise) == "jpeg"
    for img in (text, noise):
        assert raster.encode(img, "auto").colour_space == "/DeviceRGB"
        assert raster.encode(img, "auto").filter == "/FlateDecode"
    assert raster.encode(noise, "jpeg").filter == "/DCTDecode"


def test_explicit_gray_policy_on_coloured_text_validates() -> None:
    """A gray policy asks for the colour to go: a page with no colour left is held to the source's
    lightness, so the colour check does not refuse red text the policy turned gray."""
    with pikepdf.open(io.BytesIO(pdfs.many_pages(1))) as pdf:
        page = pdf.pages[0].obj
        page.Contents.write(b"0.8 0 0 rg\n" + page.Contents.read_bytes())
        buf = io.BytesIO()
        pdf.save(buf)
    policy = JobPolicy(mode=Mode.RASTER, dpi=DPI, raster_encoding="gray", watermark=WatermarkSpec())
    result = watermark_document(buf.getvalue(), policy)
    assert result.validation["ok"], result.validation
    with pikepdf.open(io.BytesIO(result.output)) as out:
        assert out.pages[0].Resources.XObject.DfIm.ColorSpace == pikepdf.Name.DeviceGray


def test_a_mark_covering_the_page_leaves_the_palette_its_document_colours() -> None:
    """A tiled mark at high opacity covers most of the page: the document's black still gets entries
    of its own (the marks take at most a quarter of the palette)."""
    data = pdfs.many_pages(1)
    img = raster._render(__import__("pypdfium2").PdfDocument(data), 0, DPI)
    marked = Image.new("L", img.size, 255)
    marked.paste(0, (0, 0, img.width, img.height // 8))  # only the top eighth is outside the marks
    red = Image.new("RGB", img.size, (230, 60, 60))
    blended = Image.composite(Image.blend(img, red, 0.6), img, marked)
    palette = raster.palette_for(blended, marked)
    entries = palette.getpalette() or []
    colours = [tuple(entries[i : i + 3]) for i in range(0, len(entries), 3)]
    assert (0, 0, 0) in colours and (255, 255, 255) in colours
    assert len(colours) <= 16

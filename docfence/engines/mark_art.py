"""What one mark draws, as a Form XObject in outline units (1000 per em; an image is 1000 units tall):
text as glyph outlines (a text with `{page}` as runs, so only the page number is drawn per page), a PNG
as an image XObject with its alpha as a soft mask, an SVG converted to PDF vector graphics by WeasyPrint
(already our report renderer) with every external reference refused."""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import re
from dataclasses import dataclass
from xml.etree import ElementTree

import pikepdf
import pypdfium2 as pdfium
from PIL import Image

from docfence.core.errors import ConfigError
from docfence.engines.marks import PageMark
from docfence.engines.outline_text import UNITS, Outline, outline_text

MAX_IMAGE_PIXELS = 4096 * 4096
_SPACE = UNITS * 0.3  # outline_text's advance for a space


SLOT = "\x00"  # in `Art.draw`: where one digit of the page number goes (see `fill_slots`)


@dataclass(frozen=True)
class Art:
    """What a mark draws as forms placed along the line (x offset in outline units, form), and its
    extent (the layout reads `outline.bbox`, `.width`, `.height`). Static text and images are one form;
    text with `{page}` is its static runs' forms plus one shared form per digit of the page number, so
    each page adds only the few bytes that place them. Such an art is a template shared by every page
    whose page number has as many digits: `draw` names each digit's form `/D` + SLOT, filled per page."""

    pieces: tuple[tuple[float, pikepdf.Stream], ...]  # a single form's (its `form`); () for runs
    outline: Outline
    draw: str = "/DfText Do"  # the operators drawing the pieces, by the names of `named`
    named: tuple[tuple[str, pikepdf.Stream], ...] = ()  # resource name -> form (each form once)
    key: tuple[str, ...] = ()  # when set: every art of this key names the same forms (shareable)
    slots: int = 0  # how many page-number digits `draw` takes (the SLOTs in it)

    @property
    def form(self) -> pikepdf.Stream:
        return self.pieces[0][1]

    @classmethod
    def single(cls, form: pikepdf.Stream, outline: Outline) -> Art:
        """One form at the origin, drawn as `/DfText`, as a single mark has always been drawn."""
        return cls(((0.0, form),), outline, "/DfText Do", (("/DfText", form),))


def fill_slots(parts: tuple[str, ...], digits: str) -> str:
    """`parts` (a text split at its SLOTs) joined with one digit of `digits` in each slot."""
    if len(digits) != len(parts) - 1 or not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{len(parts) - 1} page-number slots cannot take {digits!r}")
    return "".join([part + digit for part, digit in zip(parts[:-1], digits, strict=True)]) + parts[-1]


def page_digits(mark: PageMark) -> str:
    """The page-number digits a `{page}` mark's slots take on its page, in order."""
    return "".join([text for text, per_page in mark.runs if per_page])


class ArtShop:
    """Makes each distinct piece of art once per output file, so a static mark, a run of text shared by
    every page and a logo are one object however many pages draw them."""

    def __init__(self, pdf: pikepdf.Pdf) -> None:
        self.pdf = pdf
        self._made: dict[tuple[str, str], Art] = {}
        self._layouts: dict[tuple[str | int, ...], Art] = {}  # `{page}` marks' arts, by their shape
        self._chunks: dict[str, tuple[pikepdf.Stream | None, tuple[float, float, float, float], float]] = {}
        self._named_for: dict[tuple[str, ...], Art] = {}
        self._slot: tuple[float, tuple[float, float, float, float]] | None = None
        self._shifted: dict[str, pikepdf.Stream] = {}  # digit forms centred in a wider slot

    def art(self, mark: PageMark) -> Art:
        spec = mark.spec
        if spec.image is not None:
            return self._once(("image", spec.image), lambda: self._image(spec.image or ""))
        if not mark.per_page:
            return self._once(("text", mark.text), lambda: self._text(mark.text))
        # keyed by the layout: the static runs' texts and how many digits each page-number run has
        shape = tuple([len(text) if per_page else text for text, per_page in mark.runs])
        made = self._layouts.get(shape)
        if made is None:
            made = self._layouts[shape] = self._runs(shape)
        return made

    def _once(self, key: tuple[str, str], make: object) -> Art:
        if key not in self._made:
            self._made[key] = make()  # type: ignore[operator]
        return self._made[key]

    def form(self, content: bytes, bbox: tuple[float, ...], resources: pikepdf.Object) -> pikepdf.Stream:
        return self.pdf.make_stream(content, Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form,
                                    BBox=pikepdf.Array([round(v, 4) for v in bbox]), Resources=resources)

    def _text(self, text: str) -> Art:
        outline = outline_text(text)
        return Art.single(self.form(outline.ops, _pad(outline.bbox), pikepdf.Dictionary()), outline)

    def _runs(self, shape: tuple[str | int, ...]) -> Art:
        """Runs laid end to end: a static run is one shared form (`/S<k>`), each digit of the page number
        a slot as wide as the widest digit, drawing one of ten shared forms (`/D<digit>`, centred in the
        slot): a footer "7/20" draws the form of the text before it, of "7" and of "/20". Every page whose
        number has as many digits gets the same layout (so the line does not shift as the digits change)
        and differs only in the digit names; every page of the mark names the same set of forms, so its
        forms share one resource dictionary (`Art.key`). The extent counts each slot as the union of
        all ten digits in it."""
        statics = tuple(part for part in shape if isinstance(part, str))
        named = self._named_for.get(statics)
        if named is None:
            named = self._named_for[statics] = self._named(statics)
        width, (s0, s1, s2, s3) = self._digit_slot()
        x, ops, k, slots = 0.0, [], 0, 0
        x0 = y0 = float("inf")
        x1 = y1 = float("-inf")
        for part in shape:
            if isinstance(part, int):
                for _ in range(part):
                    ops.append(f"q 1 0 0 1 {x:.1f} 0 cm /D{SLOT} Do Q")
                    x0, y0, x1, y1 = min(x0, s0 + x), min(y0, s1), max(x1, s2 + x), max(y1, s3)
                    x, slots = x + width, slots + 1
                continue
            form, (b0, b1, b2, b3), advance = self._chunk(part)
            if form is not None:  # a blank run adds only its width
                ops.append(f"q 1 0 0 1 {x:.1f} 0 cm /S{k} Do Q")
                x0, y0, x1, y1 = min(x0, b0 + x), min(y0, b1), max(x1, b2 + x), max(y1, b3)
            x += advance
            k += 1
        if not ops:
            raise ConfigError("the mark text has nothing visible to draw")
        return Art((), Outline(b"", (x0, y0, x1, y1), x), " ".join(ops), named.named,
                   ("runs", *statics), slots)

    def _digit_slot(self) -> tuple[float, tuple[float, float, float, float]]:
        """(width, extent) of one page-number digit: the widest digit's advance, and the union of the ten
        digits' outlines, each centred in it (`_digit`)."""
        if self._slot is None:
            width = max(outline_text(d).advance for d in "0123456789")
            boxes = [outline_text(d, (width - outline_text(d).advance) / 2).bbox for d in "0123456789"]
            self._slot = (width, (min(b[0] for b in boxes), min(b[1] for b in boxes),
                                  max(b[2] for b in boxes), max(b[3] for b in boxes)))
        return self._slot

    def _digit(self, digit: str) -> pikepdf.Stream:
        """The form of one digit centred in its slot: the digit's own text form when every digit is as
        wide (tabular figures, as in DejaVu), else its outline moved right by half the difference."""
        width, _ = self._digit_slot()
        shift = (width - outline_text(digit).advance) / 2
        if not shift:
            return self._once(("text", digit), lambda: self._text(digit)).form
        if digit not in self._shifted:
            outline = outline_text(digit, shift)
            self._shifted[digit] = self.form(outline.ops, _pad(outline.bbox), pikepdf.Dictionary())
        return self._shifted[digit]

    def _chunk(self, chunk: str) -> tuple[pikepdf.Stream | None, tuple[float, float, float, float], float]:
        """(form, outline box, advance) of one static run; (None, zero box, its width) when blank."""
        found = self._chunks.get(chunk)
        if found is None:
            if not chunk.strip():
                found = (None, (0.0, 0.0, 0.0, 0.0), _SPACE * len(chunk))
            else:
                piece = self._once(("text", chunk), lambda: self._text(chunk))
                found = (piece.form, piece.outline.bbox, piece.outline.advance)
            self._chunks[chunk] = found
        return found

    def _named(self, statics: tuple[str, ...]) -> Art:
        """The forms every page of a `{page}` mark may draw: its static runs and the ten digits."""
        named = [(f"/S{k}", self._once(("text", text), lambda t=text: self._text(t)).form)
                 for k, text in enumerate(statics) if text.strip()]
        named += [(f"/D{d}", self._digit(d)) for d in "0123456789"]
        return Art((), Outline(b"", (0.0, 0.0, 0.0, 0.0)), "", tuple(named))

    def _image(self, uri: str) -> Art:
        """The image scaled to 1000 units tall, its aspect kept; an SVG stays vector graphics."""
        kind, data = decode_image(uri)
        if kind == "svg":
            with _svg_source(data) as src:  # copied whole (data too), so the source may close
                inner = self.pdf.copy_foreign(src.pages[0].as_form_xobject())
            width, height = (float(v) for v in inner.BBox[2:4])
            scale = UNITS / height
            content = f"q {scale:.6f} 0 0 {scale:.6f} 0 0 cm /DfArt Do Q\n"
        else:
            inner = _png_xobject(self.pdf, data)
            width, height = float(inner.Width), float(inner.Height)
            content = f"q {width * UNITS / height:.4f} 0 0 {UNITS:.4f} 0 0 cm /DfArt Do Q\n"
        w = width * UNITS / height
        resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(DfArt=inner))
        form = self.form(content.encode("ascii"), (0.0, 0.0, w, UNITS), resources)
        return Art.single(form, Outline(b"", (0.0, 0.0, w, UNITS), w))


def decode_image(uri: str) -> tuple[str, bytes]:
    """("png" | "svg", bytes) of a mark's data URI; ConfigError when it is neither."""
    header, _, payload = uri.partition(",")
    kind = {"data:image/png;base64": "png", "data:image/svg+xml;base64": "svg"}.get(header)
    if kind is None:
        raise ConfigError("a mark image must be a PNG or SVG data URI", field="image")
    try:
        return kind, base64.b64decode(payload, validate=True)
    except ValueError as exc:
        raise ConfigError("a mark image is not valid base64", field="image") from exc


@functools.lru_cache(maxsize=8)
def check_image(uri: str) -> tuple[float, float]:
    """Decode and convert the image once, as the engine will: (width, height) in points or pixels;
    ConfigError naming the problem (not an image, too many pixels, SVG text, external references)."""
    kind, data = decode_image(uri)
    if kind == "svg":
        # read inside the block: a page of a Pdf nobody holds is destroyed with it
        with _svg_source(data) as src:
            box = src.pages[0].mediabox
            return float(box[2]), float(box[3])
    width, height = _png_pixels(data).size
    return float(width), float(height)


def _png_pixels(data: bytes) -> Image.Image:
    try:
        img = Image.open(io.BytesIO(data))
        if img.format != "PNG":
            raise ConfigError("a mark image declared as PNG is not a PNG", field="image")
        if img.size[0] * img.size[1] > MAX_IMAGE_PIXELS:
            raise ConfigError(f"a mark image may have at most {MAX_IMAGE_PIXELS} pixels", field="image")
        img.load()
    except (OSError, Image.DecompressionBombError) as exc:
        raise ConfigError("a mark image is not a readable PNG", field="image") from exc
    return img


def _png_xobject(pdf: pikepdf.Pdf, data: bytes) -> pikepdf.Stream:
    img = _png_pixels(data)
    rgba = img.convert("RGBA")
    stream = _raw_image(pdf, rgba.convert("RGB").tobytes(), rgba.size, "/DeviceRGB")
    alpha = rgba.getchannel("A")
    if alpha.getextrema() != (255, 255):
        stream.SMask = _raw_image(pdf, alpha.tobytes(), rgba.size, "/DeviceGray")
    return stream


def _raw_image(pdf: pikepdf.Pdf, pixels: bytes, size: tuple[int, int], space: str) -> pikepdf.Stream:
    import zlib

    stream = pdf.make_stream(zlib.compress(pixels, 6))
    stream.Type, stream.Subtype = pikepdf.Name.XObject, pikepdf.Name.Image
    stream.Width, stream.Height, stream.BitsPerComponent = size[0], size[1], 8
    stream.ColorSpace = pikepdf.Name(space)
    stream.Filter = pikepdf.Name.FlateDecode
    return stream


@functools.lru_cache(maxsize=8)
def _svg_pdf(data: bytes) -> bytes:
    """The SVG drawn by WeasyPrint on a page of its own size. Cached per process, so the engine and the
    validator (which rebuilds the mark to compare) import the very same bytes."""
    from weasyprint import HTML

    from docfence.engines.report.fetch import BundleFetcher, quiet_weasyprint

    width, height = _svg_size(data)
    fetcher = BundleFetcher({"mark.svg": data})
    html = (f'<style>@page{{size:{width:.3f}px {height:.3f}px;margin:0}}body{{margin:0}}'
            f'img{{display:block;width:{width:.3f}px;height:{height:.3f}px}}</style>'
            '<img src="docfence-asset://bundle/mark.svg">')
    with quiet_weasyprint():
        pdf = HTML(string=html, base_url="docfence-asset://bundle/", url_fetcher=fetcher).write_pdf()
    if fetcher.refused:
        raise ConfigError("a mark SVG may not reference other files or URLs", field="image")
    doc = pdfium.PdfDocument(pdf)
    try:
        if len(doc) != 1:
            raise ConfigError("a mark SVG must fit on one page", field="image")
        text = doc[0].get_textpage().get_text_range().strip()
    finally:
        doc.close()
    if text:
        raise ConfigError("a mark SVG may not hold text elements: convert its text to paths", field="image")
    return bytes(pdf)


_UNIT_PX = {"": 1.0, "px": 1.0, "pt": 4 / 3, "pc": 16.0, "mm": 96 / 25.4, "cm": 96 / 2.54, "in": 96.0}
_LENGTH_RE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(px|pt|pc|mm|cm|in)?\s*")


def _svg_size(data: bytes) -> tuple[float, float]:
    """The SVG's size in CSS pixels from its root's width and height, else its viewBox."""
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise ConfigError("a mark SVG is not well-formed XML", field="image") from exc
    if not root.tag.endswith("svg"):
        raise ConfigError("a mark SVG must have <svg> as its root element", field="image")
    sizes = [_length(root.get(name)) for name in ("width", "height")]
    box = (root.get("viewBox") or "").replace(",", " ").split()
    if None in sizes and len(box) == 4:
        with contextlib.suppress(ValueError):
            sizes = [float(box[2]), float(box[3])]
    width, height = sizes
    if width is None or height is None or not (0 < width <= 10_000 and 0 < height <= 10_000):
        raise ConfigError("a mark SVG needs a width and height (or a viewBox) of 1-10000 px", field="image")
    return width, height


def _length(value: str | None) -> float | None:
    match = _LENGTH_RE.fullmatch(value or "")
    return float(match.group(1)) * _UNIT_PX[match.group(2) or ""] if match else None


def _svg_source(data: bytes) -> pikepdf.Pdf:
    """The converted SVG opened. Use it in a `with` block and read what you need inside it: its pages
    and objects are destroyed with the Pdf, so they must never outlive it (or be read off a temporary)."""
    try:
        return pikepdf.open(io.BytesIO(_svg_pdf(data)))
    except pikepdf.PdfError as exc:
        raise ConfigError("a mark SVG could not be converted", field="image") from exc


def _pad(bbox: tuple[float, float, float, float]) -> tuple[float, ...]:
    return (bbox[0] - 10, bbox[1] - 10, bbox[2] + 10, bbox[3] + 10)


__all__ = ["SLOT", "Art", "ArtShop", "check_image", "decode_image", "fill_slots", "page_digits"]

"""Raster mode (appearance only, at the declared DPI): pages rendered by pdfium with annotations and form
fields, watermark burned in, pages rebuilt as images at the same visible size and orientation, each
encoded by content (palette/gray Flate for text-like pages, JPEG for photos). Text and links are gone."""

from __future__ import annotations

import functools
import io
import math
import secrets
import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pikepdf
import pypdfium2 as pdfium
from PIL import Image, ImageChops, ImageStat

from docfence.core.errors import ConfigError, CorruptContent, RenderCrashed
from docfence.core.policy import JobPolicy
from docfence.engines.geometry import PageGeometry
from docfence.engines.mark_pixels import PageMarks, composite, watermark_layer
from docfence.engines.marks import MarkSet
from docfence.engines.parallel import run_parallel, split, usable_cores
from docfence.engines.preflight import OpenedPdf

_IN_FLIGHT = 6
_PALETTE_COLOURS = 16
_FLAT_ERROR = 4.0  # mean per-pixel error of a 16-colour palette below which a page counts as text-like
_PNG_LEVEL = 4  # explicit "png" encoding (RGB): Pillow's PNG, predictors chosen per row
_FLATE_LEVEL = 2  # palette and gray pages: 5% smaller than PNG level 4 here, in a third of its CPU time


@dataclass(frozen=True)
class EncodedImage:
    """An image XObject's payload, prepared off the main thread (pikepdf objects are made on it)."""

    filter: str  # /DCTDecode or /FlateDecode (PNG predictors)
    data: bytes
    width: int
    height: int
    colour_space: str  # /DeviceGray, /DeviceRGB or /Indexed
    bits: int = 8
    colours: int = 1
    palette: bytes = b""
    predictor: bool = True  # Flate only: rows carry PNG predictor bytes (/DecodeParms)


def classify(img: Image.Image) -> tuple[str, Image.Image | None]:
    """('palette', palette image) for text-like pages, ('gray'|'jpeg'|'jpeg-gray', None) otherwise."""
    small = img.reduce(4) if min(img.size) >= 64 else img
    quant = small.quantize(_PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    error = ImageStat.Stat(ImageChops.difference(small, quant.convert("RGB")).convert("L")).mean[0]
    _, cb, cr = small.convert("YCbCr").split()
    spread = [int(v) for band in (cb, cr) for v in band.getextrema()]  # type: ignore[arg-type]
    gray = max(128 - spread[0], spread[1] - 128, 128 - spread[2], spread[3] - 128) <= 4
    if error <= _FLAT_ERROR:
        return ("gray", None) if gray else ("palette", quant)
    return ("jpeg-gray" if gray else "jpeg"), None


def encode(img: Image.Image, encoding: str) -> EncodedImage:
    """Encode one composited page per the policy (auto chooses by content)."""
    img = img if img.mode == "RGB" else img.convert("RGB")
    palette_src: Image.Image | None = None
    if encoding == "auto":
        encoding, palette_src = classify(img)
    if encoding == "gray":
        return _flate(img.convert("L"))
    if encoding == "palette":
        if palette_src is None:
            palette_src = img.reduce(4).quantize(_PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE)
        return _flate(img.quantize(palette=palette_src, dither=Image.Dither.NONE))
    if encoding == "png":
        return _png(img)
    buf = io.BytesIO()
    gray = encoding == "jpeg-gray"
    (img.convert("L") if gray else img).save(buf, format="JPEG", quality=80)
    space = "/DeviceGray" if gray else "/DeviceRGB"
    return EncodedImage("/DCTDecode", buf.getvalue(), img.size[0], img.size[1], space)


def _flate(img: Image.Image) -> EncodedImage:
    """A gray or (at most 16-colour) palette image as plain Flate rows, no predictor: on text-like pages
    PNG's row filters buy almost nothing and cost more than the compression itself."""
    width, height = img.size
    if img.mode == "L":
        data = zlib.compress(img.tobytes(), _FLATE_LEVEL)
        return EncodedImage("/FlateDecode", data, width, height, "/DeviceGray", predictor=False)
    palette = bytes(img.getpalette() or [])[: 3 * _PALETTE_COLOURS]
    palette += palette[-3:] * (_PALETTE_COLOURS - len(palette) // 3)  # every 4-bit index has a colour
    data = zlib.compress(img.tobytes("raw", "P;4"), _FLATE_LEVEL)  # two pixels a byte, rows padded
    return EncodedImage("/FlateDecode", data, width, height, "/Indexed", 4, 1, palette, predictor=False)


def _png(img: Image.Image) -> EncodedImage:
    """Pillow's PNG IDAT is a Flate stream with PNG predictors: embed it as is, palette included."""
    buf = io.BytesIO()
    extra = {"bits": 4} if img.mode == "P" else {}
    img.save(buf, format="PNG", compress_level=_PNG_LEVEL, **extra)
    png = buf.getvalue()
    pos, idat, palette = 8, [], b""
    width = height = depth = colour_type = 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
        elif kind == b"PLTE":
            palette = body
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    colours = {0: 1, 2: 3, 3: 1}[colour_type]
    space = {0: "/DeviceGray", 2: "/DeviceRGB", 3: "/Indexed"}[colour_type]
    return EncodedImage("/FlateDecode", b"".join(idat), width, height, space, depth, colours, palette)


def _image_stream(pdf: pikepdf.Pdf, enc: EncodedImage) -> pikepdf.Stream:
    stream = pdf.make_stream(enc.data)
    stream.Type, stream.Subtype = pikepdf.Name.XObject, pikepdf.Name.Image
    stream.Filter = pikepdf.Name(enc.filter)
    stream.Width, stream.Height, stream.BitsPerComponent = enc.width, enc.height, enc.bits
    if enc.filter == "/FlateDecode" and enc.predictor:
        stream.DecodeParms = pikepdf.Dictionary(
            Predictor=15, Colors=enc.colours, BitsPerComponent=enc.bits, Columns=enc.width
        )
    if enc.colour_space == "/Indexed":
        stream.ColorSpace = pikepdf.Array(
            [
                pikepdf.Name.Indexed,
                pikepdf.Name.DeviceRGB,
                len(enc.palette) // 3 - 1,
                pikepdf.String(enc.palette),
            ]
        )
    else:
        stream.ColorSpace = pikepdf.Name(enc.colour_space)
    return stream


def add_image_page(pdf: pikepdf.Pdf, enc: EncodedImage, size: tuple[float, float]) -> None:
    """Append a page of the displayed `size` (points, no rotation) showing the image edge to edge."""
    w, h = size
    content = pdf.make_stream(f"q {w:.4f} 0 0 {h:.4f} 0 0 cm /DfIm Do Q\n".encode("ascii"))
    page = pikepdf.Dictionary(
        Type=pikepdf.Name.Page,
        MediaBox=pikepdf.Array([0, 0, round(w, 4), round(h, 4)]),
        Resources=pikepdf.Dictionary(XObject=pikepdf.Dictionary(DfIm=_image_stream(pdf, enc))),
        Contents=content,
    )
    pdf.pages.append(pikepdf.Page(page))


def _render(doc: pdfium.PdfDocument, index: int, dpi: int) -> Image.Image:
    """The page at `dpi` in RGB. pdfium draws 4-byte pixels, which Pillow takes without a repack (RGB is
    4 bytes a pixel inside Pillow too)."""
    page = doc[index]
    try:
        bitmap = page.render(scale=dpi / 72.0, may_draw_forms=True, draw_annots=True, rev_byteorder=True,
                             prefer_bgrx=True)
        size = (bitmap.width, bitmap.height)
        return Image.frombytes("RGB", size, bitmap.buffer, "raw", "RGBX", bitmap.stride)
    finally:
        page.close()


def _compose_and_encode(
    img: Image.Image, geo: PageGeometry, marks: PageMarks, policy: JobPolicy
) -> EncodedImage:
    """Marks burned in and the page encoded."""
    if marks:
        composite(img, watermark_layer(geo, marks, img.size, policy.dpi / 72.0))
    return encode(img, policy.raster_encoding)


def watermark_raster(data: bytes, opened: OpenedPdf, policy: JobPolicy) -> bytes:
    """Preflighted PDF in, image-only watermarked PDF out (encryption re-applied with the same permissions).

    From _PARALLEL_FROM_PAGES pages the pages are split into ranges across the usable cores, each range
    rendered and encoded in a forked process (pdfium is not thread-safe, a process each is); a range
    whose process gives no answer fails the job as render_crashed, as a crash of the render process
    would. Within a range, pdfium renders on its one thread and two threads composite and encode."""
    if policy.watermark is None:
        raise ConfigError("a watermark job needs a watermark spec")
    marks = MarkSet.of(policy)
    count = len(opened.geometry)
    ranges = split(count, usable_cores() if count >= _PARALLEL_FROM_PAGES else 1)
    if len(ranges) > 1:
        _layers_before_fork(opened, marks, policy.dpi / 72.0)
    work = functools.partial(_encode_range, data, opened, policy, marks)
    pieces = run_parallel([functools.partial(work, first, stop) for first, stop in ranges])
    out = pikepdf.new()
    for (first, stop), piece in zip(ranges, pieces, strict=True):
        if piece is None:
            raise RenderCrashed("A raster rendering process ended without an answer.")
        if isinstance(piece, _Raised):
            raise piece.error
        for enc, geo in zip(piece, opened.geometry[first:stop], strict=True):
            add_image_page(out, enc, geo.display_size)
    return _save_raster(out, opened)


_PARALLEL_FROM_PAGES = 4  # ~40 ms of CPU per dense page at 150 DPI against a few ms per fork
_SHARED_LAYERS = 16  # at most this many distinct layers are built before forking (the cache holds 32)


def _layers_before_fork(opened: OpenedPdf, marks: MarkSet, scale: float) -> None:
    """Build each distinct mark layer once, in this process, so the forked range processes inherit it
    (copy-on-write) instead of each building its own (~50-100 ms of CPU per layer at 150 DPI: a
    full-page render). Skipped when the layers barely repeat (marks with `{page}`: one per page)."""
    count = len(opened.geometry)
    keys: dict[tuple[PageGeometry, PageMarks, tuple[int, int]], None] = {}
    for index, geo in enumerate(opened.geometry):
        drawn = marks.on_page(index, count)
        if drawn:
            width, height = geo.display_size  # pdfium's render size: each side rounded up
            keys[(geo, drawn, (math.ceil(width * scale), math.ceil(height * scale)))] = None
            if len(keys) > _SHARED_LAYERS:
                return
    for key in keys:
        watermark_layer(*key, scale)


@dataclass(frozen=True)
class _Raised:
    """An exception a range's process raised, carried back to be raised where a serial run raised it."""

    error: BaseException


def _encode_range(
    data: bytes, opened: OpenedPdf, policy: JobPolicy, marks: MarkSet, first: int, stop: int
) -> list[EncodedImage] | _Raised:
    try:
        return _encode_pages(data, opened, policy, marks, range(first, stop))
    except Exception as exc:  # raised again by the caller, in page order
        return _Raised(exc)


def _encode_pages(
    data: bytes, opened: OpenedPdf, policy: JobPolicy, marks: MarkSet, indices: range
) -> list[EncodedImage]:
    try:
        doc = pdfium.PdfDocument(data, password=opened.password or None)
    except pdfium.PdfiumError as exc:
        raise CorruptContent() from exc
    doc.init_forms()
    count = len(opened.geometry)
    encoded: list[EncodedImage] = []
    pending: deque[Future[EncodedImage]] = deque()
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for index in indices:
                geo = opened.geometry[index]
                img = _render(doc, index, policy.dpi)
                drawn = marks.on_page(index, count)
                if drawn:
                    watermark_layer(geo, drawn, img.size, policy.dpi / 72.0)  # pdfium stays on this thread
                pending.append(pool.submit(_compose_and_encode, img, geo, drawn, policy))
                while len(pending) > _IN_FLIGHT or (pending and index == indices[-1]):
                    encoded.append(pending.popleft().result())
    finally:
        doc.close()
    return encoded


def _save_raster(out: pikepdf.Pdf, opened: OpenedPdf) -> bytes:
    buf = io.BytesIO()
    encryption = None
    if opened.encrypted:
        allow = opened.pdf.allow
        encryption = pikepdf.Encryption(owner=secrets.token_hex(16), user=opened.password, R=6, allow=allow)
    out.save(buf, encryption=encryption)
    return buf.getvalue()


def naive_jpeg_size(img: Image.Image) -> int:
    """Size of the naive baseline (RGB JPEG quality 85) for the bench's comparison."""
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG", quality=85)
    return len(buf.getvalue())

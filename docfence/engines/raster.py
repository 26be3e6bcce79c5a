"""Raster mode (appearance only, at the declared DPI): pages rendered by pdfium with annotations and forms,
marks burned in, rebuilt as images of the same visible size and orientation, each in the tightest encoding
whose colours outside the marks keep colour_difference's bound (palette/gray Flate, JPEG for photos)."""

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
from typing import Any

import numpy as np
import pikepdf
import pypdfium2 as pdfium
from PIL import Image, ImageChops, ImageStat

from docfence.core.errors import ConfigError, CorruptContent, OverLimits, RenderCrashed
from docfence.core.policy import JobPolicy
from docfence.engines.colour_difference import COLOUR_BOUND_DE99, on_grid, percentile_difference, spread
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
_MARK_COLOURS = 4  # of a 16-colour palette's entries, the most the marks' blended colours may take
_PALETTE_SAMPLE = 16384  # pixels the palette is chosen from at most (_Sample): as good as 64k, 4x cheaper
#: The engine holds each page's encoding to this ΔE99 outside its marks, below the validator's bound:
#: the validator reads the same grid of its own render, but leaves out a wider margin around the marks
#: and, above 150 DPI, averages first, which moves its figure by a little; a page that misses it moves
#: one step up its ladder (_LADDERS).
_ENGINE_DE99 = 0.75 * COLOUR_BOUND_DE99
# Each content class tries its encodings in order, the first whose colours stay within _ENGINE_DE99
# taken; the last is taken as it is. A gray page a colour mark or thin coloured lines made look gray
# to classify() goes on to a palette; a palette page whose colours need more than 16 entries to 256.
_LADDERS = {
    "palette": ("palette", "palette256", "png"),
    "gray": ("gray", "palette", "palette256", "png"),
    "jpeg": ("jpeg", "jpeg-fine", "png"),
    "jpeg-gray": ("jpeg-gray", "jpeg", "jpeg-fine", "png"),
}
_POLICY_LADDERS = {"jpeg": ("jpeg", "jpeg-fine"), "png": ("png",), "gray": ("gray",),
                   "palette": _LADDERS["palette"]}


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


def classify(img: Image.Image) -> str:
    """'palette' for text-like pages, 'gray', 'jpeg' or 'jpeg-gray' otherwise (on a 4x reduction: the
    mean error of a 16-colour palette there says whether the page is flat colour or photo-like)."""
    small = img.reduce(4) if min(img.size) >= 64 else img
    quant = small.quantize(_PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    error = ImageStat.Stat(ImageChops.difference(small, quant.convert("RGB")).convert("L")).mean[0]
    _, cb, cr = small.convert("YCbCr").split()
    spread = [int(v) for band in (cb, cr) for v in band.getextrema()]  # type: ignore[arg-type]
    gray = max(128 - spread[0], spread[1] - 128, 128 - spread[2], spread[3] - 128) <= 4
    if error <= _FLAT_ERROR:
        return "gray" if gray else "palette"
    return "jpeg-gray" if gray else "jpeg"


def encode(img: Image.Image, encoding: str, marked: Image.Image | None = None) -> EncodedImage:
    """Encode one composited page per the policy (auto chooses by content). `marked`: an 'L' mask of the
    page, nonzero where a mark was blended in. Outside it the page's colours stay within _ENGINE_DE99 of
    `img`, measured on the pixels the validator reads against its own render (_Sample); the palette is
    built from those colours, with a few entries for the marks' own."""
    img = img if img.mode == "RGB" else img.convert("RGB")
    ladder = _LADDERS[classify(img)] if encoding == "auto" else _POLICY_LADDERS[encoding]
    sample = _Sample.of(img, marked)
    for step, kind in enumerate(ladder):
        encoded, shown = _encode_as(img, kind, sample)
        if shown is None or step == len(ladder) - 1:
            return encoded
        if percentile_difference(sample.grid, shown, sample.grid_keep) <= _ENGINE_DE99:
            return encoded
    raise AssertionError("every ladder ends in a step taken as it is")


_UNMARKED = [255] + [0] * 255  # point() tables: a list costs nothing, a function 256 calls
_INKED = [0] + [255] * 255


@dataclass(frozen=True)
class _Sample:
    """A page's pixels as the engine reads them. `grid`, `grid_keep`: the pixels the validator's colour
    proof reads (colour_difference.on_grid) and 255 there outside the marks, what each encoding's
    colours are measured on. `pixels`, `in_mark`: at most _PALETTE_SAMPLE of the grid's pixels, spread()
    over it, and whether a mark covers each: what the palette is chosen from. True colours, where a
    box-averaged reduction blends thin black strokes with the paper into grays (a palette built from it
    has no black); spread, as a regular sparser grid can fall between a page's one-pixel rules and
    leave their colours out."""

    grid: Image.Image
    grid_keep: Image.Image | None
    pixels: np.ndarray[Any, np.dtype[np.uint8]]
    in_mark: np.ndarray[Any, np.dtype[np.bool_]]

    @classmethod
    def of(cls, img: Image.Image, marked: Image.Image | None) -> _Sample:
        grid = on_grid(img)
        grid_keep = None if marked is None else on_grid(marked).point(_UNMARKED)
        pixels = np.asarray(grid).reshape(-1, 3)
        in_mark = np.zeros(len(pixels), dtype=bool)
        if grid_keep is not None:
            in_mark = np.asarray(grid_keep).reshape(-1) == 0
        if len(pixels) > _PALETTE_SAMPLE:
            pick = spread(len(pixels), _PALETTE_SAMPLE)
            pixels, in_mark = pixels[pick], in_mark[pick]
        return cls(grid, grid_keep, pixels, in_mark)


def _encode_as(img: Image.Image, kind: str, sample: _Sample) -> tuple[EncodedImage, Image.Image | None]:
    """The page in one encoding, and the RGB pixels it shows on the sample's grid (None: exactly `img`)."""
    if kind == "gray":
        return _flate(img.convert("L")), sample.grid.convert("L").convert("RGB")
    if kind in ("palette", "palette256"):
        colours = _PALETTE_COLOURS if kind == "palette" else 256
        palette = _palette(sample, colours)
        indexed = img.quantize(palette=palette, dither=Image.Dither.NONE)
        # without dithering each pixel maps by its colour alone: the grid maps as the page does
        shown = sample.grid.quantize(palette=palette, dither=Image.Dither.NONE).convert("RGB")
        return _flate(indexed, 4 if colours <= 16 else 8), shown
    if kind == "png":
        return _png(img), None
    in_gray = kind == "jpeg-gray"
    buf = io.BytesIO()
    fine = {"quality": 95, "subsampling": 0} if kind == "jpeg-fine" else {"quality": 80}
    (img.convert("L") if in_gray else img).save(buf, format="JPEG", **fine)
    space = "/DeviceGray" if in_gray else "/DeviceRGB"
    encoded = EncodedImage("/DCTDecode", buf.getvalue(), img.size[0], img.size[1], space)
    return encoded, on_grid(Image.open(buf).convert("RGB"))


def palette_for(img: Image.Image, marked: Image.Image | None, colours: int = _PALETTE_COLOURS) -> Image.Image:
    """A palette image of at most `colours` entries for `img` (`marked`: as for encode())."""
    return _palette(_Sample.of(img, marked), colours)


def _palette(sample: _Sample, colours: int) -> Image.Image:
    """At most `colours` entries chosen from the sample's true colours. The marks' pixels get at most
    _MARK_COLOURS of 16 entries (a quarter of a larger palette), so a mark that covers much of the page
    cannot take the document's colours."""
    document, mark = sample.pixels[~sample.in_mark], sample.pixels[sample.in_mark]
    share = 0 if not len(mark) else colours if not len(document) else max(_MARK_COLOURS, colours // 4)
    entries = [*_clustered(document, colours - share), *_clustered(mark, share)]
    palette = Image.new("P", (1, 1))
    palette.putpalette(b"".join(bytes(e) for e in entries) or b"\xff\xff\xff")
    return palette


def _clustered(pixels: np.ndarray[Any, np.dtype[np.uint8]], count: int) -> list[tuple[int, int, int]]:
    """At most `count` colours for `pixels` (N x 3): Pillow's max-coverage clusters, each represented by
    its mean, or by its most frequent member where that holds half the cluster (paper, solid ink: kept
    exact; a ramp of anti-aliased edges keeps its mean, which is nearer to most of it)."""
    if not count or not len(pixels):
        return []
    sample = Image.fromarray(pixels.reshape(1, -1, 3))
    quant = sample.quantize(count, method=Image.Quantize.MAXCOVERAGE)
    means = quant.getpalette() or []
    seen = sample.getcolors(len(pixels)) or []  # each distinct colour once, with its count
    counts = np.array([n for n, _ in seen])
    colours = np.array([c for _, c in seen], dtype=np.uint8).reshape(1, -1, 3)
    # each distinct colour's cluster: the entry it maps to (without dithering, by its colour alone)
    cluster = np.asarray(Image.fromarray(colours).quantize(palette=quant, dither=Image.Dither.NONE))[0]
    sizes = np.bincount(cluster, weights=counts)
    order = np.lexsort((counts, cluster))  # by cluster, then by count: each cluster's mode comes last
    last = order[np.r_[cluster[order][1:] != cluster[order][:-1], True]]
    chosen = []
    for at in last:
        entry = int(cluster[at])
        mode = counts[at] * 2 >= sizes[entry]
        red, green, blue = (int(v) for v in colours[0, at]) if mode else means[3 * entry : 3 * entry + 3]
        chosen.append((red, green, blue))
    return chosen


def _flate(img: Image.Image, bits: int = 4) -> EncodedImage:
    """A gray or palette image (4-bit indices: at most 16 colours; else 8-bit) as plain Flate rows, no
    predictor: on text-like pages PNG's row filters buy almost nothing and cost more than the
    compression itself."""
    width, height = img.size
    if img.mode == "L":
        data = zlib.compress(img.tobytes(), _FLATE_LEVEL)
        return EncodedImage("/FlateDecode", data, width, height, "/DeviceGray", predictor=False)
    entries = 1 << bits
    palette = bytes(img.getpalette() or [])[: 3 * entries]
    if bits == 4:
        palette += palette[-3:] * (entries - len(palette) // 3)  # every 4-bit index has a colour
    raw = img.tobytes("raw", "P;4") if bits == 4 else img.tobytes()  # 4 bits: two pixels a byte
    data = zlib.compress(raw, _FLATE_LEVEL)
    return EncodedImage("/FlateDecode", data, width, height, "/Indexed", bits, 1, palette, predictor=False)


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
    """Marks burned in and the page encoded (its colours outside the marks kept: encode())."""
    marked = None
    if marks:
        layer = watermark_layer(geo, marks, img.size, policy.dpi / 72.0)
        composite(img, layer)
        marked = Image.new("L", img.size, 0)
        for at, alpha, _ in layer:
            marked.paste(255, at, alpha.point(_INKED))
    return encode(img, policy.raster_encoding, marked)


def watermark_raster(data: bytes, opened: OpenedPdf, policy: JobPolicy,
                     marks: MarkSet | None = None) -> bytes:
    """Preflighted PDF in, image-only watermarked PDF out (encryption re-applied with the same permissions).

    From _PARALLEL_FROM_PAGES pages the pages are split into ranges across the usable cores, each range
    rendered and encoded in a forked process (pdfium is not thread-safe, a process each is); a range
    whose process gives no answer fails the job as render_crashed, as a crash of the render process
    would. Within a range, pdfium renders on its one thread and two threads composite and encode."""
    if policy.watermark is None:
        raise ConfigError("a watermark job needs a watermark spec")
    marks = MarkSet.of(policy) if marks is None else marks  # fitted to the pages: mark_obscure
    _pages_fit_memory(opened, policy)
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


# A page is drawn whole: pdfium's 4-byte bitmap and Pillow's 4-byte copy of it are held at once, at least.
_HELD_BYTES_PER_PIXEL = 8


def _pages_fit_memory(opened: OpenedPdf, policy: JobPolicy) -> None:
    """OverLimits, before anything is drawn, for a page whose pixels at the class's DPI cannot fit in the
    class's render memory (`render_memory_mb`): the class's limits refuse it in milliseconds, where
    drawing it would fail at the memory limit after seconds (a 7800-pt page is 264 Mpx at 150 DPI)."""
    scale, budget = policy.dpi / 72.0, policy.limits.render_memory_mb * 1024 * 1024
    for number, geo in enumerate(opened.geometry, start=1):
        width, height = geo.display_size
        pixels = math.ceil(width * scale) * math.ceil(height * scale)
        if pixels * _HELD_BYTES_PER_PIXEL > budget:
            raise OverLimits(f"Page {number} is {pixels / 1e6:.0f} million pixels at {policy.dpi} DPI: "
                             f"more than the configured render memory ({policy.limits.render_memory_mb} MB) "
                             "holds.")


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

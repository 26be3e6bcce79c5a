"""Each page's content must decode and parse, and (vector mode) every stream the pages reach must decode,
before any work: preflight's costliest steps on long documents (~0.5 ms of CPU per dense page), split
across the usable cores for long documents."""

from __future__ import annotations

import functools

import pikepdf

from docfence.core.errors import CorruptContent, DocumentError, MalformedPdf, OverLimits
from docfence.core.policy import Limits
from docfence.engines import decode
from docfence.engines.parallel import map_ranges, split, usable_cores

CODED = (MemoryError, RecursionError, pikepdf.PdfError, ValueError, TypeError, KeyError, IndexError,
         AttributeError, OverflowError, NotImplementedError)


def coded(exc: BaseException) -> DocumentError:
    """The DocumentError a library failure on a hostile structure stands for."""
    if isinstance(exc, (MemoryError, RecursionError)):
        return OverLimits("The PDF's structure needs more memory or nesting than the limits allow.")
    return MalformedPdf("The PDF is damaged beyond safe repair (its structure cannot be read).")


def check_pages_content(pages: list[pikepdf.Dictionary], limits: Limits, *, stream_data: bool) -> None:
    """check_page_content on every page, then (`stream_data`: vector mode) check_stream_data over what
    the pages reach: the costliest preflight steps on long documents, split across the usable cores
    (forked, copy-on-write) from _PARALLEL_FROM_PAGES pages. The refusal a serial walk would raise is
    raised (the first page whose content fails, else the first piece whose stream data fails); a piece
    that gives no answer fails closed."""
    cores = usable_cores()
    if len(pages) < _PARALLEL_FROM_PAGES or cores < 2:
        for page in pages:
            check_page_content(page, limits)
        if stream_data:
            check_stream_data(pages, limits)
        return
    check = functools.partial(_refusals, pages, limits, stream_data)
    pieces = map_ranges(check, split(len(pages), cores))
    if any(found is None for found in pieces):
        raise MalformedPdf("The PDF's page content could not be checked (a check gave no answer).")
    for step in (0, 1):  # every page's content before any stream data, as in the serial walk
        for found in pieces:
            refusal = found[step] if found is not None else None
            if refusal is not None:
                raise refusal


_PARALLEL_FROM_PAGES = 200  # below this, the fork costs more than the pieces save


def _refusals(
    pages: list[pikepdf.Dictionary], limits: Limits, stream_data: bool, first: int, stop: int
) -> tuple[DocumentError | None, DocumentError | None]:
    """(the content refusal of the first failing page in pages[first:stop], the stream-data refusal of
    those pages), each None when they pass; stream data is not checked once content failed."""
    step = 0
    try:
        for page in pages[first:stop]:
            check_page_content(page, limits)
        step = 1
        if stream_data:
            check_stream_data(pages[first:stop], limits)
    except DocumentError as exc:
        return (exc, None) if step == 0 else (None, exc)
    except CODED as exc:
        return (coded(exc), None) if step == 0 else (None, coded(exc))
    return None, None


def check_page_content(page: pikepdf.Dictionary, limits: Limits) -> None:
    """Each page's content must decode and parse; a half-readable page is refused, not half-rendered."""
    contents = page.get("/Contents")
    streams = [contents] if isinstance(contents, pikepdf.Stream) else list(contents or [])
    total = 0
    try:
        for stream in streams:
            if not isinstance(stream, pikepdf.Stream):
                raise CorruptContent()
            total += len(stream.read_bytes())
            if total > limits.max_stream_bytes:
                raise OverLimits("A page's content is larger than the configured decompressed size limit.")
        if streams:  # libqpdf parses every token; only inline images are handed back (see _PARSE_ONLY)
            pikepdf.parse_content_stream(page, _PARSE_ONLY)
    except pikepdf.PdfError as exc:
        raise CorruptContent() from exc


# Only inline images are handed back: libqpdf still tokenises and parses the whole content (its errors
# raise as before) but pikepdf builds no Python instruction for any other operator, which was 40% of the
# check's CPU (0.41 -> 0.25 ms a dense page); nothing here reads the instructions. Inline images stay in:
# pikepdf assembles each one itself at EI, and a malformed one (BI ... EI without ID) fails there.
_PARSE_ONLY = "BI ID EI"

_NOT_FOLLOWED = frozenset({"/Parent", "/P"})  # up the page tree / back to the annotation's page


def check_stream_data(pages: list[pikepdf.Dictionary], limits: Limits) -> None:
    """Vector mode keeps the bytes of every stream a page reaches (content, resources, annotation
    appearances) in the output, so one whose compressed data does not decode would only fail the
    validator's full read of the output after the renders: refuse it here, as corrupt_content. Only
    chains of the general filters are decoded (images keep their codec; raster mode redraws them)."""
    seen: set[tuple[int, int]] = set()
    stack: list[pikepdf.Object] = list(pages)
    while stack:
        obj = stack.pop()
        if not isinstance(obj, (pikepdf.Dictionary, pikepdf.Stream, pikepdf.Array)):
            continue  # names, numbers and strings hold no streams
        if obj.is_indirect:
            if obj.objgen in seen:
                continue
            seen.add(obj.objgen)
        if isinstance(obj, pikepdf.Stream):
            _check_decodes(obj, limits)
        if isinstance(obj, (pikepdf.Dictionary, pikepdf.Stream)):
            stack.extend(value for key, value in obj.items() if key not in _NOT_FOLLOWED)
        elif isinstance(obj, pikepdf.Array):
            stack.extend(obj)


def _check_decodes(obj: pikepdf.Stream, limits: Limits) -> None:
    filters = decode.canonical(stream_filters(obj))
    if not filters or not all(f in decode.MAX_RATIO for f in filters):
        return
    try:
        decode.decoded_size(obj.read_raw_bytes(), filters, limits.max_stream_bytes,
                            early_change(obj, len(filters)))
    except decode.DecodeError as exc:
        raise CorruptContent("A stream the pages use is damaged: its compressed data does not decode.") \
            from exc


def early_change(obj: pikepdf.Stream, layers: int) -> list[bool]:
    """/EarlyChange of each filter layer (LZW reads it; true unless its /DecodeParms say 0)."""
    parms = obj.get("/DecodeParms")
    per_layer = list(parms) if isinstance(parms, pikepdf.Array) else [parms] * layers
    return [not (isinstance(p, pikepdf.Dictionary) and as_int(p.get("/EarlyChange", 1)) == 0)
            for p in per_layer[:layers]]


def as_int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        return 0


def stream_filters(obj: pikepdf.Stream) -> list[str]:
    raw = obj.get("/Filter")
    if raw is None:
        return []
    if isinstance(raw, pikepdf.Array):
        return [str(f) for f in raw]
    return [str(raw)]

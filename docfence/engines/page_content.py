"""Each page's content must decode and parse before any work (preflight's costliest step on long
documents: ~0.4 ms of CPU per dense page), split across the usable cores for long documents."""

from __future__ import annotations

import functools

import pikepdf

from docfence.core.errors import CorruptContent, DocumentError, MalformedPdf, OverLimits
from docfence.core.policy import Limits
from docfence.engines.parallel import map_ranges, split, usable_cores

CODED = (MemoryError, RecursionError, pikepdf.PdfError, ValueError, TypeError, KeyError, IndexError,
         AttributeError, OverflowError, NotImplementedError)


def coded(exc: BaseException) -> DocumentError:
    """The DocumentError a library failure on a hostile structure stands for."""
    if isinstance(exc, (MemoryError, RecursionError)):
        return OverLimits("The PDF's structure needs more memory or nesting than the limits allow.")
    return MalformedPdf("The PDF is damaged beyond safe repair (its structure cannot be read).")


def check_pages_content(pages: list[pikepdf.Dictionary], limits: Limits) -> None:
    """check_page_content on every page, the costliest preflight step on long documents (~0.4 ms of CPU
    per dense page), split across the usable cores (forked, copy-on-write) from _PARALLEL_FROM_PAGES
    pages. The first refusal in page order is raised, as a serial walk would; a piece that ends without
    an answer fails closed."""
    cores = usable_cores()
    if len(pages) < _PARALLEL_FROM_PAGES or cores < 2:
        for page in pages:
            check_page_content(page, limits)
        return
    pieces = map_ranges(functools.partial(_content_refusal, pages, limits), split(len(pages), cores))
    for found in pieces:
        if found is None:
            raise MalformedPdf("The PDF's page content could not be checked (a check gave no answer).")
        if found:
            raise found[0]


_PARALLEL_FROM_PAGES = 200  # below this, the fork costs more than the pieces save


def _content_refusal(
    pages: list[pikepdf.Dictionary], limits: Limits, first: int, stop: int
) -> list[DocumentError]:
    """[the refusal of the first failing page in pages[first:stop]], or [] when every page passes."""
    try:
        for page in pages[first:stop]:
            check_page_content(page, limits)
    except DocumentError as exc:
        return [exc]
    except CODED as exc:
        return [coded(exc)]
    return []


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
        if streams:
            pikepdf.parse_content_stream(page)
    except pikepdf.PdfError as exc:
        raise CorruptContent() from exc

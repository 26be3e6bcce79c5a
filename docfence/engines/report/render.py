"""Report rendering, bytes out: validate data against the bundle's schema, render its Jinja2 source in a
sandbox, lay it out with WeasyPrint using only the bundle's assets, cap the pages. A report requested for
a period renders with the request's period as the template's `period`, whatever the data says.
Knows nothing of jobs, the database or HTTP."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from weasyprint import CSS, HTML
from weasyprint.text.fonts import FontConfiguration

from docfence.core.clock import monotonic
from docfence.core.errors import RenderResourceExceeded, TemplateError
from docfence.engines.report.bundle import TemplateBundle, load_bundle, template_hash
from docfence.engines.report.data import template_values, validate_data
from docfence.engines.report.fetch import BASE_URL, BundleFetcher, quiet_weasyprint
from docfence.engines.report.jinja import render_html

__all__ = [
    "VARIANTS",
    "RenderedReport",
    "TemplateBundle",
    "load_bundle",
    "render_report",
    "template_hash",
    "template_values",
]

# docfence variant name -> WeasyPrint pdf_variant. None is plain PDF 1.7.
VARIANTS: Mapping[str | None, str | None] = {None: None, "pdf/a-3b": "pdf/a-3b", "pdf/ua-1": "pdf/ua-1"}


@dataclass(frozen=True)
class RenderedReport:
    """A rendered report. `refused_urls` lists (redacted, at most 50) resources the render asked for and
    did not get; treat it as sensitive as the data, since a URL built from data can carry data."""

    pdf: bytes
    pages: int
    template_sha256: str
    variant: str | None = None
    refused_urls: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # WeasyPrint's unformatted message templates, never their arguments
    seconds: float = 0.0


def _check_args(variant: str | None, max_pages: int) -> str | None:
    if variant not in VARIANTS:
        raise TemplateError(f"unknown PDF variant; expected one of {sorted(v for v in VARIANTS if v)}")
    if max_pages < 1:
        raise TemplateError("max_pages must be at least 1")
    return VARIANTS[variant]


def _pdf_identifier(template_sha256: str, values: dict[str, Any]) -> bytes:
    """A PDF /ID that is a function of (template, what it sees): reproducible output, distinct per report."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(template_sha256.encode() + b"\0" + canonical).digest()[:16]


def _layout_pdf(
    html: str, css: str, fetcher: BundleFetcher, options: dict[str, Any], max_pages: int
) -> tuple[bytes, int]:
    font_config = FontConfiguration()
    stylesheet = CSS(string=css, base_url=BASE_URL, url_fetcher=fetcher, font_config=font_config)
    document = HTML(string=html, base_url=BASE_URL, url_fetcher=fetcher).render(
        font_config=font_config, stylesheets=[stylesheet], **options
    )
    pages = len(document.pages)
    if pages > max_pages:  # checked after layout, before the (costly) PDF serialisation
        raise RenderResourceExceeded(f"report has {pages} pages; the limit is {max_pages}")
    return document.write_pdf(**options), pages


def render_report(
    bundle: TemplateBundle, data: dict[str, Any], *, variant: str | None = None, max_pages: int = 500,
    period: str | None = None,
) -> RenderedReport:
    """Render `bundle` with `data` to PDF; `period` (the request's period key) is the template's
    `period` (`template_values`). The schema judges `data` as the caller sent it.

    Raises TemplateDataInvalid (data breaks the schema; the message names paths and rules, no values),
    TemplateError (template syntax, sandbox violation, unknown variant, layout failure) or
    RenderResourceExceeded (more than `max_pages` pages, oversized HTML). A URL outside the bundle's
    assets never fails the render: the resource is left out and listed in `refused_urls`."""
    started = monotonic()
    pdf_variant = _check_args(variant, max_pages)
    validate_data(bundle.schema, data)
    values = template_values(data, period)
    html = render_html(bundle.html, values)
    fetcher = BundleFetcher(bundle.assets)
    sha = template_hash(bundle)
    options = {"pdf_variant": pdf_variant, "pdf_identifier": _pdf_identifier(sha, values)}
    with quiet_weasyprint() as weasyprint_notes:
        try:
            pdf, pages = _layout_pdf(html, bundle.css, fetcher, options, max_pages)
        except RenderResourceExceeded:
            raise
        except MemoryError:
            raise RenderResourceExceeded("report layout ran out of memory") from None
        except Exception as exc:
            # WeasyPrint's message may quote document text; keep only the exception class.
            raise TemplateError(f"report layout failed: {type(exc).__name__}") from None
    return RenderedReport(
        pdf=pdf,
        pages=pages,
        template_sha256=sha,
        variant=variant,
        refused_urls=tuple(fetcher.refused),
        warnings=tuple(weasyprint_notes),
        seconds=monotonic() - started,
    )

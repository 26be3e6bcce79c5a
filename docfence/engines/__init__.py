"""The watermark engines: bytes in -> bytes out, no jobs, database or HTTP.

`watermark_document` runs preflight -> vector or raster per policy -> validation; it raises DocumentError
subclasses (ValidationFailed carries `.report`) and never returns an output that failed validation. Safe to
call in a child process (no global state besides font caches).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docfence.core.errors import ConfigError, OverLimits
from docfence.core.policy import JobPolicy, Mode


@dataclass(frozen=True)
class ProcessResult:
    output: bytes
    pages: int
    validation: dict[str, Any]
    mode: str


def watermark_document(data: bytes, policy: JobPolicy, *, password: str | None = None,
            on_pages: Callable[[int], None] | None = None) -> ProcessResult:
    """Watermark `data` per `policy`; raises DocumentError subclasses (ValidationFailed with `.report`).
    `on_pages` hears the page count once preflight knows it (the sandbox sizes its time budget by it)."""
    from docfence.engines.marks import MarkSet
    from docfence.engines.preflight import preflight
    from docfence.engines.raster import watermark_raster
    from docfence.engines.repair import readers_agree
    from docfence.engines.sanitize import sanitize
    from docfence.engines.validate import require_valid, validate
    from docfence.engines.vector import save, watermark_vector

    if policy.watermark is None:
        raise ConfigError("a watermark job needs a watermark spec")
    opened = preflight(data, policy, password)
    if on_pages is not None:
        on_pages(len(opened.pages))
    sanitised = sanitize(opened.pdf, opened.pages, policy.sanitize)
    source = data
    if _pages_touched(sanitised.stripped) or opened.repaired:
        # the validator compares the output with its source: give it (and the raster renderer) the
        # repaired and sanitised input, so what was changed on purpose is not reported as a loss
        source = save(opened.pdf, opened.encrypted)
        if opened.repaired:
            readers_agree(source, len(opened.pages), password)
        notes = opened.notes
        opened = preflight(source, policy, password)
        opened.notes = [*notes, *(n for n in opened.notes if n not in notes)]
    mode = Mode(policy.mode).value
    if mode == "vector":
        output = watermark_vector(opened, policy)
    else:
        output = watermark_raster(source, opened, policy)
    if len(output) > policy.limits.max_output_bytes:
        raise OverLimits("The output is larger than the configured output limit.")
    report = validate(
        source, output, MarkSet.of(policy), mode=mode, password=password, dpi=policy.dpi,
        sanitize=policy.sanitize, level=policy.validation,
    )
    report["encrypted"] = opened.encrypted
    report["sanitize"] = sanitised.report()
    report["notes"] = [*opened.notes, *sanitised.notes(), *report["notes"]]
    require_valid(report)
    return ProcessResult(output=output, pages=len(opened.pages), validation=report, mode=mode)


def _pages_touched(stripped: list[Any]) -> bool:
    """Something was stripped from a page, an annotation or field, or an object pages may use: the
    validator, which compares every page entry and resource, must then see the sanitised input. Items
    removed from the trailer or catalog alone (e.g. /Info) leave every page as it was."""
    return any(not str(f.where).startswith(("trailer", "catalog")) for f in stripped)


__all__ = ["ProcessResult", "watermark_document"]

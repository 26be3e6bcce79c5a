"""The watermark engines: bytes in -> bytes out, no jobs, database or HTTP.

`watermark_document` runs preflight -> vector or raster per policy -> validation; it raises DocumentError
subclasses (ValidationFailed carries `.report`) and never returns an output that failed validation. Safe to
call in a child process (no global state besides font caches). A report rendered as a declared variant
(PDF/A-3b, PDF/UA-1) keeps its identification through sanitising and marking, and its validation
report proves it (engines/variant_proof.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docfence.core.errors import ConfigError, OverLimits, UnsupportedFeature
from docfence.core.policy import JobPolicy, Mode


@dataclass(frozen=True)
class ProcessResult:
    output: bytes
    pages: int
    validation: dict[str, Any]
    mode: str


def watermark_document(data: bytes, policy: JobPolicy, *, password: str | None = None,
            on_pages: Callable[[int], None] | None = None, variant: str | None = None) -> ProcessResult:
    """Watermark `data` per `policy`; raises DocumentError subclasses (ValidationFailed with `.report`).
    `on_pages` hears the page count once preflight knows it (the sandbox sizes its time budget by it).
    `variant`: `data` is a report docfence rendered as this PDF variant (engines.report.render.VARIANTS);
    the output must still be one, which the "variant" check proves (UnsupportedFeature in raster mode)."""
    from docfence.engines.mark_obscure import fit_marks
    from docfence.engines.marks import MarkSet
    from docfence.engines.preflight import preflight
    from docfence.engines.repair import readers_agree
    from docfence.engines.sanitize import sanitize
    from docfence.engines.validate import require_valid, validate
    from docfence.engines.variant_proof import identification_of
    from docfence.engines.vector import save, watermark_vector

    if policy.watermark is None:
        raise ConfigError("a watermark job needs a watermark spec")
    mode = Mode(policy.mode).value
    _check_variant_mode(variant, mode)
    opened = preflight(data, policy, password)
    if on_pages is not None:
        on_pages(len(opened.pages))
    ident = identification_of(opened.pdf, variant) if variant is not None else None
    sanitised = sanitize(opened.pdf, opened.pages, policy.sanitize, identification=ident)
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
    # each page's marks laid out against its text once, for the engine and the validator alike
    marks = fit_marks(MarkSet.of(policy), source, password, opened.geometry)
    if mode == "vector":
        output = watermark_vector(opened, policy, variant=variant, marks=marks)
    else:  # imported here: the raster engine brings numpy (~0.1 s of CPU), which vector jobs never need
        from docfence.engines.raster import watermark_raster

        output = watermark_raster(source, opened, policy, marks=marks)
    if len(output) > policy.limits.max_output_bytes:
        raise OverLimits("The output is larger than the configured output limit.")
    report = validate(
        source, output, marks, mode=mode, password=password, dpi=policy.dpi,
        sanitize=policy.sanitize, level=policy.validation,
    )
    report["encrypted"] = opened.encrypted
    report["sanitize"] = sanitised.report()
    report["notes"] = [*opened.notes, *sanitised.notes(), *report["notes"]]
    if variant is not None:
        _prove_variant(report, output, variant)
    require_valid(report)
    return ProcessResult(output=output, pages=len(opened.pages), validation=report, mode=mode)


def _check_variant_mode(variant: str | None, mode: str) -> None:
    if variant is not None and mode != "vector":
        raise UnsupportedFeature(f"a {variant} report cannot be watermarked in {mode} mode, which keeps no "
                                 "text, fonts or tags; its class must use vector mode")


def _prove_variant(report: dict[str, Any], output: bytes, variant: str) -> None:
    """Join the "variant" check of the finished output to the validation report."""
    from docfence.engines.variant_proof import prove_variant

    proof = prove_variant(output, variant)
    report["checks"].append(proof)
    report["ok"] = bool(report["ok"]) and proof["ok"]


def _pages_touched(stripped: list[Any]) -> bool:
    """Something was stripped from a page, an annotation or field, or an object pages may use: the
    validator, which compares every page entry and resource, must then see the sanitised input. Items
    removed from the trailer or catalog alone (e.g. /Info) leave every page as it was."""
    return any(not str(f.where).startswith(("trailer", "catalog")) for f in stripped)


__all__ = ["ProcessResult", "watermark_document"]

"""What a render process does with one task: bytes in (a file), bytes out (a file), an Outcome.

Runs only inside a freshly forked child of the zygote; it never talks to the store or the network.
Task kinds: "watermark" (engines.watermark_document, then the verification code), "report" (a frozen template
version + data), "provider_check" (a provider's PDF: watermarked and validated when the policy has a mark,
else opened; a requested PDF variant proved either way) and "sign" (an output validated by an earlier
task, signed; only this kind gets the key).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.core.clock import monotonic
from docfence.core.errors import MalformedPdf, NoPages, NotAPdf
from docfence.core.policy import JobPolicy, Kind
from docfence.sandbox.outcomes import Outcome, from_exception
from docfence.sandbox.protocol import take_secrets

KINDS = ("watermark", "report", "provider_check", "sign")


def run_task(request: dict[str, Any], on_pages: Callable[[int], None],
             secrets_fd: int | None = None) -> Outcome:
    """Do the task described by `request` (its password and key read from `secrets_fd`, see
    protocol.secrets_pipe); every exception becomes a coded outcome (outcomes.py)."""
    from docfence.faults import fault_point  # the test hook; inert unless DOCFENCE_FAULTS is set

    try:
        secrets = take_secrets(secrets_fd)  # this process only: never in the zygote
        fault_point("render")
        policy = JobPolicy.from_dict(request["policy"])
        data = Path(request["input"]).read_bytes()
        started = monotonic()
        output, pages, validation = _dispatch(request["kind"], data, policy, secrets.get("password"),
                                              on_pages, secrets.get("signing"), request.get("variant"))
        engine_s = monotonic() - started
        _write(request["output"], output, fsync=bool(request.get("fsync")))
        return Outcome(True, pages=pages, validation=validation, engine_s=engine_s)
    except BaseException as exc:  # every failure must become an answer, never a hang
        return from_exception(exc)


def unconfined(exc: Exception) -> Outcome:
    """The outcome of a task that did not run because its process could not confine itself: a crash of
    the render process (retryable), never the task's own failure."""
    from docfence.core.errors import RenderCrashed

    return from_exception(RenderCrashed(f"the render process could not confine itself ({exc})"))


def _dispatch(kind: str, data: bytes, policy: JobPolicy, password: str | None,
              on_pages: Callable[[int], None], signing: Any = None,
              variant: str | None = None) -> tuple[bytes, int, dict[str, Any]]:
    from docfence import engines

    if kind == "watermark":
        from docfence.engines.issue import issue

        result = engines.watermark_document(data, policy, password=password, on_pages=on_pages)
        # after validation, the verification code (engines/issue.py); signing is a task of its own
        output = issue(result.output, result.validation, policy, password=password)
        return output, result.pages, result.validation
    if kind == "sign":
        from docfence.engines.issue import sign_validated
        from docfence.engines.signing import SigningKey
        from docfence.faults import fault_point

        fault_point("sign")

        signed, report = sign_validated(data, policy, SigningKey.from_request(signing))
        return signed, 0, report
    if kind == "report":
        from docfence.sandbox.report_job import render_report_job

        result = render_report_job(data, policy)
        return result.output, result.pages, result.validation
    if kind == "provider_check":
        return _provider_check(data, policy, on_pages, variant)
    raise ValueError(f"unknown sandbox task kind {kind!r}")


def _provider_check(data: bytes, policy: JobPolicy, on_pages: Callable[[int], None],
                    variant: str | None = None) -> tuple[bytes, int, dict[str, Any]]:
    """A provider's PDF is untrusted input like any upload. A report requested as a PDF `variant` must
    be one when it leaves, watermarked or not: the "variant" check proves it (ValidationFailed)."""
    from docfence import engines
    from docfence.core.errors import ValidationFailed
    from docfence.engines.checks import failure_message
    from docfence.engines.variant_proof import prove_variant
    from docfence.sandbox.report_job import opens_checks

    if not data.startswith(b"%PDF-"):
        raise NotAPdf("the provider's output is not a PDF")
    if policy.watermark is not None:
        result = engines.watermark_document(data, policy.evolve(kind=Kind.WATERMARK), on_pages=on_pages,
                                            variant=variant)
        return result.output, result.pages, result.validation
    pages = _page_count(data)
    checks = opens_checks(pages) + ([prove_variant(data, variant)] if variant else [])
    validation = {"ok": all(c["ok"] for c in checks), "mode": "provider", "pages": pages, "checks": checks}
    if not validation["ok"]:
        raise ValidationFailed(failure_message(validation), report=validation)
    return data, pages, validation


def _page_count(data: bytes) -> int:
    import pypdfium2

    try:
        doc = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        raise MalformedPdf("the provider's output does not open") from exc
    try:
        pages = len(doc)
    finally:
        doc.close()
    if pages < 1:
        raise NoPages()
    return pages


def _write(path: str, data: bytes, *, fsync: bool) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())

"""The local halves of a provider render: the HTML sent out (data validated, template rendered in the
sandbox, only the fields the template uses leave) and the check of what came back, run in a render child
under the job's limits (PDFium is not thread-safe and the provider's bytes are untrusted)."""

from __future__ import annotations

import json
import os
import resource
import tempfile
from pathlib import Path
from typing import Any

from docfence.blobs import RegionRouter
from docfence.core.errors import BlobError, DocumentError, RenderResourceExceeded
from docfence.core.policy import JobPolicy, Kind
from docfence.core.records import Job
from docfence.engines.report_data import validate_data
from docfence.engines.report_jinja import render_html
from docfence.engines.report_job import opens_checks, parse_snapshot
from docfence.worker import child


class ChildRenderError(DocumentError):
    """The provider's output failed its checks."""

    def __init__(self, code: str, message: str | None, *, retryable: bool = False) -> None:
        super().__init__(message or "the provider's output failed its checks")
        self.code = code  # type: ignore[misc]  # the render child's stable code, carried over
        self.retryable = retryable  # type: ignore[misc]


def provider_input(router: RegionRouter, job: Job) -> bytes:
    """The HTML document a provider renders (CSS inlined). Raises TemplateError, TemplateDataInvalid or
    BlobError; assets of the bundle are not sent (a provider gets no more than the page needs)."""
    if job.input_key is None:
        raise BlobError("the job has no input")
    snapshot = router.for_region(job.region).get(job.input_key, expected_sha256=job.input_sha256)
    bundle, data, _variant = parse_snapshot(snapshot)
    validate_data(bundle.schema, data)
    html = render_html(bundle.html, data)
    style = f"<style>{bundle.css}</style>"
    html = html.replace("</head>", style + "</head>", 1) if "</head>" in html else style + html
    return html.encode("utf-8")


def inspect_in_child(artifact: bytes, policy: JobPolicy) -> tuple[bytes, int, dict[str, Any]]:
    """(output, pages, validation) of a provider's PDF: watermarked and validated like any PDF when the
    policy has a watermark, else checked to open with pages. Raises ChildRenderError (coded) or
    RenderResourceExceeded."""
    limits = policy.limits
    with tempfile.TemporaryDirectory(prefix="docfence-dispatch-") as tmp:
        src, out = Path(tmp) / "input.pdf", Path(tmp) / "output.pdf"
        src.write_bytes(artifact)
        proc = child.context().Process(
            target=inspect_child,
            args=(str(src), str(out), json.dumps(policy.to_dict()), limits.render_memory_mb,
                  int(limits.render_timeout_s) + 1),
        )
        proc.start()
        proc.join(timeout=limits.render_timeout_s)
        if proc.is_alive():
            proc.kill()
            proc.join()
            raise RenderResourceExceeded("checking the provider's output exceeded its time limit")
        outcome = child.read_outcome(str(out))
        if outcome is None:
            raise ChildRenderError("render_crashed", f"the check process died (exit {proc.exitcode})",
                                   retryable=True)
        if not outcome.ok:
            raise ChildRenderError(outcome.error_code or "render_error", outcome.error_message,
                                   retryable=outcome.retryable)
        return out.read_bytes(), outcome.pages, dict(outcome.validation or {})


def inspect_child(input_path: str, output_path: str, policy_json: str, memory_mb: int, cpu_s: int) -> None:
    """Child entry point (same contract as worker.child.render_child): limits, check, outcome file."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 1024 * 1024,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    outcome = _inspect(input_path, output_path, policy_json)
    tmp = output_path + ".outcome.tmp"
    Path(tmp).write_text(json.dumps(outcome.__dict__), "utf-8")
    os.replace(tmp, output_path + ".outcome")


def _inspect(input_path: str, output_path: str, policy_json: str) -> child.RenderOutcome:
    from docfence.core.errors import DocfenceError, NotAPdf

    try:
        data = Path(input_path).read_bytes()
        if not data.startswith(b"%PDF-"):
            raise NotAPdf("the provider's output is not a PDF")
        policy = JobPolicy.from_dict(json.loads(policy_json))
        if policy.watermark is not None:
            from docfence import engines

            result = engines.process(data, policy.evolve(kind=Kind.WATERMARK))
            output, pages, validation = result.output, result.pages, result.validation
        else:
            output, pages = data, _pages(data)
            validation = {"ok": True, "mode": "provider", "pages": pages, "checks": opens_checks(pages)}
        Path(output_path).write_bytes(output)
        return child.RenderOutcome(True, pages=pages, validation=validation)
    except MemoryError:
        err = RenderResourceExceeded("checking the provider's output exceeded its memory limit")
        return child.RenderOutcome(False, error_code=err.code, error_message=err.message)
    except DocfenceError as exc:
        return child.RenderOutcome(False, error_code=exc.code, error_message=exc.message,
                                   retryable=exc.retryable)
    except Exception as exc:  # a checker bug fails the attempt; it never hangs it
        return child.RenderOutcome(False, error_code="render_error",
                                   error_message=f"the check failed ({type(exc).__name__})", retryable=True)


def _pages(data: bytes) -> int:
    import pypdfium2

    from docfence.core.errors import MalformedPdf, NoPages

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

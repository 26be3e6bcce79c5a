"""The local halves of a provider render: the HTML sent out (data validated, template rendered in the
template sandbox, only the fields the template uses leave) and the check of what came back, run in its
own render process of the document sandbox under the job's limits (the provider's bytes are untrusted)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.blobs import RegionRouter
from docfence.blobs.kek.jobs import JobKeys, RowKey, read_object
from docfence.core.errors import BlobError
from docfence.core.policy import JobPolicy
from docfence.core.records import Job
from docfence.engines.report.data import template_values, validate_data
from docfence.engines.report.jinja import render_html
from docfence.sandbox import Sandbox, Task
from docfence.sandbox.report_job import read_snapshot


def provider_input(router: RegionRouter, job: Job, keys: JobKeys) -> bytes:
    """The HTML document a provider renders (CSS inlined), from the job's snapshot opened under its data
    key (plaintext when its row names no provider). Raises TemplateError, TemplateDataInvalid or
    BlobError; assets of the bundle are not sent (a provider gets no more than the page needs)."""
    if job.input_key is None:
        raise BlobError("the job has no input")
    snapshot = read_object(router.for_region(job.region), job.input_key, keys.key_for(RowKey.of(job)),
                           expected_sha256=job.input_sha256)
    job_input = read_snapshot(snapshot)
    bundle = job_input.bundle
    validate_data(bundle.schema, job_input.data)
    html = render_html(bundle.html, template_values(job_input.data, job_input.period))
    style = f"<style>{bundle.css}</style>"
    html = html.replace("</head>", style + "</head>", 1) if "</head>" in html else style + html
    return html.encode("utf-8")


def check_provider_output(sandbox: Sandbox, artifact: bytes, policy: JobPolicy, *,
                          heartbeat: Callable[[], object], heartbeat_interval_s: float,
                          ) -> tuple[bytes, int, dict[str, Any]]:
    """(output, pages, validation) of a provider's PDF, checked in its own render process: watermarked
    and validated like any PDF when the policy has a watermark, else checked to open with pages.
    `heartbeat` keeps the attempt's lease while it runs (what it raises, e.g. LeaseLost, propagates).
    Raises the coded error of the sandbox's outcome (render_crashed, render_resource_exceeded, ...)."""
    with tempfile.TemporaryDirectory(prefix="docfence-dispatch-") as tmp:
        src, out = Path(tmp) / "input.pdf", Path(tmp) / "output.pdf"
        src.write_bytes(artifact)
        outcome = sandbox.run(Task("provider_check", src, out, policy), heartbeat=heartbeat,
                              heartbeat_interval_s=heartbeat_interval_s)
        if not outcome.ok:
            raise outcome.error()
        return out.read_bytes(), outcome.pages, dict(outcome.validation or {})

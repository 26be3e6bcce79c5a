"""The validation report as GET /v1/jobs/{id} shows it: for a job that failed validation, which check
failed, on which page and what differed (never document text), as `docfence inspect` and the console."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from docfence.observability.inspect import report_summary


class CheckOut(BaseModel):
    name: str
    ok: bool
    failures: list[str] = Field(default=[], description="The check's failure messages (generic)")
    details: list[str] = Field(default=[], description=(
        "Which page and what differed, e.g. \"page 3: /Annots 12 -> 11\"; never document text"))


class ValidationOut(BaseModel):
    """The report of the attempt that failed validation (`attempt` names it)."""

    attempt: int | None = None
    ok: bool
    mode: str | None = None
    pages: int | None = None
    checks: list[CheckOut]


def validation_out(report: dict[str, Any] | None) -> ValidationOut | None:
    """The wire form of a kept validation report (core.records.failed_validation), capped as
    observability.inspect.report_summary caps it; None when there is none."""
    summary = report_summary(report)
    if summary is None:
        return None
    pages = summary.get("pages")
    return ValidationOut(attempt=summary.get("attempt"), ok=summary["ok"], mode=summary.get("mode"),
                         pages=pages if isinstance(pages, int) else None,
                         checks=[CheckOut(**c) for c in summary["checks"]])

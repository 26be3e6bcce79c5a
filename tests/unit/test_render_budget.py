"""The render budget grows with the input: base + per MB + per page, raster pages by their DPI, capped."""

from __future__ import annotations

from pathlib import Path

from docfence.core.policy import JobPolicy, Limits, Mode
from docfence.sandbox.supervisor import Task, _raster_dpi


def test_a_tiny_vector_file_gets_seconds_and_pages_add_to_it() -> None:
    limits = Limits()
    tiny = limits.render_budget_s(input_bytes=3_000, pages=1)
    assert tiny < 11
    assert limits.render_budget_s(input_bytes=3_000, pages=2000) == tiny - 0.05 + 2000 * 0.05


def test_raster_pages_get_their_own_per_page_budget_scaled_by_dpi() -> None:
    limits = Limits()
    vector = limits.render_budget_s(input_bytes=0, pages=100)
    at_150 = limits.render_budget_s(input_bytes=0, pages=100, raster_dpi=150)
    at_300 = limits.render_budget_s(input_bytes=0, pages=100, raster_dpi=300)
    assert vector == 10 + 100 * 0.05
    assert at_150 == 10 + 100 * 0.25
    assert at_300 == 10 + 100 * 1.0


def test_a_2000_page_raster_job_fits_under_the_cap_at_150_dpi() -> None:
    limits = Limits()
    assert limits.render_budget_s(input_bytes=0, pages=2000, raster_dpi=150) < limits.render_timeout_s
    assert limits.render_budget_s(input_bytes=0, pages=2000, raster_dpi=600) == limits.render_timeout_s


def test_the_sandbox_asks_for_the_raster_budget_only_for_raster_watermark_jobs(tmp_path: Path) -> None:
    def task(kind: str, mode: Mode) -> Task:
        return Task(kind, tmp_path / "in.pdf", tmp_path / "out.pdf", JobPolicy(mode=mode, dpi=200))

    assert _raster_dpi(task("watermark", Mode.RASTER)) == 200
    assert _raster_dpi(task("watermark", Mode.VECTOR)) is None
    assert _raster_dpi(task("report", Mode.RASTER)) is None

"""The shipped sample template ("monthly") and a generator of SYNTHETIC data for it: made-up clinic
activity metrics (appointments per site, department and day), never patient data."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from docfence.engines.report.bundle import TemplateBundle, load_bundle

TEMPLATES_DIR = Path(__file__).parent / "report_templates"
MONTHLY_DIR = TEMPLATES_DIR / "monthly"
SAMPLE_CLINIC = "Synthetic Demo Clinic"
DEPARTMENTS = (
    "Cardiology",
    "Dermatology",
    "Endocrinology",
    "Gastroenterology",
    "Neurology",
    "Oncology",
    "Orthopaedics",
    "Paediatrics",
)
# Measured on the shipped template (A4, DejaVu Sans 9pt): detail rows that fit on page 1 below the
# header and summary, and on each later page. The last page is filled to about two thirds.
ROWS_ON_FIRST_PAGE = 27
ROWS_PER_PAGE = 45
LAST_PAGE_ROWS = 30


def load_monthly_bundle() -> TemplateBundle:
    """The shipped "monthly" sample bundle."""
    return load_bundle(MONTHLY_DIR)


def _row_count(pages: int) -> int:
    if pages <= 1:
        return ROWS_ON_FIRST_PAGE * 2 // 3
    return ROWS_ON_FIRST_PAGE + (pages - 2) * ROWS_PER_PAGE + LAST_PAGE_ROWS


def _rows(count: int, rng: random.Random, year: int, month: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    per_site = 28 * len(DEPARTMENTS)
    for i in range(count):
        site, rest = divmod(i, per_site)
        day, dept = divmod(rest, len(DEPARTMENTS))
        appointments = rng.randint(4, 60)
        rows.append(
            {
                "date": f"{year:04d}-{month:02d}-{day + 1:02d}",
                "site": f"Site {site + 1:02d}",
                "department": DEPARTMENTS[dept],
                "appointments": appointments,
                "no_shows": rng.randint(0, appointments // 6),
                "avg_wait_minutes": round(rng.uniform(3.0, 45.0), 1),
            }
        )
    return rows


def sample_monthly_data(pages: int = 1, seed: int = 0) -> dict[str, Any]:
    """Deterministic synthetic data for the monthly template, sized to render to about `pages` pages."""
    rng = random.Random(seed)
    year, month = 2026, 1 + seed % 12
    rows = _rows(_row_count(pages), rng, year, month)
    departments = []
    for name in DEPARTMENTS:
        mine = [r for r in rows if r["department"] == name]
        total = sum(r["appointments"] for r in mine)
        waits = [r["avg_wait_minutes"] for r in mine]
        departments.append(
            {
                "name": name,
                "appointments": total,
                "no_shows": sum(r["no_shows"] for r in mine),
                "avg_wait_minutes": round(sum(waits) / len(waits), 1) if waits else 0.0,
            }
        )
    return {
        "clinic": SAMPLE_CLINIC,
        "period": f"{year:04d}-{month:02d}",
        "notes": "All figures are synthetic, generated for testing; they describe no real clinic or patient.",
        "departments": departments,
        "rows": rows,
    }

"""Report-pipeline records in the store: templates, report requests, schedules, provider observations.

A mixin of SqlStore: it uses the same `_tx()` and named queries (queries/<dialect>/reports.sql).
"""

from __future__ import annotations


class ReportQueries:
    """Methods are added by the report pipeline; each runs named queries inside `self._tx()`."""

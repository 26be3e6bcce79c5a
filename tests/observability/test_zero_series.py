"""Every labelled counter that an alert rule or the dashboard reads has a series from start-up, so the
first event is a rise that rate() sees, not the birth of a series it cannot compare."""

from __future__ import annotations

import subprocess
import sys

from docfence.observability import metrics
from docfence.providers.poller import PollOutcomeCode

_FRESH = """
from prometheus_client import generate_latest
from docfence.observability import metrics
print(generate_latest().decode())
"""


def _fresh_exposition() -> str:
    """The metrics of a process that recorded nothing yet (this test process has recorded plenty)."""
    return subprocess.run([sys.executable, "-c", _FRESH], check=True, capture_output=True,
                          text=True, timeout=120).stdout


def test_the_poll_outcomes_are_the_pollers_codes() -> None:
    assert set(metrics.POLL_OUTCOMES) == {code.value for code in PollOutcomeCode}


def test_counters_read_by_rules_and_dashboard_start_at_zero() -> None:
    text = _fresh_exposition()
    expected = [f'docfence_stale_attempts_discarded_total{{reason="{r}"}} 0.0'
                for r in metrics.DISCARD_REASONS]
    expected += [f'docfence_provider_polls_total{{outcome="{o}"}} 0.0' for o in metrics.POLL_OUTCOMES]
    expected += [f'docfence_validation_failures_total{{check="unknown",mode="{m}"}} 0.0'
                 for m in ("raster", "vector")]
    expected += ['docfence_reclaims_total{outcome="requeued"} 0.0',
                 'docfence_reconcile_skipped_locked_total{pass="lease_expired"} 0.0']
    missing = [line for line in expected if line not in text.splitlines()]
    assert len(expected) > 10 and missing == []

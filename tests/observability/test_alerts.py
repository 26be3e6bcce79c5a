"""The alert rules: promtool accepts them, they fire on a dead worker fleet but not on a quiet queue,
and every expression names only metrics docfence exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from docfence.core.clock import FakeClock
from docfence.observability.exposition import build_registry
from docfence.store.base import Store

from .helpers import submit

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
             "gaugehistogram": ("_bucket", "_gcount", "_gsum")}
_UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'docfence_jobs{{state="queued", instance="api-1"}}'
        values: '5x20'
      - series: 'docfence_leases_valid{{mode="vector", instance="api-1"}}'
        values: '0x20'
      - series: 'docfence_claims_total{{mode="vector", instance="w-1"}}'
        values: '7x20'
      - series: 'docfence_job_max_overdue_seconds{{state="queued", instance="api-1"}}'
        values: '0 0 45+60x18'
    alert_rule_test:
      - eval_time: 12m
        alertname: DocfenceWorkersAbsent
        exp_alerts:
          - exp_labels: {{severity: page}}
            exp_annotations:
              summary: "Jobs are queued but no worker has claimed any for 5 minutes"
              runbook: "docs/runbook.md#draining-and-restarting-workers"
      - eval_time: 12m
        alertname: DocfenceJobPastDeadline
        exp_alerts:
          - exp_labels: {{severity: page}}
            exp_annotations:
              summary: "A job is 10m 45s past its deadline and still not terminal"
              runbook: "docs/runbook.md#a-job-looks-stuck"
  - interval: 1m
    input_series:  # a quiet queue: nothing queued, nothing leased, nothing claimed: no page
      - series: 'docfence_jobs{{state="queued", instance="api-1"}}'
        values: '0x20'
      - series: 'docfence_leases_valid{{mode="vector", instance="api-1"}}'
        values: '0x20'
      - series: 'docfence_job_max_overdue_seconds{{state="queued", instance="api-1"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 15m
        alertname: DocfenceWorkersAbsent
        exp_alerts: []
      - eval_time: 15m
        alertname: DocfenceJobPastDeadline
        exp_alerts: []
"""


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); rules not checked")
    return path


def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_rules_page_on_a_dead_fleet_and_not_on_a_quiet_queue(tmp_path: Path) -> None:
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(_UNIT_TESTS.format(rules=str(RULES)), "utf-8")
    done = subprocess.run([_promtool(), "test", "rules", str(tests)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _exported(store: Store) -> set[str]:
    names: set[str] = set()
    for family in build_registry(store).collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def test_every_expression_names_exported_metrics(store: Store, clock: FakeClock) -> None:
    submit(store)
    exported = _exported(store)
    rules = yaml.safe_load(RULES.read_text("utf-8"))
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert len(alerts) >= 6
    for rule in alerts:
        used = set(re.findall(r"\bdocfence_[a-z_]+", rule["expr"]))
        assert used, rule["alert"]
        assert used <= exported, (rule["alert"], used - exported)
        assert rule["labels"]["severity"] in ("page", "ticket") and rule["annotations"]["summary"]
    text = RULES.read_text("utf-8")
    for signal in ("docfence_job_max_overdue_seconds", "docfence_lease_expirations_total",
                   "docfence_validation_failures_total", "docfence_job_oldest_age_seconds"):
        assert signal in text
    assert "restart" not in " ".join(r["expr"] for r in alerts)  # symptoms, not restarts

"""The encryption counters: every (op, code) the alert and the dashboard read exists at zero in a fresh
process, rewraps count, an unknown op or free text cannot grow the label set, and the alert pages on one
failure and stays quiet on none (promtool unit tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from docfence.observability import metrics

from .test_alerts import RULES, _promtool
from .test_zero_series import _fresh_exposition

ALERT = "DocfenceEncryptionFailures"
_UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:  # a tampered artifact: one download failed to open
      - series: 'docfence_encryption_failures_total{{op="open", code="object_integrity", instance="api-1"}}'
        values: '0 0 0 1+0x17'
      - series: 'docfence_encryption_failures_total{{op="unwrap", code="config_invalid", instance="api-1"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: {alert}
        exp_alerts:
          - exp_labels: {{severity: page, op: open, code: object_integrity}}
            exp_annotations:
              summary: "1 open failures (object_integrity) of encrypted job data in 10 minutes"
              runbook: "docs/runbook.md#encryption-failures-and-a-lost-key-encryption-key"
      - eval_time: 15m
        alertname: {alert}
        exp_alerts: []
  - interval: 1m
    input_series:  # nothing failed: the zero series alone never page
      - series: 'docfence_encryption_failures_total{{op="unwrap", code="config_invalid", instance="w-1"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 15m
        alertname: {alert}
        exp_alerts: []
"""


def _value(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_the_encryption_counters_start_at_zero() -> None:
    lines = _fresh_exposition().splitlines()
    expected = [f'docfence_encryption_failures_total{{code="{c}",op="{o}"}} 0.0'
                for o in metrics.ENCRYPTION_OPS for c in metrics.ENCRYPTION_CODES]
    expected.append("docfence_rewraps_total 0.0")
    assert len(expected) == 13 and [line for line in expected if line not in lines] == []


def test_failures_and_rewraps_count_with_bounded_labels() -> None:
    seal = {"op": "seal", "code": "storage_error"}
    other = {"op": "other", "code": "a_b_c"}
    before, before_other = _value("docfence_encryption_failures_total", seal), _value(
        "docfence_encryption_failures_total", other)
    rewraps = _value("docfence_rewraps_total")
    metrics.count_encryption_failure("seal", "storage_error")
    metrics.count_encryption_failure("decrypt everything", "a b c")
    metrics.count_rewraps(3)
    metrics.count_rewraps(0)
    assert _value("docfence_encryption_failures_total", seal) == before + 1
    assert _value("docfence_encryption_failures_total", other) == before_other + 1
    assert _value("docfence_rewraps_total") == rewraps + 3


def test_the_alert_pages_on_a_failure_and_not_on_zero(tmp_path: Path) -> None:
    rules = yaml.safe_load(RULES.read_text("utf-8"))
    assert ALERT in {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = tmp_path / "encryption_test.yml"
    tests.write_text(_UNIT_TESTS.format(rules=str(RULES), alert=ALERT), "utf-8")
    done = subprocess.run([_promtool(), "test", "rules", str(tests)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rules_runbook_link_names_a_runbook_heading() -> None:
    runbook = RULES.parents[2] / "docs" / "runbook.md"
    anchors = {"-".join("".join(ch for ch in line.lstrip("#").strip().lower() if ch.isalnum() or ch in " -")
                        .split()) for line in runbook.read_text("utf-8").splitlines() if line.startswith("#")}
    rules = yaml.safe_load(RULES.read_text("utf-8"))
    links = [rule["annotations"].get("runbook", "") for group in rules["groups"] for rule in group["rules"]]
    named = [link.split("#", 1)[1] for link in links if link.startswith("docs/runbook.md#")]
    assert "encryption-failures-and-a-lost-key-encryption-key" in named
    assert [anchor for anchor in named if anchor not in anchors] == []

"""The alert rules on rows the reconciler skips for a lock: a sustained skip pages, a one-off skip (a
frozen client the server ended) does not, and an escalation opens a ticket (promtool unit tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from .test_alerts import RULES, _promtool

_UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:  # a session without limits keeps an expired lease locked: skipped every pass
      - series: 'docfence_reconcile_skipped_locked_total{{pass="lease_expired", instance="r-1"}}'
        values: '0+30x20'
      - series: 'docfence_reconcile_skipped_locked_escalated_total{{pass="lease_expired", instance="r-1"}}'
        values: '0 0 1+0x18'
    alert_rule_test:
      - eval_time: 12m
        alertname: DocfenceReconcilerSkipsLockedRows
        exp_alerts:
          - exp_labels: {{severity: page, pass: lease_expired}}
            exp_annotations:
              summary: "The reconciler's lease_expired pass keeps skipping rows locked by another session"
              runbook: "docs/runbook.md#rows-skipped-for-a-lock"
      - eval_time: 12m
        alertname: DocfenceLockedRowsEscalated
        exp_alerts:
          - exp_labels: {{severity: ticket, pass: lease_expired}}
            exp_annotations:
              summary: "Rows locked past a lease held up the lease_expired pass (1 in 30 minutes)"
              runbook: "docs/runbook.md#rows-skipped-for-a-lock"
  - interval: 1m
    input_series:  # a frozen worker's session, ended by the server after seconds: skipped for one minute
      - series: 'docfence_reconcile_skipped_locked_total{{pass="deadline_reached", instance="r-1"}}'
        values: '0 0 10 10+0x17'
      - series: 'docfence_reconcile_skipped_locked_escalated_total{{pass="deadline_reached", instance="r-1"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: DocfenceReconcilerSkipsLockedRows
        exp_alerts: []
      - eval_time: 15m
        alertname: DocfenceReconcilerSkipsLockedRows
        exp_alerts: []
      - eval_time: 15m
        alertname: DocfenceLockedRowsEscalated
        exp_alerts: []
"""


def test_the_skipped_row_rules_are_in_the_rules_file() -> None:
    rules = yaml.safe_load(RULES.read_text("utf-8"))
    names = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert {"DocfenceReconcilerSkipsLockedRows", "DocfenceLockedRowsEscalated"} <= names


def test_a_sustained_skip_pages_and_a_brief_one_does_not(tmp_path: Path) -> None:
    tests = tmp_path / "skipped_locked_test.yml"
    tests.write_text(_UNIT_TESTS.format(rules=str(RULES)), "utf-8")
    done = subprocess.run([_promtool(), "test", "rules", str(tests)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr

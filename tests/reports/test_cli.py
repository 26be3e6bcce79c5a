"""The report commands end to end on SQLite: templates, an idempotent request, show, retry refused while
queued, a schedule and one scheduler pass, and one provider dispatch pass against the loopback fake."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from docfence.cli import reports as reports_cli
from docfence.engines.report.render import render_report
from docfence.samples.monthly_report import MONTHLY_DIR, load_monthly_bundle, sample_monthly_data
from docfence.testing.fake_provider import FakeProvider


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="docfence")
    reports_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    code: int = args.func(args)
    return code


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", f"sqlite:///{tmp_path}/docfence.db")
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", f"file:{tmp_path}/objects")
    monkeypatch.delenv("DOCFENCE_CONFIG", raising=False)
    return tmp_path


def test_report_commands(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("templates", "create", "--id", "monthly", "--dir", str(MONTHLY_DIR)) == 0
    assert run("templates", "list") == 0
    assert "monthly@1" in capsys.readouterr().out
    data = env / "data.json"
    data.write_text(json.dumps(sample_monthly_data(pages=1)))
    base = ("reports", "request", "--tenant", "acme", "--subject", "clinic-1", "--period", "2026-01",
            "--template", "monthly@1", "--data", str(data))
    assert run(*base) == 0 and run(*base) == 0
    first, second = capsys.readouterr().out.splitlines()
    request_id = first.split("\t")[0]
    assert "created" in first and "existing" in second and second.split("\t")[0] == request_id
    assert run("reports", "show", request_id) == 0
    assert "queued" in capsys.readouterr().out
    assert run("reports", "retry", request_id) == 2  # the job is still queued
    assert "illegal_transition" in capsys.readouterr().err

    (env / "sched" / "acme" / "clinic-2").mkdir(parents=True)
    (env / "sched" / "acme" / "clinic-2" / "2026-02.json").write_text(json.dumps(sample_monthly_data()))
    assert run("reports", "schedule", "add", "--tenant", "acme", "--subject", "clinic-2", "--template",
               "monthly@1", "--start-period", "2026-02") == 0
    capsys.readouterr()
    for _ in range(2):
        assert run("reports", "schedule", "run", "--data-dir", str(env / "sched"),
                   "--now", "2026-03-02T00:00:00+00:00") == 0
    passes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(passes[0]["created"]) == 1 and passes[1]["created"] == []

    pdf = render_report(load_monthly_bundle(), sample_monthly_data()).pdf
    monkeypatch.setenv("VENDOR_KEY", "test-api-key")
    with FakeProvider(artifact=pdf) as fake:
        providers = env / "providers.toml"
        providers.write_text(f'[providers.vendor]\npreset = "docfence"\nbase_url = "{fake.base_url}"\n'
                             'auth_env = "VENDOR_KEY"\n[providers.vendor.poll]\ninitial_delay_s = 0.05\n'
                             'max_delay_s = 0.1\n')
        vendor = ("--processor", "vendor", "--providers", str(providers))
        assert run(*base[:7], "2026-09", *base[8:], *vendor) == 0
        vendor_request = capsys.readouterr().out.split("\t")[0]
        assert run("reports", "dispatch", "--once", "--providers", str(providers)) == 0
        assert json.loads(capsys.readouterr().out)["succeeded"] == 1
    assert run("reports", "show", vendor_request) == 0
    out = capsys.readouterr().out
    assert "succeeded" in out and "last status succeeded" in out


def test_a_report_with_bad_data_is_corrected_for_its_period(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newcomer's path: bad data refused naming the path, a bad period refused, a failed request
    superseded with corrected data."""
    from docfence.config import load_settings
    from docfence.store import open_store

    assert run("templates", "create", "--id", "monthly", "--dir", str(MONTHLY_DIR)) == 0
    bad, good, fixed = env / "bad.json", env / "good.json", env / "fixed.json"
    bad.write_text(json.dumps({**sample_monthly_data(pages=1), "clinic": ""}))
    good.write_text(json.dumps(sample_monthly_data(pages=1)))
    fixed.write_text(json.dumps(sample_monthly_data(pages=1, seed=9)))
    base = ("reports", "request", "--tenant", "acme", "--subject", "clinic-1", "--template", "monthly@1")
    capsys.readouterr()
    assert run(*base, "--period", "2026-01", "--data", str(bad)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("docfence: --data: invalid_report_data: template monthly@1: ") and "$.clinic" in err
    assert run(*base, "--period", "october", "--data", str(good)) == 2
    assert "--period: invalid_request: period='october': must be YYYY-MM" in capsys.readouterr().err
    assert run(*base, "--period", "2026-01", "--data", str(good), "--json") == 0
    first = json.loads(capsys.readouterr().out)
    store = open_store(load_settings().database_url)
    try:
        (claim,) = store.claim("w1")
        store.fail(claim.job.id, claim.attempt, "w1", "render_failed", "wrong figures", retryable=False)
    finally:
        store.close()
    assert run(*base, "--period", "2026-01", "--data", str(fixed)) == 2
    assert "--supersede" in capsys.readouterr().err
    assert run(*base, "--period", "2026-01", "--data", str(fixed), "--supersede",
               "--watermark", '{"text": "CORRECTED", "position": "footer"}') == 0
    out = capsys.readouterr().out
    assert f"created revision 2, superseding {first['id']}" in out
    new_id = out.split("\t")[0]
    assert run("reports", "show", first["id"]) == 0
    shown = capsys.readouterr().out
    assert f"superseded by {new_id}" in shown and "failed" in shown  # the evidence stays
    assert run("reports", "show", new_id, "--json") == 0
    new = json.loads(capsys.readouterr().out)
    assert new["supersedes"] == first["id"] and new["watermark"]["text"] == "CORRECTED"
    assert new["jobs"][0]["parent"] == first["jobs"][0]["id"]
    assert run(*base, "--period", "2026-01", "--watermark", "{oops") == 2
    assert capsys.readouterr().err.startswith("docfence: --watermark='{oops': not a JSON object")

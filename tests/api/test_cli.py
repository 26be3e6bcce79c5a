"""The `docfence` job and key commands against a live server: output and exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from docfence.cli import jobs, keys, serve

from .conftest import PDF, ApiEnv


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="docfence")
    sub = parser.add_subparsers(dest="command")
    for module in (jobs, keys, serve):
        module.register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.fixture
def shell(env: ApiEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ApiEnv:
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", env.settings.database_url)
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", env.settings.storage_url)
    monkeypatch.setenv("DOCFENCE_URL", env.base_url)
    monkeypatch.delenv("DOCFENCE_API_KEY", raising=False)
    assert cli(["keys", "create", "--tenant", "acme", "--scopes", "submit,read", "--name", "ci"]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert key.startswith("dfk_")
    monkeypatch.setenv("DOCFENCE_API_KEY", key)
    return env


def _json_out(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out.strip().splitlines()
    data: dict[str, object] = json.loads(out[-1])
    return data


def test_submit_status_wait_download(
    shell: ApiEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.pdf"
    src.write_bytes(PDF)
    assert cli(["submit", str(src), "--text", "PRIVATE", "--mode", "raster", "--json"]) == 0
    row = _json_out(capsys)
    assert row["file"] == str(src)
    job = row["job"]
    assert isinstance(job, dict)
    job_id = str(job["id"])
    assert job["state"] == "queued" and job["mode"] == "raster"
    assert shell.store.get(job_id).policy.watermark.text == "PRIVATE"  # type: ignore[union-attr]
    assert cli(["status", job_id]) == 0
    assert capsys.readouterr().out.startswith(f"{job_id} queued")
    shell.finish(job_id, b"%PDF-1.4 out\n")
    assert cli(["wait", job_id, "--budget", "5"]) == 0
    assert "succeeded" in capsys.readouterr().out
    out = tmp_path / "out.pdf"
    assert cli(["download", job_id, "--out", str(out)]) == 0
    assert out.read_bytes() == b"%PDF-1.4 out\n"
    folder = tmp_path / "dl"  # a trailing separator names a folder, made if missing
    assert cli(["download", job_id, "--out", f"{folder}/"]) == 0
    assert (folder / f"{job_id}.pdf").read_bytes() == b"%PDF-1.4 out\n"
    assert capsys.readouterr().out.strip().endswith(f"dl/{job_id}.pdf")
    assert cli(["cancel", job_id]) == 4
    assert "job_already_ended" in capsys.readouterr().err


def test_exit_codes_for_canceled_timeout_and_usage(
    shell: ApiEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in.pdf"
    src.write_bytes(PDF)
    assert cli(["submit", str(src), "--json"]) == 0
    slow = str(_json_out(capsys)["job"]["id"])  # type: ignore[index]
    assert cli(["wait", slow, "--budget", "0.4"]) == 3
    assert "poll_timeout" in capsys.readouterr().err
    assert cli(["submit", str(src), "--json"]) == 0
    doomed = str(_json_out(capsys)["job"]["id"])  # type: ignore[index]
    assert cli(["cancel", doomed]) == 0
    assert cli(["wait", doomed]) == 1
    assert cli(["submit", str(src), "--wait", "--budget", "0.3"]) == 3
    assert cli(["submit", str(tmp_path / "missing.pdf")]) == 2
    monkeypatch.delenv("DOCFENCE_API_KEY")
    assert cli(["status", slow]) == 2
    with pytest.raises(SystemExit) as usage:
        cli(["download", slow])
    assert usage.value.code == 2


def test_keys_list_and_revoke(shell: ApiEnv, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    key_id = listing.split("\t")[0]
    assert "acme" in listing and "dfk_" not in listing
    assert cli(["keys", "revoke", key_id]) == 0
    assert cli(["status", "job_x"]) == 4
    assert "unauthorized" in capsys.readouterr().err
    assert cli(["keys", "revoke", "nope"]) == 2
    assert cli(["keys", "create", "--tenant", "bad tenant"]) == 2
    assert cli(["keys", "create", "--tenant", "acme", "--scopes", "root"]) == 2


def test_operator_keys_are_issued_separately(shell: ApiEnv, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["keys", "create", "--tenant", "acme", "--scopes", "read,operator"]) == 2
    assert "--operator" in capsys.readouterr().err
    assert cli(["keys", "create", "--operator", "--name", "ops"]) == 0
    out = capsys.readouterr().out
    assert "scopes: operator" in out
    principal = shell.service.authenticate(out.strip().splitlines()[-1])
    assert principal.is_operator and not principal.allows("jobs.read")
    with pytest.raises(SystemExit):  # a key is either a tenant's or an operator's
        cli(["keys", "create", "--tenant", "acme", "--operator"])


def test_submit_many_files_waits_together_and_downloads(
    shell: ApiEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    files = []
    for name in ("a.pdf", "b.pdf"):
        path = tmp_path / name
        path.write_bytes(PDF + name.encode())
        files.append(path)
    junk = tmp_path / "c.docx"
    junk.write_bytes(b"PK\x03\x04 not a pdf")
    out_dir = tmp_path / "out"
    capsys.readouterr()

    def play_worker() -> None:  # finishes each job once it exists (the CLI is waiting meanwhile)
        done = 0
        while done < 2:
            for claim in shell.store.claim("test-worker", limit=50):  # one batch: claimed together
                shell.commit(claim, b"%PDF-1.4 out " + claim.job.id.encode())
                done += 1

    worker = threading.Thread(target=play_worker, daemon=True)
    worker.start()
    code = cli(["submit", *map(str, files), str(junk), "--out", str(out_dir), "--budget", "30", "--json"])
    worker.join(timeout=30)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 4  # the .docx was refused; the others succeeded
    assert [r["file"] for r in rows] == [str(files[0]), str(files[1]), str(junk)]
    for row in rows[:2]:
        assert row["job"]["state"] == "succeeded"
        assert Path(row["output"]).read_bytes() == b"%PDF-1.4 out " + row["job"]["id"].encode()
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.watermarked.pdf", "b.watermarked.pdf"]
    assert rows[2]["job"] is None and rows[2]["error"]["code"] == "unsupported_media_type"
    assert cli(["download", rows[0]["job"]["id"], "--out", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"].endswith(".pdf")
    assert cli(["submit", str(files[0]), "--deadline", "99999999"]) == 4
    assert "--deadline: invalid_request: deadline_s=1e+08: must be in (0, 3600]" in capsys.readouterr().err

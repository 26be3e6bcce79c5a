"""`docfence submit` (labels, --password-file, many files as one batch) and `docfence jobs` against a
live server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docfence.blobs.sealed import fetch_sealed, open_under
from docfence.service.artifacts_keys import job_keys, row_key
from docfence.storage_keys import job_prefix

from .conftest import PDF, ApiEnv
from .test_cli import cli, shell  # noqa: F401  (the fixture)


def test_many_files_go_as_one_batch_with_label_and_password(
    shell: ApiEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    files = []
    for name in ("one.pdf", "two.pdf", "three.pdf"):
        files.append(tmp_path / name)
        files[-1].write_bytes(PDF + name.encode())
    secret = tmp_path / "pw.txt"
    secret.write_text("s3cret-pw\nignored second line\n")
    capsys.readouterr()
    code = cli(["submit", *map(str, files), "--label", "Q4", "--password-file", str(secret),
                "--idempotency-key", "run-7", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0 and [r["job"]["filename"] for r in rows] == ["one.pdf", "two.pdf", "three.pdf"]
    assert {r["job"]["label"] for r in rows} == {"Q4"}
    assert [s.path for s in shell.seen if s.method == "POST"] == ["/v1/jobs/batch"]  # one request
    keys = [shell.store.get(r["job"]["id"]).idempotency_key for r in rows]
    assert keys == ["run-7-1", "run-7-2", "run-7-3"]
    blobs, opened = shell.service.router.for_region("local"), set()
    for job in (shell.store.get(r["job"]["id"]) for r in rows):  # each under its own data key
        prefix = job_prefix("acme", job.id)
        key, sealed = job_keys(shell.service).key_for(row_key(job)), fetch_sealed(blobs, prefix)
        assert key is not None and sealed is not None
        opened.add(open_under(sealed, key, prefix))
    assert opened == {"s3cret-pw"}


def test_jobs_lists_searches_and_pages(shell: ApiEnv, tmp_path: Path,  # noqa: F811
                                       capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "report.pdf"
    src.write_bytes(PDF)
    for _ in range(3):
        assert cli(["submit", str(src), "--label", "paged"]) == 0
    assert cli(["submit", str(src), "--label", "other"]) == 0
    capsys.readouterr()
    assert cli(["jobs", "--label", "paged", "--limit", "2", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row.get("label") for row in lines[:2]] == ["paged", "paged"] and "next_cursor" in lines[2]
    assert cli(["jobs", "--label", "paged", "--limit", "2", "--cursor", lines[2]["next_cursor"]]) == 0
    rest = capsys.readouterr().out.splitlines()
    assert len(rest) == 1 and "label=paged" in rest[0] and "report.pdf" in rest[0]
    assert cli(["jobs", "--filename", "nothing.pdf"]) == 0
    assert capsys.readouterr().out == ""


def test_bad_password_file_and_label_name_the_flag(shell: ApiEnv, tmp_path: Path,  # noqa: F811
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.pdf"
    src.write_bytes(PDF)
    capsys.readouterr()
    assert cli(["submit", str(src), "--password-file", str(tmp_path / "missing.txt")]) == 2
    assert capsys.readouterr().err.startswith("docfence: --password-file: cannot read")
    assert cli(["submit", str(src), "--label", "a\tb"]) == 4
    assert "--label:" in capsys.readouterr().err

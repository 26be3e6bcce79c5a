"""Marks through the HTTP API and the client: a 400 that names the field at fault, the job's marks and
field values on the job, the recipient hidden from read-only keys."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from docfence.client import DocfenceClient

from .conftest import PDF, ApiEnv

FOOTER = {"text": "{recipient} · {page}/{pages}", "position": "footer"}


def test_marks_and_fields_are_on_the_job_and_the_recipient_only_for_senders(any_env: ApiEnv) -> None:
    sender = any_env.client()
    job = sender.submit(PDF, marks=[{"text": "CONFIDENTIAL"}, FOOTER], recipient="Ada Example",
                        reference="REF-7")
    assert [m["kind"] for m in job.marks] == ["text", "text"]
    assert job.marks[1]["text"] == FOOTER["text"] and job.marks[1]["fields"] == ["recipient", "page", "pages"]
    assert job.fields["recipient"] == "Ada Example" and job.fields["job_id"] == job.id
    assert job.fields["reference"] == "REF-7" and len(job.fields["sha8"]) == 8
    reader = DocfenceClient(any_env.base_url, any_env.key(scopes=("read",)))
    seen = reader.get(job.id)
    assert seen.fields["recipient"] == "(hidden)" and seen.fields["job_id"] == job.id
    assert seen.marks[1]["text"] is None and seen.marks[1]["fields"] == ["recipient", "page", "pages"]
    events = reader.events(job.id)["events"]
    assert events[0]["details"]["recipient"] == "(hidden)"
    assert sender.events(job.id)["events"][0]["details"]["recipient"] == "Ada Example"


@pytest.mark.parametrize(("data", "field", "words"), [
    ({"marks": '[{"text": "for {recipent}"}]'}, "marks", "{recipent}"),
    ({"marks": '{"text": "x"}'}, "marks", "JSON array"),
    ({"watermark": '{"text": "{nope}"}'}, "watermark", "{nope}"),
    ({"recipient": "x" * 200}, "recipient", "at most 120"),
    ({"reference": "r" * 65}, "reference", "at most 64"),
])
def test_bad_marks_and_values_are_refused_with_a_400_naming_them(
    env: ApiEnv, data: dict[str, str], field: str, words: str
) -> None:
    upload = {"file": ("a.pdf", PDF, "application/pdf")}
    response = httpx.post(f"{env.base_url}/v1/jobs", data=data, files=upload,
                          headers={"Authorization": f"Bearer {env.key()}"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_watermark" and error["field"] == field and words in error["message"]


def test_the_cli_client_sends_marks_and_fields_and_names_a_refused_flag(
    env: ApiEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from .test_cli import cli

    monkeypatch.setenv("DOCFENCE_URL", env.base_url)
    monkeypatch.setenv("DOCFENCE_API_KEY", env.key())
    doc = tmp_path / "in.pdf"
    doc.write_bytes(PDF)
    footer = '[{"text": "CONFIDENTIAL"}, {"text": "{recipient} {page}/{pages}", "position": "footer"}]'
    assert cli(["submit", str(doc), "--json", "--recipient", "Ada Example", "--marks", footer]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    job_id = row["job"]["id"]
    assert row["job"]["fields"]["recipient"] == "Ada Example"  # the sender sees whom it went to
    stored = env.store.get(job_id).policy
    assert stored.fields is not None and stored.fields["recipient"] == "Ada Example"
    assert [m.position for m in stored.all_marks()] == ["diagonal", "footer"]
    assert cli(["submit", str(doc), "--recipient", "x" * 200]) != 0
    assert "--recipient" in capsys.readouterr().err

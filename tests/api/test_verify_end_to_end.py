"""A class that stamps a verification code and signs its outputs, through the real path on both stores:
HTTP submit -> worker -> sandboxed render (marks, validation, code, signature) -> fenced commit ->
download. The downloaded file decodes (zbarimg, 150 DPI) to the URL frozen on the job, its signature is
valid and covers the whole file (pdfsig), and /v1/verify answers with its sha256 and matches it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docfence.blobs import RegionRouter
from docfence.cli import main
from docfence.config import DocumentClass, SigningConfig, VerificationConfig
from docfence.core.policy import SigningSpec, VerificationSpec
from docfence.observability.inspect import format_inspection, inspect_job, inspection_dict
from docfence.samples import pdfs
from docfence.testing.signing_ca import write_test_ca
from docfence.testing.stores import temporary_pg_database
from docfence.worker.runner import Worker

from .conftest import ApiEnv, api_env


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def issuing_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ApiEnv]:
    p12, made = write_test_ca(tmp_path)
    overrides = {
        "classes": {"default": DocumentClass("default"),
                    "shared": DocumentClass("shared", verification=VerificationSpec(pages="1,3"),
                                            signing=SigningSpec(visible=True))},
        "verification": VerificationConfig(public_base_url="https://verify.example.org",
                                           organisation="Example Health"),
        "signing": SigningConfig(pkcs12=str(p12), pkcs12_password=made.password),
    }
    if request.param == "sqlite":
        with api_env(tmp_path, **overrides) as env:  # type: ignore[arg-type]
            yield env
        return
    with temporary_pg_database("docfence_verify_e2e") as url, \
            api_env(tmp_path, url, **overrides) as env:  # type: ignore[arg-type]
        yield env


def test_issued_document_carries_a_decodable_code_and_a_whole_file_signature(
        issuing_env: ApiEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = issuing_env
    with env.client() as client:
        job = client.submit(pdfs.many_pages(3), document_class="shared")
        worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
        assert worker.run(until_idle=True).succeeded == 1
        done = client.get(job.id)
        assert done.state == "succeeded", done
        path = client.download(job.id, tmp_path / "issued.pdf")
    data = path.read_bytes()
    spec = env.store.get(job.id).policy.verification
    assert spec is not None and spec.url.startswith(f"https://verify.example.org/v1/verify/{job.id}?c=")
    subprocess.run(["pdftoppm", "-r", "150", "-png", str(path), str(tmp_path / "p")], check=True,
                   timeout=120)
    decoded = [subprocess.run(["zbarimg", "-q", "--raw", str(tmp_path / f"p-{i}.png")],
                              capture_output=True, text=True, timeout=60).stdout.split() for i in (1, 2, 3)]
    assert decoded == [[spec.url], [], [spec.url]]
    sig = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert "Signature is Valid" in sig and "Total document signed" in sig, sig
    artifact = env.store.artifact(job.id)
    assert artifact is not None
    checks = {c["name"]: c["ok"] for c in artifact.validation["checks"]}
    assert all(checks[name] for name in ("verification_code_structure", "verification_code_decodes",
                                         "signature_valid", "signature_covers_file")), checks
    sha = hashlib.sha256(data).hexdigest()
    public = httpx.get(spec.url.replace("https://verify.example.org", env.base_url)).json()
    assert public["sha256"] == sha and public["organisation"] == "Example Health"
    match = httpx.post(f"{env.base_url}/v1/verify/{job.id}", params={"c": spec.code},
                       files={"file": ("issued.pdf", data, "application/pdf")}).json()
    assert match == {"match": True, "sha256": sha}
    ins = inspect_job(env.store, job.id)
    issued = inspection_dict(ins)["issue"]
    assert issued["verification"] == {"pages": "1,3", "url": spec.url, "status": "ok"}
    assert issued["signature"]["status"] == "ok" and issued["signature"]["visible"] is True
    assert "Example Health Documents" in issued["signature"]["signer"]
    screen = format_inspection(ins)
    assert f"code       ok (pages 1,3) {spec.url}" in screen
    assert "signature  ok (visible, " in screen
    with env.client() as client:  # the client and the CLI, as a recipient would use them (no key sent)
        assert client.verify(job.id, spec.code, document=path) == match
        assert client.verify(job.id, spec.code)["sha256"] == sha
    capsys.readouterr()
    assert main(["verify", spec.url, "--url", env.base_url, "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == match
    assert main(["verify", job.id, "--code", spec.code, "--url", env.base_url, "--sha256", "0" * 64]) == 1
    assert capsys.readouterr().out.startswith("NO MATCH")
    assert main(["verify", job.id, "--code", "A" * 16, "--url", env.base_url]) == 4
    assert "not_found" in capsys.readouterr().err


def test_an_encrypted_document_of_a_signing_class_fails_with_signing_refused(issuing_env: ApiEnv) -> None:
    """Its render succeeds and is validated; the sign task refuses the encrypted output: the job fails
    with `signing_refused`, permanently, and nothing is published."""
    import io

    import pikepdf

    buf = io.BytesIO()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(1))) as pdf:
        pdf.save(buf, encryption=pikepdf.Encryption(owner="o-secret", user="u-secret", R=6))
    env = issuing_env
    with env.client() as client:
        job = client.submit(buf.getvalue(), document_class="shared", password="u-secret")
        worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
        assert worker.run(until_idle=True).failed == 1
        done = client.get(job.id)
    assert done.state == "failed" and done.raw["error"]["code"] == "signing_refused", done.raw
    assert env.store.artifact(job.id) is None


def test_a_signing_process_that_dies_publishes_nothing_and_requeues_the_job(
        issuing_env: ApiEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The render succeeded and was validated; its signing process is SIGKILLed before it signs. The
    attempt ends as render_crashed (retryable): nothing is published, no staged object is left, and the
    job is queued for its next attempt."""
    monkeypatch.setenv("DOCFENCE_FAULTS", "sign=once:kill")  # read by the zygote the worker starts
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    env = issuing_env
    with env.client() as client:
        job = client.submit(pdfs.many_pages(1), document_class="shared")
        worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
        counters = worker.run(until_idle=True)
        after = client.get(job.id)
    assert counters.succeeded == 0 and counters.retried == 1, counters
    assert after.state == "queued" and after.attempt == 1, after.raw
    assert env.store.artifact(job.id) is None
    attempts = env.store.attempts(job.id)
    assert [a.error_code for a in attempts] == ["render_crashed"]
    blobs = env.service.router.for_region("local")
    assert [key for key in blobs.list("") if "/attempts/" in key] == []  # no output was staged

"""The worker's own wiring (not just the sandbox's): a real worker renders a signing class's job and a
job with a PDF password; just before it stops its zygotes, their writable memory is read through
/proc/PID/mem. The watermark zygote holds neither the password nor the key, the sign zygote not the
password (both zygotes are children of this process: the worker runs in this thread)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pikepdf
import pytest
from api.conftest import api_env  # tests/ is on sys.path (rootdir packages, no tests/__init__.py)

from docfence.blobs import RegionRouter
from docfence.config import DocumentClass, SigningConfig
from docfence.core.policy import SigningSpec
from docfence.engines.signing import SigningKey
from docfence.samples import pdfs
from docfence.sandbox import Sandbox
from docfence.testing.signing_ca import write_test_ca
from docfence.worker.runner import Worker

from .test_secrets import PASSWORD, _found, _needles


def _locked() -> bytes:
    out = io.BytesIO()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(1))) as pdf:
        pdf.save(out, encryption=pikepdf.Encryption(owner="o-" + PASSWORD, user=PASSWORD, R=6))
    return out.getvalue()


def _scan_before_close(box: Sandbox, needles: dict[str, bytes], into: dict[str, dict[str, int]],
                       name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    close: Callable[[], None] = box.close

    def scanning_close() -> None:
        if box.zygote_pid is not None:
            into[name] = _found(box.zygote_pid, needles)
        close()

    monkeypatch.setattr(box, "close", scanning_close)


def test_a_worker_keeps_the_key_and_the_password_out_of_its_zygotes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p12, made = write_test_ca(tmp_path)
    key = SigningKey.from_pkcs12(p12.read_bytes(), made.password)
    classes = {"default": DocumentClass("default"), "signed": DocumentClass("signed", signing=SigningSpec())}
    signing = SigningConfig(pkcs12=str(p12), pkcs12_password=made.password)
    with api_env(tmp_path, classes=classes, signing=signing) as env, env.client() as client:
        signed = client.submit(pdfs.many_pages(2), document_class="signed")
        locked = tmp_path / "locked.pdf"
        locked.write_bytes(_locked())
        protected = client.submit(locked, password=PASSWORD)
        worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
        seen: dict[str, dict[str, int]] = {}
        _scan_before_close(worker.sandbox, _needles(key), seen, "watermark", monkeypatch)
        _scan_before_close(worker.sign_sandbox, _needles(), seen, "sign", monkeypatch)
        assert worker.run(until_idle=True).succeeded == 2
        assert {client.get(job.id).state for job in (signed, protected)} == {"succeeded"}
    assert seen == {"watermark": {}, "sign": {}}  # both zygotes ran and were scanned

"""GET/POST /v1/verify/{job_id}: no key, rate-limited per address; the answer names only the issuer, the
issue time, the artifact's sha256 and whether it was deleted, and every document that is not verifiable
(unknown id, wrong or missing code, another tenant's job without a code, not succeeded) gets one 404."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from docfence.config import DocumentClass, VerificationConfig
from docfence.core.clock import FakeClock
from docfence.core.policy import VerificationSpec
from docfence.samples import pdfs
from docfence.testing.stores import temporary_pg_database
from docfence.verification import verification_code

from .conftest import ApiEnv, api_env

CLASSES = {"default": DocumentClass("default"),
           "shared": DocumentClass("shared", verification=VerificationSpec(pages="all"))}
CONFIG = VerificationConfig(public_base_url="https://verify.example.org/", organisation="Example Health",
                            requests_per_minute=60, burst=40)
ISSUED = b"%PDF-1.4 the issued artifact, recipient Jane Roe, patient 1234\n"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def venv(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        with api_env(tmp_path, classes=CLASSES, verification=CONFIG) as e:
            yield e
        return
    with temporary_pg_database("docfence_verify") as url, \
            api_env(tmp_path, url, classes=CLASSES, verification=CONFIG) as e:
        yield e


def _issued(env: ApiEnv, tenant: str = "acme", document_class: str = "shared") -> tuple[str, str]:
    """A succeeded job of `document_class` and the code its QR carries."""
    with env.client(env.key(tenant)) as client:
        job = client.submit(pdfs.many_pages(1), document_class=document_class)
    env.finish(job.id, ISSUED)
    spec = env.store.get(job.id).policy.verification
    return job.id, spec.code if spec else ""


def test_submission_freezes_the_url_and_code_in_the_policy(venv: ApiEnv) -> None:
    job_id, code = _issued(venv)
    job = venv.store.get(job_id)
    spec = job.policy.verification
    with venv.client() as client:
        assert spec is not None and client.get(job_id).raw["verification_url"] == spec.url
        plain = client.submit(pdfs.many_pages(1), document_class="default")
        assert plain.raw["verification_url"] is None
    assert spec is not None and spec.pages == "all"
    assert code == verification_code(venv.service._secret, job_id, job.input_sha256 or "")
    url = urlsplit(spec.url)
    assert (url.scheme, url.netloc, url.path) == ("https", "verify.example.org", f"/v1/verify/{job_id}")
    assert parse_qs(url.query) == {"c": [code]}


def test_get_answers_only_issuer_time_hash_and_deletion(venv: ApiEnv) -> None:
    job_id, code = _issued(venv)
    answer = httpx.get(f"{venv.base_url}/v1/verify/{job_id}", params={"c": code})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"organisation", "issued_at", "sha256", "deleted"}
    assert body["organisation"] == "Example Health" and body["deleted"] is False
    assert body["sha256"] == hashlib.sha256(ISSUED).hexdigest()
    for secret in ("acme", "Jane", "1234", "shared", "test-worker", "input", "objects"):
        assert secret not in answer.text


def test_every_unverifiable_document_gets_the_same_404(venv: ApiEnv) -> None:
    job_id, code = _issued(venv)
    plain_id, _ = _issued(venv, tenant="other", document_class="default")  # issued without a code
    with venv.client(venv.key("other")) as client:
        queued = client.submit(pdfs.many_pages(1), document_class="shared")
    queued_code = venv.store.get(queued.id).policy.verification.code  # type: ignore[union-attr]
    wrong = ("A" if code[0] != "A" else "B") + code[1:]
    asked = [(job_id, wrong), (job_id, None), (job_id, code.lower()), ("01UNKNOWNJOB000000000000000", code),
             (plain_id, code), (plain_id, None), (queued.id, queued_code)]
    bodies = set()
    for asked_id, asked_code in asked:
        params = {"c": asked_code} if asked_code else {}
        for answer in (httpx.get(f"{venv.base_url}/v1/verify/{asked_id}", params=params),
                       httpx.post(f"{venv.base_url}/v1/verify/{asked_id}", params=params,
                                  data={"sha256": hashlib.sha256(ISSUED).hexdigest()})):
            assert answer.status_code == 404, (asked_id, asked_code, answer.text)
            bodies.add(answer.text)
    assert len(bodies) == 1, bodies


def test_post_compares_a_file_or_its_sha256(venv: ApiEnv) -> None:
    job_id, code = _issued(venv)
    url = f"{venv.base_url}/v1/verify/{job_id}"
    right, other = hashlib.sha256(ISSUED).hexdigest(), hashlib.sha256(ISSUED + b" ").hexdigest()
    assert httpx.post(url, params={"c": code}, data={"sha256": right.upper()}).json() == \
        {"match": True, "sha256": right}
    assert httpx.post(url, params={"c": code}, data={"sha256": other}).json()["match"] is False
    sent = httpx.post(url, params={"c": code}, files={"file": ("d.pdf", ISSUED, "application/pdf")})
    assert sent.json() == {"match": True, "sha256": right}
    changed = httpx.post(url, params={"c": code}, files={"file": ("d.pdf", ISSUED + b" ", "application/pdf")})
    assert changed.json() == {"match": False, "sha256": other}
    for bad in ({"data": {"sha256": "xyz"}}, {}, {"data": {"sha256": right},
                                                  "files": {"file": ("d.pdf", ISSUED, "application/pdf")}}):
        refused = httpx.post(url, params={"c": code}, **bad)  # type: ignore[arg-type]
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "invalid_request"


def test_a_deleted_document_still_verifies_as_deleted(venv: ApiEnv) -> None:
    job_id, code = _issued(venv)
    admin = venv.key(scopes=("admin",))
    gone = httpx.delete(f"{venv.base_url}/v1/jobs/{job_id}", params={"request_id": "DR-1"},
                        headers={"Authorization": f"Bearer {admin}"})
    assert gone.status_code == 200, gone.text
    body = httpx.get(f"{venv.base_url}/v1/verify/{job_id}", params={"c": code}).json()
    assert body["deleted"] is True and body["sha256"] == hashlib.sha256(ISSUED).hexdigest()


def test_requests_over_the_address_budget_get_429_until_the_bucket_refills(tmp_path: Path) -> None:
    tight = VerificationConfig(public_base_url="https://v.example", organisation="X", requests_per_minute=6,
                               burst=2)
    with api_env(tmp_path, classes=CLASSES, verification=tight) as env:
        url = f"{env.base_url}/v1/verify/01UNKNOWNJOB000000000000000"
        assert [httpx.get(url).status_code for _ in range(2)] == [404, 404]
        refused = httpx.post(url, data={"sha256": "0" * 64})
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
        assert refused.headers["Retry-After"] == "10"
        assert httpx.get(f"{env.base_url}/healthz").status_code == 200  # other routes are not limited
        assert isinstance(env.clock, FakeClock)
        env.clock.advance(10)  # one request's worth of tokens at 6 per minute
        assert httpx.get(url).status_code == 404
        assert httpx.get(url).status_code == 429

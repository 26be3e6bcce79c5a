"""All pairs of class features through the service: mode x text / PNG / SVG marks x dynamic fields x
sanitise policy x verification code x signing x report variant x encrypted input (pairs.py), each
combination a class of its own on both deployments (conftest.py), submitted through the API with the
Python client, rendered by the real worker, and its output judged by outside tools. Every pair of
feature values that can occur together is seen together in at least one combination."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from docfence.core.errors import ApiError
from docfence.demo import with_active_content
from docfence.reports import Templates
from docfence.samples import pdfs
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.testing.judges import Expect, assert_holds, judge

from .conftest import PAIR_CLASSES, STORES, Deployment, class_expect, content_expect, encrypted, fetch, finish
from .pairs import FEATURES, covering_set, pairs_of, possible, required_pairs

TENANT, TEMPLATE = "pairs", "pairs-monthly"
USER_PW, OWNER_PW = "pairs-user-pw", "pairs-owner-pw"
FIELDS = {"recipient": "Dr. Ada Example", "reference": "REF-7"}
REPORT_TEXT = "Synthetic Demo Clinic"  # sample_monthly_data()'s clinic
# Classes that sign, for an encrypted input (its own outcome: signing_refused, docs/verification.md).
SIGNERS = {combo["signing"]: name for name, combo in PAIR_CLASSES.items()
           if combo["signing"] != "off" and combo["variant"] == "watermark"}
# A raster class, for a report of each variant (refused when requested).
RASTER = next(name for name, combo in PAIR_CLASSES.items() if combo["mode"] == "raster")
VARIANT_NAMES = [v for v in FEATURES["variant"] if v.startswith("pdf/")]
# A class with a code and a signature, for a report (which gets neither) and the planted defects.
REPORT_OF_ISSUER = next(name for name, combo in PAIR_CLASSES.items()
                        if combo["code"] == "on" and combo["signing"] != "off")


def _cases(names: list[str]) -> list[Any]:
    return [pytest.param(name, store, id=f"{name}-{store}-" + ",".join(PAIR_CLASSES[name].values()))
            for name in names for store in STORES]


def test_the_combinations_hold_every_possible_pair() -> None:
    combos = list(PAIR_CLASSES.values())
    assert combos == covering_set(FEATURES, possible) and all(possible(c) for c in combos)
    seen = set().union(*(pairs_of(c) for c in combos))
    assert required_pairs(FEATURES, possible) <= seen
    # never together: a report has no uploaded input to encrypt; a class that signs refuses an
    # encrypted one (test_an_encrypted_input_of_a_signing_class_is_refused)
    required = required_pairs(FEATURES, possible)
    assert (("encrypted", "yes"), ("variant", "report")) not in required
    assert (("encrypted", "yes"), ("signing", "visible")) not in required
    assert (("mode", "raster"), ("variant", "pdf/a-3b")) not in required
    assert set(SIGNERS) == {"invisible", "visible"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pair-input")
    plain = with_active_content(pdfs.links())  # a script, an embedded file, an author, a URI link
    (folder / "letter.pdf").write_bytes(plain)
    (folder / "locked.pdf").write_bytes(encrypted(plain, USER_PW, OWNER_PW))
    return {"no": folder / "letter.pdf", "yes": folder / "locked.pdf"}


@pytest.fixture(scope="module")
def pair_jobs(deployments: dict[str, Deployment], sources: dict[str, Path]) -> dict[tuple[str, str], str]:
    """Every combination submitted on both stores before any test waits: (class, store) -> job id, or
    the refusal as text; ("signing-" + signing, store) the encrypted inputs of signing classes,
    ("raster-" + variant, store) the variant reports of a raster class (refused), ("report-of-issuer", store)
    a report of a class with a code and a signature."""
    jobs: dict[tuple[str, str], str] = {}
    for store, deployment in deployments.items():
        Templates(deployment.service.store).create_version(TEMPLATE, load_monthly_bundle(), actor="test",
                                                           owner=TENANT)
        with deployment.client(TENANT) as client:
            for name, combo in PAIR_CLASSES.items():
                try:
                    jobs[name, store] = _submit(client, name, combo, sources)
                except ApiError as exc:  # the combination's own test reports it
                    jobs[name, store] = f"refused: {type(exc).__name__}: {exc}"
            for signing, name in SIGNERS.items():
                jobs[f"signing-{signing}", store] = client.submit(
                    sources["yes"], document_class=name, password=USER_PW).id
            for variant in VARIANT_NAMES:
                subject = f"raster-{variant.replace('/', '-')}"
                try:
                    answer = client.request_report(subject, "2026-01", f"{TEMPLATE}@1",
                                                   sample_monthly_data(pages=1), variant=variant,
                                                   document_class=RASTER)
                    jobs[f"raster-{variant}", store] = str(answer["jobs"][0]["id"])
                except ApiError as exc:
                    jobs[f"raster-{variant}", store] = f"refused: {type(exc).__name__}: {exc}"
            answer = client.request_report("report-of-issuer", "2026-01", f"{TEMPLATE}@1",
                                           sample_monthly_data(pages=1), document_class=REPORT_OF_ISSUER)
            jobs["report-of-issuer", store] = str(answer["jobs"][0]["id"])
    return jobs


def _submit(client: Any, name: str, combo: dict[str, str], sources: dict[str, Path]) -> str:
    if combo["variant"] == "watermark":
        password = USER_PW if combo["encrypted"] == "yes" else None
        return str(client.submit(sources[combo["encrypted"]], document_class=name, password=password,
                                 label="pairs", **FIELDS).id)
    variant = None if combo["variant"] == "report" else combo["variant"]
    answer = client.request_report(name, "2026-01", f"{TEMPLATE}@1", sample_monthly_data(pages=1),
                                   variant=variant, document_class=name)
    return str(answer["jobs"][0]["id"])


@pytest.mark.parametrize("name,store", _cases(list(PAIR_CLASSES)))
def test_combination(name: str, store: str, pair_jobs: dict[tuple[str, str], str],
                     deployments: dict[str, Deployment], sources: dict[str, Path], tmp_path: Path) -> None:
    combo, deployment = PAIR_CLASSES[name], deployments[store]
    job_id = pair_jobs[name, store]
    assert job_id.startswith("job_"), job_id
    job = finish(deployment, TENANT, job_id)
    artifact = fetch(deployment, TENANT, job, tmp_path)
    if combo["variant"] == "watermark":
        password = USER_PW if combo["encrypted"] == "yes" else None
        given = content_expect(deployment, name, sources[combo["encrypted"]])
        expect = class_expect(deployment, job, password=password, differs_password=password, **given)
    else:
        raster = combo["mode"] == "raster"
        expect = class_expect(deployment, job, text=() if raster else (REPORT_TEXT,),
                              no_text=(REPORT_TEXT,) if raster else (), embedded=0, javascript=False)
    assert_holds(artifact, expect, tmp_path / "judged")


VARIANTS = [name for name, combo in PAIR_CLASSES.items() if combo["variant"].startswith("pdf/")]


@pytest.mark.parametrize("name,store", _cases(VARIANTS))
def test_report_variant_keeps_its_identification(name: str, store: str, pair_jobs: dict[tuple[str, str], str],
                                                 deployments: dict[str, Deployment], tmp_path: Path) -> None:
    """The variant's XMP identification and the properties a reader sees without veraPDF (fonts
    embedded, output intent; tags, /Lang and dc:title for UA) survive the class's marks and sanitiser."""
    deployment = deployments[store]
    job_id = pair_jobs[name, store]
    assert job_id.startswith("job_"), job_id
    job = finish(deployment, TENANT, job_id)
    artifact = fetch(deployment, TENANT, job, tmp_path)
    assert_holds(artifact, Expect(variant=PAIR_CLASSES[name]["variant"]), tmp_path / "judged")


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("signing", ["invisible", "visible"])
def test_an_encrypted_input_of_a_signing_class_is_refused(signing: str, store: str,
                                                          pair_jobs: dict[tuple[str, str], str],
                                                          deployments: dict[str, Deployment]) -> None:
    job = finish(deployments[store], TENANT, pair_jobs[f"signing-{signing}", store])
    assert (job.state, job.error_code) == ("failed", "signing_refused"), job.raw
    assert job.artifact is None


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_a_variant_report_of_a_raster_class_is_refused(variant: str, store: str,
                                                       pair_jobs: dict[tuple[str, str], str]) -> None:
    """Rasterised pages keep no text, fonts or tags, so no raster render delivers a variant: the request
    is refused before anything is stored (422, naming the class and its mode)."""
    answer = pair_jobs[f"raster-{variant}", store]
    assert answer.startswith("refused: InvalidRequest: invalid_request:"), answer
    assert f"{variant} report cannot be watermarked in raster mode (class {RASTER})" in answer, answer

@pytest.mark.parametrize("store", STORES)
def test_a_report_of_a_class_that_codes_and_signs_carries_neither(store: str,
                                                                  pair_jobs: dict[tuple[str, str], str],
                                                                  deployments: dict[str, Deployment],
                                                                  tmp_path: Path) -> None:
    """docs/verification.md, "Scope": report jobs get neither the code nor the signature."""
    deployment = deployments[store]
    job = finish(deployment, TENANT, pair_jobs["report-of-issuer", store])
    artifact = fetch(deployment, TENANT, job, tmp_path)
    assert job.artifact is not None
    assert_holds(artifact, Expect(pages=job.artifact.pages, code_url="", signed=False), tmp_path / "judged")


def test_the_judges_catch_planted_defects(pair_jobs: dict[tuple[str, str], str],
                                          deployments: dict[str, Deployment], tmp_path: Path) -> None:
    """Each outside judgement used above fails on an output broken in its way, so a green matrix is
    not one whose judges cannot see."""
    import pikepdf

    deployment = deployments["sqlite"]
    job = finish(deployment, TENANT, pair_jobs[REPORT_OF_ISSUER, "sqlite"])
    good = fetch(deployment, TENANT, job, tmp_path / "good")
    assert_holds(good, class_expect(deployment, job), tmp_path / "ok")  # it holds as published
    url = job.raw["verification_url"]

    appended = tmp_path / "appended.pdf"
    appended.write_bytes(good.read_bytes() + b"% an update after the signature\n")
    changed = tmp_path / "changed.pdf"
    with pikepdf.open(good) as pdf:
        pdf.docinfo["/Author"] = "Dr. Planted"
        pdf.Root.OpenAction = pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String("app.alert(1)"))
        pdf.save(changed)
    cases = {
        "pdfsig": (appended, Expect(signed=True)),
        "zbarimg": (good, Expect(pages=job.artifact.pages if job.artifact else None, code_url=url + "x",
                                 code_pages=(1,))),
        "Author": (changed, Expect(author="")),
        "/JS": (changed, Expect(javascript=False)),
        "no visible mark": (good, Expect(differs_from=good)),
        "pdftotext": (good, Expect(text=("words this document does not hold",))),
        "Encrypted": (good, Expect(password="not-encrypted")),
    }
    for what, (path, expect) in cases.items():
        problems = judge(path, expect, tmp_path / what.replace(" ", "-").replace("/", ""))
        assert any(what in p for p in problems), (what, problems)
    report = finish(deployment, TENANT, pair_jobs[VARIANTS[0], "sqlite"])
    stripped = tmp_path / "stripped.pdf"
    with pikepdf.open(fetch(deployment, TENANT, report, tmp_path / "report")) as pdf:
        del pdf.Root.Metadata
        pdf.save(stripped)
    problems = judge(stripped, Expect(variant=PAIR_CLASSES[VARIANTS[0]]["variant"]), tmp_path / "variant")
    assert any("pdfinfo -meta" in p for p in problems), problems

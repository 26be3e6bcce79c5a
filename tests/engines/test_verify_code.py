"""The verification code: drawn after the validated marks on exactly its pages, in both modes, on rotated,
offset and mixed-size pages; zbarimg (a decoder independent of the validator's zxing-cpp) reads the URL
from a 150 DPI render of each page that carries it, and finds no code on the others. Planted defects:
a code that does not decode, is covered, encodes another URL or is missing must fail its checks."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pikepdf
import pytest

from docfence import engines
from docfence.core.errors import ValidationFailed
from docfence.core.policy import JobPolicy, Mode, VerificationSpec
from docfence.engines import verify_code
from docfence.engines.issue import issue
from docfence.samples import pdfs

from .helpers import mutate, opaque_image

URL = "https://verify.example.org/v1/verify/01JABCDEFGHJKMNPQRSTVWXYZ0?c=ABCDEFGHJKMNPQRS"
MODES = ("vector", "raster")


def zbar_codes(data: bytes, tmp_path: Path, pages: int) -> list[list[str]]:
    """What zbarimg reads from each page rendered at 150 DPI by poppler (pdftoppm)."""
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(data)
    subprocess.run(["pdftoppm", "-r", "150", "-png", str(pdf), str(tmp_path / "page")], check=True,
                   timeout=120)
    found = []
    for i in range(1, pages + 1):
        image = next(tmp_path.glob(f"page-{i:0{len(str(pages))}d}.png"))
        run = subprocess.run(["zbarimg", "-q", "--raw", str(image)], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode in (0, 4), run.stderr  # 4: no symbol found
        found.append(run.stdout.split())
    return found


def issued(data: bytes, mode: str, spec: VerificationSpec) -> tuple[bytes, dict[str, object]]:
    policy = JobPolicy(mode=Mode(mode), verification=spec)
    result = engines.watermark_document(data, policy)
    return issue(result.output, result.validation, policy), result.validation


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sample", ["rotated_pages", "offset_boxes", "mixed_sizes"])
def test_the_code_decodes_on_exactly_its_pages(sample: str, mode: str, tmp_path: Path) -> None:
    data = getattr(pdfs, sample)()
    count = len(pikepdf.open(io.BytesIO(data)).pages)
    spec = VerificationSpec(url=URL, pages="odd")
    output, report = issued(data, mode, spec)
    checks = {c["name"]: c for c in report["checks"]}  # type: ignore[attr-defined]
    assert checks["verification_code_structure"]["ok"] and checks["verification_code_decodes"]["ok"]
    assert report["ok"] is True
    for i, codes in enumerate(zbar_codes(output, tmp_path, count)):
        assert codes == ([URL] if i % 2 == 0 else []), (i, codes)


def test_the_stage_changes_nothing_but_the_code(tmp_path: Path) -> None:
    data = pdfs.links()
    policy = JobPolicy(verification=VerificationSpec(url=URL, pages="last"))
    marked = engines.watermark_document(data, policy).output
    stamped = verify_code.stamp(marked, policy.verification, mode="vector", dpi=150)  # type: ignore[arg-type]
    with pikepdf.open(io.BytesIO(marked)) as before, pikepdf.open(io.BytesIO(stamped)) as after:
        for a, b in zip(before.pages[:-1], after.pages[:-1], strict=True):
            assert set(a.obj.keys()) == set(b.obj.keys())
            assert [s.read_bytes() for s in _streams(a)] == [s.read_bytes() for s in _streams(b)]
        assert len(_streams(after.pages[-1])) == len(_streams(before.pages[-1])) + 1
    again = verify_code.stamp(marked, policy.verification, mode="vector", dpi=150)  # type: ignore[arg-type]
    assert again == stamped  # a retry draws the same bytes


def _streams(page: pikepdf.Page) -> list[pikepdf.Stream]:
    contents = page.obj.Contents
    return list(contents) if isinstance(contents, pikepdf.Array) else [contents]


def test_an_encrypted_output_keeps_its_encryption_and_its_code() -> None:
    buf = io.BytesIO()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(2))) as pdf:
        pdf.save(buf, encryption=pikepdf.Encryption(owner="o-secret", user="u-secret", R=6))
    policy = JobPolicy(verification=VerificationSpec(url=URL), owner_password_policy="keep")
    result = engines.watermark_document(buf.getvalue(), policy, password="u-secret")
    output = issue(result.output, result.validation, policy, password="u-secret")
    with pikepdf.open(io.BytesIO(output), password="u-secret") as pdf:
        assert pdf.is_encrypted
    assert {c["name"] for c in result.validation["checks"] if c["ok"]} >= {"verification_code_decodes"}


# -- planted defects ---------------------------------------------------------------------------------
def _last_page_broken(change: str) -> bytes:
    spec = VerificationSpec(url=URL, pages="last")
    marked = engines.watermark_document(pdfs.many_pages(2), JobPolicy()).output
    good = verify_code.stamp(marked, spec, mode="vector", dpi=150)

    def damage(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[-1].obj
        name = next(n for n in page.Resources.XObject if n.startswith(verify_code.NAME))
        form = page.Resources.XObject[name]
        if change == "shrunk":  # the same modules, drawn a tenth of the size: too small to decode
            form.Matrix = pikepdf.Array([0.1, 0, 0, 0.1, 0, 0])
        elif change == "covered":  # an opaque image drawn over it after the code
            page.Resources.XObject["/Cover"] = opaque_image(pdf)
            x, y, size = verify_code.placement(verify_code.page_geometry(page), spec)
            cover = f"q {size:.2f} 0 0 {size:.2f} {x:.2f} {y:.2f} cm /Cover Do Q".encode()
            page.Contents = pikepdf.Array([*page.Contents, pdf.make_stream(cover)])
        elif change == "other_url":
            other = verify_code.build_form(pdf, URL.replace("ABCD", "ZZZZ"), mode="vector", dpi=150,
                                           size_pt=72)
            form.write(other.read_bytes())
        elif change == "missing":
            page.Contents = pikepdf.Array(list(page.Contents)[:-1])
        elif change == "page_dropped":  # the page with the code is gone
            del pdf.pages[-1]

    return mutate(good, damage), marked, spec  # type: ignore[return-value]


@pytest.mark.parametrize(("change", "required"), [
    ("shrunk", {"verification_code_structure", "verification_code_decodes"}),
    ("covered", {"verification_code_structure", "verification_code_decodes"}),
    ("other_url", {"verification_code_structure", "verification_code_decodes"}),
    ("missing", {"verification_code_structure", "verification_code_decodes"}),
    ("page_dropped", {"verification_code_structure"}),
])
def test_planted_code_defects_fail(change: str, required: set[str]) -> None:
    broken, marked, spec = _last_page_broken(change)  # type: ignore[misc]
    checks = verify_code.prove(marked, broken, spec, mode="vector", dpi=150)
    failed = {c["name"] for c in checks if not c["ok"]}
    assert required <= failed, checks


def test_the_control_passes() -> None:
    spec = VerificationSpec(url=URL, pages="last")
    marked = engines.watermark_document(pdfs.many_pages(2), JobPolicy()).output
    resaved = mutate(verify_code.stamp(marked, spec, mode="vector", dpi=150), lambda _: None)
    checks = verify_code.prove(marked, resaved, spec, mode="vector", dpi=150)
    assert all(c["ok"] for c in checks), checks


def test_a_failed_proof_fails_the_job_with_its_report(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = JobPolicy(verification=VerificationSpec(url=URL))
    result = engines.watermark_document(pdfs.many_pages(1), policy)
    monkeypatch.setattr(verify_code, "stamp", lambda data, *a, **k: data)  # a stage that drew nothing
    with pytest.raises(ValidationFailed) as caught:
        issue(result.output, result.validation, policy)
    failed = {c["name"] for c in caught.value.report["checks"] if not c["ok"]}  # type: ignore[attr-defined]
    assert failed == {"verification_code_structure", "verification_code_decodes"}

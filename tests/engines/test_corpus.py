"""Every file of the shared corpus ends validated or with a clean coded refusal, in bounded time: each
run happens in its own child process with a timeout, so a hang fails the test instead of CI."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .helpers import CORPUS

CHILD = Path(__file__).with_name("corpus_child.py")
TIMEOUT_S = 300  # a hang guard per file (no case expects "timeout"); generous for a loaded machine
REFUSALS = {
    "formatcorpus__minimal_test.pdf": "malformed_pdf",
    "pdfjs__bug1250079.pdf": "malformed_pdf",
    "pdfium__bug_1324189.pdf": "malformed_pdf",
    "pymupdf__test_open2.docx": "not_a_pdf",
    "pdfium__redirect.pdf": "no_pages",
    "pdfjs__Pages-tree-refs.pdf": "page_tree_invalid",
    "formatcorpus__033689.pdf": "corrupt_content",
    "formatcorpus__encryption_openpassword.pdf": "password_required",
}
# (file, mode, owner-password policy, password) -> expected code ("ok" = validated)
SPECIAL = {
    ("formatcorpus__encryption_openpassword.pdf", "vector", "refuse", "wrong"): "invalid_password",
    ("pdfium__encrypted.pdf", "vector", "refuse", None): "password_required",
    ("pdfium__encrypted.pdf", "vector", "refuse", "1234"): "ok",
    ("pdfium__encrypted.pdf", "raster", "refuse", "1234"): "ok",
    ("pdfjs__secHandler.pdf", "vector", "refuse", None): "permissions_forbid_modification",
    ("pdfjs__secHandler.pdf", "vector", "keep", None): "ok",
    ("pdfjs__secHandler.pdf", "raster", "keep", None): "ok",
}
RASTER_TOO = (
    "pymupdf__v110-changes.pdf",
    "pymupdf__test-2812.pdf",
    "pdfcpu__grid_example.pdf",
    "pymupdf__test_3886.pdf",
    "pymupdf__cms-etc-filled.pdf",
    "pdfjs__issue8125.pdf",
)


def _cases() -> dict[tuple[str, str, str, str | None], str]:
    if not CORPUS.is_dir():
        return {}
    cases: dict[tuple[str, str, str, str | None], str] = {}
    for path in sorted(CORPUS.iterdir()):
        if path.name in ("README.md", "manifest.tsv") or path.name in (
            "pdfium__encrypted.pdf",
            "pdfjs__secHandler.pdf",
        ):
            continue
        cases[(path.name, "vector", "refuse", None)] = REFUSALS.get(path.name, "ok")
    for name in RASTER_TOO:
        cases[(name, "raster", "refuse", None)] = "ok"
    cases.update(SPECIAL)
    return cases


CASES = _cases()


def _run(case: tuple[str, str, str, str | None]) -> dict[str, object]:
    name, mode, owner, password = case
    args = [sys.executable, str(CHILD), str(CORPUS / name), mode, owner, *([password] if password else [])]
    try:
        done = subprocess.run(
            args, capture_output=True, timeout=TIMEOUT_S, check=False, cwd=Path(__file__).parents[2]
        )
    except subprocess.TimeoutExpired:
        return {"code": "timeout"}
    if done.returncode != 0:
        return {"code": "crash", "stderr": done.stderr.decode()[-800:]}
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str, str, str | None], dict[str, object]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CASES, pool.map(_run, CASES), strict=True))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus ../shared/corpus is absent (see its README)")
@pytest.mark.parametrize("case", list(CASES), ids=["-".join(str(p) for p in c if p) for c in CASES])
def test_corpus_file_ends_validated_or_coded(
    outcomes: dict[tuple[str, str, str, str | None], dict[str, object]],
    case: tuple[str, str, str, str | None],
) -> None:
    outcome = outcomes[case]
    assert outcome["code"] == CASES[case], outcome
    if case[0] in ("pdfium__encrypted.pdf", "pdfjs__secHandler.pdf") and outcome["code"] == "ok":
        assert outcome["encrypted"], "encryption must never be silently stripped"


@pytest.mark.skipif(CORPUS.is_dir(), reason="corpus present")
def test_corpus_absent_is_reported() -> None:
    pytest.skip(f"shared corpus not found at {CORPUS}; corpus tests skipped")

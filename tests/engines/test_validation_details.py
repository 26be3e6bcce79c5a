"""Every refusal explains itself: a failed check carries "details" (which page, what differed, in PDF
names, numbers, object and page numbers, a reader's capped message), the job's message names the first,
and `docfence watermark --json` and `docfence inspect` show them. No detail carries document text.
Defects are planted as in test_planted_defects (its helpers and fixtures' inputs)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from api.conftest import api_env  # tests/ is on sys.path (rootdir packages, no tests/__init__.py)

from docfence.blobs import RegionRouter
from docfence.core.errors import ValidationFailed
from docfence.core.policy import SanitizePolicy, WatermarkSpec
from docfence.engines import checks
from docfence.engines.geometry import page_geometry
from docfence.engines.second_reader import SecondReader
from docfence.engines.validate import require_valid, validate
from docfence.samples import pdfs
from docfence.worker.runner import Worker

from .helpers import mutate
from .test_planted_defects import watermarked

SPEC = WatermarkSpec()
HANG_GUARD_S = 300.0  # only stops a broken build from hanging; nothing asserts on durations
#: A watermark nobody can see (white, 1 % opaque): the output fails its fidelity validation.
INVISIBLE = {"text": "CONFIDENTIAL", "color": [1.0, 1.0, 1.0], "opacity": 0.01}
SECRET = "Jane Q. Patient 4711-XYZ diagnosis"


def _run(source: bytes, output: bytes, level: str = "standard", **kw: Any) -> dict[str, Any]:
    return validate(source, output, SPEC, mode="vector", level=level, **kw)


def _failed(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"] if not c["ok"]}


def _message(report: dict[str, Any]) -> str:
    with pytest.raises(ValidationFailed) as caught:
        require_valid(report)
    assert caught.value.report is report
    return caught.value.message


@pytest.fixture(scope="module")
def links_pair() -> tuple[bytes, bytes]:
    data = pdfs.links()
    return data, watermarked(data)


def test_a_removed_link_names_its_page_and_the_counts(links_pair: tuple[bytes, bytes]) -> None:
    def drop_link(pdf: pikepdf.Pdf) -> None:
        del pdf.pages[0].obj.Annots[1]

    report = _run(links_pair[0], mutate(links_pair[1], drop_link))
    failed = _failed(report)
    assert set(failed) == {"annotations_and_links"}
    assert failed["annotations_and_links"]["details"] == ["page 1: /Annots 3 → 2"]
    assert _message(report) == ("The output failed its fidelity validation (annotations_and_links): "
                                "page 1: /Annots 3 → 2.")


def test_a_changed_annotation_and_page_entry_say_where_and_what(links_pair: tuple[bytes, bytes]) -> None:
    def change(pdf: pikepdf.Pdf) -> None:
        pdf.pages[0].obj.Annots[0].Rect = pikepdf.Array([1, 2, 3, 4])
        pdf.pages[1].obj.UserUnit = 2

    failed = _failed(_run(links_pair[0], mutate(links_pair[1], change)))
    assert failed["annotations_and_links"]["details"] == [
        "page 1: /Annots[0]/Rect [40 760 300 780] → [1 2 3 4]"]
    assert failed["page_dictionary"]["details"] == ["page 2: /UserUnit absent → 2"]
    assert failed["page_dictionary"]["failures"] == ["page 2: page entry /UserUnit changed"]  # unchanged


def test_page_geometry_names_the_box_and_both_values(links_pair: tuple[bytes, bytes]) -> None:
    def shrink(pdf: pikepdf.Pdf) -> None:
        pdf.pages[1].obj.CropBox = pikepdf.Array([10, 10, 500, 700])

    report = _run(links_pair[0], mutate(links_pair[1], shrink))
    geometry = _failed(report)["page_geometry"]
    assert geometry["details"] == ["page 2: CropBox [0 0 595 842] → [10 10 500 700]"]
    assert "page_geometry: page 2: CropBox [0 0 595 842] → [10 10 500 700]" in _message(report)


def test_an_inherited_rotation_is_told_as_the_reader_sees_it() -> None:
    source = pdfs.rotated_pages()

    def unrotate(pdf: pikepdf.Pdf) -> None:
        pdf.pages[5].obj.Parent.Rotate = 0

    details = _failed(_run(source, mutate(watermarked(source), unrotate)))["page_geometry"]["details"]
    assert details == ["pages 5-6: Rotate 90 → 0"]  # the two pages under that page-tree node


def test_sanitised_residue_names_the_kind_and_the_object(links_pair: tuple[bytes, bytes]) -> None:
    def plant_script(pdf: pikepdf.Pdf) -> None:
        pdf.Root.OpenAction = pdf.make_indirect(pikepdf.Dictionary(
            S=pikepdf.Name.JavaScript, JS=pikepdf.String(f"app.alert('{SECRET}')")))

    output = mutate(links_pair[1], plant_script)
    with pikepdf.open(io.BytesIO(output)) as pdf:
        number = pdf.Root.OpenAction.objgen[0]
    report = _run(links_pair[0], output, sanitize=SanitizePolicy(hidden_data="keep"))
    failed = _failed(report)
    assert set(failed) == {"sanitised"}
    assert failed["sanitised"]["details"] == [f"javascript left at object {number}"]
    assert _message(report).endswith(f"(sanitised): javascript left at object {number}.")
    assert "Jane" not in json.dumps(report)


def test_a_watermark_missing_on_two_pages_names_them_once() -> None:
    source = pdfs.many_pages(3)

    def strip(pdf: pikepdf.Pdf) -> None:
        for n in (1, 2):
            page = pdf.pages[n].obj
            page.Contents = pikepdf.Array(list(page.Contents)[1:-1])

    report = _run(source, mutate(watermarked(source), strip), "exhaustive")  # every page rendered
    failed = _failed(report)
    assert failed["watermark_rendered"]["details"] == ["pages 2-3: watermark not visible when rendered"]
    assert failed["watermark_rendered"]["failures"] == [
        "page 2: watermark not visible when rendered", "page 3: watermark not visible when rendered"]
    assert failed["watermark_structure"]["details"] == [
        "pages 2-3: /Contents 1 stream(s), 3 expected (1 of the page's own between the mark's two)"]


def test_pixel_details_merge_across_the_render_processes() -> None:
    """Exhaustive mode renders 20 pages in pieces (several processes when cores allow): the pages of
    every piece are told in one line."""
    source = pdfs.many_pages(20)

    def strip(pdf: pikepdf.Pdf) -> None:
        for n in (2, 17):
            page = pdf.pages[n].obj
            page.Contents = pikepdf.Array(list(page.Contents)[1:-1])

    details = _failed(_run(source, mutate(watermarked(source), strip), "exhaustive"))["watermark_rendered"]
    assert details["details"] == ["pages 3,18: watermark not visible when rendered"]


def test_the_second_reader_says_what_poppler_saw() -> None:
    data = pdfs.many_pages(2)
    with pikepdf.open(io.BytesIO(data)) as pdf:
        expected = [page_geometry(p.obj) for p in pdf.pages]
    moved = [expected[0], dataclasses.replace(expected[1], rotate=90)]
    report = SecondReader(data, None, 2, parse_content=False).finish(moved)
    assert report["failures"] == ["poppler: page 2 rotation differs"]
    assert report["details"] == ["pdfinfo: page 2 rotation 0, 90 expected"]
    boxed = [dataclasses.replace(expected[0], crop=(0.0, 0.0, 100.0, 100.0)), expected[1]]
    report = SecondReader(data, None, 2, parse_content=False).finish(boxed)
    assert report["details"] == [
        "pdfinfo: page 1 MediaBox [0 0 595 842] CropBox [0 0 595 842], expected [0 0 595 842] [0 0 100 100]"]


def test_a_truncated_output_carries_both_readers_messages(links_pair: tuple[bytes, bytes]) -> None:
    output = links_pair[1]
    report = _run(links_pair[0], output[: len(output) // 2])
    second = _failed(report)["second_reader"]
    qpdf, pdfinfo = second["details"]
    assert qpdf.startswith("qpdf full read (libqpdf, in process: every object and stream) found ")
    assert "problem(s), the first: " in qpdf and "_io.BytesIO" not in qpdf
    assert second["failures"][1] == "pdfinfo failed (exit 1)"
    assert pdfinfo.startswith("pdfinfo: Syntax Error"), pdfinfo  # poppler's own words
    assert "docfence-check-" not in pdfinfo and "/tmp" not in pdfinfo  # the copy's path is not shown
    assert len(_message(report)) <= checks.MESSAGE_CHARS


def _with_secrets() -> bytes:
    """A page whose text, annotation comment and a private page entry all hold SECRET."""
    builder = pdfs.SampleBuilder()
    note = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Text,
                              Rect=pikepdf.Array([50, 50, 70, 70]), Contents=pikepdf.String(SECRET))
    builder.page([SECRET, f"second line {SECRET}"], Annots=pikepdf.Array([note]),
                 DfNote=pikepdf.String(SECRET))
    builder.page(["page two"])
    return builder.to_bytes()


def test_no_detail_carries_the_documents_text() -> None:
    source = _with_secrets()
    sound = watermarked(source)

    def rewrite(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[0].obj
        own = page.Contents[1]
        own.write(own.read_bytes().replace(b"Patient", b"Pxtient"))
        page.Annots[0].Contents = pikepdf.String(SECRET.upper())
        page.DfNote = pikepdf.String(SECRET + " changed")
        pdf.pages[1].obj.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary())

    for output, level in ((mutate(sound, rewrite), "exhaustive"), (sound[: len(sound) * 2 // 3], "standard")):
        report = _run(source, output, level)
        failed = _failed(report)
        assert failed and all(c["details"] for c in failed.values()), failed
        told = json.dumps(report, ensure_ascii=False) + _message(report)
        for word in ("Jane", "JANE", "Patient", "Pxtient", "4711", "diagnosis", "DIAGNOSIS"):
            assert word not in told, (word, told)
    shown = {n: c["details"] for n, c in _failed(_run(source, mutate(sound, rewrite), "exhaustive")).items()}
    n = len(SECRET)
    assert shown["annotations_and_links"] == [
        f"page 1: /Annots[0]/Contents a string of {n} bytes → a string of {n} bytes"]
    assert shown["page_dictionary"] == [f"page 1: /DfNote a string of {n} bytes → a string of {n + 8} bytes"]
    assert shown["text_extracted"] == ["page 1: extracted text differs"]
    assert shown["fonts"] == ["page 2: resource /Font: /F1 removed"]
    assert shown["content_preserved"][0].startswith("page 1: /Contents[1] a stream of ")


def test_details_are_bounded_in_number_and_length() -> None:
    made = checks.check("x", [f"page {n}: {'y' * 500} {n}" for n in range(1, 40)])
    assert len(made["failures"]) == checks.MAX_DETAILS and len(made["details"]) == checks.MAX_DETAILS
    assert all(len(d) <= checks.MAX_DETAIL_CHARS for d in made["details"])
    assert checks.check("x", [])["ok"] and "details" not in checks.check("x", [])  # nothing on success


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "docfence.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=HANG_GUARD_S, env=env, check=False)


def test_watermark_json_shows_each_failed_checks_details(tmp_path: Path) -> None:
    (tmp_path / "in.pdf").write_bytes(pdfs.links())
    env = {k: v for k, v in os.environ.items() if k != "DOCFENCE_CONFIG"}
    done = _cli("watermark", "in.pdf", "--out", "out", "--opacity", "0.01", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    entry = json.loads(done.stdout)["files"][0]
    assert entry["code"] == "validation_failed"
    assert entry["checks"] == [{"name": "watermark_rendered",
                                "details": ["pages 1-2: watermark not visible when rendered"]}]
    assert entry["message"] == ("The output failed its fidelity validation (watermark_rendered): "
                                "pages 1-2: watermark not visible when rendered.")
    assert "pages 1-2: watermark not visible when rendered" in done.stderr


def test_a_failed_jobs_view_and_inspect_name_the_page_and_what_differed(tmp_path: Path) -> None:
    with api_env(tmp_path) as env, env.client() as client:
        job = client.submit(pdfs.links(), watermark=INVISIBLE)
        worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
        assert worker.run(until_idle=True).failed == 1
        view = client.get(job.id)
        assert view.error_code == "validation_failed"
        expected = ("The output failed its fidelity validation (watermark_rendered): "
                    "pages 1-2: watermark not visible when rendered.")
        assert view.error_message == expected
        cli_env = {k: v for k, v in os.environ.items() if k != "DOCFENCE_CONFIG"}
        cli_env.update(DOCFENCE_DATABASE_URL=env.settings.database_url,
                       DOCFENCE_STORAGE_URL=env.settings.storage_url)
        shown = _cli("inspect", job.id, cwd=tmp_path, env=cli_env)
        assert shown.returncode == 0, shown.stderr
        assert f"last error validation_failed: {expected}" in shown.stdout
        as_json = json.loads(_cli("inspect", job.id, "--json", cwd=tmp_path, env=cli_env).stdout)
        assert as_json["job"]["last_error_message"] == expected

"""`docfence watermark`: atomic outputs in DIR, inputs untouched, a summary, exit 1 when any file failed."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest

from docfence.cli import watermark
from docfence.core.policy import Limits
from docfence.samples import pdfs
from docfence.testing.procs import LONG_BUDGET_TOML, long_budget_config


@pytest.fixture(autouse=True)
def _long_budget(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests expect success, which must not depend on the render budget being enough on a
    loaded machine: the CLI runs under a budget only a hang exceeds (its limits come from the config)."""
    for key, value in long_budget_config(tmp_path_factory.mktemp("config")).items():
        monkeypatch.setenv(key, value)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="docfence")
    watermark.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["watermark", *argv])
    code: int = args.func(args)
    return code


def test_cli_mixed_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "in" / "links.pdf"
    bad = tmp_path / "in" / "notes.pdf"
    good.parent.mkdir()
    good.write_bytes(pdfs.links())
    bad.write_bytes(b"not a pdf at all")
    before = hashlib.sha256(good.read_bytes()).hexdigest()
    out = tmp_path / "out"
    code = _run([str(good), str(bad), "--out", str(out), "--text", "Vertraulich", "--pages", "1", "--json"])
    assert code == 1
    assert hashlib.sha256(good.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in out.iterdir()) == ["links.watermarked.pdf"]  # no temp files left
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["succeeded"] == 1 and summary["failed"] == 1
    assert "not_a_pdf" in captured.err and "[2/2]" in captured.err


def test_cli_all_ok_raster(tmp_path: Path) -> None:
    src = tmp_path / "form.pdf"
    src.write_bytes(pdfs.form())
    assert _run([str(src), "--out", str(tmp_path / "o"), "--mode", "raster", "--dpi", "72"]) == 0


def test_cli_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    src = tmp_path / "a.pdf"
    src.write_bytes(pdfs.form())
    assert _run([str(src), "--out", str(tmp_path / "o"), "--opacity", "7"]) == 2


def test_cli_same_names_from_different_folders_never_collide(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a" / "report.pdf", tmp_path / "b" / "report.pdf"
    for path, data in ((first, pdfs.links()), (second, pdfs.form())):
        path.parent.mkdir()
        path.write_bytes(data)
    out = tmp_path / "out"
    assert _run([str(first), str(second), str(first), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    outputs = [Path(f["output"]) for f in summary["files"]]
    assert len(set(outputs)) == 3 and all(p.parent == out for p in outputs)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in outputs)
    # each output comes from its own input (a watermarked form keeps its form field, links do not)
    assert outputs[0].name.startswith("a__") and outputs[1].name.startswith("b__")
    assert outputs[0].read_bytes() != outputs[1].read_bytes()


def test_output_names_are_distinct_and_stable() -> None:
    names = watermark.output_names([Path("/x/a/report.pdf"), Path("/x/b/report.pdf"), Path("/x/c/other.pdf"),
                                    Path("/y/a/report.pdf")])
    assert names == ["x__a__report.watermarked.pdf", "b__report.watermarked.pdf", "other.watermarked.pdf",
                     "y__a__report.watermarked.pdf"]


def test_cli_takes_its_limits_from_the_configuration() -> None:
    args = argparse.Namespace(text="x", position="diagonal", pages="all", opacity=0.25, mode="vector",
                              dpi=150, owner_password_policy="refuse", timezone="UTC", mark=[])
    limits = watermark.build_policy(args).limits
    assert "render_base_s = 600.0" in LONG_BUDGET_TOML
    assert limits.render_base_s == 600.0 and limits.render_timeout_s == 600.0
    assert limits.max_pages == Limits().max_pages  # what the configuration does not set stays the default


def test_cli_bad_configuration_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[limits]\nrender_base_s = -1\n")
    monkeypatch.setenv("DOCFENCE_CONFIG", str(config))
    src = tmp_path / "a.pdf"
    src.write_bytes(pdfs.form())
    assert _run([str(src), "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


def test_cli_reads_no_setting_but_the_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", "mysql://not-used-here")  # a local command needs no database
    src = tmp_path / "a.pdf"
    src.write_bytes(pdfs.form())
    assert _run([str(src), "--out", str(tmp_path / "o")]) == 0


def _count_zygote_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The profiles of the zygotes started from now on; each start also notes whether the command's
    parser (which imports every other command's modules) had been built yet in this `main` ("late") or
    not ("early"), and the text its marks may hold (--command-line: ascii or any; None: not a CLI's)."""
    from docfence import cli
    from docfence.sandbox import launch

    started: list[str] = []
    parsers: list[int] = []
    spawn, build = launch.spawn_zygote, cli.build_parser

    main = cli.main

    def counted(profile: str, command_line: str | None = None) -> object:
        started.append(f"{profile} {'late' if parsers else 'early'} {command_line}")
        return spawn(profile, command_line=command_line)

    def built() -> object:
        parsers.append(1)
        return build()

    def fresh_main(argv: list[str]) -> int:
        parsers.clear()
        return main(argv)

    monkeypatch.setattr(launch, "spawn_zygote", counted)
    monkeypatch.setattr(cli, "build_parser", built)
    monkeypatch.setattr(cli, "main", fresh_main)
    return started


def test_the_command_line_starts_the_zygote_before_its_other_imports_and_uses_that_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`docfence watermark` starts its zygote before the parser imports the other commands' modules (it
    warms up while they import): one zygote, that one, and no process left behind, whether the command
    succeeds or fails its usage; --help starts none."""
    import os

    from docfence import cli
    from docfence.testing.proctree import children

    already = set(children(os.getpid()))  # what earlier tests of this process left running is theirs
    started = _count_zygote_starts(monkeypatch)
    src = tmp_path / "a.pdf"
    src.write_bytes(pdfs.links())
    early = f"watermark early {cli.mark_text([str(src), str(tmp_path)])}"  # "any" where tmp is not ASCII
    assert cli.main(["watermark", str(src), "--out", str(tmp_path / "o")]) == 0
    assert started == [early]
    assert (tmp_path / "o" / "a.watermarked.pdf").read_bytes().startswith(b"%PDF-")
    assert set(children(os.getpid())) <= already  # the zygote was stopped with the command
    assert cli.main(["watermark", str(src), "--out", str(tmp_path / "o"), "--opacity", "7"]) == 2
    assert started == [early] * 2
    assert set(children(os.getpid())) <= already  # stopped even before it was ready
    with pytest.raises(SystemExit):
        cli.main(["watermark", "--help"])
    with pytest.raises(SystemExit):
        cli.main(["--debug", "watermark"])  # usage error: no input, no --out
    assert started == [early] * 3  # --help starts nothing
    assert set(children(os.getpid())) <= already


def test_a_command_line_that_may_hold_other_characters_gets_every_font_parsed() -> None:
    """"ascii" only when no mark can hold another character: a non-ASCII argument or a \\u escape in
    --mark's JSON makes it "any" (the zygote then parses every font before forking)."""
    from docfence.cli import mark_text

    assert mark_text(["watermark", "a.pdf", "--out", "o", "--text", "CONFIDENTIAL"]) == "ascii"
    assert mark_text(["watermark", "a.pdf", "--out", "o", "--text", "患者 Müller"]) == "any"
    escaped = json.dumps({"text": "患者 {page}/{pages}", "position": "footer"})
    assert escaped.isascii() and mark_text(["watermark", "a.pdf", "--mark", escaped]) == "any"


def test_a_command_leaves_nothing_in_the_temporary_folder(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The real command, one file and then three: every render process's private folder (it held the
    second reader's copy of the document) is gone when the command ends, however the zygote's shutdown
    and the last render process's exit interleave."""
    import subprocess
    import sys

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    inputs = []
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.pdf").write_bytes(pdfs.links())
        inputs.append(str(tmp_path / f"{name}.pdf"))
    for batch in (inputs[:1], inputs):
        command = [sys.executable, "-m", "docfence.cli", "watermark", "--out", str(tmp_path / "out"), *batch]
        ran = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert ran.returncode == 0, ran.stderr
        assert sorted(p.name for p in temporary.iterdir()) == []

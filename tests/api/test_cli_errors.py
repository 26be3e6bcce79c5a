"""Every `docfence` command, given a bad setting, ends with one clean line naming it: no traceback.

The walk enumerates the real parser, so a new command is covered the day it is added (and fails here
until its bad-setting line is clean).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.cli import build_parser, main

BAD_DB = "mysql://x"


def _leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(child, (*prefix, name))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argv(command: tuple[str, ...], parser: argparse.ArgumentParser, tmp: Path) -> list[str]:
    """The command with every required argument filled in with a harmless placeholder."""
    argv = list(command)
    for action in parser._actions:
        if action.option_strings and action.required:
            argv += [action.option_strings[0], str(tmp / "placeholder")]
        elif not action.option_strings and action.nargs not in ("?", "*") and action.choices is None:
            argv.append("placeholder")
        elif not action.option_strings and action.choices is not None:
            argv.append(sorted(action.choices)[0])
    return argv


#: Commands that read neither the database nor the API: their bad setting is a bad value of their own.
LOCAL = {
    ("demo",): (["demo", "--dir", "{file}"], "--dir"),
    ("watermark",): (["watermark", "{file}", "--out", "{tmp}/out", "--opacity", "7"], "opacity"),
    ("capacity",): (["capacity", "--rate", "1", "--mix", "vector:x:1", "--p99", "5"], "mix"),
    ("bench", "queue"): (["bench", "queue", "--store", "mysql"], "--store"),
    ("bench", "service"): (["bench", "service", "--store", "mysql"], "--store"),
    ("reports", "dispatch"): (["reports", "dispatch", "--providers", "{tmp}/missing.toml"], "--providers"),
    ("keys", "create"): (["keys", "create", "--tenant", "acme"], "DOCFENCE_DATABASE_URL"),
    ("verify",): (["verify", "placeholder"], "--code"),  # a job id needs its code (or give the QR's URL)
}
#: Commands that talk to the API: the bad setting is the server's URL (nothing listens there).
API = {("submit",), ("status",), ("wait",), ("cancel",), ("download",), ("jobs",)}


def _commands() -> list[tuple[str, ...]]:
    return [command for command, _ in _leaves(build_parser())]


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_bad_setting_is_one_clean_line(
    command: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", BAD_DB)
    monkeypatch.setenv("DOCFENCE_URL", url)
    monkeypatch.setenv("DOCFENCE_API_KEY", "dfk_000000000000_secret")
    monkeypatch.delenv("DOCFENCE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "a.pdf"
    a_file.write_bytes(b"%PDF-1.4\n%%EOF\n")
    parser = dict(_leaves(build_parser()))[command]
    if command in LOCAL:
        template, named = LOCAL[command]
        argv = [part.format(file=a_file, tmp=tmp_path) for part in template]
    else:
        argv, named = _argv(command, parser, tmp_path), (url if command in API else "DOCFENCE_DATABASE_URL")
        if command == ("submit",):
            argv[-1] = str(a_file)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal (one line too: see OneLineParser)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code != 0, (argv, out, err)
    assert len(lines) == 1, (argv, err)
    assert "Traceback" not in err and named in lines[0], (argv, err)
    assert lines[0].startswith("docfence"), lines[0]


def _run(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "docfence.cli", *argv], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=120, check=False)


def test_the_real_entry_point_shows_no_traceback_unless_asked(tmp_path: Path) -> None:
    env = {**os.environ, "DOCFENCE_DATABASE_URL": BAD_DB}
    env.pop("DOCFENCE_CONFIG", None)
    plain = _run("ops", "status", env=env, cwd=tmp_path)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip() == ("docfence: DOCFENCE_DATABASE_URL='mysql://x': allowed: "
                                    "sqlite:///relative.db, sqlite:////abs/path.db or "
                                    "postgresql://user@host:5432/db")
    debug = _run("--debug", "ops", "status", env=env, cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    version = _run("--version", env=env, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("docfence ")


def test_config_file_errors_name_the_table_key_and_keep_builtin_classes(tmp_path: Path) -> None:
    from docfence.config import load_settings
    from docfence.core.errors import ConfigError

    config = tmp_path / "docfence.toml"
    config.write_text("[classes.x]\ndeadline = 5\n")
    with pytest.raises(
            ConfigError,
            match=r"^\[classes\.x\]: unknown key .deadline. \(allowed: allowed_fields, deadline_s,"):
        load_settings(env={"DOCFENCE_CONFIG": str(config)})
    config.write_text('[classes.x]\ndeadline_s = "soon"\n')
    with pytest.raises(ConfigError, match=r"^\[classes\.x\]\.deadline_s='soon': must be a number$"):
        load_settings(env={"DOCFENCE_CONFIG": str(config)})
    config.write_text("[classes.x]\ndeadline_s = 7200\n")
    with pytest.raises(ConfigError,
                       match=r"^\[classes\.x\]: deadline_s=7200: must be in \(0, max_deadline_s=3600\]"):
        load_settings(env={"DOCFENCE_CONFIG": str(config)})
    config.write_text('[classes.x]\nmode = "raster"\n[classes.x.watermark]\ntxt = "A"\n')
    with pytest.raises(ConfigError, match=r"^\[classes\.x\]\.watermark: unknown watermark field 'txt'"):
        load_settings(env={"DOCFENCE_CONFIG": str(config)})
    config.write_text('[classes.x]\nmode = "raster"\n')
    settings = load_settings(env={"DOCFENCE_CONFIG": str(config)})
    assert set(settings.all_classes()) == {"default", "x"}  # the built-in class stays
    config.write_text('builtin_classes = false\ndefault_class = "x"\n[classes.x]\nmode = "raster"\n')
    assert set(load_settings(env={"DOCFENCE_CONFIG": str(config)}).all_classes()) == {"x"}
    with pytest.raises(ConfigError, match=r"^DOCFENCE_DEFAULT_CLASS='nope': not a configured class "
                                          r"\(configured: default, x\)$"):
        load_settings(env={"DOCFENCE_CONFIG": str(_write(tmp_path, '[classes.x]\nmode = "raster"\n')),
                           "DOCFENCE_DEFAULT_CLASS": "nope"})
    with pytest.raises(ConfigError, match=r"^DOCFENCE_MAX_UPLOAD_BYTES='lots': must be an integer$"):
        load_settings(env={"DOCFENCE_MAX_UPLOAD_BYTES": "lots"})
    with pytest.raises(ConfigError, match=r"^heartbeat_interval_s=5\.0: .* lease_ttl_s=4\.0 "
                                          r"\(with DOCFENCE_LEASE_TTL_S='4'\)$"):
        load_settings(env={"DOCFENCE_LEASE_TTL_S": "4"})
    with pytest.raises(ConfigError, match=r"^unknown setting 'databse_url'"):
        load_settings(env={"DOCFENCE_CONFIG": str(_write(tmp_path, 'databse_url = "x"\n'))})


def _write(tmp: Path, text: str) -> Path:
    path = tmp / "other.toml"
    path.write_text(text)
    return path


def test_a_closed_output_pipe_ends_quietly(tmp_path: Path) -> None:
    """`docfence audit export | head`: the reader leaves early; the command ends without a traceback."""
    writer = ("import sys; from docfence.cli.errors import run_command\n"
              "def export(args):\n"
              "    for n in range(200000):\n"
              "        print(f'{{\"seq\": {n}, \"action\": \"submitted\"}}')\n"
              "    return 0\n"
              "sys.exit(run_command(export, None))\n")
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141
    assert first.startswith(b'{"seq": 0') and err == ""


#: Commands without a --json result: serve prints nothing of its own; demo is a walk-through for people.
NO_JSON = {("serve",), ("demo",)}


@pytest.mark.parametrize("command", [c for c in _commands() if c not in NO_JSON], ids=" ".join)
def test_every_command_takes_json(command: tuple[str, ...], tmp_path: Path) -> None:
    parser = dict(_leaves(build_parser()))[command]
    assert any("--json" in action.option_strings for action in parser._actions), command


def test_json_is_honoured_by_the_database_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    monkeypatch.setenv("DOCFENCE_DATABASE_URL", f"sqlite:///{tmp_path}/docfence.db")
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", f"file:{tmp_path}/objects")
    monkeypatch.delenv("DOCFENCE_CONFIG", raising=False)
    for argv in (["db", "upgrade"], ["keys", "create", "--tenant", "acme"], ["keys", "list"],
                 ["ops", "pause", "--mode", "raster"], ["ops", "set-mode", "default", "raster"],
                 ["ops", "status"], ["ops", "drain"], ["audit", "verify"], ["templates", "list"]):
        assert main([*argv, "--json"]) == 0, argv
        lines = capsys.readouterr().out.strip().splitlines() or ["{}"]
        parsed = json.loads(lines[0]) if argv != ["ops", "status"] else json.loads("\n".join(lines))
        assert isinstance(parsed, dict), argv
    assert main(["ops", "set-mode", "nope", "raster"]) == 2
    assert capsys.readouterr().err.strip() == ("docfence: document_class='nope': unknown class "
                                               "(configured: default)")


def test_the_readme_names_every_environment_variable() -> None:
    from docfence import config

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    variables = {*config.SETTINGS_ENV, *config.WORKER_ENV, "DOCFENCE_CONFIG", "DOCFENCE_URL",
                 "DOCFENCE_API_KEY", "DOCFENCE_REPORT_PROCESSORS"}
    assert sorted(v for v in variables if f"`{v}`" not in readme) == []


def test_an_unreachable_database_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"postgresql://nobody:hunter2@127.0.0.1:{_closed_port()}/docfence"
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", url)
    monkeypatch.delenv("DOCFENCE_CONFIG", raising=False)
    assert main(["ops", "status"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("docfence: store_unavailable: ") and "hunter2" not in line
    assert url.replace("hunter2", "***") in line


def test_a_class_table_allows_exactly_its_documented_keys(tmp_path: Path) -> None:
    """The unknown-key message lists the keys docs/configuration.md documents for `[classes.NAME]`,
    and an internal name (`mark_rules`) is refused like any unknown key."""
    import re

    from docfence.config import load_settings
    from docfence.core.errors import ConfigError

    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    table = doc[doc.index("| `mode` | `vector`"):doc.index("| `signing` | `None`")]
    documented = sorted({*re.findall(r"^\| `(\w+)` \|", table, re.M), "signing"})
    assert len(documented) == 20  # owner_password_policy and obscure since issue 29
    config = tmp_path / "docfence.toml"
    for key in ("mark_rules", "name", "colour"):
        config.write_text(f"[classes.x]\n{key} = 1\n")
        with pytest.raises(ConfigError) as refused:
            load_settings(env={"DOCFENCE_CONFIG": str(config)})
        assert refused.value.message == (f"[classes.x]: unknown key {key!r} "
                                         f"(allowed: {', '.join(documented)})")

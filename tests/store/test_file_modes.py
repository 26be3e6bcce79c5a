"""What docfence writes is private whatever the umask: under umask 022 and 000, real processes (`serve`
accepting a submission, `reconcile --once`, `audit export --out`) leave every folder of the local data
folder 0700 and every file in it 0600: the SQLite database, its WAL and shared-memory files, the
objects, the password key, the URL-signing secret; and the export file 0600. A key file that group or
others may read stops a long-running command at start-up with one line and exit 2."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from docfence.blobs.sealed import KEY_FILE
from docfence.client import DocfenceClient
from docfence.config import Settings
from docfence.config.issuing import SigningConfig
from docfence.config.key_files import DATA_FOLDER_KEYS, check_key_files
from docfence.core.errors import ConfigError
from docfence.core.interpreter import module_command
from docfence.core.private_files import create_private_file, open_private, private_dirs
from docfence.harness.tcp_proxy import free_port
from docfence.testing.procs import wait_for
from docfence.testing.signing_ca import write_test_ca

PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
START_GUARD_S = 120  # a hang guard only: start-up imports the engines on a shared machine


def _env(data: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DOCFENCE_", "PROMETHEUS_"))}
    return {**base, "DOCFENCE_DATABASE_URL": f"sqlite:///{data}/docfence.db",
            "DOCFENCE_STORAGE_URL": f"file://{data}/objects", **extra}


def _docfence(env: dict[str, str], umask: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(module_command("docfence.cli", *args), env=env, umask=umask, capture_output=True,
                          text=True, timeout=START_GUARD_S)


@contextmanager
def _serving(env: dict[str, str], umask: int, log: Path) -> Iterator[str]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(module_command("docfence.cli", "serve", "--port", str(port)), env=env,
                                umask=umask, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, START_GUARD_S, "the API to answer")
        yield base
    finally:
        proc.terminate()
        proc.wait(START_GUARD_S)


def _modes(root: Path) -> dict[str, str]:
    """Every folder and regular file under `root` (itself included) -> its mode, in octal."""
    found = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                found[str(path.relative_to(root))] = oct(stat.S_IMODE(st.st_mode))
    return found


def _not_private(root: Path, modes: dict[str, str]) -> dict[str, str]:
    """The entries of `modes` (from _modes(root)) that are not 0700 folders or 0600 files."""
    return {name: mode for name, mode in modes.items()
            if mode != (oct(0o700) if Path(root, name).is_dir() else oct(0o600))}


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_data_folder_and_exports_are_private_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    data = tmp_path / "deploy" / "data"  # neither exists: docfence makes both
    env = _env(data)
    with _serving(env, umask, tmp_path / "serve.log") as base:
        made = _docfence(env, umask, "keys", "create", "--tenant", "acme", "--scopes", "submit,read")
        assert made.returncode == 0, made.stderr
        with DocfenceClient(base, made.stdout.strip().splitlines()[-1]) as client:
            client.submit(PDF)
        reconciled = _docfence(env, umask, "reconcile", "--once")
        assert reconciled.returncode == 0, reconciled.stderr
        modes = _modes(data)  # while the server holds the database open: its WAL and -shm exist
    names = set(modes)
    assert {"docfence.db", "docfence.db-wal", "docfence.db-shm", KEY_FILE, "signing.key"} <= names
    assert any(name.startswith("objects/") and Path(data, name).is_file() for name in names)  # the upload
    assert _not_private(data, modes) == {}
    assert oct(stat.S_IMODE((tmp_path / "deploy").stat().st_mode)) == oct(0o700)
    (tmp_path / "older.jsonl").write_text("")
    os.chmod(tmp_path / "older.jsonl", 0o644)
    for out in (tmp_path / "audit.jsonl", tmp_path / "older.jsonl"):
        exported = _docfence(env, umask, "audit", "export", "--out", str(out))
        assert exported.returncode == 0, exported.stderr
        assert '"to_state": "queued"' in out.read_text()
        assert oct(stat.S_IMODE(out.stat().st_mode)) == oct(0o600), out


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_a_one_shot_command_makes_the_data_folder_private_too(tmp_path: Path, umask: int) -> None:
    """`docfence keys create` and `db upgrade` keep the umask they were given (only long-running
    commands tighten it): the database, its folder, the object store's root and the URL-signing secret
    are private through the code that makes each."""
    data = tmp_path / "deploy" / "data"
    made = _docfence(_env(data), umask, "keys", "create", "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    upgraded = _docfence(_env(tmp_path / "other"), umask, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    modes, other = _modes(data), _modes(tmp_path / "other")
    assert {"docfence.db", "objects", "signing.key"} <= set(modes) and "docfence.db" in other
    assert _not_private(data, modes) == {} and _not_private(tmp_path / "other", other) == {}
    assert oct(stat.S_IMODE((tmp_path / "deploy").stat().st_mode)) == oct(0o700)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_signing_key_open_to_others_stops_the_start(tmp_path: Path, mode: int) -> None:
    p12, _ = write_test_ca(tmp_path)
    os.chmod(p12, mode)
    config = tmp_path / "docfence.toml"
    config.write_text(f'[signing]\npkcs12 = "{p12}"\npkcs12_password = "test-pkcs12-pass"\n')
    for command in (("reconcile", "--once"), ("serve", "--port", "0")):
        ran = _docfence(_env(tmp_path / "data", DOCFENCE_CONFIG=str(config)), 0o022, *command)
        assert ran.returncode == 2, (command, ran.returncode, ran.stderr)
        lines = ran.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
        assert str(p12) in lines[0] and f"mode {mode:04o}" in lines[0] and "chmod 600" in lines[0]


def test_each_key_file_is_checked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    p12, _ = write_test_ca(tmp_path)
    settings = Settings(database_url=f"sqlite:///{data}/docfence.db", storage_url=f"file://{data}/objects",
                        signing=SigningConfig(pkcs12=str(p12)))
    check_key_files(settings)  # nothing there yet but a private p12: a missing key is its loader's to name
    private_dirs(data)
    for name in DATA_FOLDER_KEYS:
        create_private_file(data / name)
    check_key_files(settings)
    for name in DATA_FOLDER_KEYS:
        os.chmod(data / name, 0o644)
        with pytest.raises(ConfigError, match=rf"{data / name} is readable or writable by group or others"):
            check_key_files(settings)
        os.chmod(data / name, 0o600)
    os.chmod(p12, 0o640)
    with pytest.raises(ConfigError, match=r"\[signing\] pkcs12"):
        check_key_files(settings)
    assert KEY_FILE in DATA_FOLDER_KEYS  # the names agree with the modules that make the keys


def test_private_files_leave_devices_and_existing_folders_alone(tmp_path: Path) -> None:
    os.close(open_private("/dev/null"))
    assert stat.S_IMODE(os.stat("/dev/null").st_mode) == 0o666
    os.chmod(tmp_path, 0o755)
    private_dirs(tmp_path / "a" / "b")
    folders = (tmp_path, tmp_path / "a", tmp_path / "a" / "b")
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in folders] == [oct(0o755), oct(0o700), oct(0o700)]

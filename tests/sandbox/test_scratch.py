"""Private temporary folders named after their process, and the sweep that removes those whose process
is gone (a worker or render process killed with SIGKILL leaves its folder, possibly with a copy of a
document in it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docfence.sandbox.scratch import make_owned, remove_orphans


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_folders_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    for name in (f"docfence-worker-{dead}-abc", f"docfence-worker-{alive}-def", f"docfence-worker-{dead}",
                 "docfence-worker-notapid", f"other-{dead}-abc"):
        (tmp_path / name).mkdir()
    (tmp_path / f"docfence-worker-{dead}-abc" / "input.pdf").write_bytes(b"%PDF- a document")
    (tmp_path / f"docfence-worker-{dead}-file").write_bytes(b"a file, not a folder")

    removed = remove_orphans("docfence-worker-", str(tmp_path))

    assert sorted(removed) == [f"docfence-worker-{dead}", f"docfence-worker-{dead}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"docfence-worker-{alive}-def", "docfence-worker-notapid", f"other-{dead}-abc",
         f"docfence-worker-{dead}-file"])


def test_a_symbolic_link_named_like_an_orphan_is_neither_followed_nor_removed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    sweep = tmp_path / "tmp"
    sweep.mkdir()
    (sweep / f"docfence-render-{_dead_pid()}").symlink_to(target, target_is_directory=True)

    assert remove_orphans("docfence-render-", str(sweep)) == []
    assert (target / "keep.txt").read_text() == "kept"


def test_an_owned_folder_is_private_and_survives_while_its_process_lives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = Path(make_owned("docfence-worker-"))
    assert folder.parent == tmp_path and folder.name.startswith(f"docfence-worker-{os.getpid()}-")
    assert folder.stat().st_mode & 0o777 == 0o700
    assert remove_orphans("docfence-worker-") == [] and folder.is_dir()

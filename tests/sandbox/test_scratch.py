"""Private temporary folders named after their process and locked by it, and the sweep that removes
those whose owner is gone (a worker or render process killed with SIGKILL leaves its folder, possibly
with a copy of a document in it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docfence.sandbox.scratch import LOCK_NAME, ORPHAN_MIN_AGE_S, hold, make_owned, remove_orphans


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(base: Path, name: str, *, lock: bool = False, old: bool = False) -> Path:
    folder = base / name
    folder.mkdir()
    (folder / "input.pdf").write_bytes(b"%PDF- a document")
    if lock:
        (folder / LOCK_NAME).touch()  # a lock file nobody holds: its owner is gone
    if old:
        stamp = folder.stat().st_mtime - ORPHAN_MIN_AGE_S - 60
        os.utime(folder, (stamp, stamp))
    return folder


def test_a_folder_whose_lock_nobody_holds_is_removed_whatever_its_name_says(tmp_path: Path) -> None:
    _folder(tmp_path, f"docfence-worker-{os.getpid()}-abc", lock=True)  # a pid of another namespace
    assert remove_orphans("docfence-worker-", str(tmp_path)) == [f"docfence-worker-{os.getpid()}-abc"]
    assert list(tmp_path.iterdir()) == []


def test_a_held_lock_keeps_its_folder_even_under_a_dead_pid(tmp_path: Path) -> None:
    """The owner may live in another pid namespace sharing the folder (containers with one /tmp)."""
    folder = _folder(tmp_path, f"docfence-render-{_dead_pid()}", old=True)
    lock = hold(str(folder))
    try:
        assert remove_orphans("docfence-render-", str(tmp_path)) == []
    finally:
        os.close(lock)
    assert remove_orphans("docfence-render-", str(tmp_path)) == [folder.name]  # released: gone


def test_without_a_lock_file_the_pid_decides_and_only_for_old_folders(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    _folder(tmp_path, f"docfence-worker-{dead}-old", old=True)
    _folder(tmp_path, f"docfence-worker-{dead}", old=True)
    _folder(tmp_path, f"docfence-worker-{dead}-new")  # its owner may be between mkdir and locking
    _folder(tmp_path, f"docfence-worker-{alive}-def", old=True)
    _folder(tmp_path, "docfence-worker-notapid", old=True)
    _folder(tmp_path, f"other-{dead}-abc", old=True)
    (tmp_path / f"docfence-worker-{dead}-file").write_bytes(b"a file, not a folder")

    removed = remove_orphans("docfence-worker-", str(tmp_path))

    assert sorted(removed) == [f"docfence-worker-{dead}", f"docfence-worker-{dead}-old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"docfence-worker-{dead}-new", f"docfence-worker-{alive}-def", "docfence-worker-notapid",
         f"other-{dead}-abc", f"docfence-worker-{dead}-file"])


def test_a_symbolic_link_named_like_an_orphan_is_neither_followed_nor_removed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    (target / LOCK_NAME).touch()
    sweep = tmp_path / "tmp"
    sweep.mkdir()
    (sweep / f"docfence-render-{_dead_pid()}").symlink_to(target, target_is_directory=True)

    assert remove_orphans("docfence-render-", str(sweep)) == []
    assert (target / "keep.txt").read_text() == "kept"


def test_an_owned_folder_is_private_locked_and_kept_while_its_process_lives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    path, lock = make_owned("docfence-worker-")
    folder = Path(path)
    try:
        assert folder.parent == tmp_path and folder.name.startswith(f"docfence-worker-{os.getpid()}-")
        assert folder.stat().st_mode & 0o777 == 0o700 and (folder / LOCK_NAME).exists()
        assert remove_orphans("docfence-worker-") == [] and folder.is_dir()
    finally:
        os.close(lock)


def test_hold_leaves_one_lock_file_and_holds_it(tmp_path: Path) -> None:
    """hold() locks its file under a name of its own and then renames it: one LOCK_NAME, held, and
    nothing staged left beside it."""
    folder = tmp_path / f"docfence-render-{_dead_pid()}"
    folder.mkdir()
    lock = hold(str(folder))
    try:
        assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]
        assert remove_orphans("docfence-render-", str(tmp_path)) == []
    finally:
        os.close(lock)

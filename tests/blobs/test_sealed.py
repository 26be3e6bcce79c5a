"""The password-sealing key: made once per data folder, the same for every process, never printed."""

from __future__ import annotations

import threading
from pathlib import Path

from docfence.blobs.sealed import PasswordSeal, _key_file
from docfence.config import Settings


def test_processes_starting_together_agree_on_one_whole_key(tmp_path: Path) -> None:
    path = tmp_path / "data" / "password.key"
    start = threading.Barrier(8)
    keys: list[bytes] = []

    def make() -> None:
        start.wait()
        keys.append(_key_file(path))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 44
    assert sorted(p.name for p in path.parent.iterdir()) == ["password.key"]  # no temporary left
    assert path.stat().st_mode & 0o777 == 0o600


def test_keys_are_not_printed() -> None:
    key = b"k" * 43 + b"="
    assert "kkkk" not in repr(PasswordSeal(key))
    settings = Settings(password_key="PASSWORD-KEY-VALUE", signing_secret="SIGNING-SECRET-VALUE")
    assert "PASSWORD-KEY-VALUE" not in repr(settings) and "SIGNING-SECRET-VALUE" not in repr(settings)

"""Every fenced shell block of the README and docs/ marked `runnable` (```sh runnable) runs as written
against a real `docfence serve` and `docfence worker` on a fresh SQLite store, with DOCFENCE_URL and
DOCFENCE_API_KEY set as the docs say. A block that stops working fails here, not for a newcomer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.config import Settings
from docfence.service import build_service
from docfence.testing.servers import serve_process

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```sh runnable\n(.*?)^```", re.S | re.M)


def runnable_blocks() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, match in enumerate(_BLOCK.finditer(path.read_text("utf-8")), start=1):
            found.append((f"{path.relative_to(ROOT)}#{n}", match.group(1)))
    return found


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("docs")
    settings = Settings(database_url=f"sqlite:///{tmp}/docfence.db", storage_url=f"file://{tmp}/objects")
    service = build_service(settings)
    key = service.create_api_key("docs", ("submit", "read", "admin"))[1]
    service.store.close()
    env = {**os.environ, "DOCFENCE_DATABASE_URL": settings.database_url,
           "DOCFENCE_STORAGE_URL": settings.storage_url, "DOCFENCE_API_KEY": key,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("DOCFENCE_CONFIG", None)
    with serve_process(env, tmp / "server.log") as (_proc, base), \
            (tmp / "worker.log").open("wb") as worker_log:
        worker = subprocess.Popen([sys.executable, "-m", "docfence.cli", "worker"], env=env,
                                  stdout=worker_log, stderr=subprocess.STDOUT)
        try:
            yield {**env, "DOCFENCE_URL": base}
        finally:
            worker.terminate()
            worker.wait(60)


def test_there_are_runnable_blocks() -> None:
    assert any(name.startswith("docs/api.md") for name, _ in runnable_blocks())


@pytest.mark.parametrize("name,script", runnable_blocks(), ids=[n for n, _ in runnable_blocks()])
def test_runnable_block(name: str, script: str, live: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=live,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

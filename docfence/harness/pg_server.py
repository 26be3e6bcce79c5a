"""A private PostgreSQL server for fault runs that stop and restart the server: initialised in a temporary
folder on a free loopback port, run as the `postgres` account, removed afterwards. Restarting it
disturbs nothing else that uses the machine's shared server."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from docfence.harness.accounts import give_to, preexec_as
from docfence.harness.tcp_proxy import free_port

__all__ = ["PrivatePostgres", "private_postgres"]

ACCOUNT = "postgres"


def _bin_folder() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
    return versions[-1].parent


@dataclass
class PrivatePostgres:
    folder: Path
    port: int
    bin: Path

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        cmd = [str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-l",
               str(self.folder / "server.log"), "-o", options, "-w", "-t", "60", *args]
        subprocess.run(cmd, check=True, preexec_fn=preexec_as(ACCOUNT), stdout=subprocess.DEVNULL,
                       cwd=self.folder)

    def start(self) -> None:
        self._ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def restart(self, down_s: float) -> None:
        """Stop the server (fast shutdown: sessions are terminated), keep it down `down_s` seconds
        (the outage being simulated), start it again."""
        self.stop()
        time.sleep(down_s)  # the outage's length is the fault itself, not a guess at an ordering
        self.start()


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    folder = Path(tempfile.mkdtemp(prefix="docfence-pg-"))
    folder.chmod(0o755)
    server = PrivatePostgres(folder, free_port(), _bin_folder())
    try:
        give_to(folder, ACCOUNT)
        initdb = [str(server.bin / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres",
                  "--no-sync"]
        subprocess.run(initdb, check=True, preexec_fn=preexec_as(ACCOUNT), stdout=subprocess.DEVNULL,
                       cwd=folder)
        server.start()
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):  # never started, or already down
            server.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)

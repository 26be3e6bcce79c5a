"""A docfence deployment of real processes for fault runs: `docfence serve`, `docfence worker` and
`docfence reconcile` on one SQLite file or PostgreSQL database and one object store, with short leases
(3 s lease, 1 s heartbeat, 1 s reconcile interval), each process in its own process group and log.
Fault runs talk to it only from outside: HTTP, the database's rows (cluster_rows.py), the objects."""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from docfence.core.interpreter import module_command
from docfence.harness.accounts import preexec_unprivileged
from docfence.harness.tcp_proxy import free_port
from docfence.harness.workers import wait_for, worker_env

__all__ = ["HEARTBEAT_S", "LEASE_TTL_S", "RECONCILE_S", "STAGING_GRACE_S", "Cluster", "cluster"]

LEASE_TTL_S, HEARTBEAT_S, RECONCILE_S, STAGING_GRACE_S = 3.0, 1.0, 1.0, 1.0
START_GUARD_S = 120.0  # only keeps a process that never comes up from hanging a run
TENANT = "faults"
# a render budget load cannot run out of: these runs are about infrastructure faults, not budgets
BASE_TOML = "[limits]\nrender_base_s = 600.0\nrender_timeout_s = 600.0\n"


@dataclass
class Cluster:
    """One deployment under `root`: its config, logs and (local) objects live there."""

    root: Path
    db_url: str  # the direct URL; a process may be given another (through a proxy)
    storage_url: str
    # every process without root's file-permission overrides (a read-only folder stays read-only)
    unprivileged: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    regions: dict[str, str] = field(default_factory=dict)  # storage region -> URL, besides storage_url
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    base_url: str = ""
    api_key: str = ""

    @property
    def _preexec(self) -> Callable[[], None] | None:
        return preexec_unprivileged if self.unprivileged else None

    @property
    def store_kind(self) -> str:
        return "postgres" if self.db_url.startswith("postgresql") else "sqlite"

    @property
    def faults_dir(self) -> Path:
        return self.root / "faults"

    def write_config(self, name: str, body: str = "") -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(body + "\n" + BASE_TOML if body else BASE_TOML)
        return path

    def env(self, *, db_url: str | None = None, faults: str | None = None, config: Path | None = None,
            **extra: str) -> dict[str, str]:
        env = worker_env(db_url or self.db_url, self.storage_url,
                         DOCFENCE_LEASE_TTL_S=str(LEASE_TTL_S),
                         DOCFENCE_HEARTBEAT_INTERVAL_S=str(HEARTBEAT_S),
                         DOCFENCE_RECONCILE_INTERVAL_S=str(RECONCILE_S),
                         DOCFENCE_STAGING_GRACE_S=str(STAGING_GRACE_S), DOCFENCE_POLL_INTERVAL_S="0.2",
                         DOCFENCE_FAULTS_DIR=str(self.faults_dir),
                         DOCFENCE_METRICS_DIR=str(self.root / "metrics"),
                         DOCFENCE_CONFIG=str(config or self.root / "base.toml"), HOME=str(self.root / "home"),
                         **self.extra_env)
        if faults:
            env["DOCFENCE_FAULTS"] = faults
        env.update(extra)
        return env

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start `docfence ARGS` as `name` (its log: logs/NAME.log), in a process group of its own."""
        with (self.root / "logs" / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(module_command("docfence.cli", *args), env=env or self.env(), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root,
                                    preexec_fn=self._preexec)
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str, *args: str, db_url: str | None = None, faults: str | None = None,
                     config: Path | None = None, batch: int | None = None) -> subprocess.Popen[bytes]:
        """A worker without its in-process reconciler: the `reconcile` process is the deployment's.
        `batch`: how many jobs it claims at once."""
        extra = {"DOCFENCE_WORKER_BATCH": str(batch)} if batch else {}
        return self.spawn(name, "worker", "--no-reconcile", *args,
                          env=self.env(db_url=db_url, faults=faults, config=config, **extra))

    def start_reconciler(self, name: str = "reconcile", *,
                         config: Path | None = None) -> subprocess.Popen[bytes]:
        return self.spawn(name, "reconcile", "--no-webhooks", env=self.env(config=config))

    def start_api(self, *, db_url: str | None = None, faults: str | None = None,
                  config: Path | None = None) -> str:
        """`docfence serve` on a free port; returns its base URL once /healthz answers."""
        port = free_port()
        self.spawn("serve", "serve", "--port", str(port), "--log-level", "warning",
                   env=self.env(db_url=db_url, faults=faults, config=config))
        self.base_url = f"http://127.0.0.1:{port}"
        wait_for(self._healthy, START_GUARD_S, "docfence serve to answer /healthz")
        return self.base_url

    def _healthy(self) -> bool:
        if self.procs["serve"].poll() is not None:
            raise AssertionError(f"docfence serve exited with {self.procs['serve'].returncode}: "
                                 f"{self.log('serve')[-2000:]}")
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def create_key(self) -> str:
        out = subprocess.run(module_command("docfence.cli", "keys", "create", "--tenant", TENANT, "--scopes",
                                            "submit,read", "--json"), env=self.env(), check=True,
                             capture_output=True, cwd=self.root, preexec_fn=self._preexec)
        self.api_key = json.loads(out.stdout.decode().strip().splitlines()[-1])["key"]
        return self.api_key

    def cli(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(module_command("docfence.cli", *args), env=self.env(), capture_output=True,
                              cwd=self.root, preexec_fn=self._preexec, timeout=START_GUARD_S)

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def submit(self, pdf: bytes, *, key: str | None = None, deadline_s: float | None = None,
               document_class: str | None = None, timeout: float = 60.0) -> httpx.Response:
        headers = dict(self._auth, **({"Idempotency-Key": key} if key else {}))
        data = {k: str(v) for k, v in (("deadline_s", deadline_s), ("document_class", document_class)) if v}
        return httpx.post(f"{self.base_url}/v1/jobs", headers=headers, data=data,
                          files={"file": ("doc.pdf", pdf, "application/pdf")}, timeout=timeout)

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job as the API shows it; None while the API cannot answer."""
        try:
            answer = httpx.get(f"{self.base_url}/v1/jobs/{job_id}", headers=self._auth, timeout=10)
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        job: dict[str, Any] = answer.json()
        return job

    def download(self, job_id: str) -> bytes | None:
        """The artifact's bytes through the API (redirect to a signed URL); None when not served."""
        answer = httpx.get(f"{self.base_url}/v1/jobs/{job_id}/artifact", headers=self._auth, timeout=30,
                           follow_redirects=True)
        return answer.content if answer.status_code == 200 else None

    def wait_terminal(self, ids: list[str], bound_s: float, abort: Callable[[], bool] | None = None) -> bool:
        """Poll the API until every job is terminal; False when `bound_s` (a hang guard far above
        any deadline, never what a run asserts) ran out first, or `abort()` turned true (say, the
        only worker exited)."""
        pending = set(ids)

        def done() -> bool:
            if abort is not None and abort():
                return True
            for job_id in list(pending):
                job = self.job(job_id)
                if job is not None and job["terminal"]:
                    pending.discard(job_id)
            return not pending

        try:
            wait_for(done, bound_s, "jobs to end")
        except AssertionError:
            return False
        return not pending

    def log(self, name: str) -> str:
        path = self.root / "logs" / f"{name}.log"
        return path.read_text("utf-8", "replace") if path.exists() else ""

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def signal_group(self, name: str, sig: signal.Signals) -> None:
        os.killpg(self.procs[name].pid, sig)

    def stop(self, name: str, timeout: float = 15.0) -> int | None:
        """SIGTERM the process group (SIGCONT first, in case it is stopped), SIGKILL when it stays."""
        proc = self.procs[name]
        if proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                _signal_group(proc, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        _signal_group(proc, signal.SIGKILL)  # render children and zygotes left behind in the group
        return proc.returncode

    def stop_all(self) -> None:
        """Every process at once (each exits within its shutdown grace), then each waited for."""
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal_group(proc, signal.SIGCONT)
                _signal_group(proc, signal.SIGTERM)
        for name in list(self.procs):
            self.stop(name)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def prepare_root(root: Path) -> None:
    for sub in ("logs", "faults", "metrics", "home", "objects"):
        (root / sub).mkdir(parents=True, exist_ok=True)


@contextmanager
def cluster(root: Path, db_url: str, *, storage_url: str | None = None, unprivileged: bool = False,
            config: str = "", extra_env: dict[str, str] | None = None,
            regions: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A deployment with its config written and an API key made; every process it started is stopped
    (with its whole group) on the way out."""
    prepare_root(root)
    secrets_env = {"DOCFENCE_PASSWORD_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
                   "DOCFENCE_SIGNING_SECRET": secrets.token_hex(32),
                   # one key-encryption key file for every process (PostgreSQL + S3 has no data folder)
                   "DOCFENCE_KEK_FILE": str(root / "keys" / "kek.key")}
    deployed = Cluster(root, db_url, storage_url or f"file://{root / 'objects'}", unprivileged,
                       {**secrets_env, **(extra_env or {})}, dict(regions or {}))
    deployed.write_config("base", config)
    with ExitStack() as stack:
        stack.callback(deployed.stop_all)
        deployed.create_key()
        yield deployed

"""Metrics in the README's set-up, with no metrics environment at all: real `serve`, `worker` and
`reconcile` processes share the host's counters through `metrics/` beside the database, so serve's
/metrics shows claims, render durations and outcomes, validation failures, lease expirations and
reclaims, and the lease-expiration series it exports is one DocfenceLeaseExpirationsHigh fires on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docfence.client import DocfenceClient
from docfence.config import Settings
from docfence.core.errors import ConfigError
from docfence.observability import multiproc
from docfence.samples import pdfs
from docfence.testing.procs import long_budget_config, start_worker, stop, wait_for, worker_env
from docfence.testing.servers import serve_process

from .helpers import samples, value
from .test_alerts import RULES, _promtool

HANG_GUARD_S = 300.0  # only stops a broken build from hanging; nothing asserts on durations
#: A watermark nobody can see (white, 1 % opaque): the output fails its fidelity validation.
INVISIBLE = {"text": "CONFIDENTIAL", "color": [1.0, 1.0, 1.0], "opacity": 0.01}


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "docfence.cli", *args], env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def readme_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The README's service set-up: database and storage URLs, nothing about metrics (short leases
    so a killed worker's lease expires soon; a render budget load cannot exhaust)."""
    data = tmp_path / "docfence-data"
    env = worker_env(f"sqlite:///{data}/docfence.db", f"file://{data}/objects",
                     DOCFENCE_LEASE_TTL_S="4", DOCFENCE_HEARTBEAT_INTERVAL_S="0.5",
                     **long_budget_config(tmp_path))
    for name in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir", "DOCFENCE_METRICS_DIR"):
        env.pop(name, None)
    yield env


def test_serve_shows_worker_and_reconciler_counters_without_setup(readme_env: dict[str, str],
                                                                  tmp_path: Path) -> None:
    env = readme_env
    key = _cli(env, "keys", "create", "--tenant", "acme", "--scopes", "submit,read").strip().splitlines()[-1]
    with serve_process(env, tmp_path / "serve.log") as (_proc, base), DocfenceClient(base, key) as client:
        scrape = lambda: samples(httpx.get(f"{base}/metrics", timeout=30).text)  # noqa: E731
        lost = client.submit(pdfs.links())
        killed_env = {**env, "DOCFENCE_FAULTS": "after_claim=kill", "DOCFENCE_FAULTS_DIR": str(tmp_path)}
        crashed = start_worker(killed_env, tmp_path / "killed.log", "--no-reconcile")
        assert crashed.wait(timeout=HANG_GUARD_S) == -9  # claimed the job, then died holding its lease
        reconciler = subprocess.Popen([sys.executable, "-m", "docfence.cli", "reconcile"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            found = wait_for(lambda: (s := scrape()) and value(s, "docfence_reclaims_total",
                                                               outcome="requeued") and s,
                             HANG_GUARD_S, "the reconciler's reclaim on serve's /metrics")
            assert value(found, "docfence_lease_expirations_total") >= 1
            invisible = client.submit(pdfs.links(), watermark=INVISIBLE)
            # runs until both jobs ended (a lease it loses under load is requeued by the reconciler)
            worker = start_worker(env, tmp_path / "worker.log", "--no-reconcile")
            try:
                wait_for(lambda: all(client.get(j.id).state in ("succeeded", "failed", "canceled")
                                     for j in (lost, invisible)), HANG_GUARD_S, "both jobs to end")
            finally:
                assert stop(worker) == 0
        finally:
            stop(reconciler)
        assert client.get(lost.id).state == "succeeded"
        assert client.get(invisible.id).error_code == "validation_failed"
        found = scrape()
    assert value(found, "docfence_claims_total", mode="vector") >= 3  # the lost claim, then two more
    assert value(found, "docfence_render_duration_seconds_count", mode="vector", pages="2-10",
                 outcome="ok") >= 1
    assert value(found, "docfence_jobs_terminal_total", state="succeeded", code="ok", mode="vector") >= 1
    assert value(found, "docfence_jobs_terminal_total", state="failed", code="validation_failed",
                 mode="vector") >= 1
    assert value(found, "docfence_validation_failures_total", check="watermark_rendered", mode="vector") >= 1
    assert value(found, "docfence_http_requests_total", method="POST", route="/v1/jobs", status="201") == 2
    expirations = value(found, "docfence_lease_expirations_total")
    files = sorted(p.name for p in (tmp_path / "docfence-data" / "metrics").glob("*.db"))
    pids = {name.rsplit("_", 1)[1] for name in files}
    assert expirations >= 1 and len(pids) <= 5, files  # serve, 2 workers, reconcile, archive: none per render
    _alert_fires_on(tmp_path)


def _alert_fires_on(tmp_path: Path) -> None:
    """The exact series serve exported (no labels of its own), growing at a crash-loop rate, fires the
    shipped alert; growing at a restart's pace, it does not."""
    promtool = _promtool()
    tests = tmp_path / "lease-alert-test.yml"
    tests.write_text(f"""
rule_files: [{RULES}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'docfence_lease_expirations_total{{instance="serve"}}'
        values: '0+6x40'
    alert_rule_test:
      - eval_time: 35m
        alertname: DocfenceLeaseExpirationsHigh
        exp_alerts:
          - exp_labels: {{severity: ticket}}
            exp_annotations:
              summary: "100m lease expirations per second over 15 minutes"
  - interval: 1m
    input_series:
      - series: 'docfence_lease_expirations_total{{instance="serve"}}'
        values: '0 5x40'
    alert_rule_test:
      - eval_time: 35m
        alertname: DocfenceLeaseExpirationsHigh
        exp_alerts: []
""")
    done = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stdout + done.stderr


_COUNTING = """
from docfence.observability import metrics
from docfence.core.process_id import process_identifier
metrics.record_lease_expired(2)
metrics.record_claimed("vector", 3)
print(process_identifier())
"""
_SCRAPE = "from docfence.observability.exposition import render_metrics; print(render_metrics(None).decode())"


def test_start_up_folds_dead_processes_counters_and_keeps_live_ones(tmp_path: Path) -> None:
    env = {**os.environ, multiproc.ENV_VAR: str(tmp_path)}

    def scrape() -> str:
        return subprocess.run([sys.executable, "-c", _SCRAPE], env=env, capture_output=True, text=True,
                              check=True, timeout=HANG_GUARD_S).stdout

    dead = [subprocess.run([sys.executable, "-c", _COUNTING], env=env, capture_output=True, text=True,
                           check=True, timeout=HANG_GUARD_S).stdout.strip() for _ in range(2)]
    live = subprocess.Popen([sys.executable, "-c", _COUNTING + "import sys; sys.stdin.read()"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout is not None
        pid = live.stdout.readline().strip()  # it counted, and runs until its stdin closes
        (tmp_path / "notes.txt").write_text("not a metrics file")
        before = scrape()
        folded = multiproc.fold_dead(tmp_path)
        assert {f"counter_{p}.db" for p in dead} <= set(folded)  # (and the scrape's own, now dead)
        left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
        assert left == sorted(["counter_archive.db", f"counter_{pid}.db", "notes.txt"])
        assert multiproc.fold_dead(tmp_path) == []  # the archive is never folded into itself
        after = scrape()
    finally:
        live.communicate("", timeout=HANG_GUARD_S)
    for text in (before, after):  # the totals survive the fold: no counter reset for Prometheus
        found = samples(text)
        assert value(found, "docfence_lease_expirations_total") == 6
        assert value(found, "docfence_claims_total", mode="vector") == 9


def test_the_folder_follows_the_database_unless_set(tmp_path: Path) -> None:
    local = Settings(database_url=f"sqlite:///{tmp_path}/data/docfence.db")
    assert multiproc.metrics_dir(local) == tmp_path / "data" / "metrics"
    pg = Settings(database_url="postgresql://u@db:5432/a", storage_url="s3://b/p")
    other = Settings(database_url="postgresql://u@db:5432/b", storage_url="s3://b/p")
    assert multiproc.metrics_dir(pg) != multiproc.metrics_dir(other)  # two deployments never mix
    assert multiproc.metrics_dir(Settings(metrics_dir=str(tmp_path / "m"))) == tmp_path / "m"


def test_a_scrape_reads_the_files_under_the_fold_lock(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A starting process folds a dead one's file into the archive, then unlinks it, holding the lock
    exclusively; a scrape that read between the two would count those values twice."""
    import fcntl

    from docfence.observability import exposition

    seen: list[tuple[str, int]] = []

    class Files:
        def collect(self) -> list[str]:
            seen.append(("read", -1))
            return ["metric"]

    def flock(handle, operation: int) -> None:  # type: ignore[no-untyped-def]
        seen.append((handle.name, operation))

    monkeypatch.setattr(exposition.fcntl, "flock", flock)
    collected = exposition._FoldLocked(Files(), tmp_path).collect()  # type: ignore[arg-type]
    assert collected == ["metric"]
    assert seen == [(str(tmp_path / ".fold.lock"), fcntl.LOCK_SH), ("read", -1)]


def test_a_default_folder_planted_in_the_temp_directory_is_refused(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """/tmp is everyone's: the default PostgreSQL folder must be a real directory of this user, closed
    to group and others, or a planted folder or symlink would collect (or feed) this host's counters."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pg = Settings(database_url="postgresql://u@db:5432/a", storage_url="s3://b/p")
    folder = multiproc.metrics_dir(pg)
    assert multiproc.prepare_folder(pg) == folder and (folder.stat().st_mode & 0o777) == 0o700
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir(mode=0o700)
    folder.rmdir()
    folder.symlink_to(elsewhere)
    _refused(pg)
    folder.unlink()
    folder.write_text("")
    _refused(pg)
    folder.unlink()
    folder.mkdir()
    folder.chmod(0o777)
    _refused(pg)
    folder.chmod(0o700)
    assert multiproc.prepare_folder(pg) == folder
    owner = folder.stat().st_uid
    monkeypatch.setattr(multiproc.os, "geteuid", lambda: owner + 1)
    _refused(pg)


def _refused(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="DOCFENCE_METRICS_DIR"):
        multiproc.prepare_folder(settings)


def _counter_file(path: Path, total: float) -> None:
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    written = MmapedDict(str(path))
    try:
        written.write_value(mmap_key("docfence_lease_expirations_total", "docfence_lease_expirations_total",
                                     [], [], ""), total, 0.0)
    finally:
        written.close()


def test_fold_takes_only_this_pid_namespaces_dead_files(tmp_path: Path) -> None:
    """Containers sharing the folder may each run a pid 1: a file of another pid namespace is never
    folded (its pid says nothing here), however dead that pid is in this namespace; this namespace's
    dead process is."""
    from docfence.core.process_id import namespace, process_identifier

    ours = namespace()
    assert process_identifier() == f"{os.getpid()}-{ours}"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True, timeout=HANG_GUARD_S).stdout.strip()
    other = str(int(ours) + 1)
    dead_here, elsewhere = f"counter_{finished}-{ours}.db", f"counter_{finished}-{other}.db"
    live_here, bare = f"counter_{os.getpid()}-{ours}.db", f"counter_{finished}.db"
    for name in (dead_here, elsewhere, live_here, bare):
        _counter_file(tmp_path / name, 5.0)
    assert multiproc.fold_dead(tmp_path) == [dead_here]
    left = sorted(p.name for p in tmp_path.glob("*.db"))
    assert left == sorted(["counter_archive.db", elsewhere, live_here, bare])

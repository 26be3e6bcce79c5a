"""What a fault run concludes, judged from outside: every accepted job terminal by its deadline plus one
reconcile interval (the database's clock), the published artifact the winning attempt's by sha256 from
the API (its summary and the downloaded bytes), the database and the object store, nothing accepted
lost, and the scenario's own checks. Also the deployment each run starts from and its barriers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from docfence.blobs import open_blob_store
from docfence.blobs.base import BlobStore
from docfence.core.errors import BlobError
from docfence.harness.cluster import RECONCILE_S, Cluster, cluster
from docfence.harness.cluster_rows import ArtifactRow, JobRow, Rows
from docfence.harness.databases import temporary_pg_database
from docfence.harness.workers import wait_for
from docfence.storage_keys import attempt_of_staging_key

__all__ = ["Verdict", "arrivals", "deployment", "judge", "proxied_url", "reached", "release", "stale_staged",
           "wait_reached"]

TERMINAL = ("succeeded", "failed", "canceled")
LOST_CODES = ("object_not_found",)  # a job that cannot find its own input lost what it was given
HANG_GUARD_S = 300.0  # only keeps a broken build from hanging; far above every deadline used here


@dataclass
class Verdict:
    """One run of one scenario. `held`: both promises, nothing lost, every scenario check passed."""

    scenario: str
    store: str
    jobs: int = 0
    terminal: int = 0
    lost: int = 0
    stale_publishes: int = 0
    deadline_misses: int = 0
    max_overrun_s: float | None = None  # the latest finished_at - deadline_at (negative: before it)
    checks: dict[str, bool] = field(default_factory=dict)
    figures: dict[str, float | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return (self.jobs > 0 and self.terminal == self.jobs and self.lost == 0 and self.stale_publishes == 0
                and self.deadline_misses == 0 and all(self.checks.values()))

    def check(self, name: str, ok: bool, why: str = "") -> bool:
        self.checks[name] = bool(ok)
        if not ok:
            self.problems.append(f"{name}: {why}" if why else name)
        return bool(ok)

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "store": self.store, "held": self.held, "jobs": self.jobs,
                "terminal": self.terminal, "lost": self.lost, "stale_publishes": self.stale_publishes,
                "deadline_misses": self.deadline_misses, "max_overrun_s": self.max_overrun_s,
                "checks": self.checks, "figures": self.figures, "problems": self.problems}


def arrivals(c: Cluster, point: str) -> list[int]:
    """The pids that reached fault point `point` (DOCFENCE_FAULTS `wait:` actions), one per arrival."""
    path = c.faults_dir / f"reached-{point}"
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def reached(c: Cluster, point: str) -> int:
    return len(arrivals(c, point))


def release(c: Cluster, name: str) -> None:
    """Let every process blocked (now or later) at `wait:name` go on."""
    path = c.faults_dir / f"release-{name}"
    path.touch()


def wait_reached(c: Cluster, point: str, count: int = 1, *, processes: int = 0) -> None:
    """Until `point` was reached `count` times, by at least `processes` different processes."""
    wait_for(lambda: reached(c, point) >= count and len(set(arrivals(c, point))) >= processes, HANG_GUARD_S,
             f"fault point {point}")


def proxied_url(db_url: str, port: int) -> str:
    """`db_url` with its host and port replaced by the proxy on loopback `port`."""
    parts = urlsplit(db_url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def pg_target(db_url: str) -> tuple[str, int]:
    parts = urlsplit(db_url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


@contextmanager
def deployment(root: Path, store: str, **options: Any) -> Iterator[Cluster]:
    """A cluster (cluster.py) on a fresh SQLite file or a throwaway PostgreSQL database."""
    with ExitStack() as stack:
        (root / "db").mkdir(parents=True, exist_ok=True)
        if store == "sqlite":
            db_url = f"sqlite:///{root / 'db' / 'jobs.db'}"
        else:
            db_url = options.pop("db_url", None) or stack.enter_context(
                temporary_pg_database("docfence_faults"))
        yield stack.enter_context(cluster(root, db_url, **options))


def blob_store(c: Cluster, region: str) -> BlobStore:
    return open_blob_store(c.regions.get(region, c.storage_url))


def stored_plaintext(c: Cluster, job_id: str, key: str, region: str) -> bytes:
    """The plaintext of a job's stored object, opened with the job's data key as its row names it (the
    deployment's key file) or read as is for a plaintext job."""
    from docfence.blobs.kek.jobs import JobKeys, RowKey, read_object
    from docfence.config.encryption import EncryptionConfig
    from docfence.store.base import open_store

    store = open_store(c.db_url)
    try:
        job = store.get(job_id)
    finally:
        store.close()
    keys = JobKeys(EncryptionConfig(kek_file=c.extra_env["DOCFENCE_KEK_FILE"]), None)
    row = RowKey(job.tenant, job.id, job.data_key_provider, job.data_key_kek_id, job.data_key_wrapped)
    return read_object(blob_store(c, region), key, keys.key_for(row))


def stale_staged(c: Cluster, job_ids: list[str]) -> list[str]:
    """Staging objects of these jobs that no artifact row names (the losing attempts' leftovers)."""
    rows = Rows(c.db_url)
    jobs, arts = rows.jobs(), rows.artifacts()
    left = []
    for job_id in job_ids:
        job = jobs.get(job_id)
        if job is None or job.input_key is None:
            continue
        prefix = job.input_key.rsplit("/", 1)[0] + "/"
        art = arts.get(job_id)
        for key in blob_store(c, job.region).list(prefix):
            if attempt_of_staging_key(key) is not None and (art is None or key != art.key):
                left.append(key)
    return left


def judge(c: Cluster, verdict: Verdict, ids: list[str]) -> Verdict:
    """Count `ids` (every job the API accepted) into `verdict` by the promise's rules."""
    rows = Rows(c.db_url)
    jobs, arts, commits = rows.jobs(), rows.artifacts(), rows.commits()
    verdict.jobs = len(ids)
    for job_id in ids:
        job = jobs.get(job_id)
        if job is None:
            verdict.lost += 1
            verdict.problems.append(f"{job_id}: accepted but not in the database")
            continue
        _judge_deadline(verdict, job)
        if _input_lost(c, job):
            verdict.lost += 1
            verdict.problems.append(f"{job_id}: its input is gone ({job.state}, {job.error_code})")
        stale = _stale_publish(c, job, arts.get(job_id), commits.get(job_id, 0))
        if stale:
            verdict.stale_publishes += 1
            verdict.problems.append(f"{job_id}: {stale}")
    return verdict


def _judge_deadline(verdict: Verdict, job: JobRow) -> None:
    if job.state not in TERMINAL or job.finished_at is None:
        verdict.problems.append(f"{job.id}: not terminal ({job.state})")
        return
    verdict.terminal += 1
    overrun = (job.finished_at - job.deadline_at).total_seconds()
    verdict.max_overrun_s = round(max(overrun, verdict.max_overrun_s or overrun), 3)
    if overrun > RECONCILE_S:
        verdict.deadline_misses += 1
        verdict.problems.append(f"{job.id}: ended {overrun:.1f} s after its deadline ({job.state})")


def _input_lost(c: Cluster, job: JobRow) -> bool:
    if job.error_code in LOST_CODES:
        return True
    try:
        return job.input_key is None or not blob_store(c, job.region).exists(job.input_key)
    except BlobError:
        return False  # the object store cannot answer now: not evidence of a loss


def _stale_publish(c: Cluster, job: JobRow, art: ArtifactRow | None, commits: int) -> str:
    """Why this job's publication is not its winning attempt's ("" when it is)."""
    if job.state != "succeeded":
        return f"a {job.state} job has an artifact" if art is not None or commits else ""
    if art is None or art.attempt != job.attempt or commits != 1:
        return f"artifact of attempt {art and art.attempt} for attempt {job.attempt}, {commits} commits"
    api = c.job(job.id) or {}
    api_sha = (api.get("artifact") or {}).get("sha256")
    stored = stored_plaintext(c, job.id, art.key, job.region)
    downloaded = c.download(job.id)
    shas = {art.sha256, api_sha, hashlib.sha256(stored).hexdigest(),
            hashlib.sha256(downloaded or b"").hexdigest()}
    return "" if len(shas) == 1 else "the sha256 of the API, the database and the object store differ"

"""Two versions, one database (docs/deploy.md, "Schema compatibility"): the API server, workers and
`ops` commands of the release before (OLD_COMMIT, installed from a `git worktree` into its own venv)
run beside the current code against one PostgreSQL database migrated by the current code. Jobs
submitted on either side finish on the other side's workers, every row stays readable by both (each
version's API and client list and read every job), and the old version's `ops pause` + `ops drain`
hand its leases back before its workers stop. The reverse is not promised: the current code refuses
readiness on a database only the old version migrated.

The old venv is built once per commit (~90 s: its dependencies come from the package index or pip's
cache) and kept under /var/cache/docfence-ci/; later runs take ~60 s.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import venv
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from time import monotonic
from typing import Any

import httpx
import pytest

from docfence.config import Settings
from docfence.core.interpreter import module_command
from docfence.harness.tcp_proxy import free_port
from docfence.samples import pdfs
from docfence.service import build_service
from docfence.store.base import open_store
from docfence.store.queries import migrations
from docfence.testing.procs import REPO, long_budget_config
from docfence.testing.stores import temporary_pg_database

#: The newest commit of main before migration 010_attempt_validation (3d44529): its schema is one
#: migration behind the current code's, and its code is the release a rolling upgrade replaces.
OLD_COMMIT = "931b371cf7c94ab6d696f19ba8786ef0bed8f996"
OLD_SCHEMA = 9
#: The one break of the rule this pair shows, kept visible rather than tolerated silently: OLD_COMMIT's
#: store builds `Attempt(**row)` from `SELECT * FROM attempts`, so once migration 010 added
#: `attempts.validation` its servers answer 500 (internal_error) to a job's events whenever the job has
#: an attempt, until they are replaced. No row is damaged (the current version reads them all), jobs
#: run on, and listings and job reads work. The current store must map rows by the fields it knows
#: (tests/store/test_schema_version.py holds it to that).
OLD_API_CANNOT_READ_ATTEMPTS = True
#: Codes the store itself writes on jobs that end without a worker's error (canceled, deadline passed,
#: lease expired with no attempt left): neither version's /v1/capabilities lists them yet.
STORE_WRITTEN_CODES = {"canceled", "deadline_exceeded", "lease_expired"}
CACHE = Path(os.environ.get("DOCFENCE_CI_CACHE", "/var/cache/docfence-ci"))
#: Generated documents (docfence.samples): the test needs no file from outside the repository.
SAMPLES = {"links": pdfs.links, "three_pages": lambda: pdfs.many_pages(3)}
GOOD = ("links", "three_pages")
NOT_A_PDF = b"%PDF-1.4\nthis file ends before any object\n"  # fails its job with a stable error code
STEP_S = 180.0  # one command or one worker run, on a loaded 2-core machine

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(900)]

# What each version's own reader makes of the listing it is given: its states, its error codes, and
# every job as its client parses it; plus each job's events (attempt rows included) through its API.
READER = """
import json, sys, tempfile
from docfence.client import DocfenceClient
from docfence.client.errors import HttpError
from docfence.client.models import KNOWN_STATES
from docfence.core.errors import DocfenceError, all_codes
from docfence.core.states import JobState
base, key = sys.argv[1], sys.argv[2]
def events(job_id):
    with DocfenceClient(base, key) as client:  # its own connection: a server that failed may reset one
        try:
            return len(client.events(job_id).get("events", []))
        except HttpError as exc:  # recorded, judged by the test
            return "error:" + exc.server_code
with DocfenceClient(base, key) as client:
    jobs = list(client.iter_jobs())
    assert [client.get(j.id).state for j in jobs] == [j.state for j in jobs]
events = {j.id: events(j.id) for j in jobs}
def download(job_id):
    with DocfenceClient(base, key) as client, tempfile.TemporaryDirectory() as folder:
        try:  # the client checks the artifact's sha256 against the job's record
            return client.download(job_id, folder).stat().st_size
        except DocfenceError as exc:  # recorded, judged by the test
            return "error:" + exc.code
downloads = {j.id: download(j.id) for j in jobs if j.state == "succeeded"}
with DocfenceClient(base, key) as client:
    documented = sorted(client.capabilities()["error_codes"])
print(json.dumps({"states": [s.value for s in JobState], "client_states": list(KNOWN_STATES),
                  "codes": sorted(all_codes()), "documented": documented, "events": events,
                  "downloads": downloads,
                  "jobs": {j.id: [j.state, j.error_code, j.attempt] for j in jobs}}))
"""


@dataclass(frozen=True)
class Version:
    """One docfence installation: how to run its CLI, and the environment all its processes share."""

    name: str
    python: Sequence[str]  # this version's interpreter with its flags
    argv: Sequence[str]  # `python -m docfence.cli` of this version
    env: dict[str, str]
    cwd: Path

    @classmethod
    def installed(cls, name: str, python: Path, env: dict[str, str], cwd: Path) -> Version:
        """The docfence of a venv: -I keeps a PYTHONPATH meant for the current code out of it."""
        return cls(name, [str(python), "-I"], [str(python), "-I", "-m", "docfence.cli"], env, cwd)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.argv, *args], env=self.env, cwd=self.cwd, capture_output=True,
                              text=True, timeout=STEP_S, check=False)
        if check:
            assert done.returncode == 0, f"{self.name} {args}: {done.stderr[-3000:]}"
        return done

    def script(self, code: str, *args: str) -> Any:
        done = subprocess.run([*self.python, "-c", code, *args], env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=STEP_S, check=False)
        assert done.returncode == 0, f"{self.name} reader: {done.stderr[-3000:]}"
        return json.loads(done.stdout.splitlines()[-1])


# -- the old version's venv, built once per commit ---------------------------------------------------
@pytest.fixture(scope="module")
def old_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv holding docfence as of OLD_COMMIT (a wheel built from a detached worktree,
    with its declared dependencies), cached per commit; the worktree is removed again."""
    cache = CACHE if os.access(CACHE, os.W_OK) else tmp_path_factory.mktemp("cache")
    root = cache / f"mixed-version-{OLD_COMMIT[:12]}"
    python = root / "venv" / "bin" / "python"
    with (cache / f"{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs on one machine build it once
        if not (root / "complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            _build_old_venv(root)
            (root / "complete").write_text(OLD_COMMIT + "\n")
    return python


def _build_old_venv(root: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="docfence-old-"))
    source = work / "src"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(source), OLD_COMMIT],
                   check=True, capture_output=True, timeout=120)
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"),
                        str(source)], check=True, capture_output=True, timeout=600)
        wheel = next((work / "dist").glob("docfence-*.whl"))
        venv.EnvBuilder(with_pip=True).create(root / "venv")
        subprocess.run([str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input",
                        str(wheel)], check=True, capture_output=True, timeout=900)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(source)],
                       check=False, capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)


# -- processes ---------------------------------------------------------------------------------------
@contextmanager
def serving(version: Version, log: Path) -> Iterator[str]:
    """`docfence serve` of `version` on a free loopback port; yields its base URL once /healthz answers."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([*version.argv, "serve", "--port", str(port), "--log-level", "warning"],
                                env=version.env, cwd=version.cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            _until(lambda: _answers(base, proc), f"{version.name} API to answer /healthz")
            yield base
        finally:
            proc.terminate()
            proc.wait(30)


def _answers(base: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"the server exited with {proc.returncode}"
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _until(condition: Any, what: str, budget_s: float = STEP_S) -> None:
    """Wait for a condition another process makes true (a bounded wait, never a measure of time)."""
    end = monotonic() + budget_s
    while not condition():
        assert monotonic() < end, f"gave up waiting for {what}"
        threading.Event().wait(0.1)


def _submit(base: str, key: str, names: Sequence[str], *, bad: int = 0) -> list[str]:
    """Submit the corpus files `names` and `bad` copies of a truncated file; the new jobs' ids."""
    documents = [SAMPLES[n]() for n in names] + [NOT_A_PDF] * bad
    ids = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        for i, data in enumerate(documents):
            answer = http.post("/v1/jobs", files={"file": (f"doc{i}.pdf", data, "application/pdf")})
            assert answer.status_code in (200, 201, 202), answer.text
            ids.append(answer.json()["id"])
    return ids


def _states(url: str, ids: Sequence[str]) -> dict[str, str]:
    store = open_store(url, migrate=False)
    try:
        return {i: store.get(i).state.value for i in ids}
    finally:
        store.close()


def _why(url: str, ids: Sequence[str]) -> dict[str, tuple[str, str | None, str | None]]:
    """Each job's state and last error, for assertion messages."""
    store = open_store(url, migrate=False)
    try:
        return {i: (j.state.value, j.last_error_code, j.last_error_message) for i in ids
                for j in [store.get(i)]}
    finally:
        store.close()


def _valid_leases(url: str) -> int:
    store = open_store(url, migrate=False)
    try:
        return store.valid_lease_count()
    finally:
        store.close()


# -- the test ----------------------------------------------------------------------------------------
def test_old_and_new_versions_share_one_database(old_python: Path, tmp_path: Path) -> None:
    with temporary_pg_database("docfence_mixed") as url:
        env = {**os.environ, "DOCFENCE_DATABASE_URL": url, "DOCFENCE_STORAGE_URL": f"file://{tmp_path}/objects",
               "DOCFENCE_SIGNING_SECRET": "mixed-version-signing-secret", **long_budget_config(tmp_path),
               # a rolling upgrade's first step: old workers cannot open sealed objects, so the new
               # version seals no new job until they are gone (docs/encryption.md)
               "DOCFENCE_SEAL_NEW_JOBS": "false"}
        new = Version("new", [sys.executable, "-P"], module_command("docfence.cli"), env, tmp_path)
        old = Version.installed("old", old_python, env, tmp_path)
        _run_both(old, new, url, tmp_path)


def test_the_current_code_is_not_ready_on_a_database_only_the_old_one_migrated(
    old_python: Path, tmp_path: Path
) -> None:
    """The reverse is not promised (a release needs its own migrations): readiness says so, naming the
    versions, until `docfence db upgrade` of the current code ran."""
    with temporary_pg_database("docfence_old_schema") as url:
        settings = Settings(database_url=url, storage_url=f"file://{tmp_path}/objects",
                            signing_secret="mixed-version-signing-secret")
        old = Version.installed("old", old_python, {**os.environ, "DOCFENCE_DATABASE_URL": url}, tmp_path)
        old.run("db", "upgrade")
        store = open_store(url, migrate=False)
        try:
            newest = migrations("postgres")[-1][0]
            assert store.schema_versions() == (OLD_SCHEMA, newest)
            service = build_service(settings, store)
            answer = service.readiness()
            assert not answer.ready and f"migration {OLD_SCHEMA}," in (answer.reason or "")
            pending = migrations("postgres")[OLD_SCHEMA:]
            assert store.migrate() == [f"{number:03d}_{name}" for number, name, _ in pending]
            assert service.readiness().ready
        finally:
            store.close()


def _run_both(old: Version, new: Version, url: str, tmp_path: Path) -> None:
    new.run("db", "upgrade")
    old.run("db", "upgrade")  # the old code finds nothing it knows pending and leaves 010 alone
    store = open_store(url, migrate=False)
    try:
        assert store.schema_versions()[0] == migrations("postgres")[-1][0] > OLD_SCHEMA
    finally:
        store.close()
    key = new.run("keys", "create", "--tenant", "mixed").stdout.strip().splitlines()[-1]
    with serving(old, tmp_path / "old-api.log") as old_api, serving(new, tmp_path / "new-api.log") as new_api:
        assert httpx.get(f"{old_api}/readyz", timeout=30).status_code == 200
        assert httpx.get(f"{new_api}/readyz", timeout=30).json() == {"status": "ok"}
        jobs = _cross_submit_and_render(old, new, old_api, new_api, key, url)
        jobs += _old_drain_hands_leases_back(old, new, old_api, key, url)
        for reconciler in (old, new):  # a reconciler pass of either version over the other's rows
            reconciler.run("reconcile", "--once")
        _both_readers_understand_every_row(old, new, old_api, new_api, key, jobs)


def _cross_submit_and_render(old: Version, new: Version, old_api: str, new_api: str, key: str,
                             url: str) -> list[str]:
    """Submitted on the old API, rendered by a new worker; submitted on the new API, rendered by an old
    one; one job of each side canceled through the other side's API."""
    jobs = []
    for api, other_api, worker in ((old_api, new_api, new), (new_api, old_api, old)):
        batch = _submit(api, key, GOOD, bad=1)
        canceled = _submit(api, key, GOOD[:1])[0]
        answer = httpx.post(f"{other_api}/v1/jobs/{canceled}/cancel", timeout=60,
                            headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200 and answer.json()["state"] == "canceled", answer.text
        assert set(_states(url, batch).values()) == {"queued"}
        worker.run("worker", "--until-idle", "--no-reconcile")
        states = _states(url, [*batch, canceled])
        assert [states[i] for i in batch] == ["succeeded"] * len(GOOD) + ["failed"], (worker.name,
                                                                                   _why(url, batch))
        assert states[canceled] == "canceled"
        jobs += [*batch, canceled]
    return jobs


def _old_drain_hands_leases_back(old: Version, new: Version, old_api: str, key: str, url: str) -> list[str]:
    """A rolling upgrade's worker step with the old `ops` commands: pause claims, drain (returns once no
    valid lease remains), stop the old worker (SIGTERM); the new version resumes and finishes the rest."""
    batch = _submit(old_api, key, GOOD * 4)
    log = (old.cwd / "old-worker.log").open("wb")
    worker = subprocess.Popen([*old.argv, "worker", "--no-reconcile"], env=old.env, cwd=old.cwd,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _until(lambda: set(_states(url, batch).values()) != {"queued"}, "the old worker's first claim")
        old.run("ops", "pause", "--reason", "upgrade to the current version")
        drained = old.run("ops", "drain", "--timeout", str(STEP_S))
        assert "drained" in drained.stdout + drained.stderr
        held = _states(url, batch)
        assert "rendering" not in held.values() and _valid_leases(url) == 0, held  # paused, drained
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(STEP_S) == 0, (old.cwd / "old-worker.log").read_text()[-3000:]
        assert _valid_leases(url) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
        log.close()
    assert set(_states(url, batch).values()) <= {"queued", "succeeded"}
    new.run("ops", "resume", "--reason", "upgrade to the current version")
    new.run("worker", "--until-idle", "--no-reconcile")
    assert set(_states(url, batch).values()) == {"succeeded"}, _why(url, batch)
    return batch


def _both_readers_understand_every_row(old: Version, new: Version, old_api: str, new_api: str, key: str,
                                       jobs: Sequence[str]) -> None:
    """Each version's client reads each version's API: the same jobs with the same states and error
    codes; each reader knows every state of both versions, each API documents every error code of
    both; every job's events (with its attempts) are readable, but for OLD_API_CANNOT_READ_ATTEMPTS."""
    seen = {(reader.name, base): reader.script(READER, base, key)
            for reader in (old, new) for base in (old_api, new_api)}
    rows = seen["new", new_api]["jobs"]
    assert sorted(rows) == sorted(jobs)
    assert {state for state, _, _ in rows.values()} == {"succeeded", "failed", "canceled"}
    states = {s for view in seen.values() for s in view["states"]}
    codes = {c for view in seen.values() for c in view["codes"]} | STORE_WRITTEN_CODES
    assert {code for _, code, _ in rows.values()} - {None} <= codes
    for (reader, base), view in seen.items():
        assert view["jobs"] == rows, (reader, base)
        assert set(view["client_states"]) == set(view["states"]) == states, reader
        assert codes - STORE_WRITTEN_CODES <= set(view["documented"]), (base, codes - set(view["documented"]))
        assert len(view["downloads"]) == sum(state == "succeeded" for state, _, _ in rows.values())
        assert all(isinstance(size, int) and size > 0 for size in view["downloads"].values()), \
            (reader, base, view["downloads"])
        for job_id, answer in view["events"].items():
            if base == old_api and rows[job_id][2] > 0 and OLD_API_CANNOT_READ_ATTEMPTS:
                assert answer == "error:internal_error", (reader, job_id, answer)
            else:
                assert isinstance(answer, int) and answer > 0, (reader, base, job_id, answer)

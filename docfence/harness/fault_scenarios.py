"""The fault scenarios, each one run of real `serve`, `worker` and `reconcile` processes with one fault
injected from outside (a signal, a TCP proxy, a server restart, a read-only folder, a stopped S3
server, a job no worker can process). Each returns a Verdict (fault_runs.py) for tests and benchmarks.
Events are ordered with fault-point barriers and database state; the only durations are the faults'
own (an outage's length) and hang guards far above every deadline."""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from docfence.core.clock import monotonic
from docfence.harness.cluster import HEARTBEAT_S, LEASE_TTL_S, RECONCILE_S, Cluster
from docfence.harness.cluster_rows import Rows
from docfence.harness.fault_runs import (
    HANG_GUARD_S,
    TERMINAL,
    Verdict,
    deployment,
    judge,
    pg_target,
    proxied_url,
    release,
    stale_staged,
    wait_reached,
)
from docfence.harness.tcp_proxy import Mode, running_proxy
from docfence.harness.workers import wait_for
from docfence.samples.pdfs import links

__all__ = ["LogWatch", "accept", "lost_answer", "partition_in_transaction", "partition_outside_transaction",
           "poison_job", "sigstop", "submit_jobs", "wait_collected"]

# The statement of a fenced commit that takes the job row's lock (queries/postgres/transitions.sql,
# artifact_committed); heartbeats never clear the lease owner, so only a commit matches.
COMMIT_LOCKS_ROW = b"lease_owner = NULL, lease_expires_at = NULL"
NOTICE_GUARD_S = LEASE_TTL_S + HEARTBEAT_S + 20.0  # how long a partition lasts at most before healing
LOCK_SEEN_S = 10.0  # the server executes the forwarded statement within this (a hang guard)
IN_TX_DEADLINE_S = 30.0  # the partitioned-in-a-transaction job's deadline: the partition outlasts it
ERROR_ID = re.compile(r'"level": "error".*\berr_[0-9a-z]+')  # a JSON log line at ERROR naming an error id


class LogWatch:
    """Watches a process's log for `text` from now on; `seen_after` is how long after the start it
    first appeared (None while it has not)."""

    def __init__(self, c: Cluster, name: str, text: str) -> None:
        self.c, self.name, self.text = c, name, text
        self.started = monotonic()
        self.seen_after: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if self.text in self.c.log(self.name):
                self.seen_after = round(monotonic() - self.started, 3)
                return

    def wait(self, bound_s: float) -> bool:
        self._thread.join(bound_s)
        return self.seen_after is not None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def accept(v: Verdict, answer: httpx.Response) -> str | None:
    """The job id of a 2xx answer; anything else is noted as a problem."""
    if answer.status_code in (200, 201, 202):
        return str(answer.json()["id"])
    v.problems.append(f"submission answered {answer.status_code}: {answer.text[:200]}")
    return None


def submit_jobs(c: Cluster, v: Verdict, count: int, **options: object) -> list[str]:
    ids = [accept(v, c.submit(links(), **options)) for _ in range(count)]  # type: ignore[arg-type]
    return [i for i in ids if i is not None]


def wait_collected(c: Cluster, ids: list[str]) -> bool:
    """Wait (bounded) until the reconciler's sweep removed every losing attempt's staged object."""
    try:
        wait_for(lambda: not stale_staged(c, ids), HANG_GUARD_S, "stale staged objects to be collected")
    except AssertionError:
        return False
    return True


def _worker_of(c: Cluster, job_id: str, attempt: int) -> str:
    for row in Rows(c.db_url).attempts(job_id):
        if int(row["attempt"]) == attempt:
            return str(row["worker"])
    return ""


def _claimed_by(c: Cluster, job_id: str, name: str) -> bool:
    """Whether worker process `name` claimed the job's last attempt (worker ids carry the pid)."""
    job = Rows(c.db_url).jobs().get(job_id)
    return job is not None and f"-{c.procs[name].pid}-" in _worker_of(c, job_id, job.attempt)


def _won_by_a_later_attempt(c: Cluster, v: Verdict, job_id: str) -> None:
    art = Rows(c.db_url).artifacts().get(job_id)
    v.check("attempt_2_won", art is not None and art.attempt >= 2,
            f"artifact of attempt {art.attempt if art else None}: the paused attempt must never publish")


def sigstop(root: Path, store: str, *, soak: bool = False) -> Verdict:
    """A worker's whole process group stopped past its lease, then continued: another worker's attempt
    2 wins, attempt 1 never publishes, the resumed worker logs "lease lost" and goes on."""
    v = Verdict("sigstop", store)
    with deployment(root, store) as c:
        c.start_api()
        c.start_reconciler()
        ids = submit_jobs(c, v, 1)
        c.start_worker("paused", faults="after_claim=wait:resume")
        wait_reached(c, "after_claim")
        c.signal_group("paused", signal.SIGSTOP)
        release(c, "resume")  # seen only once it runs again
        c.start_worker("rescuer")
        c.wait_terminal(ids, HANG_GUARD_S)
        watch = LogWatch(c, "paused", "lease lost")
        c.signal_group("paused", signal.SIGCONT)
        v.check("lease_lost_logged", watch.wait(NOTICE_GUARD_S), "the resumed worker never logged it")
        v.figures["resumed_notice_s"] = watch.seen_after
        watch.close()
        c.stop("rescuer")
        more = submit_jobs(c, v, 1)
        c.wait_terminal(more, HANG_GUARD_S, abort=lambda: not c.alive("paused"))
        v.check("paused_worker_alive", c.alive("paused"))
        v.check("paused_worker_goes_on", bool(more) and _claimed_by(c, more[0], "paused"))
        _won_by_a_later_attempt(c, v, ids[0])
        v.check("stale_staged_collected", wait_collected(c, ids))
        return judge(c, v, ids + more)


def partition_outside_transaction(root: Path, store: str = "postgres", *, soak: bool = False) -> Verdict:
    """A black hole between a worker and PostgreSQL while it is between statements (its result staged,
    its commit not sent), healed once another worker won: one winner, the stale staged object
    collected, the partition noticed before the heal, the worker claiming again after it."""
    v = Verdict("partition_outside_tx", store)
    with deployment(root, store) as c, running_proxy(pg_target(c.db_url)) as proxy:
        rows = Rows(c.db_url)
        c.start_api()
        c.start_reconciler()
        ids = submit_jobs(c, v, 1)
        c.start_worker("cut_off", db_url=proxied_url(c.db_url, proxy.port),
                       faults="after_staging_upload=wait:partition")
        wait_reached(c, "after_staging_upload")
        proxy.blackhole()
        watch = LogWatch(c, "cut_off", "lease lost")
        release(c, "partition")
        c.start_worker("rescuer")
        c.wait_terminal(ids, HANG_GUARD_S)
        c.stop("rescuer")
        v.check("partition_noticed_before_heal", watch.wait(NOTICE_GUARD_S),
                "the partitioned worker did not notice its lease was lost while partitioned")
        v.figures["detection_s"] = watch.seen_after
        watch.close()
        proxy.heal()
        healed_at = rows.now()
        more = submit_jobs(c, v, 1)
        c.wait_terminal(more, HANG_GUARD_S, abort=lambda: not c.alive("cut_off"))
        v.check("worker_recovered_after_heal", bool(more) and _claimed_by(c, more[0], "cut_off"))
        v.figures["recovery_s"] = _claimed_after(rows, more, healed_at)
        _won_by_a_later_attempt(c, v, ids[0])
        v.check("stale_staged_collected", wait_collected(c, ids))
        return judge(c, v, ids + more)


def _claimed_after(rows: Rows, ids: list[str], at: datetime) -> float | None:
    """Seconds from `at` (store clock) until the first attempt of ids[0] was claimed."""
    attempts = rows.attempts(ids[0]) if ids else []
    if not attempts:
        return None
    return round((attempts[0]["claimed_at"] - at).total_seconds(), 3) if rows.postgres else None


def partition_in_transaction(root: Path, store: str = "postgres", *, soak: bool = False) -> Verdict:
    """A black hole between a worker and PostgreSQL right after its commit statement locked the job row
    (inside BEGIN ... COMMIT): the server must release the lock by itself, so the job is terminal by
    its deadline plus one reconcile interval, and has one winner."""
    v = Verdict("partition_in_tx", store)
    with deployment(root, store) as c, running_proxy(pg_target(c.db_url)) as proxy:
        rows = Rows(c.db_url)
        c.start_api()
        c.start_reconciler()
        ids = submit_jobs(c, v, 1, deadline_s=IN_TX_DEADLINE_S)
        c.start_worker("cut_off", db_url=proxied_url(c.db_url, proxy.port),
                       faults="before_commit=wait:commit")
        wait_reached(c, "before_commit")
        fired = proxy.arm(COMMIT_LOCKS_ROW, Mode.BLACKHOLE, statement_only=True)
        release(c, "commit")
        v.check("commit_statement_reached_server", fired.wait(HANG_GUARD_S))
        v.check("row_locked_by_the_cut_off_session", _wait_true(lambda: rows.row_locked(ids[0]), LOCK_SEEN_S),
                "the partition did not leave a transaction holding the job row (the scenario did not happen)")
        c.start_worker("rescuer")
        # a commit's finished_at is its transaction's start (now()), so a commit held open past the
        # deadline would look in time afterwards: watch the state while the deadline passes instead
        bound = rows.jobs()[ids[0]].deadline_at + timedelta(seconds=RECONCILE_S)
        wait_for(lambda: rows.jobs()[ids[0]].state in TERMINAL or rows.now() > bound,
                 HANG_GUARD_S, "the job to end or its deadline to pass (store clock)")
        late = rows.jobs()[ids[0]].state
        if not v.check("terminal_by_deadline_plus_interval", late in TERMINAL,
                       f"still {late} one reconcile interval past its deadline (store clock); the cut-off "
                       f"worker's sessions: {rows.backend_states(proxy.upstream_ports())}"):
            v.deadline_misses += 1  # its finished_at cannot show it (see above); judge() adds to this
        proxy.heal()
        c.wait_terminal(ids, HANG_GUARD_S)
        v.check("stale_staged_collected", wait_collected(c, ids))
        return judge(c, v, ids)


def lost_answer(root: Path, store: str = "postgres", *, soak: bool = False) -> Verdict:
    """The answer to a submission's COMMIT is lost between PostgreSQL and `serve` (the commit happened):
    the client's retry with the same idempotency key gets that job, and it succeeds (input kept)."""
    v = Verdict("lost_answer", store)
    with deployment(root, store) as c, running_proxy(pg_target(c.db_url)) as proxy:
        rows = Rows(c.db_url)
        c.start_api(db_url=proxied_url(c.db_url, proxy.port), faults="after_input_upload=wait:answer")
        c.start_worker("w")
        c.start_reconciler()
        first: list[httpx.Response | Exception] = []
        thread = threading.Thread(target=_submit_into, args=(c, "lost-answer", first))
        thread.start()
        wait_reached(c, "after_input_upload")
        fired = proxy.arm(b"COMMIT", Mode.DROP_ANSWERS)
        release(c, "answer")
        v.check("commit_sent", fired.wait(HANG_GUARD_S))
        v.check("commit_landed", _wait_true(lambda: rows.job_by_key("lost-answer") is not None))
        proxy.cut()  # the server's answer never arrives; the connection breaks
        proxy.heal()
        thread.join(HANG_GUARD_S)
        answered = first[0] if first else None
        lost = not isinstance(answered, httpx.Response) or answered.status_code >= 300
        v.check("first_answer_not_2xx", lost, f"answered {getattr(answered, 'status_code', None)}")
        retry = c.submit(links(), key="lost-answer")
        job_id = accept(v, retry)
        v.check("retry_found_the_committed_job",
                job_id is not None and job_id == rows.job_by_key("lost-answer"))
        ids = [job_id] if job_id else []
        c.wait_terminal(ids, HANG_GUARD_S)
        return judge(c, v, ids)


def _submit_into(c: Cluster, key: str, out: list[httpx.Response | Exception]) -> None:
    try:
        out.append(c.submit(links(), key=key, timeout=HANG_GUARD_S))
    except httpx.HTTPError as exc:
        out.append(exc)


def _wait_true(predicate: Callable[[], bool], bound_s: float = HANG_GUARD_S) -> bool:
    try:
        wait_for(predicate, bound_s, "a condition")
    except AssertionError:
        return False
    return True


def poison_job(root: Path, store: str, *, soak: bool = False) -> Verdict:
    """A job its worker cannot process (its storage region is missing from the worker's configuration):
    no worker exits, the job ends failed with a coded error and an error id in the worker's log, and
    the worker processes the next job."""
    v = Verdict("poison_job", store)
    quarantine = root / "objects-q"
    regions = {"local": f"file://{root / 'objects'}", "quarantine": f"file://{quarantine}"}
    full = (f'regions = {{ local = "{regions["local"]}", quarantine = "{regions["quarantine"]}" }}\n'
            '[classes.quarantined]\nregion = "quarantine"\n')
    quarantine.mkdir(parents=True, exist_ok=True)
    with deployment(root, store, config=full, regions=regions) as c:
        worker_config = c.write_config("worker")  # this worker's configuration lost the region
        c.start_api()
        c.start_reconciler()
        c.start_worker("w", config=worker_config)
        poison = submit_jobs(c, v, 1, document_class="quarantined")
        c.wait_terminal(poison, HANG_GUARD_S, abort=lambda: not c.alive("w"))
        v.check("worker_survived_the_poison_job", c.alive("w"), f"exit {c.procs['w'].poll()}")
        normal = submit_jobs(c, v, 1)
        c.wait_terminal(normal, HANG_GUARD_S, abort=lambda: not c.alive("w"))
        v.check("worker_never_exited", c.alive("w"))
        job = Rows(c.db_url).jobs().get(poison[0]) if poison else None
        v.check("poison_failed_with_a_code",
                job is not None and job.state == "failed" and bool(job.error_code),
                f"{job and job.state} {job and job.error_code}")
        logged = [line for line in c.log("w").splitlines()
                  if poison and poison[0] in line and ERROR_ID.search(line)]
        v.check("error_id_logged", bool(logged), "no ERROR log line with the job id and an error id")
        v.check("next_job_succeeded", bool(normal) and Rows(c.db_url).jobs()[normal[0]].state == "succeeded")
        return judge(c, v, poison + normal)

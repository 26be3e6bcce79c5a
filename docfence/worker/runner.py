"""One worker process: claim, render in the sandbox (a fresh render process per job, forked from a warm
zygote), stage, fenced commit; discard when stale.

Only this process talks to the store and holds leases; a render process only turns bytes into bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from docfence.blobs.base import BlobInfo
from docfence.blobs.envelope import DataKey
from docfence.blobs.kek.jobs import JobKeys
from docfence.blobs.regions import RegionRouter
from docfence.blobs.sealed import PasswordSeal, load_key
from docfence.config import Settings
from docfence.core.clock import monotonic
from docfence.core.errors import (
    BlobError,
    DocfenceError,
    LeaseLost,
    StaleAttempt,
    StoreError,
    StoreUnavailable,
)
from docfence.core.ids import new_id
from docfence.core.loops import report_failure
from docfence.core.policy import Kind
from docfence.core.records import ArtifactInfo, Claim, Job
from docfence.faults import fault_point
from docfence.observability import metrics
from docfence.sandbox import Outcome, Sandbox, Task
from docfence.sandbox.scratch import make_owned, remove_orphans
from docfence.storage_keys import staging_key
from docfence.store.base import JobStore
from docfence.store.wakeups import Wakeups
from docfence.worker import sealing
from docfence.worker.committer import Committer, StagedResult
from docfence.worker.failures import describe_start, kept_validation, unexpected_failure
from docfence.worker.leases import Lease, LeaseKeeper, close_thread_connection
from docfence.worker.outages import Backoff, OutageOutlasted, OutageRetry
from docfence.worker.signing import sign_output, signing_request


class WorkerStore(JobStore, Wakeups, Protocol):
    """What a worker uses: the job transitions, and wake-ups when work is queued."""


log = logging.getLogger("docfence.worker")

GROUP_COMMIT_MAX = 100  # staged results committed in one transaction at most
SCRATCH_PREFIX = "docfence-worker-"  # + the worker's pid: its job folders (scratch.remove_orphans)


@dataclass
class Counters:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    discarded: int = 0


class Worker:
    def __init__(self, settings: Settings, store: WorkerStore, regions: RegionRouter, *,
                 worker_id: str | None = None, backoff: Backoff | None = None,
                 job_keys: JobKeys | None = None) -> None:
        self.settings, self.cfg, self.store, self.regions = settings, settings.worker, store, regions
        self.backoff = backoff or Backoff()  # outages within an attempt, and claims while the store is down
        self._claim_failures = 0  # consecutive failed claims: the outage's back-off step
        self._rng = random.Random()
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{new_id('w')[-6:]}"
        self.leases = LeaseKeeper(store, self.id, self.cfg.heartbeat_interval_s)
        self.stopping = threading.Event()
        self.counters = Counters()
        self._stop_seen: float | None = None  # when shutdown began (the grace period counts from it)
        remove_orphans(SCRATCH_PREFIX)  # job folders of workers killed on this host (SIGKILL, OOM)
        self._scratch, self._scratch_lock = self._new_scratch()
        self._counts_lock = threading.Lock()  # the committer thread counts outcomes too
        self.committer = Committer(store, self.id, max_batch=GROUP_COMMIT_MAX,
                                   on_committed=self._committed, on_stale=self._stale)
        self.sandbox = Sandbox("watermark")  # no report engine in it: cheaper forks for watermark jobs
        self.report_sandbox = Sandbox("report")  # started by the first report job (from this thread)
        # the key's own zygote (started with the worker when a class signs): it never forks a render
        # process for untrusted input, whose memory the key would otherwise share (docs/security.md)
        self.sign_sandbox = Sandbox("sign")
        self._seal: PasswordSeal | None = None  # loaded by the first job that carries a password
        self._signing = signing_request(settings)
        self.keys = job_keys or JobKeys(settings.encryption, settings.data_folder())  # opened on first use

    def run(self, *, until_idle: bool = False, max_jobs: int | None = None) -> Counters:
        """Claim and process jobs until `stopping` is set (SIGTERM), the queue is idle, or max_jobs."""
        log.info(describe_start(self.settings, self.store, self.regions, self.id))
        self.leases.start()
        self.committer.start()
        self.sandbox.start(wait=False)  # warms up while we claim; the first job waits until it is ready
        if self._signing is not None:
            self.sign_sandbox.start(wait=False)  # pyHanko's imports and set-up, before the first signing
        try:
            if self._scratch_lock is None:  # removed by an earlier run(): a fresh private one (never
                self._scratch, self._scratch_lock = self._new_scratch()  # re-made by name in /tmp)
            while not self.stopping.is_set():
                claims = self._claim()
                if not claims:
                    if until_idle:
                        break
                    if claims is not None:  # after a failed claim its back-off was the wait
                        self._wait_for_work()
                    continue
                for claim in claims:
                    self._render_or_release(claim)
                if max_jobs is not None and self.counters.claimed >= max_jobs:
                    break
        finally:
            self.sandbox.close()
            self.report_sandbox.close()
            self.sign_sandbox.close()
            self.committer.close()  # commit what is staged while its leases still hold
            self.leases.stop()
            close_thread_connection(self.store)  # this thread's; the next call would open another
            shutil.rmtree(self._scratch, ignore_errors=True)  # each job's folder went with its job
            if self._scratch_lock is not None:
                os.close(self._scratch_lock)
                self._scratch_lock = None
        return self.counters

    @staticmethod
    def _new_scratch() -> tuple[Path, int | None]:
        """This worker's private folder for its jobs' files, locked as its own (scratch.py)."""
        folder, lock = make_owned(SCRATCH_PREFIX)
        return Path(folder), lock

    def _claim(self) -> list[Claim] | None:
        """Claimed jobs; None after a failed claim and its back-off (capped and jittered, one log
        line per outage): the store reconnects by itself on the next call."""
        try:
            claims = self.store.claim(self.id, limit=self.cfg.batch)
        except Exception as exc:  # an outage, or a bug in a claim: never the end of the worker
            if self._claim_failures == 0:  # one line per outage; "claims work again" ends it
                report_failure("claim (retried with back-off)", exc, log)
            if not isinstance(exc, StoreError):
                metrics.record_loop_error("worker")
            self.stopping.wait(self.backoff.delay(self._claim_failures, self._rng))
            self._claim_failures += 1
            return None
        if self._claim_failures:
            log.info("claims work again after %d failed tries", self._claim_failures)
            self._claim_failures = 0
        self._count("claimed", len(claims))
        for claim in claims:
            metrics.record_claimed(claim.job.mode)
        return claims

    def _wait_for_work(self) -> None:
        try:
            self.store.wait_for_work(self.cfg.poll_interval_s)
            return
        except Exception:  # LISTEN is an optimisation; polling still finds the work
            log.debug("listen failed; polling")
        self.stopping.wait(self.cfg.poll_interval_s)

    def _render_or_release(self, claim: Claim) -> None:
        """Process one claim; whatever it raises ends this attempt only, never the worker."""
        lease = self.leases.hold(claim.job.id, claim.attempt, claim.job.policy.lease_ttl_s)
        retry = OutageRetry.for_claim(claim, lease, self.backoff, self._grace_over)
        handed_over = False  # to the committer, which drops the lease once the outcome is known
        try:
            if self.stopping.is_set():  # shutting down before we started: hand it back at once
                self._release(claim)
                return
            fault_point("after_claim")
            handed_over = self.render_and_stage(claim, lease, retry)
        except StoreError as exc:  # the lease lapses and the reconciler requeues the job
            log.warning("store error while processing: %s", exc.code,
                        extra={"job_id": claim.job.id, "attempt": claim.attempt})
        except Exception as exc:  # a bug, or an error nobody expected here: this attempt fails
            self._fail_unexpected(claim, exc, retry)
        finally:
            if not handed_over:
                self.leases.drop(lease)

    def _fail_unexpected(self, claim: Claim, exc: Exception, retry: OutageRetry) -> None:
        """Fail the attempt with a coded error and an error id (failures.py); never raises."""
        failure = unexpected_failure(exc, retry.ctx)
        try:
            self._fail(claim, failure.code, failure.message, failure.retryable, retry)
        except Exception as again:  # the lease lapses and the reconciler requeues the job
            log.warning("could not record the failure (error id %s): %s", failure.error_id,
                        again.code if isinstance(again, DocfenceError) else type(again).__name__,
                        extra=retry.ctx)

    def render_and_stage(self, claim: Claim, lease: Lease, retry: OutageRetry) -> bool:
        """Render, validate and stage one claim. True when a staged result went to the committer;
        every other outcome (failure recorded, stale, lease lost, outage past the deadline) is
        settled here. Outages of the blob store or the store are retried within the attempt."""
        job, attempt = claim.job, claim.attempt
        ctx = retry.ctx
        log.info("rendering", extra=ctx)
        workdir = self._scratch / f"{job.id}-{attempt}"
        workdir.mkdir()
        try:
            store = self.regions.for_region(job.region)
            key = sealing.data_key(self.keys, job, retry)
            sealing.fetch_input(store, job, key, workdir / "input.pdf", retry)
            password = sealing.password(store, job, key, retry, self._legacy_seal)
            outcome = self._render(claim, lease, workdir, password)
            if outcome is None:
                return False  # lease lost or shutdown: nothing recorded as success
            if not outcome.ok:
                kept = None
                if outcome.error_code == "validation_failed":
                    metrics.record_validation_report(outcome.validation, job.mode)
                    kept = kept_validation(outcome.validation)
                self._fail(claim, outcome.error_code or "engine_error", outcome.error_message or "",
                           outcome.retryable, retry, validation=kept)
                return False
            return self._stage(claim, lease, workdir / "output.pdf", outcome, retry, key)
        except LeaseLost:
            self._discard_lost(claim)
        except StaleAttempt:
            self._count("discarded")
            metrics.record_discarded("stale_commit")
            log.warning("stale attempt; output discarded", extra=ctx)
        except OutageOutlasted as out:
            self._outlasted(claim, out)
        except BlobError as exc:  # deterministic (not found, integrity) or this worker's own (password key)
            self._fail(claim, exc.code, exc.message, exc.retryable, retry)
        finally:  # never raises: a result already handed to the committer must keep its lease
            shutil.rmtree(workdir, ignore_errors=True)
        return False

    def _discard_lost(self, claim: Claim, what: str = "attempt discarded, nothing staged") -> None:
        self._count("discarded")
        metrics.record_discarded("lease_lost")
        log.warning("lease lost; %s", what, extra={"job_id": claim.job.id, "attempt": claim.attempt})

    def _outlasted(self, claim: Claim, out: OutageOutlasted) -> None:
        """At the deadline the job is left to the reconciler's deadline pass (which cancels it, with
        the store's clock); at the end of shutdown's grace it is handed back."""
        ctx = {"job_id": claim.job.id, "attempt": claim.attempt}
        if out.why == "shutdown":
            log.warning("outage (%s) outlasted the shutdown grace; job handed back", out.error.code,
                        extra=ctx)
            self._release(claim)
            return
        self._count("discarded")
        metrics.record_discarded("deadline_outage")
        log.warning("outage (%s) lasted until the job's deadline; left to the reconciler's deadline pass",
                    out.error.code, extra=ctx)

    def _render(self, claim: Claim, lease: Lease, workdir: Path, password: str | None) -> Outcome | None:
        """The job's outcome from its own render process; None when the lease was lost or shutdown's
        grace ran out (the render process is killed, nothing is recorded as success)."""
        job = claim.job
        kind = "report" if job.policy.kind is Kind.REPORT else "watermark"
        ctx = {"job_id": job.id, "attempt": claim.attempt}  # on the sandbox's own log lines
        task = Task(kind, workdir / "input.pdf", workdir / "output.pdf", job.policy,
                    password=password, log_context=ctx)
        sandbox = self.report_sandbox if kind == "report" else self.sandbox
        started = monotonic()
        cancel = lambda: lease.lost.is_set() or self._grace_over()  # noqa: E731
        result = sandbox.run(task, cancel=cancel)
        if result.ok and job.policy.signing is not None and kind == "watermark":
            result = sign_output(self.sign_sandbox, self._signing, task, result, cancel)
        if result.canceled:
            if lease.lost.is_set():
                self._discard_lost(claim, "render killed and discarded")
            else:
                self._release(claim)
            return None
        metrics.record_render(job.mode, result.pages, monotonic() - started, ok=result.ok)
        return result

    def _legacy_seal(self) -> PasswordSeal:
        """password.key's seal, for jobs whose row names no key provider (loaded on first use)."""
        if self._seal is None:
            self._seal = PasswordSeal(load_key(self.settings))
        return self._seal

    def _grace_over(self) -> bool:
        if not self.stopping.is_set():
            return False
        if self._stop_seen is None:
            self._stop_seen = monotonic()
        return monotonic() - self._stop_seen > self.cfg.shutdown_grace_s

    def _stage(self, claim: Claim, lease: Lease, output: Path, outcome: Outcome, retry: OutageRetry,
               key: DataKey | None = None) -> bool:
        """Upload the output (sealed under the job's data key) to its attempt-specific staging key and
        hand it to the committer. Raises LeaseLost, before anything is uploaded, when the lease was lost
        (and again before the hand-over)."""
        job, attempt = claim.job, claim.attempt
        size = output.stat().st_size
        if size > job.policy.limits.max_output_bytes:
            self._fail(claim, "render_resource_exceeded", "the output exceeds its size limit", False, retry)
            return False
        store = self.regions.for_region(job.region)
        staging = staging_key(job.tenant, job.id, attempt)

        def upload() -> BlobInfo:
            if lease.lost.is_set():  # checked before every try: a lost attempt uploads nothing
                raise LeaseLost("lease lost before staging")
            fault_point("storage_write", error=lambda: BlobError("injected storage write failure"))
            return sealing.put_output(store, staging, output, key, job.policy.limits.max_output_bytes,
                                      self.settings.encryption.chunk_size)

        info = retry.call("staging the output", upload)
        fault_point("after_staging_upload")
        if lease.lost.is_set():  # staged too late: the reconciler's orphan sweep removes the object
            raise LeaseLost("lease lost before commit")
        artifact = ArtifactInfo(staging, info.sha256, info.bytes, outcome.pages, outcome.validation or {})
        self.committer.submit(StagedResult(claim, artifact, lease, store))
        return True

    def _committed(self, result: StagedResult, job: Job | None) -> None:
        try:
            if job is not None:
                metrics.record_terminal(job)
            self._count("succeeded")
            log.info("committed", extra={"job_id": result.claim.job.id, "attempt": result.claim.attempt})
        finally:
            self.leases.drop(result.lease)

    def _stale(self, result: StagedResult, known: bool) -> None:
        """Not committed as far as we know. When the store answered (`known`), discard the staged
        object unless our own earlier commit went through with its answer lost; when it could not
        be reached, keep the object: the reconciler removes it if it turns out to be an orphan."""
        claim = result.claim
        ctx = {"job_id": claim.job.id, "attempt": claim.attempt}
        try:
            ours = self._committed_as(claim, result.artifact.key) if known else None
            if ours is None:
                self._count("discarded")
                metrics.record_discarded("commit_unknown")
                log.warning("commit outcome unknown (store unreachable); staged object kept", extra=ctx)
                return
            if ours:
                self._committed(result, None)
                return
            try:
                result.blobs.delete(result.artifact.key)  # ours, attempt-specific, never committed
            except BlobError as exc:  # the reconciler's staging sweep removes it later
                log.warning("could not delete a stale staged object: %s", exc.code, extra=ctx)
            self._count("discarded")
            metrics.record_discarded("stale_commit")
            log.warning("stale attempt; output discarded", extra=ctx)
        finally:
            self.leases.drop(result.lease)

    def _count(self, name: str, n: int = 1) -> None:
        with self._counts_lock:
            setattr(self.counters, name, getattr(self.counters, name) + n)

    def _committed_as(self, claim: Claim, key: str) -> bool | None:
        """Whether our own commit went through although its answer was lost; None: cannot tell."""
        for _ in range(50):
            try:
                art = self.store.artifact(claim.job.id)
                return art is not None and art.attempt == claim.attempt and art.key == key
            except StoreUnavailable:
                self.stopping.wait(0.2)
            except StoreError:
                return None
        return None

    def _fail(self, claim: Claim, code: str, message: str, retryable: bool, retry: OutageRetry,
              validation: str | None = None) -> None:
        """Record the attempt's failure (with its kept validation report, if any); the store's outages
        are retried while the lease holds."""
        args = (claim.job.id, claim.attempt, self.id, code, message)
        try:
            if validation is None:  # stores in tests that know no reports take the plain call
                job = retry.call("recording a failure",
                                 lambda: self.store.fail(*args, retryable=retryable))
            else:
                job = retry.call("recording a failure", lambda: self.store.fail(
                    *args, retryable=retryable, validation=validation))
        except StaleAttempt:
            self._count("discarded")
            metrics.record_discarded("stale_fail")
            return
        except OutageOutlasted as out:
            self._outlasted(claim, out)
            return
        metrics.record_terminal(job)
        if job.state.terminal:
            self._count("failed")
        else:
            self._count("retried")
        log.info("attempt failed: %s", code, extra={"job_id": claim.job.id, "attempt": claim.attempt})

    def _release(self, claim: Claim) -> None:
        # stale or unreachable: the reconciler requeues it when the lease expires
        with contextlib.suppress(DocfenceError):
            self.store.release(claim.job.id, claim.attempt, self.id)

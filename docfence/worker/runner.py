"""One worker process: claim, render in the sandbox (a fresh render process per job, forked from a warm
zygote), stage, fenced commit; discard when stale.

Only this process talks to the store and holds leases; a render process only turns bytes into bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from docfence.blobs.regions import RegionRouter
from docfence.blobs.sealed import PasswordSeal, load_key
from docfence.config import Settings
from docfence.core.clock import monotonic
from docfence.core.errors import (
    BlobError,
    ConfigError,
    DocfenceError,
    StaleAttempt,
    StoreError,
    StoreUnavailable,
)
from docfence.core.ids import new_id
from docfence.core.policy import Kind
from docfence.core.records import ArtifactInfo, Claim, Job
from docfence.faults import fault_point
from docfence.observability import metrics
from docfence.sandbox import Outcome, Sandbox, Task
from docfence.sandbox.scratch import make_owned, remove_orphans
from docfence.storage_keys import job_prefix, staging_key
from docfence.store.base import JobStore
from docfence.store.wakeups import Wakeups
from docfence.worker.committer import Committer, StagedResult
from docfence.worker.leases import Lease, LeaseKeeper


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


def _merged(validated: dict[str, Any] | None, stage: dict[str, Any] | None) -> dict[str, Any]:
    """The render's validation report with the signing task's checks appended (what is published)."""
    merged = dict(validated or {})
    merged["checks"] = [*merged.get("checks", []), *(stage or {}).get("checks", [])]
    merged["ok"] = bool(merged.get("ok", True)) and all(c.get("ok") for c in merged["checks"])
    return merged


def _signing_request(settings: Settings) -> dict[str, Any] | None:
    """The `[signing]` key, opened once here so a wrong file or password stops the worker at start-up;
    None when no class signs (a worker then never reads the file)."""
    if not any(c.signing is not None for c in settings.all_classes().values()):
        return None
    from docfence.engines.signing import load_key

    return load_key(settings.signing.pkcs12, settings.signing.pkcs12_password).to_request()


class Worker:
    def __init__(self, settings: Settings, store: WorkerStore, regions: RegionRouter, *,
                 worker_id: str | None = None) -> None:
        self.settings, self.cfg, self.store, self.regions = settings, settings.worker, store, regions
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
        self._signing = _signing_request(settings)

    def run(self, *, until_idle: bool = False, max_jobs: int | None = None) -> Counters:
        """Claim and process jobs until `stopping` is set (SIGTERM), the queue is idle, or max_jobs."""
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

    def _claim(self) -> list[Claim]:
        try:
            claims = self.store.claim(self.id, limit=self.cfg.batch)
        except StoreError as exc:
            log.warning("claim failed: %s", exc.code)
            self.stopping.wait(self.cfg.poll_interval_s)
            return []
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
        lease = self.leases.hold(claim.job.id, claim.attempt, claim.job.policy.lease_ttl_s)
        handed_over = False  # to the committer, which drops the lease once the outcome is known
        try:
            if self.stopping.is_set():  # shutting down before we started: hand it back at once
                self._release(claim)
                return
            fault_point("after_claim")
            handed_over = self.render_and_stage(claim, lease)
        except StoreError as exc:  # the lease lapses and the reconciler requeues the job
            log.warning("store error while processing: %s", exc.code,
                        extra={"job_id": claim.job.id, "attempt": claim.attempt})
        finally:
            if not handed_over:
                self.leases.drop(lease)

    def render_and_stage(self, claim: Claim, lease: Lease) -> bool:
        """Render, validate and stage one claim. True when a staged result went to the committer;
        every other outcome (failure recorded, stale, lease lost) is settled here."""
        job, attempt = claim.job, claim.attempt
        ctx = {"job_id": job.id, "attempt": attempt}
        log.info("rendering", extra=ctx)
        workdir = self._scratch / f"{job.id}-{attempt}"
        workdir.mkdir()
        try:
            store = self.regions.for_region(job.region)
            if job.input_key is None:
                raise BlobError("the job has no input")
            (workdir / "input.pdf").write_bytes(store.get(job.input_key, expected_sha256=job.input_sha256))
            outcome = self._render(claim, lease, workdir)
            if outcome is None:
                return False  # lease lost or shutdown: nothing recorded as success
            if not outcome.ok:
                if outcome.error_code == "validation_failed":
                    metrics.record_validation_report(outcome.validation, job.mode)
                self._fail(claim, outcome.error_code or "engine_error", outcome.error_message or "",
                           outcome.retryable)
                return False
            return self._stage(claim, lease, workdir / "output.pdf", outcome)
        except StaleAttempt:
            self._count("discarded")
            metrics.record_discarded("stale_commit")
            log.warning("stale attempt; output discarded", extra=ctx)
        except BlobError as exc:
            self._fail(claim, exc.code, exc.message, True)
        finally:  # never raises: a result already handed to the committer must keep its lease
            shutil.rmtree(workdir, ignore_errors=True)
        return False

    def _render(self, claim: Claim, lease: Lease, workdir: Path) -> Outcome | None:
        """The job's outcome from its own render process; None when the lease was lost or shutdown's
        grace ran out (the render process is killed, nothing is recorded as success)."""
        job = claim.job
        kind = "report" if job.policy.kind is Kind.REPORT else "watermark"
        task = Task(kind, workdir / "input.pdf", workdir / "output.pdf", job.policy,
                    password=self._password(job))
        sandbox = self.report_sandbox if kind == "report" else self.sandbox
        started = monotonic()
        cancel = lambda: lease.lost.is_set() or self._grace_over()  # noqa: E731
        result = sandbox.run(task, cancel=cancel)
        if result.ok and job.policy.signing is not None and kind == "watermark":
            result = self._sign(job, workdir, result, cancel)
        if result.canceled:
            if lease.lost.is_set():
                self._count("discarded")
                metrics.record_discarded("lease_lost")
                log.warning("lease lost; render killed and discarded",
                            extra={"job_id": job.id, "attempt": claim.attempt})
            else:
                self._release(claim)
            return None
        metrics.record_render(job.mode, result.pages, monotonic() - started, ok=result.ok)
        return result

    def _sign(self, job: Job, workdir: Path, rendered: Outcome, cancel: Callable[[], bool]) -> Outcome:
        """Sign the validated output in a render process of its own, forked after validation by the
        sign sandbox's zygote: it gets the key and our own validated bytes, never the untrusted input
        (engines/issue.py)."""
        validated = workdir / "validated.pdf"
        (workdir / "output.pdf").rename(validated)
        task = Task("sign", validated, workdir / "output.pdf", job.policy, signing=self._signing)
        signed = self.sign_sandbox.run(task, cancel=cancel)
        if not signed.ok:
            report = _merged(rendered.validation, signed.validation) if signed.validation else None
            return replace(signed, validation=report)
        return replace(rendered, validation=_merged(rendered.validation, signed.validation),
                       engine_s=rendered.engine_s + signed.engine_s)

    def _password(self, job: Job) -> str | None:
        """The job's PDF password, unsealed for its render process only (never logged or stored)."""
        if not job.sealed_password:
            return None
        if self._seal is None:
            try:
                self._seal = PasswordSeal(load_key(self.settings))
            except ConfigError as exc:  # this worker cannot open passwords: its job must not hang
                raise BlobError(exc.message) from None
        return self._seal.unseal(self.regions.for_region(job.region), job_prefix(job.tenant, job.id))

    def _grace_over(self) -> bool:
        if not self.stopping.is_set():
            return False
        if self._stop_seen is None:
            self._stop_seen = monotonic()
        return monotonic() - self._stop_seen > self.cfg.shutdown_grace_s

    def _stage(self, claim: Claim, lease: Lease, output: Path, outcome: Outcome) -> bool:
        """Upload the output to its attempt-specific staging key and hand it to the committer."""
        job, attempt = claim.job, claim.attempt
        size = output.stat().st_size
        if size > job.policy.limits.max_output_bytes:
            self._fail(claim, "render_resource_exceeded", "the output exceeds its size limit", False)
            return False
        store = self.regions.for_region(job.region)
        key = staging_key(job.tenant, job.id, attempt)
        fault_point("storage_write", error=lambda: BlobError("injected storage write failure"))
        with output.open("rb") as fh:
            info = store.put_stream(key, fh, max_bytes=job.policy.limits.max_output_bytes)
        fault_point("after_staging_upload")
        if lease.lost.is_set():
            raise StaleAttempt("lease lost before commit")
        artifact = ArtifactInfo(key, info.sha256, info.bytes, outcome.pages, outcome.validation or {})
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

    def _fail(self, claim: Claim, code: str, message: str, retryable: bool) -> None:
        try:
            job = self.store.fail(claim.job.id, claim.attempt, self.id, code, message, retryable=retryable)
        except StaleAttempt:
            self._count("discarded")
            metrics.record_discarded("stale_fail")
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

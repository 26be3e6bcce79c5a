"""The dispatcher of provider-rendered report jobs: fenced claim, idempotent submit, bounded polling with
every pass persisted, and one fenced terminal transition (complete with the verified, staged artifact, or
fail with the provider outcome code). Never "in progress" forever."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import httpx

from docfence import storage_keys as layout
from docfence.blobs import RegionRouter
from docfence.blobs.kek.jobs import JobKeys, RowKey, put_object, read_object
from docfence.config.encryption import EncryptionConfig
from docfence.core import loops
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import BlobError, DocfenceError, ProviderError, StaleAttempt
from docfence.core.ids import new_id
from docfence.core.records import ArtifactInfo, Claim
from docfence.observability import metrics
from docfence.providers import BoundedPoller, Observation, PollOutcome, ProviderClient, ProviderConfig
from docfence.reports.provider_render import check_provider_output, provider_input
from docfence.sandbox import Sandbox
from docfence.store.base import JobStore, ProviderStore


class DispatcherStore(JobStore, ProviderStore, Protocol):
    """What the dispatcher uses: provider claims and observations, and the fenced job outcomes."""


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DispatcherConfig:
    providers: Mapping[str, ProviderConfig]
    worker_id: str = "dispatcher"
    batch: int = 4
    heartbeat_interval_s: float = 5.0  # while sleeping between polls; every poll pass also heartbeats
    commit_margin_s: float = 10.0  # polling stops this long before the job's deadline: time to commit
    http_timeout_s: float = 15.0


@dataclass
class DispatchResult:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    discarded: int = 0


class ProviderObservationSink:
    """The poller's sink: persists every pass (last stated status + time) and extends the lease, in one
    transaction; raises LeaseLost when the attempt is stale, which stops the poll."""

    def __init__(self, store: Any, claim: Claim, provider: str) -> None:
        self.store, self.claim, self.provider = store, claim, provider

    def record(self, obs: Observation) -> None:
        metrics.record_provider_observation(obs.kind.value)
        self.store.record_provider_observation(
            self.claim.job.id, self.claim.attempt, self.claim.worker, provider=self.provider,
            kind=obs.kind.value, provider_job_id=obs.provider_job_id, status=obs.status,
            http_status=obs.http_status, reason=obs.reason, observed_at=obs.observed_at,
        )


class Dispatcher:
    """Claims only report jobs whose policy names a configured provider as processor (query
    `claim_provider_jobs`); the idempotency key sent to the provider is derived from the job id, so a
    re-claimed job (lease expiry, retryable failure) finds its provider job instead of creating another."""

    def __init__(
        self, config: DispatcherConfig, store: DispatcherStore, router: RegionRouter, *,
        clock: Clock | None = None, sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None, sandbox: Sandbox | None = None,
        job_keys: JobKeys | None = None,
    ) -> None:
        self.config, self.store, self.router = config, store, router
        # the jobs' data keys: snapshots opened, outputs sealed (default: [encryption]'s defaults, the
        # key provider opened on first use; pass the deployment's, e.g. JobKeys(settings.encryption, ...))
        self.keys = job_keys or JobKeys(EncryptionConfig(), None)
        self.clock = clock or SystemClock()
        self._base_sleep, self._transport = sleep, transport
        self._own_sandbox = sandbox is None
        self.sandbox = sandbox or Sandbox()  # its zygote starts at the first provider output checked

    def close(self) -> None:
        """Stop the sandbox's zygote when this dispatcher started it."""
        if self._own_sandbox:
            self.sandbox.close()

    def run_once(self) -> DispatchResult:
        """Claim up to `batch` provider jobs and drive each to a terminal transition (or discard it)."""
        result = DispatchResult()
        claims = self.store.claim_provider_jobs(self.config.worker_id, sorted(self.config.providers),
                                                limit=self.config.batch)
        result.claimed = len(claims)
        for claim in claims:
            try:
                outcome = self.render_through_provider(claim)
            except StaleAttempt:
                outcome = "discarded"
                log.warning("stale attempt; provider result discarded",
                            extra={"job_id": claim.job.id, "attempt": claim.attempt})
            except Exception as exc:  # one job's unexpected error must not stop the others' in this pass
                outcome = self._fail_unexpected(claim, exc)
            setattr(result, outcome, getattr(result, outcome) + 1)
        return result

    def run_forever(self, stop: threading.Event, *, interval_s: float = 5.0,
                    on_pass: Callable[[DispatchResult], None] | None = None) -> None:
        """Pass after pass until `stop`, each result handed to `on_pass`, under the one loop supervisor
        (core.loops): a pass that raises (the store is down) is logged and counted as
        `report_dispatcher`, and the next follows; a pass that claimed jobs is followed at once."""
        def one_pass() -> DispatchResult:
            result = self.run_once()
            if on_pass is not None:
                on_pass(result)
            return result

        loops.run_forever("report_dispatcher", one_pass, interval_s=interval_s, stop=stop,
                          record_error=metrics.record_loop_error, busy=lambda r: r.claimed > 0, logger=log)

    def _fail_unexpected(self, claim: Claim, exc: Exception) -> str:
        """An exception nobody expected ends the attempt as retryable `internal_error` (its attempts
        bound the retries), logged at ERROR with its traceback under an error id; when even that fails,
        the lease expires and the reconciler requeues the job."""
        job, attempt = claim.job, claim.attempt
        error_id = new_id("err")
        log.error("provider job attempt failed: internal_error %s: unexpected %s\n%s", error_id,
                  type(exc).__name__, loops.safe_traceback(exc), extra={"job_id": job.id, "attempt": attempt})
        metrics.record_loop_error("report_dispatcher")
        try:
            failed = self.store.fail(job.id, attempt, claim.worker, "internal_error",
                                     f"internal error (error id {error_id})", retryable=True)
        except StaleAttempt:
            return "discarded"
        except Exception as again:  # the store is down too: the lease runs out instead
            loops.report_failure(f"failing provider job {job.id}", again, log)
            return "discarded"
        return "failed" if failed.state.terminal else "retried"

    def render_through_provider(self, claim: Claim) -> str:
        """One claimed job through its outside renderer (submit, poll within the deadline, download,
        check the output, fenced commit) to "succeeded", "failed" or "retried"; raises StaleAttempt
        (discard)."""
        job = claim.job
        provider = str((job.policy.report or {}).get("processor"))
        sink = ProviderObservationSink(self.store, claim, provider)
        try:
            payload = provider_input(self.router, job, self.keys)
        except DocfenceError as exc:  # bad template/data or a missing input: nothing is sent
            return self._end(claim, sink, exc, details={"stage": "input"})
        cfg = self.config.providers[provider]
        sleep = self._heartbeating_sleep(claim)
        with ProviderClient(cfg, transport=self._transport, timeout_s=self.config.http_timeout_s,
                            clock=self.clock, sleep=sleep) as client:
            try:
                provider_job_id = client.submit(payload, idempotency_key=f"docfence-{job.id}",
                                                filename="report.html")
            except ProviderError as exc:
                return self._end(claim, sink, exc, details={"stage": "submit"})
            log.info("provider job submitted", extra={"job_id": job.id, "attempt": claim.attempt})
            poller = BoundedPoller(client, clock=self.clock, sleep=sleep, policy=cfg.poll)
            deadline = job.deadline_at - timedelta(seconds=self.config.commit_margin_s)
            outcome = poller.poll(provider_job_id, deadline=deadline, sink=sink)
            metrics.record_provider_poll(outcome.outcome.value)
            if not outcome.succeeded:
                error = outcome.error()
                assert error is not None
                return self._end(claim, sink, error, details=_outcome_details(outcome))
            try:
                assert outcome.result_url is not None
                artifact = client.download_result(outcome.result_url)
            except ProviderError as exc:
                return self._end(claim, sink, exc, details={**_outcome_details(outcome), "stage": "download"})
        return self._commit(claim, sink, artifact, outcome)

    def _commit(
        self, claim: Claim, sink: ProviderObservationSink, artifact: bytes, outcome: PollOutcome
    ) -> str:
        job, attempt = claim.job, claim.attempt
        try:
            output, pages, validation = check_provider_output(
                self.sandbox, artifact, job.policy, heartbeat_interval_s=self.config.heartbeat_interval_s,
                heartbeat=lambda: self.store.heartbeat(job.id, attempt, claim.worker))
        except DocfenceError as exc:
            return self._end(claim, sink, exc, details={**_outcome_details(outcome), "stage": "validate"})
        sha = hashlib.sha256(output).hexdigest()
        blobs = self.router.for_region(job.region)
        key = layout.staging_key(job.tenant, job.id, attempt)
        try:  # sealed under the job's data key; read back: what is committed is what was verified
            data_key = self.keys.key_for(RowKey.of(job))
            put_object(blobs, key, output, data_key)
            read_object(blobs, key, data_key, expected_sha256=sha)
        except BlobError as exc:
            return self._end(claim, sink, exc, details={"stage": "stage"})
        validation["provider"] = {"name": sink.provider, "provider_job_id": outcome.provider_job_id,
                                  "download_sha256": hashlib.sha256(artifact).hexdigest()}
        self.store.finish_provider_observation(job.id, attempt, claim.worker, outcome.outcome.value,
                                               details=_outcome_details(outcome))
        try:
            self.store.complete(job.id, attempt, claim.worker,
                                ArtifactInfo(key, sha, len(output), pages, validation))
        except StaleAttempt:
            blobs.delete(key)  # ours, attempt-specific, never committed
            raise
        log.info("provider artifact committed", extra={"job_id": job.id, "attempt": attempt})
        return "succeeded"

    def _end(self, claim: Claim, sink: ProviderObservationSink, error: DocfenceError, *,
             details: dict[str, Any]) -> str:
        """Record the outcome on the observation row (creating it when no pass happened) and fail."""
        job, attempt = claim.job, claim.attempt
        if self.store.provider_observation(job.id) is None or details.get("stage") in ("input", "submit"):
            self.store.record_provider_observation(job.id, attempt, claim.worker, provider=sink.provider,
                                                   kind=f"{details.get('stage', 'poll')}_failed")
        self.store.finish_provider_observation(job.id, attempt, claim.worker, error.code,
                                               details={**details, "error": error.code})
        failed = self.store.fail(job.id, attempt, claim.worker, error.code, error.message,
                                 retryable=error.retryable)
        log.info("provider job ended: %s", error.code, extra={"job_id": job.id, "attempt": attempt})
        return "failed" if failed.state.terminal else "retried"

    def _heartbeating_sleep(self, claim: Claim) -> Callable[[float], None]:
        """Sleep in slices, extending the lease after each; LeaseLost propagates and stops the poll."""
        step = self.config.heartbeat_interval_s

        def sleep(seconds: float) -> None:
            remaining = seconds
            while remaining > 0:
                chunk = min(step, remaining)
                self._base_sleep(chunk)
                remaining -= chunk
                self.store.heartbeat(claim.job.id, claim.attempt, claim.worker)

        return sleep


def _outcome_details(outcome: PollOutcome) -> dict[str, Any]:
    """Facts for the audit trail: ids, codes, statuses and times; never a result URL."""
    return {
        "provider_job_id": outcome.provider_job_id, "outcome": outcome.outcome.value,
        "last_status": outcome.last_status, "passes": outcome.passes,
        "last_observed_at": outcome.last_observed_at.isoformat() if outcome.last_observed_at else None,
        "last_kind": outcome.last_kind.value if outcome.last_kind else None,
        "http_status": outcome.http_status,
    }

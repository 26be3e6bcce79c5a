"""The rewrap service: after a key-encryption key rotation (or a change of provider), re-wrap the jobs'
data keys under the current key in bounded batches, each row on its own with a predicate on its old
wrapped key (resumable by construction; the objects are never touched: their data key is the same)."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from docfence.blobs.kek import KeyProvider, KeyRing, WrappedKey, open_key_provider, rewrap
from docfence.blobs.kek.local import KEK_FILE
from docfence.blobs.kek.local import NAME as LOCAL
from docfence.config.encryption import EncryptionConfig
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import ConfigError, DocfenceError
from docfence.core.loops import report_failure
from docfence.observability import metrics
from docfence.store.base import AuditLog, DataKeyStore
from docfence.store.data_keys import StoredDataKey

log = logging.getLogger("docfence.rewrap")
__all__ = ["RewrapConfig", "RewrapResult", "Rewrapper", "current_kek", "key_ring", "pending", "rewrapper_for"]


class RewrapStore(DataKeyStore, AuditLog, Protocol):
    """The data-key queries and the audit log (one operations event per pass that moved keys)."""


@dataclass(frozen=True)
class RewrapConfig:
    batch: int = 100  # data keys one pass may re-wrap ([encryption] rewrap_batch)
    # with nothing left to re-wrap, how often a pass looks again (a rotation is seen at once: the
    # current key id is compared every reconciler pass)
    idle_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if self.batch < 1 or self.idle_interval_s <= 0:
            raise DocfenceError("rewrap batch and idle interval must be positive")


@dataclass
class RewrapResult:
    rewrapped: list[str] = field(default_factory=list)  # job ids now under the current key
    skipped: list[str] = field(default_factory=list)  # destroyed or re-wrapped by another pass meanwhile
    failed: list[str] = field(default_factory=list)  # did not unwrap (logged); retried on a later pass
    remaining: int = 0  # live wrapped keys not under the current key after this pass


def key_ring(config: EncryptionConfig, data_folder: Path | None) -> KeyProvider:
    """The configured provider as current, each of `previous_providers` as older (unwrap only)."""
    def opened(name: str) -> KeyProvider:
        return open_key_provider(name, data_folder=data_folder, kek_file=config.kek_file,
                                 kms_key_id=config.kms_key_id, kms_region=config.kms_region,
                                 kms_endpoint_url=config.kms_endpoint_url)

    return KeyRing(opened(config.provider), *(opened(name) for name in config.previous_providers))


def rewrapper_for(store: RewrapStore, config: EncryptionConfig, data_folder: Path | None, *,
                  clock: Clock | None = None) -> Rewrapper:
    """The reconciler's rewrap service for the configured providers (opened on its first pass)."""
    return Rewrapper(store, lambda: key_ring(config, data_folder), RewrapConfig(batch=config.rewrap_batch),
                     clock=clock)


def current_kek(config: EncryptionConfig, data_folder: Path | None) -> tuple[str, str] | None:
    """(provider, current key id), or None when it cannot be read now (the local key file is not made
    yet, or the key service does not answer): for status, which must not create or fail."""
    try:
        if config.provider == LOCAL and not local_kek_path(config, data_folder).exists():
            return None
        keys = key_ring(config, data_folder)
        return keys.name, keys.current_key_id()
    except DocfenceError:
        return None


def local_kek_path(config: EncryptionConfig, data_folder: Path | None) -> Path:
    """The local provider's key file: `kek_file`, else kek.key in the data folder. ConfigError when
    there is neither."""
    if config.kek_file:
        return Path(config.kek_file)
    if data_folder is None:
        raise ConfigError("[encryption] provider = \"local\" needs kek_file when there is no local data "
                          "folder", field="encryption.kek_file")
    return data_folder / KEK_FILE


def pending(counts: dict[tuple[str, str], int], current: tuple[str, str]) -> int:
    """How many of `counts`' wrapped keys are not under `current` (provider, key id)."""
    return sum(n for key, n in counts.items() if key != current)


class Rewrapper:
    """`run_once()` re-wraps one bounded batch. The reconciler calls `run_if_due()` every pass: a batch
    runs while work remains, at once when the current key changed, and every `idle_interval_s`
    otherwise. `open_keys` is called on first use (a process that never rewraps needs no key file)."""

    def __init__(self, store: RewrapStore, open_keys: Callable[[], KeyProvider], config: RewrapConfig, *,
                 clock: Clock | None = None) -> None:
        self.store, self.config = store, config
        self._open_keys, self._lock = open_keys, threading.Lock()
        self._keys: KeyProvider | None = None
        self._clock: Clock = clock or SystemClock()
        self._after = ""  # the id cursor: a pass starts after the last row of the one before
        self._busy, self._seen_key, self._last = True, "", float("-inf")
        self._failed = float("-inf")  # when a pass last raised

    @property
    def keys(self) -> KeyProvider:
        with self._lock:
            if self._keys is None:
                self._keys = self._open_keys()
            return self._keys

    def due(self) -> bool:
        return (self._busy or self._clock.monotonic() - self._last >= self.config.idle_interval_s
                or self.keys.current_key_id() != self._seen_key)

    def run_if_due(self) -> RewrapResult | None:
        """`run_once()` when due, else None. A pass that raises (a key service unreachable, a key file
        unreadable) is one log line and a count of docfence_loop_errors_total{loop="rewrap"}, never
        the caller's failure; the next try is `idle_interval_s` later."""
        if self._clock.monotonic() - self._failed < self.config.idle_interval_s:
            return None
        try:
            return self.run_once() if self.due() else None
        except Exception as exc:  # the reconciler's other passes go on
            report_failure("rewrap pass", exc, log)
            metrics.record_loop_error("rewrap")
            self._failed = self._clock.monotonic()
            return None

    def run_once(self) -> RewrapResult:
        """One batch. A row that does not unwrap is logged and counted in `failed`, and the pass goes
        on; a key service that is unreachable (a retryable error) ends the pass (`run_if_due` logs it)."""
        keys = self.keys
        provider, current = keys.name, keys.current_key_id()
        self._seen_key, self._last = current, self._clock.monotonic()
        rows = self.store.rewrap_due(provider, current, after=self._after, limit=self.config.batch)
        result = RewrapResult()
        for row in rows:
            try:
                outcome = self._rewrap_one(row)
            except DocfenceError as exc:
                if exc.retryable:  # the key service is unreachable: every row would fail the same
                    raise
                metrics.count_encryption_failure("unwrap", exc.code)  # a lost KEK, a corrupt wrapped key
                report_failure(f"rewrap of job {row.job_id}'s data key", exc, log)
                result.failed.append(row.job_id)
                continue
            except Exception as exc:  # one row's key must not stop the others
                report_failure(f"rewrap of job {row.job_id}'s data key", exc, log)
                result.failed.append(row.job_id)
                continue
            (result.rewrapped if outcome else result.skipped).append(row.job_id)
        self._after = rows[-1].job_id if len(rows) == self.config.batch else ""
        result.remaining = pending(self.store.count_data_keys(), (provider, current))
        self._busy = result.remaining > len(result.failed) or bool(self._after)
        self._record(result, provider, current)
        return result

    def _rewrap_one(self, row: StoredDataKey) -> bool:
        """True when re-wrapped; False when the row changed meanwhile (zero rows: skip)."""
        context = {"tenant": row.tenant, "job": row.job_id}
        old = WrappedKey(row.provider, row.kek_id, base64.b64decode(row.wrapped, validate=True))
        new = rewrap(self.keys, old, context)
        if new is None:  # already under the current key (rotated back): nothing to store
            return False
        return self.store.replace_wrapped_key(
            row.job_id, old=row.wrapped, provider=new.provider, kek_id=new.key_id,
            wrapped=base64.b64encode(new.wrapped).decode("ascii"))

    def _record(self, result: RewrapResult, provider: str, current: str) -> None:
        metrics.count_rewraps(len(result.rewrapped))
        if not result.rewrapped:
            return
        self.store.record_event("data_keys_rewrapped", actor="reconciler", details={
            "rewrapped": len(result.rewrapped), "remaining": result.remaining,
            "kek_fingerprint": WrappedKey(provider, current, b"").fingerprint()})
        log.info("rewrap: %d data keys re-wrapped, %d skipped, %d failed, %d remaining",
                 len(result.rewrapped), len(result.skipped), len(result.failed), result.remaining)

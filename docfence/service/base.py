"""What every use case shares: settings, the store, the regions' blob stores, the clock, the secret
that signs download URLs, the verifier and the store's write slots; and the tenant check every
read of a job goes through."""

from __future__ import annotations

import os
import secrets
import threading

from docfence.blobs import RegionRouter
from docfence.blobs.kek.jobs import JobKeys
from docfence.blobs.sealed import PasswordSeal
from docfence.config import Settings
from docfence.core.access import Principal
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import ConfigError, NotFound
from docfence.core.records import Job
from docfence.store.base import Store
from docfence.verification import Verifier


def load_signing_secret(settings: Settings) -> bytes:
    """The configured secret, or one generated once and kept (mode 0600) next to the data."""
    if settings.signing_secret:
        return str(settings.signing_secret).encode("utf-8")
    folder = settings.data_folder()
    if folder is None:
        raise ConfigError("set DOCFENCE_SIGNING_SECRET: API servers without a local data folder must "
                          "share one", field="signing_secret")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "signing.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_hex(32).encode("ascii"))
    return path.read_bytes().strip()


class ServiceState:
    """The state of one Service (one per process); each use case is a class over it."""

    # `store` is the concrete store (store.base.Store): the API reaches the report pipeline and the
    # console's reads through `service.store`, so the service carries every capability for now.
    def __init__(self, settings: Settings, store: Store, router: RegionRouter, *, clock: Clock | None = None,
                 signing_secret: bytes | None = None) -> None:
        self.settings, self.store, self.router = settings, store, router
        self.clock = clock or SystemClock()
        self._secret = signing_secret or load_signing_secret(settings)
        self.verifier = Verifier(settings, store, self._secret)  # verification codes and /v1/verify
        # Writers queue here, not in the database (SQLite's sleeping busy handler), so a burst of
        # submits cannot starve the threadpool that status reads also need; the store says how many.
        self._writes = threading.BoundedSemaphore(store.write_slots)
        self._seal: PasswordSeal | None = None  # loaded on the first password (its key may be remote-only)
        # the jobs' data keys ([encryption]); the key provider is opened on first use
        self.job_keys = JobKeys(settings.encryption, settings.data_folder())

    def _visible(self, principal: Principal, job_id: str, *, acting: bool = False) -> Job:
        """Another tenant's job is indistinguishable from a missing one. `acting`: the caller ends the
        job (cancel), which an operator may do to every tenant's (core/access.py, tenant_view); reads
        never reach past the key's own tenant."""
        try:
            job = self.store.get(job_id)
        except NotFound:
            raise NotFound(f"no job {job_id}") from None
        reach = principal.tenant_view if acting else principal.tenant
        if reach is not None and job.tenant != reach:
            raise NotFound(f"no job {job_id}")
        return job

"""Wiring for long-running processes: the store and region storage from Settings, a worker with its
in-process reconciler, and signal handling (SIGTERM: stop claiming, finish or hand leases back)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass

from docfence.blobs.regions import RegionRouter
from docfence.config import Settings
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.sandbox.confine import readable_by_render
from docfence.store import open_store
from docfence.store.base import Store
from docfence.worker.runner import Counters, Worker

log = logging.getLogger("docfence")


@dataclass
class Runtime:
    settings: Settings
    store: Store
    regions: RegionRouter

    @classmethod
    def open(cls, settings: Settings, *, role: str = "cli") -> Runtime:
        """`role` names this process's PostgreSQL sessions (application_name `docfence-<role>`), so
        `docfence inspect` and pg_stat_activity tell a worker's session from a reconciler's."""
        return cls(settings, open_store(settings.database_url, application_name=f"docfence-{role}"),
                   RegionRouter.from_config(settings.region_urls()))

    def reconciler(self) -> Reconciler:
        cfg = ReconcileConfig(batch=self.settings.reconcile_batch,
                              interval_s=self.settings.worker.reconcile_interval_s,
                              staging_grace_s=self.settings.staging_grace_s)
        from docfence.maintenance.rewrap import rewrapper_for

        rewrapper = rewrapper_for(self.store, self.settings.encryption, self.settings.data_folder())
        return Reconciler(self.store, self.regions, cfg, rewrapper=rewrapper)

    def webhook_dispatcher(self) -> WebhookDispatcher:
        """Delivers webhooks beside the in-process reconciler (any number of them may run at once)."""
        return WebhookDispatcher(self.store, self.settings.webhooks,
                                 worker=f"webhooks@{socket.gethostname()}:{os.getpid()}",
                                 interval_s=self.settings.worker.reconcile_interval_s)

    def close(self) -> None:
        self.store.close()


def run_worker(rt: Runtime, *, until_idle: bool = False, max_jobs: int | None = None,
               install_signals: bool = True) -> Counters:
    """Run one worker (and, by default, a reconciler thread) until SIGTERM/SIGINT or idle."""
    worker = Worker(rt.settings, rt.store, rt.regions)
    warn_if_data_readable_by_render(rt.settings)
    stop_reconciler = threading.Event()
    threads = []
    if rt.settings.worker.reconcile_in_process:
        threads = [threading.Thread(target=rt.reconciler().run_forever, args=(stop_reconciler,),
                                    name="reconciler", daemon=True),
                   threading.Thread(target=rt.webhook_dispatcher().run_forever, args=(stop_reconciler,),
                                    name="webhooks", daemon=True)]
        for thread in threads:
            thread.start()
    if install_signals:
        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %d: no more claims; finishing or handing back current work", signum)
            worker.stopping.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        return worker.run(until_idle=until_idle, max_jobs=max_jobs)
    finally:
        stop_reconciler.set()
        for thread in threads:
            thread.join(timeout=5)


def warn_if_data_readable_by_render(settings: Settings) -> None:
    """Render processes may read the system's code and library folders (sandbox/confine.py): say so
    loudly when the database, the blob folders or the data folder (password.key) lie inside one."""
    # the database file itself (a link may lead elsewhere than its folder); each place once
    places = dict.fromkeys([settings.data_folder(), settings.sqlite_path(),
                            *(folder for folder, _ in settings.local_folders())])
    for place in filter(None, places):
        if readable_by_render(place):
            log.warning("%s lies inside a folder render processes may read (docs/security.md): a document "
                        "that took one over could read it; move the data out of /usr and the Python "
                        "installation", place)

"""Use cases shared by the API and the CLI: submit, read, cancel, delete, download, API keys and signed URLs.

Handlers call these and never the store; every error raised here carries a stable `code`. `Service`
gathers one class per use case (submission, reads, cancel_delete, artifacts, api_keys), each over the
state they all share (base.ServiceState).
"""

from __future__ import annotations

from docfence.blobs import BlobStore, RegionRouter
from docfence.config import Settings
from docfence.core.access import SCOPES, Principal, check_tenant
from docfence.core.clock import Clock
from docfence.core.errors import ConfigError, Forbidden, InvalidRequest, Unauthorized
from docfence.intake import MAX_BATCH_ITEMS, MAX_LIST_LIMIT, BatchOutcome, JobQuery
from docfence.service.api_keys import KEY_PREFIX, ApiKeys
from docfence.service.artifacts import Artifacts, Download
from docfence.service.base import load_signing_secret
from docfence.service.cancel_delete import REASON_CHARS, CancelAndDelete, check_reason
from docfence.service.reads import JobDetail, Reads
from docfence.service.request_policy import SubmitRequest
from docfence.service.submission import STAGE_THREADS, Submission
from docfence.store.base import Store

__all__ = ["KEY_PREFIX", "MAX_BATCH_ITEMS", "MAX_LIST_LIMIT", "REASON_CHARS", "SCOPES", "STAGE_THREADS",
           "BatchOutcome", "Download", "Forbidden", "InvalidRequest", "JobDetail", "JobQuery", "Principal",
           "Service", "SubmitRequest", "Unauthorized", "build_service", "check_reason", "check_tenant",
           "load_signing_secret"]


class Service(Submission, Reads, CancelAndDelete, Artifacts, ApiKeys):
    """The use cases. One instance per process; thread-safe as long as the store is.

    Each base class is one use case over the shared state (settings, store, regions, clock, signing
    secret, write slots); none calls another, so each can be read on its own."""


def build_service(
    settings: Settings, store: Store | None = None, blobs: RegionRouter | BlobStore | None = None,
    *, clock: Clock | None = None
) -> Service:
    """Wire a Service from settings; `blobs` may be a router or one store serving every region."""
    if store is None:
        from docfence.store.base import open_store

        store = open_store(settings.database_url, application_name="docfence-api")
    if blobs is None:
        router = RegionRouter.from_config(settings.region_urls())
    elif isinstance(blobs, RegionRouter):
        router = blobs
    else:
        router = RegionRouter({region: blobs for region in settings.region_urls()})
    check_class_images(settings)
    return Service(settings, store, router, clock=clock)


def check_class_images(settings: Settings) -> None:
    """Every class logo draws (an SVG within the supported subset, a PNG that decodes), so a bad one
    stops start-up with its class and name instead of refusing each submission to that class."""
    from docfence.engines.mark_art import check_image

    for doc_class in settings.classes.values():
        for name, uri in doc_class.mark_rules.images:
            try:
                check_image(uri)
            except ConfigError as exc:
                raise ConfigError(f"[classes.{doc_class.name}].images.{name}: {exc.message}") from None

"""A PDF variant that no render could deliver is refused when it is requested (422 naming `variant`),
with nothing stored: a variant on a class that watermarks in raster mode (raster keeps no text, fonts or
tags), or a variant asked of an outside provider (nothing asks a provider for PDF/A or PDF/UA)."""

from __future__ import annotations

import dataclasses

import pytest

from docfence.config import DocumentClass
from docfence.core.errors import InvalidRequest
from docfence.core.policy import Mode, WatermarkSpec
from docfence.reports import ReportRequests, RequestSpec
from docfence.samples.monthly_report import sample_monthly_data
from docfence.store.sqlstore import SqlStore


def _spec(template: str, **changes: object) -> RequestSpec:
    spec = RequestSpec(tenant="acme", subject="clinic-1", period="2026-01", template=template,
                       data=sample_monthly_data(pages=1), variant="pdf/a-3b")
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def test_a_variant_from_an_outside_provider_is_refused(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    with pytest.raises(InvalidRequest, match="rendered only by docfence itself") as refused:
        requests_uc.create(_spec(monthly, processor="vendor"), actor="test")
    assert refused.value.field == "variant"
    assert rstore.list_jobs(tenant="acme") == []
    requests_uc.create(_spec(monthly, processor="vendor", variant=None), actor="test")  # no variant: fine


def test_a_variant_on_a_raster_class_is_refused_and_vector_is_accepted(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    raster = DocumentClass("preview", deadline_s=120.0, mode=Mode.RASTER.value,
                           watermark=WatermarkSpec(text="SYNTHETIC REPORT"))
    settings = dataclasses.replace(requests_uc.settings, classes={**requests_uc.settings.classes,
                                                                   "preview": raster})
    uc = ReportRequests(settings, rstore, requests_uc.router, processors=("vendor",))
    with pytest.raises(InvalidRequest, match="raster mode") as refused:
        uc.create(_spec(monthly, document_class="preview"), actor="test")
    assert refused.value.field == "variant"
    detail, created = uc.create(_spec(monthly), actor="test")  # the default class is vector
    assert created and detail.request.variant == "pdf/a-3b"

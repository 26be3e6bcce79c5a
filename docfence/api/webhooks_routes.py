"""`/v1/webhooks/endpoints`: a tenant admin manages its tenant's signed webhook endpoints. The signing
secret is in the answer of create and rotate-secret only; no other answer ever carries it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from docfence.api.deps import Require, ServiceDep
from docfence.api.errors import error_responses
from docfence.maintenance.webhook_endpoints import IssuedSecret, WebhookEndpoints
from docfence.service import Principal

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
WebhooksManage = Annotated[Principal, Depends(Require("webhooks.manage"))]
EndpointId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class EndpointIn(BaseModel):
    url: str = Field(min_length=1, max_length=2000, description="The receiver, http:// or https://")
    events: list[str] = Field(default_factory=lambda: ["*"], min_length=1, max_length=10, description=(
        "job.succeeded, job.failed, job.canceled, report_request.succeeded, report_request.failed, "
        "report_request.canceled; or [\"*\"] for all"))
    description: str | None = Field(default=None, max_length=200)


class EndpointOut(BaseModel):
    id: str
    tenant: str
    url: str
    events: list[str]
    description: str | None
    created_at: datetime
    disabled_at: datetime | None


class EndpointSecretOut(EndpointOut):
    secret: str = Field(description="The Standard Webhooks signing secret (whsec_...); shown this once")


def _out(endpoint: Any) -> dict[str, Any]:
    return {"id": endpoint.id, "tenant": endpoint.tenant, "url": endpoint.url,
            "events": list(endpoint.events), "description": endpoint.description,
            "created_at": endpoint.created_at, "disabled_at": endpoint.disabled_at}


def _with_secret(issued: IssuedSecret) -> EndpointSecretOut:
    return EndpointSecretOut(**_out(issued.endpoint), secret=issued.secret)


def _endpoints(service: Any) -> WebhookEndpoints:
    return WebhookEndpoints(service.store, service.settings.webhooks)


@router.post("/endpoints", status_code=201, response_model=EndpointSecretOut,
             responses=error_responses(400, 401, 403, 422))
def create_endpoint(body: EndpointIn, service: ServiceDep, principal: WebhooksManage) -> EndpointSecretOut:
    """Add an endpoint of the key's tenant; the answer carries its signing secret, never shown again."""
    return _with_secret(_endpoints(service).create(principal.tenant, body.url, body.events,
                                                   actor=principal.actor, description=body.description))


@router.get("/endpoints", response_model=list[EndpointOut], responses=error_responses(401, 403))
def list_endpoints(service: ServiceDep, principal: WebhooksManage) -> list[EndpointOut]:
    """The tenant's endpoints, disabled ones included (never their secrets)."""
    return [EndpointOut(**_out(e)) for e in _endpoints(service).list(principal.tenant)]


@router.delete("/endpoints/{endpoint_id}", response_model=EndpointOut,
               responses=error_responses(401, 403, 404, 422))
def disable_endpoint(endpoint_id: EndpointId, service: ServiceDep, principal: WebhooksManage) -> EndpointOut:
    """Disable the endpoint (its record and delivery history stay): nothing more is delivered to it, and
    its pending deliveries fail as `endpoint_disabled`. Idempotent."""
    endpoint = _endpoints(service).disable(principal.tenant, endpoint_id, actor=principal.actor)
    return EndpointOut(**_out(endpoint))


@router.post("/endpoints/{endpoint_id}/rotate-secret", response_model=EndpointSecretOut,
             responses=error_responses(401, 403, 404, 422))
def rotate_secret(endpoint_id: EndpointId, service: ServiceDep,
                  principal: WebhooksManage) -> EndpointSecretOut:
    """A new signing secret (shown this once); the old one keeps signing alongside it for
    `[webhooks] secret_grace_s`, so receivers can switch without losing a delivery."""
    return _with_secret(_endpoints(service).rotate(principal.tenant, endpoint_id, actor=principal.actor))

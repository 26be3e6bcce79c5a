"""`/v1/webhooks/endpoints`: a tenant admin manages its tenant's signed webhook endpoints. The signing
secret is in the answer of create and rotate-secret only; no other answer ever carries it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field, WithJsonSchema

from docfence.api.deps import Require, ServiceDep
from docfence.api.errors import error_responses
from docfence.api.wire import code_point_class
from docfence.core.states import JobState
from docfence.maintenance.webhook_endpoints import MAX_URL_CHARS, IssuedSecret, WebhookEndpoints
from docfence.service import Principal

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
WebhooksManage = Annotated[Principal, Depends(Require("webhooks.manage"))]
EndpointId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
# What maintenance.webhook_endpoints checks at creation, as the schema states it. A host written as an
# address must also pass the SSRF policy (public, or listed in [webhooks] allow_hosts): that depends on
# the configuration and on which address it is, so the pattern does not try to say it. An IPv6 address
# in brackets is taken too, and not described here (its grammar would dwarf the rest).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # one DNS label (IDNA: 1-63 characters)
_PORT = r"(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_UNSAFE = code_point_class("whitespace") + r"#\x00-\x1f\x7f-\x9f"  # controls, #fragment: refused
URL_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:{_LABEL}\.)*{_LABEL}\.?(?::{_PORT})?(?:[/?][^{_UNSAFE}]*)?$"
#: The event types as store.outbox names them (the API may not import the store): a job's or a report
#: request's terminal state.
EVENT_TYPES = tuple(f"{subject}.{state.value}" for subject in ("job", "report_request")
                    for state in JobState if state.terminal)
_EVENTS = {"anyOf": [{"type": "array", "items": {"const": "*"}, "minItems": 1, "maxItems": 1},
                     {"type": "array", "items": {"enum": list(EVENT_TYPES)}, "minItems": 1, "maxItems": 10}],
           "default": ["*"]}


class EndpointIn(BaseModel):
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS, description="The receiver, http:// or https://",
                     json_schema_extra={"pattern": URL_PATTERN})
    events: Annotated[list[str], WithJsonSchema(_EVENTS)] = Field(
        default_factory=lambda: ["*"], min_length=1, max_length=10, description=(
            "job.succeeded, job.failed, job.canceled, report_request.succeeded, report_request.failed, "
            "report_request.canceled; or [\"*\"] for all"))
    # lone surrogates are refused too; a class of them is not portable, so the pattern leaves them out
    description: str | None = Field(default=None, max_length=200, json_schema_extra={
        "pattern": r"^[^\x00-\x1f\x7f-\x9f]*$"})


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

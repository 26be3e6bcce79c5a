"""Request dependencies: the Service of this app, the authenticated Principal (Bearer API key) and one
dependency per permission of `core.access.PERMISSIONS`, which every route declares (`JobsRead`...)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docfence.core.access import PERMISSIONS
from docfence.service import Principal, Service, Unauthorized

bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                    description="API key: `Authorization: Bearer dfk_<id>_<secret>`")


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def get_principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    """The principal the request gate authenticated from the headers (before any body was read);
    raises Unauthorized (401) for a missing, wrong or revoked key when no gate ran."""
    checked = getattr(request.state, "principal", None)
    if isinstance(checked, Principal):
        return checked
    if credentials is None:
        raise Unauthorized()
    return get_service(request).authenticate(credentials.credentials)


ServiceDep = Annotated[Service, Depends(get_service)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]


class Require:
    """A dependency that yields the principal if its key grants `permission`, else raises Forbidden."""

    def __init__(self, permission: str) -> None:
        PERMISSIONS[permission]  # a typo fails at import, not at request time
        self.permission = permission

    def __call__(self, principal: PrincipalDep) -> Principal:
        principal.require(self.permission)
        return principal


JobsSubmit = Annotated[Principal, Depends(Require("jobs.submit"))]
JobsRead = Annotated[Principal, Depends(Require("jobs.read"))]
JobsCancel = Annotated[Principal, Depends(Require("jobs.cancel"))]
JobsDelete = Annotated[Principal, Depends(Require("jobs.delete"))]
TemplatesRead = Annotated[Principal, Depends(Require("templates.read"))]
TemplatesWrite = Annotated[Principal, Depends(Require("templates.write"))]
ReportsRequest = Annotated[Principal, Depends(Require("reports.request"))]
ReportsRetry = Annotated[Principal, Depends(Require("reports.retry"))]
ReportsRead = Annotated[Principal, Depends(Require("reports.read"))]
SchedulesWrite = Annotated[Principal, Depends(Require("schedules.write"))]
SchedulesRead = Annotated[Principal, Depends(Require("schedules.read"))]
ConsoleRead = Annotated[Principal, Depends(Require("console.read"))]
OpsClaims = Annotated[Principal, Depends(Require("ops.claims"))]
OpsModes = Annotated[Principal, Depends(Require("ops.modes"))]

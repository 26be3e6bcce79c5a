"""Request dependencies: the Service of this app and the authenticated Principal (Bearer API key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

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

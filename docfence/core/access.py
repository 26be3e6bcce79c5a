"""Who may do what: the scopes an API key carries, the principal behind a key, and the one permission
table that every route, console call and use case checks (`Principal.require`).

Two kinds of key, issued separately (`docfence keys create`):
- tenant keys carry any of `submit`, `read`, `admin`. `admin` is the tenant admin: every permission
  within its own tenant (delete jobs, publish the tenant's templates, schedules, its console view) and
  nothing outside it. Keys created with scope `admin` before roles were split keep it with this
  meaning: they lost the cross-tenant powers and never became operators.
- operator keys carry `operator` alone: the cross-tenant console, pausing and resuming claims,
  draining, class modes, and publishing templates shared with every tenant. They hold no tenant's
  data rights (no submit, read, download or delete of jobs), but may end and retry any tenant's work:
  cancel queued or rendering jobs and retry failed report requests, always with a reason
  (`Principal.reason_for`), audited with the operator's key as the actor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from docfence.core.errors import Forbidden, InvalidRequest

_TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_tenant(tenant: str) -> str:
    """`tenant` if it is a valid tenant name; InvalidRequest naming the rule otherwise."""
    if not isinstance(tenant, str) or not _TENANT_RE.fullmatch(tenant):
        raise InvalidRequest("tenant must match [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)")
    return tenant


REASON_CHARS = 200  # a caller's reason for an action (cancel, delete, retry), kept in the audit event


def check_reason(reason: str | None) -> str | None:
    """A caller's free-text reason, trimmed (None when blank); InvalidRequest names the field when it
    is longer than REASON_CHARS or holds control characters (it is shown in timelines)."""
    if reason is None or not reason.strip():
        return None
    text = reason.strip()
    if len(text) > REASON_CHARS:
        raise InvalidRequest(f"reason: at most {REASON_CHARS} characters (got {len(text)})", field="reason")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise InvalidRequest("reason: control characters (newlines, tabs) are not allowed", field="reason")
    return text


TENANT_SCOPES = ("submit", "read", "admin")
OPERATOR = "operator"
SCOPES = (*TENANT_SCOPES, OPERATOR)
#: The tenant column of operator keys. It grants nothing: operators hold no tenant permission, and
#: their cross-tenant views and shared templates never compare it with a tenant.
OPERATOR_TENANT = "operators"

#: permission -> the scopes that grant it. Tenant-scoped permissions act on the key's own tenant only;
#: the operator's act on every tenant (console, claims, modes, cancel, retry) or on shared templates.
PERMISSIONS: dict[str, frozenset[str]] = {
    "jobs.submit": frozenset({"submit", "admin"}),
    "jobs.read": frozenset({"read", "admin"}),
    "jobs.cancel": frozenset({"submit", "admin", OPERATOR}),  # operator: any tenant's job, with a reason
    "jobs.delete": frozenset({"admin"}),
    # the recipient, purpose and reference of a job's marks: those who may send documents out see whom
    # to; read-only keys (dashboards) and operators see that a field was set, not its value
    "jobs.recipient": frozenset({"submit", "admin"}),
    "templates.read": frozenset({"read", "admin", OPERATOR}),  # operator: shared templates only
    "templates.write": frozenset({"admin", OPERATOR}),  # admin: its tenant's; operator: shared ones
    "reports.request": frozenset({"submit", "admin"}),
    "reports.retry": frozenset({"submit", "admin", OPERATOR}),  # operator: any tenant's, with a reason
    "reports.read": frozenset({"read", "admin"}),
    "schedules.write": frozenset({"submit", "admin"}),
    "schedules.read": frozenset({"read", "admin"}),
    "webhooks.manage": frozenset({"admin"}),  # the tenant's own webhook endpoints
    "console.read": frozenset({"read", "admin", OPERATOR}),  # tenant keys: their own tenant only
    "ops.claims": frozenset({OPERATOR}),  # pause, resume, drain
    "ops.modes": frozenset({OPERATOR}),
    "ops.workers": frozenset({OPERATOR}),  # see worker hosts and process ids in timelines
}


def check_scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    """The scopes of a new key: a non-empty subset of TENANT_SCOPES, or `operator` alone."""
    bad = [s for s in scopes if s not in SCOPES]
    if not scopes or bad:
        raise InvalidRequest(f"scopes must be a non-empty subset of {', '.join(TENANT_SCOPES)}, or "
                             f"{OPERATOR} alone")
    if OPERATOR in scopes and len(set(scopes)) > 1:
        raise InvalidRequest("an operator key carries no tenant scope: issue it on its own")
    return tuple(dict.fromkeys(scopes))


@dataclass(frozen=True)
class Principal:
    """The caller behind one API key: its tenant and scopes."""

    key_id: str
    tenant: str
    scopes: tuple[str, ...]

    @property
    def actor(self) -> str:
        return f"key:{self.key_id}"

    @property
    def is_operator(self) -> bool:
        return OPERATOR in self.scopes

    def allows(self, permission: str) -> bool:
        return not PERMISSIONS[permission].isdisjoint(self.scopes)

    def require(self, permission: str) -> None:
        """Raises Forbidden (403) unless one of the key's scopes grants `permission`."""
        if not self.allows(permission):
            raise Forbidden(f"this API key may not do {permission}")

    @property
    def tenant_view(self) -> str | None:
        """The tenant whose records this key sees in cross-tenant views and may cancel or retry (None:
        every tenant, for an operator)."""
        return None if self.is_operator else self.tenant

    def reason_for(self, reason: str | None) -> str | None:
        """The checked reason (check_reason) for ending or retrying a tenant's work; an operator, who
        acts on tenants that are not its own, must give one (InvalidRequest naming `reason`)."""
        note = check_reason(reason)
        if note is None and self.is_operator:
            raise InvalidRequest("reason: an operator acting on a tenant's work must say why (1-"
                                 f"{REASON_CHARS} characters, recorded in the audit event)", field="reason")
        return note

    @property
    def template_owner(self) -> str | None:
        """Who owns templates this key publishes: its tenant, or None (shared) for an operator."""
        return None if self.is_operator else self.tenant

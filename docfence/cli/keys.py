"""`docfence keys create|list|revoke`: API keys, straight against the store named by the settings.

`create` prints the new key once, on the last line; only the sha256 of its secret is stored. Tenant
keys (`--tenant T --scopes submit,read,admin`, where admin is the tenant admin) and operator keys
(`--operator`: cross-tenant console, claims, class modes, shared templates) are issued separately.
"""

from __future__ import annotations

import argparse
from typing import Any

from docfence.cli.errors import describe, say
from docfence.cli.output import add_json_flag, emit
from docfence.config import load_settings
from docfence.core.access import OPERATOR, OPERATOR_TENANT
from docfence.core.errors import DocfenceError
from docfence.service import Service, build_service


def register(sub: Any) -> None:
    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once, on the last line)")
    who = create.add_mutually_exclusive_group(required=True)
    who.add_argument("--tenant", help="a tenant key for this tenant")
    who.add_argument("--operator", action="store_true",
                     help="an operator key: every tenant's console, pause/resume/drain, class modes, "
                          "shared templates; no tenant's jobs")
    create.add_argument("--scopes", default="submit,read",
                        help="tenant keys: comma-separated submit,read,admin (admin: the tenant admin)")
    create.add_argument("--name", default="")
    add_json_flag(create)
    create.set_defaults(func=run_create)
    listing = keys_sub.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument("--tenant")
    add_json_flag(listing)
    listing.set_defaults(func=run_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id")
    add_json_flag(revoke)
    revoke.set_defaults(func=run_revoke)


def _service() -> Service:
    return build_service(load_settings())


def run_create(args: argparse.Namespace) -> int:
    scopes = tuple(s.strip() for s in args.scopes.split(",") if s.strip())
    if args.operator:
        tenant, scopes = OPERATOR_TENANT, (OPERATOR,)
    elif OPERATOR in scopes:
        say("--scopes: operator keys are issued with --operator, never as a tenant scope")
        return 2
    else:
        tenant = args.tenant
    try:
        record, key = _service().create_api_key(tenant, scopes, name=args.name, actor="cli")
    except DocfenceError as exc:
        say(describe(exc))
        return 2
    if args.json:  # the key is printed once, here too
        emit(args, "", {"id": record.id, "tenant": record.tenant, "scopes": list(record.scopes), "key": key})
        return 0
    print(f"key id: {record.id}  tenant: {record.tenant}  scopes: {','.join(record.scopes)}")
    print("store this key now; it is not shown again:")
    print(key)
    return 0


def run_list(args: argparse.Namespace) -> int:
    keys = _service().list_api_keys(args.tenant)
    if args.json:
        for k in keys:
            emit(args, "", {"id": k.id, "tenant": k.tenant, "scopes": list(k.scopes), "name": k.name,
                            "created_at": k.created_at.isoformat(),
                            "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None})
        return 0
    for k in keys:
        revoked = k.revoked_at.isoformat() if k.revoked_at else "-"
        print(f"{k.id}\t{k.tenant}\t{','.join(k.scopes)}\t{k.name}\t{k.created_at.isoformat()}\t{revoked}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    try:
        record = _service().revoke_api_key(args.key_id, actor="cli")
    except DocfenceError as exc:
        say(describe(exc))
        return 2
    emit(args, f"revoked {record.id}", {"id": record.id, "revoked": True})
    return 0

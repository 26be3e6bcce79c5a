"""`docfence keys create|list|revoke`: API keys, straight against the store named by the settings;
`keys rotate-kek|retire-kek`: the local provider's key-encryption keys (kek.key).

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
from docfence.core.errors import ConfigError, DocfenceError
from docfence.core.records import key_fingerprint
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
    rotate = keys_sub.add_parser("rotate-kek", help="local provider: add a new current key-encryption key "
                                 "(the reconciler then re-wraps the data keys under it)")
    add_json_flag(rotate)
    rotate.set_defaults(func=run_rotate_kek)
    retire = keys_sub.add_parser("retire-kek", help="local provider: remove an older key-encryption key "
                                 "once no data key is wrapped with it (see `docfence ops status`)")
    retire.add_argument("kek", help="the key's id (kek-...) or its fingerprint as `ops status` shows it")
    add_json_flag(retire)
    retire.set_defaults(func=run_retire_kek)


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


def _local_kek_file() -> tuple[Any, Any]:
    """(settings, the local provider's key file); ConfigError when no configured provider is local."""
    from docfence.maintenance.rewrap import local_kek_path

    settings = load_settings()
    enc = settings.encryption
    if "local" not in (enc.provider, *enc.previous_providers):
        raise ConfigError("[encryption] provider is not \"local\": rotate the KMS key in KMS (re-point the "
                          "alias, or KMS's own rotation); the reconciler re-wraps the data keys",
                          field="encryption.provider")
    return settings, local_kek_path(enc, settings.data_folder())


def run_rotate_kek(args: argparse.Namespace) -> int:
    from docfence.blobs.kek.local import load_key_file, rotate_key_file
    from docfence.store import open_store

    try:
        settings, path = _local_kek_file()
        if settings.encryption.provider != "local":
            raise ConfigError("[encryption] provider is not \"local\": new data keys are not wrapped by the "
                              "key file, so rotating it moves nothing", field="encryption.provider")
        load_key_file(path, create=True)  # made on first use; a rotation of none makes it first
        key_id = rotate_key_file(path)
    except DocfenceError as exc:
        say(describe(exc))
        return 2
    fingerprint = key_fingerprint("local", key_id)
    store = open_store(settings.database_url)
    try:
        store.record_event("kek_rotated", actor="cli", details={"kek_fingerprint": fingerprint})
    finally:
        store.close()
    emit(args, f"new current key-encryption key {key_id} (fingerprint {fingerprint}); the reconciler "
         "re-wraps the data keys under it (`docfence ops status` shows how many remain), then retire the "
         "older key with `docfence keys retire-kek`", {"kek_id": key_id, "kek_fingerprint": fingerprint})
    return 0


def run_retire_kek(args: argparse.Namespace) -> int:
    from docfence.blobs.kek.local import load_key_file, retire_key
    from docfence.store import open_store

    try:
        settings, path = _local_kek_file()
        ids = [k for k in load_key_file(path, create=False)
               if args.kek in (k, key_fingerprint("local", k))]
    except DocfenceError as exc:
        say(describe(exc))
        return 2
    if not ids:
        emit(args, f"{args.kek} is not in the key file (retired already, or never there)",
             {"kek": args.kek, "retired": False})
        return 0
    key_id, fingerprint = ids[0], key_fingerprint("local", ids[0])
    store = open_store(settings.database_url)
    try:
        wrapped = store.count_data_keys().get(("local", key_id), 0)
        if wrapped:
            say(f"{wrapped} data key(s) are still wrapped with {fingerprint}: let the reconciler re-wrap "
                "them under the current key first (`docfence ops status` shows how many remain)")
            return 2
        try:
            retire_key(path, key_id)  # refuses the current key
        except DocfenceError as exc:
            say(describe(exc))
            return 2
        store.record_event("kek_retired", actor="cli", details={"kek_fingerprint": fingerprint})
    finally:
        store.close()
    emit(args, f"retired key-encryption key {key_id} (fingerprint {fingerprint})",
         {"kek_id": key_id, "kek_fingerprint": fingerprint, "retired": True})
    return 0

"""The OpsStore (pauses, class modes, lease counts, retention) and KeyStore queries of the SQL stores
(a mixin of SqlStore)."""

from __future__ import annotations

from docfence.core.errors import NotFound
from docfence.core.records import ApiKey, ClaimPause
from docfence.store.sqlbase import SqlBase, _api_key


class OperationsQueries(SqlBase):
    def pause_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None:
        with self._tx() as tx:
            if tx.run("insert_pause", scope=scope, actor=actor, reason=reason, now=self._now_param()):
                self._append_event(tx, "claims_paused", actor=actor, job_id=None, reason=reason,
                                   details={"scope": scope}, chain="operations")

    def resume_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None:
        with self._tx() as tx:
            if tx.run("delete_pause", scope=scope):
                self._append_event(tx, "claims_resumed", actor=actor, job_id=None, reason=reason,
                                   details={"scope": scope}, chain="operations")
                tx.announce_work()

    def paused_scopes(self) -> list[str]:
        with self._tx(write=False) as tx:
            return [r["scope"] for r in tx.all("list_pauses")]

    def claim_pauses(self) -> list[ClaimPause]:
        """The current pauses with who paused, when and why."""
        with self._tx(write=False) as tx:
            rows = tx.all("list_pauses")
        return [ClaimPause(scope=r["scope"], paused_at=r["paused_at"], actor=r["actor"], reason=r["reason"])
                for r in rows]

    def valid_lease_count(self, *, mode: str | None = None) -> int:
        with self._tx(write=False) as tx:
            row = tx.one("count_valid_leases", mode=mode, now=self._now_param())
        return int(row["n"]) if row else 0

    def set_class_mode(self, document_class: str, mode: str, *, actor: str) -> None:
        with self._tx() as tx:
            tx.run("set_class_mode", document_class=document_class, mode=mode, actor=actor,
                   now=self._now_param())
            self._append_event(tx, "class_mode_changed", actor=actor, job_id=None, reason=None,
                               details={"document_class": document_class, "mode": mode},
                               chain="operations")

    def class_modes(self) -> dict[str, str]:
        with self._tx(write=False) as tx:
            return {r["document_class"]: r["mode"] for r in tx.all("list_class_modes")}

    # -- API keys ------------------------------------------------------------------------------------
    def insert_api_key(
        self, key_id: str, *, tenant: str, name: str, scopes: tuple[str, ...], key_hash: str, actor: str
    ) -> ApiKey:
        with self._tx() as tx:
            row = tx.one("insert_api_key", id=key_id, tenant=tenant, key_name=name, scopes=",".join(scopes),
                         key_hash=key_hash, now=self._now_param())
            assert row is not None
            self._append_event(tx, "api_key_created", actor=actor, job_id=None, reason=None,
                               details={"key_id": key_id, "tenant": tenant, "scopes": list(scopes)},
                               chain="operations")
        return _api_key(row)

    def get_api_key(self, key_id: str) -> ApiKey | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_api_key", id=key_id)
        return _api_key(row) if row else None

    def revoke_api_key(self, key_id: str, *, actor: str) -> ApiKey:
        with self._tx() as tx:
            row = tx.one("revoke_api_key", id=key_id, now=self._now_param())
            if row is None:
                raise NotFound(f"no API key {key_id}")
            self._append_event(tx, "api_key_revoked", actor=actor, job_id=None, reason=None,
                               details={"key_id": key_id}, chain="operations")
        return _api_key(row)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._tx(write=False) as tx:
            return [_api_key(r) for r in tx.all("list_api_keys", tenant=tenant)]

    # -- deletion and retention --------------------------------------------------------------------
    def retention_due(self, *, batch: int = 100) -> list[str]:
        with self._tx(write=False) as tx:
            return [r["id"] for r in tx.all("select_retention_due", limit=batch, now=self._now_param())]

"""The DataKeyStore queries of the SQL stores (a mixin of SqlStore): the jobs whose wrapped data key is
not under the current key-encryption key, replacing one job's wrapped key with a predicate on the old
one, and how many live wrapped keys each key-encryption key holds."""

from __future__ import annotations

from dataclasses import dataclass, field

from docfence.store.sqlbase import SqlBase


@dataclass(frozen=True, slots=True)
class StoredDataKey:
    """One job's live wrapped data key as its row holds it (`wrapped`: base64 text)."""

    job_id: str
    tenant: str
    provider: str
    kek_id: str
    wrapped: str = field(repr=False)


class DataKeyQueries(SqlBase):
    def rewrap_due(self, provider: str, kek_id: str, *, after: str = "", limit: int = 100
                   ) -> list[StoredDataKey]:
        """Up to `limit` jobs, in id order strictly after `after`, whose live wrapped key is not under
        (`provider`, `kek_id`); jobs whose key was destroyed, and plaintext jobs, are never listed."""
        with self._tx(write=False) as tx:
            rows = tx.all("select_rewrap_due", provider=provider, kek_id=kek_id, after=after, limit=limit)
        return [StoredDataKey(r["id"], r["tenant"], r["data_key_provider"], r["data_key_kek_id"] or "",
                              r["data_key_wrapped"]) for r in rows]

    def replace_wrapped_key(self, job_id: str, *, old: str, provider: str, kek_id: str, wrapped: str
                            ) -> bool:
        """Store a job's re-wrapped key only while its row still holds `old`; False (nothing changed,
        never an error) when the key was destroyed or re-wrapped by another pass meanwhile."""
        with self._tx() as tx:
            return tx.run("replace_wrapped_key", id=job_id, old=old, provider=provider, kek_id=kek_id,
                          wrapped=wrapped) == 1

    def count_data_keys(self) -> dict[tuple[str, str], int]:
        """(provider, key-encryption key id) -> how many live wrapped data keys it holds."""
        with self._tx(write=False) as tx:
            rows = tx.all("count_data_keys")
        return {(r["provider"], r["kek_id"]): int(r["n"]) for r in rows}

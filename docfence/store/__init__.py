"""The job store: the only package with SQL. `open_store(url)` picks SQLite or PostgreSQL."""

from docfence.store.base import Store, open_store

__all__ = ["Store", "open_store"]

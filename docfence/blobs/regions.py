"""RegionRouter: the only way to pick a BlobStore for a job's region. Unknown regions are refused, so no
byte can be written to (or read from) storage outside the approved list."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from docfence.blobs.base import BlobStore
from docfence.blobs.urls import open_blob_store
from docfence.core.errors import ConfigError, RegionNotApproved

_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class RegionRouter:
    """Maps approved region names (e.g. "eu-central-1") to their store; fixed at construction."""

    def __init__(self, stores: Mapping[str, BlobStore]) -> None:
        if not stores:
            raise ConfigError("at least one approved storage region is required")
        for region in stores:
            if not isinstance(region, str) or not _REGION.fullmatch(region):
                raise ConfigError(f"invalid storage region name {region!r}")
        self._stores: Mapping[str, BlobStore] = MappingProxyType(dict(stores))

    @classmethod
    def from_config(cls, mapping: Mapping[str, str]) -> RegionRouter:
        """Build each store from region -> blob store URL (open_blob_store); bad URLs raise ConfigError."""
        return cls({region: open_blob_store(url) for region, url in mapping.items()})

    def for_region(self, region: str) -> BlobStore:
        """The store for `region`; raises RegionNotApproved for any region not configured."""
        try:
            return self._stores[region]
        except (KeyError, TypeError):
            raise RegionNotApproved(f"region {region!r} is not approved for storage") from None

    def approved(self) -> list[str]:
        return sorted(self._stores)

    def __repr__(self) -> str:
        return f"RegionRouter({self.approved()})"

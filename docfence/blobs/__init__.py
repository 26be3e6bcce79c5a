"""Artifact storage, which knows nothing of jobs: the BlobStore protocol, a local-folder and an S3 backend,
`open_blob_store(url)` to build one from a setting, and the RegionRouter that keeps bytes in their region."""

from __future__ import annotations

from docfence.blobs.base import BlobInfo, BlobReader, BlobStore, validate_key
from docfence.blobs.local import LocalBlobStore
from docfence.blobs.regions import RegionRouter
from docfence.blobs.urls import open_blob_store

__all__ = [
    "BlobInfo",
    "BlobReader",
    "BlobStore",
    "LocalBlobStore",
    "RegionRouter",
    "open_blob_store",
    "validate_key",
]

"""`open_blob_store(url)`: a blob store built from a storage setting (file: or s3:). Its own module so
the region router can use it while the package re-exports both (no import cycle)."""

from __future__ import annotations

from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from docfence.blobs.base import BlobStore
from docfence.blobs.local import LocalBlobStore
from docfence.core.errors import ConfigError

_S3_PARAMS = frozenset({"endpoint_url", "region", "sse"})


def open_blob_store(url: str) -> BlobStore:
    """Build a store from a URL; a bad URL raises ConfigError (at start-up). Accepted forms:

    file:///abs/dir, file:relative/dir (resolved against the working directory now),
    s3://bucket[/prefix][?endpoint_url=http://127.0.0.1:9000&region=eu-central-1&sse=AES256]
    (credentials come from the standard AWS environment variables / boto3 chain, never from the URL).
    """
    parsed = urlsplit(url)
    if parsed.scheme == "file":
        return _open_file(parsed)
    if parsed.scheme == "s3":
        return _open_s3(parsed)
    # The URL itself is not echoed: a mistyped one could carry a secret.
    raise ConfigError(f"unsupported blob store URL scheme {parsed.scheme!r} (use file: or s3:)")


def _open_file(parsed: SplitResult) -> LocalBlobStore:
    from pathlib import Path

    if parsed.query or parsed.fragment:
        raise ConfigError("file: blob store URLs take no query or fragment")
    if parsed.netloc not in ("", "localhost"):
        raise ConfigError("file: blob store URL has a host; use file:///abs/dir or file:relative/dir")
    path = unquote(parsed.path)
    if not path:
        raise ConfigError("file: blob store URL has no path")
    return LocalBlobStore(Path(path))


def _open_s3(parsed: SplitResult) -> BlobStore:
    from docfence.blobs.s3 import S3BlobStore  # imported here: the embedded default never loads boto3

    if parsed.fragment or "@" in parsed.netloc or ":" in parsed.netloc:
        raise ConfigError("s3: blob store URLs take no credentials, port or fragment (use endpoint_url)")
    params = _single_params(parsed.query)
    endpoint_url = params.get("endpoint_url")
    if endpoint_url is not None:
        endpoint = urlsplit(endpoint_url)
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc or "@" in endpoint.netloc:
            raise ConfigError("endpoint_url must be an http(s) URL without credentials")
    return S3BlobStore(
        parsed.netloc,
        unquote(parsed.path).lstrip("/"),
        endpoint_url=endpoint_url,
        region_name=params.get("region"),
        server_side_encryption=params.get("sse"),
    )


def _single_params(query: str) -> dict[str, str]:
    try:
        raw = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ConfigError("s3: blob store URL has a malformed query") from exc
    unknown = sorted(set(raw) - _S3_PARAMS)
    if unknown:
        raise ConfigError(f"unknown s3: blob store URL parameters {unknown}; known: {sorted(_S3_PARAMS)}")
    params: dict[str, str] = {}
    for name, values in raw.items():
        if len(values) != 1 or not values[0]:
            raise ConfigError(f"s3: blob store URL parameter {name!r} must appear once, with a value")
        params[name] = values[0]
    return params

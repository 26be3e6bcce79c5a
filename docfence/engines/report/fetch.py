"""The only URL fetcher a report render uses: it serves the bundle's own assets by relative name and refuses
every other URL (file:, http(s):, data:, ...) without touching the filesystem or opening a socket."""

from __future__ import annotations

import contextlib
import logging
import mimetypes
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urldefrag, urlsplit, uses_netloc, uses_relative

from weasyprint.urls import URLFetcher, URLFetcherResponse

ASSET_SCHEME = "docfence-asset"
ASSET_HOST = "bundle"
BASE_URL = f"{ASSET_SCHEME}://{ASSET_HOST}/"
MAX_RECORDED = 50
MAX_URL_CHARS = 200

# urljoin() only resolves relative references for schemes it knows; without this, "logo.svg" against
# BASE_URL would stay relative. Registering a private scheme name changes nothing for other schemes.
for _registry in (uses_relative, uses_netloc):
    if ASSET_SCHEME not in _registry:
        _registry.append(ASSET_SCHEME)


class AssetRefused(Exception):
    """Raised to WeasyPrint for a refused URL; WeasyPrint then renders without the resource."""


def redact_url(url: str) -> str:
    """A bounded form of a URL for the result: data: URIs lose their payload, long URLs are cut."""
    if url[:5].lower() == "data:":
        header, _, payload = url.partition(",")
        return f"{header[:60]},<{len(payload)} chars>"
    return url if len(url) <= MAX_URL_CHARS else url[:MAX_URL_CHARS] + "..."


class BundleFetcher(URLFetcher):  # type: ignore[misc]
    """Serves `docfence-asset://bundle/<name>` from `assets`; anything else is recorded and refused.

    Never calls URLFetcher.fetch/open of the base class, so urllib's file/http/ftp/data handlers it
    installs are unreachable. Not thread-safe (neither is WeasyPrint): one fetcher per render."""

    def __init__(self, assets: Mapping[str, bytes]) -> None:
        super().__init__(allowed_protocols=(ASSET_SCHEME,), allow_redirects=False, fail_on_errors=False)
        self._assets = dict(assets)
        self.refused: list[str] = []

    def _asset_name(self, url: str) -> str | None:
        parts = urlsplit(urldefrag(url).url)
        if parts.scheme.lower() != ASSET_SCHEME or parts.netloc != ASSET_HOST or parts.query:
            return None
        name = unquote(parts.path).lstrip("/")
        return name if name in self._assets else None

    def _refuse(self, url: str) -> AssetRefused:
        shown = redact_url(url)
        if shown not in self.refused and len(self.refused) < MAX_RECORDED:
            self.refused.append(shown)
        return AssetRefused("resource is not an asset of this template bundle")

    def fetch(self, url: str, headers: Any = None) -> URLFetcherResponse:
        name = self._asset_name(url)
        if name is None:
            raise self._refuse(url)
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return URLFetcherResponse(url, body=self._assets[name], headers={"Content-Type": mime})

    def open(self, url: Any, data: Any = None, timeout: Any = None) -> URLFetcherResponse:
        return self.fetch(url if isinstance(url, str) else url.full_url)


class _Swallow(logging.Filter):
    """Drops WeasyPrint's log records (their arguments quote URLs and CSS that may carry data), keeping
    only the unformatted message templates, which are WeasyPrint's own text."""

    def __init__(self) -> None:
        super().__init__()
        self.templates: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            template = str(record.msg)
            if template not in self.templates:
                self.templates.append(template)
        return False


@contextlib.contextmanager
def quiet_weasyprint() -> Iterator[list[str]]:
    """Silence the weasyprint loggers for the duration; yields the list of warning templates seen."""
    swallow = _Swallow()
    loggers = [logging.getLogger("weasyprint"), logging.getLogger("weasyprint.progress")]
    for logger in loggers:
        logger.addFilter(swallow)
    try:
        yield swallow.templates
    finally:
        for logger in loggers:
            logger.removeFilter(swallow)

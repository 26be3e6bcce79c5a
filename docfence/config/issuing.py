"""`[verification]` and `[signing]`: what an issued document carries besides its marks (a QR code that
recipients check, a PAdES signature) and the organisation-wide settings both need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docfence.config.tables import section
from docfence.core.errors import ConfigError


@dataclass(frozen=True)
class VerificationConfig:
    """`[verification]`: where recipients check a document, and the name they are shown as its issuer."""

    public_base_url: str = ""  # e.g. https://verify.example.org; the QR code encodes URLs under it
    organisation: str = ""  # the issuer's name GET /v1/verify/{job_id} answers with
    requests_per_minute: int = 30  # per client address, on /v1/verify (no key there)
    burst: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.requests_per_minute <= 100_000 or not 0 < self.burst <= 10_000:
            raise ConfigError("requests_per_minute and burst must be positive (at most 100000 and 10000)")
        url = self.public_base_url
        if url and (not url.startswith(("https://", "http://")) or any(c in url for c in "?# ")
                    or len(url) > 200):
            raise ConfigError(f"public_base_url={url!r}: must be an http(s) URL of at most 200 characters "
                              "without a query or fragment")
        if len(self.organisation) > 200:
            raise ConfigError("organisation must be at most 200 characters")


@dataclass(frozen=True)
class SigningConfig:
    """`[signing]`: the organisation's PKCS#12 file for signed outputs (not the secret of signed URLs)."""

    pkcs12: str = ""  # path to the .p12/.pfx file: private key, certificate and its chain
    pkcs12_password: str = ""  # or DOCFENCE_SIGNING_PKCS12_PASSWORD

    def __repr__(self) -> str:  # the password never reaches a log or a traceback
        return f"SigningConfig(pkcs12={self.pkcs12!r})"


def signing_from(table: Any, env: dict[str, str]) -> SigningConfig:
    """[signing], its password taken from DOCFENCE_SIGNING_PKCS12_PASSWORD when that is set."""
    if env.get("DOCFENCE_SIGNING_PKCS12_PASSWORD") and isinstance(table, dict):
        table = {**table, "pkcs12_password": env["DOCFENCE_SIGNING_PKCS12_PASSWORD"]}
    signing: SigningConfig = section(SigningConfig, "[signing]", table)
    return signing

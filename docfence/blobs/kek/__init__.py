"""Key-encryption keys: the narrow KeyProvider protocol that wraps and unwraps a job's data key, its
providers (`local`: a key file in the data folder; `aws-kms`: AWS KMS through boto3), the KeyRing that
lets a rotation or a change of provider unwrap with the old and wrap with the new, and `rewrap`."""

from __future__ import annotations

from pathlib import Path

from docfence.blobs.kek.base import (
    Context,
    KeyProvider,
    KeyRing,
    WrappedKey,
    generate_by_wrapping,
    rewrap,
)
from docfence.core.errors import ConfigError
from docfence.core.records import key_fingerprint

PROVIDERS = ("local", "aws-kms")


def open_key_provider(provider: str, *, data_folder: Path | None, kek_file: str = "", kms_key_id: str = "",
                      kms_region: str = "", kms_endpoint_url: str = "") -> KeyProvider:
    """The configured provider. `local` keeps its key file at `kek_file`, else in `data_folder`; without
    either (PostgreSQL and S3: no local data folder) ConfigError names the settings to give."""
    if provider == "local":
        from docfence.blobs.kek.local import KEK_FILE, LocalKeyProvider

        if kek_file:
            return LocalKeyProvider(Path(kek_file))
        if data_folder is None:
            raise ConfigError("[encryption] provider = \"local\" needs kek_file (one file every API server "
                              "and worker reads) when there is no local data folder, or provider = "
                              "\"aws-kms\"", field="encryption.kek_file")
        return LocalKeyProvider(data_folder / KEK_FILE)
    if provider == "aws-kms":
        from docfence.blobs.kek.aws_kms import AwsKmsProvider

        if not kms_key_id:
            raise ConfigError("[encryption] provider = \"aws-kms\" needs kms_key_id (a key id, ARN or "
                              "alias/NAME)", field="encryption.kms_key_id")
        return AwsKmsProvider(kms_key_id, region_name=kms_region or None,
                              endpoint_url=kms_endpoint_url or None)
    raise ConfigError(f"[encryption] provider = {provider!r}: allowed: {', '.join(PROVIDERS)}",
                      field="encryption.provider")


__all__ = ["PROVIDERS", "Context", "KeyProvider", "KeyRing", "WrappedKey", "generate_by_wrapping",
           "key_fingerprint", "open_key_provider", "rewrap"]

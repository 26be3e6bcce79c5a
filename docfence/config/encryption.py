"""`[encryption]`: envelope encryption of every stored object: which key provider wraps the jobs' data
keys (docfence.blobs.kek), its settings, and the sealed format's chunk size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docfence.config.tables import section, strings_to_tuple
from docfence.core.errors import ConfigError

PROVIDERS = ("local", "aws-kms")
#: Variable -> [encryption] key it overrides.
ENCRYPTION_ENV = {
    "DOCFENCE_KEK_PROVIDER": "provider",
    "DOCFENCE_KEK_FILE": "kek_file",
    "DOCFENCE_KMS_KEY_ID": "kms_key_id",
    "DOCFENCE_KMS_REGION": "kms_region",
    "DOCFENCE_KMS_ENDPOINT_URL": "kms_endpoint_url",
}

SEAL_ENV = "DOCFENCE_SEAL_NEW_JOBS"  # true | false: [encryption] seal_new_jobs


def _flag(var: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{var}={raw!r}: must be true or false", field=var)


@dataclass(frozen=True)
class EncryptionConfig:
    """[encryption] (docs/security.md). On by default with the `local` provider: a key file made once
    in the data folder. Every API server and worker of a deployment must use the same provider and key."""

    provider: str = "local"  # local | aws-kms: wraps new data keys
    kek_file: str = ""  # local: the key file; empty: kek.key in the data folder
    kms_key_id: str = ""  # aws-kms: key id, ARN or alias/NAME (re-point an alias to rotate)
    kms_region: str = ""  # aws-kms: empty: boto3's own (AWS_REGION, the config file)
    kms_endpoint_url: str = ""  # aws-kms: a VPC endpoint, or a test server
    # providers still asked to unwrap while a rewrap pass moves their keys to `provider`
    previous_providers: tuple[str, ...] = ()
    chunk_size: int = 64 * 1024  # sealed objects' chunk; each object records its own
    rewrap_batch: int = 100  # data keys re-wrapped per reconciler pass after a rotation
    # new jobs get a data key and sealed objects; false only while workers of the release before
    # (which cannot open sealed objects) still run: a rolling upgrade's first step (docs/encryption.md).
    # Sealed jobs are read whatever this says.
    seal_new_jobs: bool = True

    def __post_init__(self) -> None:
        for name in (self.provider, *self.previous_providers):
            if name not in PROVIDERS:
                raise ConfigError(f"provider {name!r}: allowed: {', '.join(PROVIDERS)}")
        if self.provider in self.previous_providers:
            raise ConfigError("previous_providers must not name the current provider")
        if self.provider == "aws-kms" and not self.kms_key_id:
            raise ConfigError("provider = \"aws-kms\" needs kms_key_id (a key id, ARN or alias/NAME)")
        if self.kms_endpoint_url and not self.kms_endpoint_url.startswith(("https://", "http://")):
            raise ConfigError(f"kms_endpoint_url={self.kms_endpoint_url!r}: must be an http(s) URL")
        if isinstance(self.chunk_size, bool) or not 4096 <= self.chunk_size <= 16 * 1024 * 1024:
            raise ConfigError(f"chunk_size={self.chunk_size!r}: must be an integer in [4096, 16777216]")
        if isinstance(self.rewrap_batch, bool) or not 0 < self.rewrap_batch <= 10_000:
            raise ConfigError(f"rewrap_batch={self.rewrap_batch!r}: must be an integer in [1, 10000]")


def encryption_from(table: Any, env: dict[str, str]) -> EncryptionConfig:
    """[encryption], each DOCFENCE_KEK_* / DOCFENCE_KMS_* variable (and DOCFENCE_SEAL_NEW_JOBS) over
    its key."""
    table = strings_to_tuple(table, "previous_providers", "[encryption]", "provider names")
    if isinstance(table, dict):
        table = {**table, **{key: env[var] for var, key in ENCRYPTION_ENV.items() if env.get(var)}}
        if env.get(SEAL_ENV):
            table["seal_new_jobs"] = _flag(SEAL_ENV, env[SEAL_ENV])
    encryption: EncryptionConfig = section(EncryptionConfig, "[encryption]", table)
    return encryption

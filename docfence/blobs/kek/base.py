"""The KeyProvider protocol (generate, wrap, unwrap a data key under a key-encryption key), the wrapped
form a job's row stores, the fingerprint audit events name a key-encryption key by, and rotation:
KeyRing (unwrap with any provider, wrap with the current one) and `rewrap`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from docfence.blobs.envelope import DataKey
from docfence.core.errors import ConfigError
from docfence.core.records import key_fingerprint

#: What a wrapped key is bound to (e.g. {"tenant": ..., "job": ...}): the same context must be given to
#: unwrap it, so a wrapped key copied into another job's row does not open. Not secret (KMS logs it).
Context = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key as it is stored (in the job's row, never beside the objects): which provider and which
    of its key-encryption keys wrapped it, and the wrapped bytes (useless without that key)."""

    provider: str
    key_id: str
    wrapped: bytes = field(repr=False)

    def fingerprint(self) -> str:
        return key_fingerprint(self.provider, self.key_id)


@runtime_checkable
class KeyProvider(Protocol):
    """A source of key-encryption keys. A provider for another key service (Vault Transit, GCP KMS) is one
    small module implementing these four members; `generate_by_wrapping` serves one without its own
    data-key generation. Errors: BlobError (retryable) when the key service is unreachable or throttles;
    ConfigError when the key is missing, disabled or not allowed; BlobIntegrityError when a wrapped key
    does not open (corrupt, or bound to another context)."""

    @property
    def name(self) -> str:
        """The provider's name as configured ("local", "aws-kms"), stored with every wrapped key."""
        ...

    def current_key_id(self) -> str:
        """The key-encryption key new data keys are wrapped with."""
        ...

    def generate(self, context: Context) -> tuple[DataKey, WrappedKey]:
        """A fresh data key for one job, and its wrapped form under the current key."""
        ...

    def wrap(self, key: DataKey, context: Context) -> WrappedKey:
        """`key` wrapped under the current key-encryption key."""
        ...

    def unwrap(self, wrapped: WrappedKey, context: Context) -> DataKey:
        """The data key, with whichever of this provider's keys (current or older) `wrapped` names."""
        ...


def context_bytes(context: Context) -> bytes:
    """The canonical encoding of a context (sorted keys, no spaces), for providers that bind it as
    associated data."""
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in context.items()):
        raise ConfigError("a key context maps strings to strings")
    return json.dumps(dict(context), sort_keys=True, separators=(",", ":")).encode("utf-8")


def generate_by_wrapping(provider: KeyProvider, context: Context) -> tuple[DataKey, WrappedKey]:
    """`generate` for a provider that only wraps: a local random key, wrapped by the provider."""
    key = DataKey.generate()
    return key, provider.wrap(key, context)


class KeyRing:
    """A KeyProvider that wraps with `current` and unwraps with whichever provider a wrapped key names:
    moving from one provider to another (local to aws-kms) is a rewrap pass over a KeyRing of both."""

    def __init__(self, current: KeyProvider, *older: KeyProvider) -> None:
        providers = (current, *older)
        self._current = current
        self._by_name = {p.name: p for p in providers}
        if len(self._by_name) != len(providers):
            raise ConfigError("a key ring holds one provider of each name (a provider's own older keys "
                              "are its own to keep)")

    @property
    def name(self) -> str:
        return self._current.name

    def current_key_id(self) -> str:
        return self._current.current_key_id()

    def generate(self, context: Context) -> tuple[DataKey, WrappedKey]:
        return self._current.generate(context)

    def wrap(self, key: DataKey, context: Context) -> WrappedKey:
        return self._current.wrap(key, context)

    def unwrap(self, wrapped: WrappedKey, context: Context) -> DataKey:
        provider = self._by_name.get(wrapped.provider)
        if provider is None:
            raise ConfigError(f"this job's data key was wrapped by key provider {wrapped.provider!r}, which "
                              f"is not configured (configured: {', '.join(sorted(self._by_name))})")
        return provider.unwrap(wrapped, context)


def is_current(provider: KeyProvider, wrapped: WrappedKey) -> bool:
    """Whether `wrapped` is already under the provider's current key-encryption key."""
    return wrapped.provider == provider.name and wrapped.key_id == provider.current_key_id()


def rewrap(provider: KeyProvider, wrapped: WrappedKey, context: Context) -> WrappedKey | None:
    """`wrapped` re-wrapped under the current key (the objects are untouched: their data key is the
    same), or None when it already is. The caller stores the new form with a predicate on the old one,
    so two rewrap passes racing cannot lose a key."""
    if is_current(provider, wrapped):
        return None
    return provider.wrap(provider.unwrap(wrapped, context), context)

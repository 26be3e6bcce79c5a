"""The stages after a validated watermark, in their fixed order: the verification code, then the
signature (last, so it covers every byte). Each stage proves its own change; a failed proof fails the
job with the whole report, and nothing unproved is returned."""

from __future__ import annotations

from typing import Any

from docfence.core.errors import ConfigError
from docfence.core.policy import JobPolicy, Mode
from docfence.engines.validate import Check, require_valid


def issue(output: bytes, report: dict[str, Any], policy: JobPolicy, *, password: str | None = None,
          signing_key: Any = None) -> bytes:
    """`output` with the class's verification code and signature; their checks join `report`.
    `signing_key` is an engines.signing.SigningKey (the parent's, sent with the task)."""
    if policy.verification is not None:
        from docfence.engines import verify_code

        mode = Mode(policy.mode).value
        stamped = verify_code.stamp(output, policy.verification, mode=mode, dpi=policy.dpi, password=password)
        _require(report, verify_code.prove(output, stamped, policy.verification, mode=mode, dpi=policy.dpi,
                                           password=password))
        output = stamped
    if policy.signing is not None:
        from docfence.engines import signing

        if signing_key is None:
            raise ConfigError("the class signs its outputs but the worker has no [signing] key")
        signed = signing.sign(output, policy.signing, signing_key)
        _require(report, signing.prove(signed, policy.signing, signing_key))
        output = signed
    return output


def _require(report: dict[str, Any], checks: list[Check]) -> None:
    report["checks"] = [*report.get("checks", []), *checks]
    report["ok"] = bool(report.get("ok", True)) and all(c["ok"] for c in checks)
    require_valid(report)


__all__ = ["issue"]

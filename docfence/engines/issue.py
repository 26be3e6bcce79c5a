"""The stages after a validated watermark, in their fixed order: the verification code (in the render
process, `issue`), then the signature (last, so it covers every byte; `sign_validated`, run by the
worker in a process of its own that never parsed the untrusted input, so only that process holds the
key). Each stage proves its own change; a failed proof fails the job with its report."""

from __future__ import annotations

from typing import Any

from docfence.core.policy import JobPolicy, Mode
from docfence.engines.checks import Check
from docfence.engines.validate import require_valid


def issue(output: bytes, report: dict[str, Any], policy: JobPolicy, *, password: str | None = None) -> bytes:
    """`output` with the class's verification code, its checks joined to `report`."""
    if policy.verification is not None:
        from docfence.engines import verify_code

        mode = Mode(policy.mode).value
        stamped = verify_code.stamp(output, policy.verification, mode=mode, dpi=policy.dpi, password=password)
        _require(report, verify_code.prove(output, stamped, policy.verification, mode=mode, dpi=policy.dpi,
                                           password=password))
        output = stamped
    return output


def sign_validated(output: bytes, policy: JobPolicy, signing_key: Any) -> tuple[bytes, dict[str, Any]]:
    """The validated `output` signed, and a report of the signature's checks (ValidationFailed with it
    when one fails; SigningRefused for an encrypted output). `signing_key`: engines.signing.SigningKey."""
    from docfence.core.errors import ConfigError
    from docfence.engines import signing

    if policy.signing is None or signing_key is None:
        raise ConfigError("the class signs its outputs but the worker has no [signing] key")
    signed = signing.sign(output, policy.signing, signing_key)
    report: dict[str, Any] = {"ok": True, "stage": "signing", "checks": []}
    _require(report, signing.prove(signed, policy.signing, signing_key, validated=output))
    return signed, report


def _require(report: dict[str, Any], checks: list[Check]) -> None:
    report["checks"] = [*report.get("checks", []), *checks]
    report["ok"] = bool(report.get("ok", True)) and all(c["ok"] for c in checks)
    require_valid(report)


__all__ = ["issue", "sign_validated"]

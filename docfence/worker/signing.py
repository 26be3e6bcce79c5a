"""The worker's signing step: the `[signing]` key opened once at start-up, and the signature of a
validated output in a render process of its own (the sign sandbox), its checks merged into the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from docfence.config import Settings
from docfence.sandbox import Outcome, Sandbox, Task


def merged_report(validated: dict[str, Any] | None, stage: dict[str, Any] | None) -> dict[str, Any]:
    """The render's validation report with the signing task's checks appended (what is published)."""
    merged = dict(validated or {})
    merged["checks"] = [*merged.get("checks", []), *(stage or {}).get("checks", [])]
    merged["ok"] = bool(merged.get("ok", True)) and all(c.get("ok") for c in merged["checks"])
    return merged


def signing_request(settings: Settings) -> dict[str, Any] | None:
    """The `[signing]` key, opened once here so a wrong file or password stops the worker at start-up;
    None when no class signs (a worker then never reads the file)."""
    if not any(c.signing is not None for c in settings.all_classes().values()):
        return None
    from docfence.engines.signing import load_key

    return load_key(settings.signing.pkcs12, settings.signing.pkcs12_password).to_request()


def sign_output(sandbox: Sandbox, signing: dict[str, Any] | None, rendered_task: Task, rendered: Outcome,
                cancel: Callable[[], bool]) -> Outcome:
    """Sign `rendered_task`'s validated output in a render process of its own, forked after validation
    by the sign sandbox's zygote: it gets the key and our own validated bytes, never the untrusted
    input (engines/issue.py)."""
    output = rendered_task.output_path
    validated = output.with_name("validated.pdf")
    output.rename(validated)
    task = Task("sign", validated, output, rendered_task.policy, signing=signing,
                log_context=rendered_task.log_context)
    signed = sandbox.run(task, cancel=cancel)
    if not signed.ok:
        report = merged_report(rendered.validation, signed.validation) if signed.validation else None
        return replace(signed, validation=report)
    return replace(rendered, validation=merged_report(rendered.validation, signed.validation),
                   engine_s=rendered.engine_s + signed.engine_s)

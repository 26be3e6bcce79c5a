"""Renders a bundle's Jinja2 source to HTML in an immutable sandbox: autoescape on, undefined names fail,
no template loader (include/extends/import find nothing), and size-bounded `*`/`**` and output."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from jinja2 import DictLoader, StrictUndefined, TemplateSyntaxError, UndefinedError
from jinja2 import TemplateError as JinjaTemplateError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from docfence.core.errors import RenderResourceExceeded, TemplateError

MAX_HTML_CHARS = 50_000_000
MAX_OPERAND = 100_000  # largest repeat count / sequence length for `*`, largest exponent for `**`
MAX_POWER_BITS = 100_000  # largest integer `**` may build


class ReportSandbox(ImmutableSandboxedEnvironment):
    """The sandbox plus bounds on `*` and `**`, which the stock sandbox leaves unlimited
    (`{{ 'x' * 10**10 }}` would otherwise exhaust memory before any output limit applies)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            too_big = isinstance(right, int | float) and abs(right) > MAX_OPERAND
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                too_big = too_big or abs(left).bit_length() * right > MAX_POWER_BITS
            if too_big:
                raise SecurityError("exponent too large")
            return operator.pow(left, right)
        for count, other in ((left, right), (right, left)):
            sized = isinstance(count, int) and isinstance(other, str | bytes | list | tuple)
            if sized and count * max(len(other), 1) > MAX_OPERAND:
                raise SecurityError("repetition too large")
        return operator.mul(left, right)


def _environment() -> ReportSandbox:
    env = ReportSandbox(
        autoescape=True,
        undefined=StrictUndefined,
        loader=DictLoader({}),  # templates come from the bundle only; include/import find nothing
        auto_reload=False,
        cache_size=0,
    )
    # Keep only harmless helpers in the global namespace.
    for name in ("lipsum", "cycler", "joiner", "namespace", "dict"):
        env.globals.pop(name, None)
    return env


def render_html(source: str, data: Mapping[str, Any], *, max_chars: int = MAX_HTML_CHARS) -> str:
    """Render `source` with `data` as its context.

    Raises TemplateError (syntax, undefined name, sandbox violation, missing include) with a message that
    names the problem class and line but no data value; RenderResourceExceeded when the HTML is too large."""
    env = _environment()
    try:
        template = env.from_string(source)
        html = template.render(dict(data))
    except SecurityError as exc:
        raise TemplateError("template broke the sandbox rules (unsafe attribute or operation)") from exc
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error at line {exc.lineno}") from exc
    except UndefinedError as exc:
        raise TemplateError("template used an undefined name or attribute") from exc
    except JinjaTemplateError as exc:
        raise TemplateError(f"template error: {type(exc).__name__}") from None  # may quote an include name
    except (TypeError, ValueError, ArithmeticError, LookupError, RecursionError) as exc:
        # `from None`: Python's own message may quote a data value (int('...') and the like).
        raise TemplateError(f"template evaluation failed: {type(exc).__name__}") from None
    if len(html) > max_chars:
        raise RenderResourceExceeded(f"rendered HTML exceeds {max_chars} characters")
    return html

"""Renders a bundle's Jinja2 source to HTML in an immutable sandbox: autoescape on, undefined names fail,
no template loader (include/extends/import find nothing), every way a string or list can grow bounded
before it grows, and the output counted while it is produced.

The stock sandbox leaves growth unlimited: `{{ 'x' * 10**10 }}`, `'x'|center(10**9)`, `'x'.ljust(10**9)`,
`'%999999999d' % 1` or a macro doubling a string with `~` would exhaust memory long before any output
limit applies. Here widths are capped at MAX_WIDTH, repetition at MAX_OPERAND, and any string built by
`+`, `~`, `join`, `replace` or a method call at MAX_STRING_CHARS; a violation is a SecurityError, which
render_html reports as a TemplateError.
"""

from __future__ import annotations

import operator
import re
import string
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jinja2 import DictLoader, StrictUndefined, TemplateSyntaxError, UndefinedError, nodes
from jinja2 import TemplateError as JinjaTemplateError
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.nodes import Concat
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import missing

from docfence.core.errors import RenderResourceExceeded, TemplateError

MAX_HTML_CHARS = 50_000_000
MAX_OPERAND = 100_000  # largest repeat count / sequence length for `*`, largest exponent for `**`
MAX_POWER_BITS = 100_000  # largest integer `**` may build
MAX_WIDTH = 10_000  # largest padding width or precision (center, ljust, rjust, zfill, format, %, indent)
MAX_STRING_CHARS = 10_000_000  # largest string `+`, `~`, join, replace or a str method may build
# `%` directives: flags, then a width and a precision that may be numbers or `*` (taken from the args).
_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})
_REFUSED_METHODS = frozenset({"expandtabs", "translate", "maketrans"})  # growth not bounded cheaply


def _too_big(what: str) -> SecurityError:
    return SecurityError(f"{what} exceeds the template size bounds")


def _check_width(width: Any, what: str) -> None:
    if isinstance(width, int) and width > MAX_WIDTH:
        raise _too_big(what)


def check_percent_format(fmt: str, args: Any) -> None:
    """Refuse a `%` format whose width or precision is over MAX_WIDTH or taken from the args (`*`)."""
    for width, precision in _PERCENT.findall(fmt):
        for number in (width, precision):
            if number == "*" or (number and int(number) > MAX_WIDTH):
                raise _too_big("a % format width")


def check_brace_format(fmt: str) -> None:
    """Refuse a `str.format` spec with a width over MAX_WIDTH or a nested field (a width from data)."""
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _literal, _field, spec, _conversion in parsed:
        if spec and ("{" in spec or any(int(n) > MAX_WIDTH for n in re.findall(r"\d+", spec))):
            raise _too_big("a format width")


def _bounded(value: Any) -> Any:
    if isinstance(value, str | bytes | list | tuple) and len(value) > MAX_STRING_CHARS:
        raise _too_big("a string")
    return value


class _BoundedConcat(CodeGenerator):
    """Compiles `a ~ b` so the joined string passes `environment.bounded` before it is used."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.bounded(")
        super().visit_Concat(node, frame)
        self.write(")")


class ReportSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox plus the growth bounds of the module docstring."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _BoundedConcat

    def bounded(self, value: Any) -> Any:
        return _bounded(value)

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            too_big = isinstance(right, int | float) and abs(right) > MAX_OPERAND
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                too_big = too_big or abs(left).bit_length() * right > MAX_POWER_BITS
            if too_big:
                raise SecurityError("exponent too large")
            return operator.pow(left, right)
        if operator_name == "%":
            if isinstance(left, str):
                check_percent_format(left, right)
            return operator.mod(left, right)
        if operator_name == "+":
            sized = isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple)
            if sized and len(left) + len(right) > MAX_STRING_CHARS:
                raise _too_big("a string")
            return operator.add(left, right)
        for count, other in ((left, right), (right, left)):
            sized = isinstance(count, int) and isinstance(other, str | bytes | list | tuple)
            if sized and count * max(len(other), 1) > MAX_OPERAND:
                raise SecurityError("repetition too large")
        return operator.mul(left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str | bytes):
            args = _check_str_method(owner, getattr(__obj, "__name__", ""), args, kwargs)
        return _bounded(super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        check_brace_format(value.__self__)
        return wrapped


def _check_str_method(owner: str | bytes, name: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Refuse a string method call whose result would outgrow the bounds, before it runs; returns the
    arguments to call it with (an iterable given to join is read once, into a list)."""
    if name in _REFUSED_METHODS:
        raise SecurityError(f"str.{name} is not available in templates")
    if name in _PADDING_METHODS:
        _check_width(args[0] if args else kwargs.get("width"), f"str.{name} width")
    elif name == "join" and args and isinstance(args[0], Iterable):
        items = list(args[0])
        size = sum(len(x) if isinstance(x, str | bytes) else 0 for x in items)
        if size + len(owner) * max(len(items) - 1, 0) > MAX_STRING_CHARS:
            raise _too_big("a joined string")
        return (items, *args[1:])
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = args[0], args[1]
        count = len(owner) + 1 if old == "" else owner.count(old)  # type: ignore[arg-type]
        if len(owner) + count * max(len(new) - len(old), 0) > MAX_STRING_CHARS:
            raise _too_big("a replaced string")
    return args


def _bounded_filters(env: ReportSandbox) -> None:
    """Wrap the stock filters that can grow a string or a list by a number the template chooses."""
    filters = env.filters
    center, fmt, indent = filters["center"], filters["format"], filters["indent"]
    join, replace, batch, slice_ = filters["join"], filters["replace"], filters["batch"], filters["slice"]

    def bounded_center(value: Any, width: int = 80) -> Any:
        _check_width(width, "center width")
        return center(value, width)

    def bounded_format(value: Any, *args: Any, **kwargs: Any) -> Any:
        check_percent_format(str(value), args)
        return _bounded(fmt(value, *args, **kwargs))

    def bounded_indent(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> Any:
        _check_width(width if isinstance(width, int) else len(str(width)), "indent width")
        return _bounded(indent(value, width, *args, **kwargs))

    def bounded_join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        items = list(value)
        if len(str(d)) * max(len(items) - 1, 0) > MAX_STRING_CHARS:
            raise _too_big("a joined string")
        return _bounded(join(eval_ctx, items, d, attribute))

    def bounded_replace(eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> Any:
        _check_str_method(str(s), "replace", (str(old), str(new)), {})
        return replace(eval_ctx, s, old, new, count)

    def bounded_batch(value: Any, linecount: int, fill_with: Any = None) -> Any:
        _check_width(linecount, "batch size")
        return batch(value, linecount, fill_with)

    def bounded_slice(value: Any, slices: int, fill_with: Any = None) -> Any:
        _check_width(slices, "slice count")
        return slice_(value, slices, fill_with)

    wrappers: tuple[tuple[str, Any, Any], ...] = (("join", bounded_join, join),
                                                  ("replace", bounded_replace, replace))
    for name, wrapper, original in wrappers:
        wrapper.jinja_pass_arg = original.jinja_pass_arg  # both take the evaluation context first
        filters[name] = wrapper
    filters.update(center=bounded_center, format=bounded_format, indent=bounded_indent, batch=bounded_batch,
                   slice=bounded_slice)


class _NamedUndefinedError(UndefinedError):
    """An undefined name (`attribute` False) or attribute/key (True), carrying the name it looked up."""

    def __init__(self, name: Any, attribute: bool) -> None:
        super().__init__("undefined")
        self.name, self.attribute = name, attribute


class _NamedUndefined(StrictUndefined):
    """StrictUndefined whose error carries the name it looked up (messages are built from the source)."""

    __slots__ = ()

    def __init__(self, hint: str | None = None, obj: Any = missing, name: str | None = None,
                 exc: Any = UndefinedError) -> None:
        # every StrictUndefined dunder raises `self._undefined_exception(message)`: make that ours
        def named(_message: str) -> UndefinedError:
            return _NamedUndefinedError(name, obj is not missing)

        super().__init__(hint, obj, name, named)  # type: ignore[arg-type]


def _source_names(env: ReportSandbox, source: str) -> set[str]:
    """Every name, attribute and constant key the template source itself spells: the only names an
    error message may quote (a key computed from data could be a data value)."""
    try:
        tree = env.parse(source)
    except TemplateSyntaxError:
        return set()
    names = {n.name for n in tree.find_all(nodes.Name)} | {n.attr for n in tree.find_all(nodes.Getattr)}
    names |= {n.arg.value for n in tree.find_all(nodes.Getitem)
              if isinstance(n.arg, nodes.Const) and isinstance(n.arg.value, str)}
    return names


def _template_line(exc: BaseException) -> int | None:
    """The template line the error was raised at (Jinja rewrites the traceback to template lines)."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def undefined_message(exc: UndefinedError, source_names: set[str]) -> str:
    """"template used an undefined name 'patient_nme' (line 12)": the name only when the template's
    source spells it (so never a data value), the line when the traceback has one."""
    line = _template_line(exc)
    where = f" (line {line})" if line is not None else ""
    if isinstance(exc, _NamedUndefinedError) and isinstance(exc.name, str) and exc.name in source_names:
        what = "attribute or key" if exc.attribute else "name"
        return f"template used an undefined {what} {exc.name!r}{where}"
    return f"template used an undefined name or attribute{where}"


def _environment() -> ReportSandbox:
    env = ReportSandbox(
        autoescape=True,
        undefined=_NamedUndefined,
        loader=DictLoader({}),  # templates come from the bundle only; include/import find nothing
        auto_reload=False,
        cache_size=0,
    )
    # Keep only harmless helpers in the global namespace.
    for name in ("lipsum", "cycler", "joiner", "namespace", "dict"):
        env.globals.pop(name, None)
    _bounded_filters(env)
    return env


def render_html(source: str, data: Mapping[str, Any], *, max_chars: int = MAX_HTML_CHARS) -> str:
    """Render `source` with `data` as its context.

    Raises TemplateError (syntax, undefined name, sandbox violation, missing include) with a message that
    names the problem class and line but no data value (an undefined name is quoted only when the
    template source spells it); RenderResourceExceeded as soon as the HTML
    produced so far is over `max_chars` (counted while rendering, not after)."""
    env = _environment()
    try:
        template = env.from_string(source)
        parts, total = [], 0
        for part in template.generate(dict(data)):
            total += len(part)
            if total > max_chars:
                raise RenderResourceExceeded(f"rendered HTML exceeds {max_chars} characters")
            parts.append(part)
        html = "".join(parts)
    except SecurityError as exc:
        raise TemplateError("template broke the sandbox rules (unsafe attribute, operation or size)") from exc
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error at line {exc.lineno}") from exc
    except UndefinedError as exc:
        raise TemplateError(undefined_message(exc, _source_names(env, source))) from exc
    except JinjaTemplateError as exc:
        raise TemplateError(f"template error: {type(exc).__name__}") from None  # may quote an include name
    except (TypeError, ValueError, ArithmeticError, LookupError, RecursionError) as exc:
        # `from None`: Python's own message may quote a data value (int('...') and the like).
        raise TemplateError(f"template evaluation failed: {type(exc).__name__}") from None
    return html

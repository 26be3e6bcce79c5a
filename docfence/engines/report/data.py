"""Validates report data against the template's JSON Schema (Draft 2020-12). Messages name the JSON path
and the broken rule, never a data value; object keys that the schema does not declare are masked as "*".

Schemas resolve references only inside themselves: every validator is built here, over an empty
`referencing` registry (nothing is ever fetched or read from disk), and `check_schema` refuses any
`$ref`/`$dynamicRef` that is not a fragment of the schema itself ("#..."). jsonschema's deprecated
RefResolver, which fetched http(s) and file URLs, is never used. `check_schema` also proves every local
reference resolves and none is part of a cycle, and bounds what a check can cost (`check_cost`).
`template_values` is what a template sees: the data, with the request's period as `period`."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from docfence.core.errors import TemplateDataInvalid, TemplateError

if TYPE_CHECKING:
    from referencing._core import Resolver  # the type of Registry.resolver_with_root's answer

MAX_REPORTED = 5
_REF_KEYWORDS = ("$ref", "$dynamicRef")
MAX_SCHEMA_DEPTH = 200
#: The most schema nodes a check may visit per data node: every `$ref` counts as the size of its target.
MAX_EXPANDED_SCHEMA_NODES = 20_000
#: The largest report data (canonical JSON, UTF-8) a request may carry.
MAX_DATA_BYTES = 2 * 1024 * 1024
MAX_PATTERN_CHARS = 1_000
# Keywords whose value is data, not a schema: a "$ref" or "pattern" inside them is just a value.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose value is a small schema-owned scalar, safe and useful to quote in a message.
_QUOTABLE = frozenset(
    [
        "type",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "const",
        "enum",
    ]
)
# Schema keywords after which the next instance step is an object key the schema does not name.
_UNNAMED_KEY = frozenset({"additionalProperties", "unevaluatedProperties", "propertyNames"})
_ITEM_STEP = frozenset({"items", "unevaluatedItems", "contains"})
_SKIP_ONE = frozenset({"allOf", "anyOf", "oneOf", "$defs", "definitions", "dependentSchemas"})


def _safe_path(error: ValidationError) -> str:
    """Rebuild the instance path from the schema path: keys reached through `properties` are
    schema-declared names; keys reached any other way come from the data and are masked."""
    instance = list(error.absolute_path)
    schema_path = list(error.absolute_schema_path)
    parts: list[str] = []
    i = 0
    for step in _instance_steps(schema_path):
        if i >= len(instance):
            break
        key = instance[i]
        parts.append(f"[{key}]" if isinstance(key, int) else (f".{key}" if step == "named" else ".*"))
        i += 1
    for key in instance[i:]:  # the walk lost track: mask whatever is left
        parts.append(f"[{key}]" if isinstance(key, int) else ".*")
    return "$" + "".join(parts)


def _instance_steps(schema_path: Sequence[Any]) -> Iterator[str]:
    """Yield "named", "unnamed" or "index" for each schema step that descends into the instance."""
    j = 0
    while j < len(schema_path):
        token = schema_path[j]
        if token == "properties":
            yield "named"
            j += 2
        elif token == "patternProperties":
            yield "unnamed"
            j += 2
        elif token == "prefixItems":
            yield "index"
            j += 2
        elif token in _UNNAMED_KEY:
            yield "unnamed"
            j += 1
        elif token in _ITEM_STEP:
            yield "index"
            j += 1
        else:
            j += 2 if token in _SKIP_ONE else 1


def _describe(error: ValidationError) -> str:
    rule = str(error.validator)
    detail = ""
    if rule in _QUOTABLE and isinstance(error.validator_value, str | int | float | bool | list):
        detail = f" {error.validator_value!r}"[:80]
    elif rule == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        detail = f" {missing!r}"[:80]
    return f"{_safe_path(error)}: violates {rule!r}{detail}"


def non_local_refs(schema: Any) -> list[str]:
    """Every `$ref`/`$dynamicRef` value of `schema` that is not a fragment of the schema itself."""
    found: list[str] = []
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise TemplateError(f"the template's schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _REF_KEYWORDS and not (isinstance(value, str) and value.startswith("#")):
                    found.append(str(value))
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
    return found


def _subschemas(node: Any) -> Iterator[Any]:
    """The dicts and lists directly inside `node`, data-valued keywords (`const`, `enum`...) left out."""
    items = ((v for k, v in node.items() if k not in _DATA_KEYWORDS) if isinstance(node, dict)
             else iter(node) if isinstance(node, list) else iter(()))
    return (v for v in items if isinstance(v, dict | list))


_Edge = tuple[Any, "Resolver[Any]", str | None]  # (subschema or reference target, its resolver, the $ref)


def _edges(node: Any, resolver: Resolver[Any]) -> list[_Edge]:
    """What a check of `node` may go on to: its subschemas and the targets of its references.
    Raises TemplateError naming a reference that does not resolve inside the schema."""
    if isinstance(node, dict) and "$id" in node:
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
    edges: list[_Edge] = [(child, resolver, None) for child in _subschemas(node)]
    for keyword in _REF_KEYWORDS if isinstance(node, dict) else ():
        ref = node.get(keyword)
        if isinstance(ref, str):
            try:
                target = resolver.lookup(ref)
            except Unresolvable:
                raise TemplateError(f"the template's schema has a reference that does not resolve "
                                    f"inside it: {ref[:200]!r}") from None
            edges.append((target.contents, target.resolver, ref))
    return edges


def expanded_size(schema: Any) -> int:
    """How many schema nodes one data node may meet, each reference counted as its target's size.
    Raises TemplateError naming a reference that does not resolve or that leads back into itself (a
    cycle: a check could recurse without end), or when the size exceeds MAX_EXPANDED_SCHEMA_NODES."""
    root = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    size: dict[int, int] = {}
    on_path: set[int] = {id(schema)}
    first = _edges(schema, root)
    stack: list[tuple[Any, list[_Edge], list[int]]] = [(schema, list(first), [id(e[0]) for e in first])]
    while stack:  # iterative depth-first: a long chain of references cannot overflow the Python stack
        node, pending, reached = stack[-1]
        if pending:
            child, resolver, ref = pending.pop()
            if id(child) in on_path:
                raise TemplateError(f"the template's schema has a cyclic reference: {str(ref)[:200]!r} "
                                    "leads back into a schema that contains it")
            if id(child) not in size:
                on_path.add(id(child))
                edges = _edges(child, resolver)
                stack.append((child, edges, [id(e[0]) for e in edges]))
            continue
        stack.pop()
        on_path.discard(id(node))
        size[id(node)] = 1 + sum(size[i] for i in reached)
        if size[id(node)] > MAX_EXPANDED_SCHEMA_NODES:
            raise TemplateError(f"the template's schema expands to more than {MAX_EXPANDED_SCHEMA_NODES} "
                                "nodes once its references are followed")
    return size[id(schema)]


def _patterns(schema: Any) -> Iterator[str]:
    """Every regular expression of `schema`: `pattern` values and `patternProperties` keys."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            if isinstance(node.get("patternProperties"), dict):
                yield from node["patternProperties"]
        stack.extend(_subschemas(node))


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is the template author's error, not a log line


def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2, whose matching is linear in the text (no backtracking); raises
    TemplateError for what RE2 refuses (back-references, look-arounds) or an oversized pattern."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise TemplateError(f"the template's schema has a pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        return _compiled(pattern)
    except re2.error:
        raise TemplateError("the template's schema has a pattern a linear-time regex engine cannot run "
                            f"(no back-references or look-arounds): {pattern[:200]!r}") from None


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def check_cost(schema: Any) -> None:
    """Raise TemplateError unless checking data against `schema` costs a bounded amount: references
    resolve without a cycle and expand to a bounded size, and every pattern runs in RE2.
    `unevaluatedProperties` next to `patternProperties` is refused: jsonschema matches those with
    Python's backtracking `re`."""
    expanded_size(schema)
    for pattern in _patterns(schema):
        compile_pattern(pattern)
    if _has_keyword(schema, "patternProperties") and _has_keyword(schema, "unevaluatedProperties"):
        raise TemplateError("the template's schema may not combine 'unevaluatedProperties' with "
                            "'patternProperties'")


def _has_keyword(schema: Any, keyword: str) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and keyword in node:
            return True
        stack.extend(_subschemas(node))
    return False


def check_schema(schema: Any) -> None:
    """Raise TemplateError unless `schema` is a valid Draft 2020-12 schema whose references all stay
    inside it (the message names the first reference that does not), resolve, form no cycle, and
    whose check costs a bounded amount (`check_cost`)."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise TemplateError("the template's schema is not a valid JSON Schema (Draft 2020-12)") from exc
    refs = non_local_refs(schema)
    if refs:
        raise TemplateError(f"the template's schema may only use local references (\"#/...\"); "
                            f"it refers to {refs[0][:200]!r}")
    check_cost(schema)


# -- the keywords jsonschema implements with Python's backtracking `re` or in quadratic time ---------------
def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compile_pattern(pattern).search(instance):
        yield ValidationError("does not match the pattern")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = compile_pattern(pattern)
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in named and not any(p.search(k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError("additional properties are not allowed")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """O(n) expected over canonical JSON (jsonschema compares every pair: 22 s at 3,000 items)."""
    if unique and validator.is_type(instance, "array"):
        seen = {canonical_json(item) for item in instance}
        if len(seen) != len(instance):
            yield ValidationError("has non-unique elements")


def _normal(value: Any) -> Any:
    """JSON Schema equality as plain JSON: 1 and 1.0 are equal, true and 1 are not (json writes those
    apart), object keys sorted by json.dumps."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(_normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_BoundedValidator = validators.extend(Draft202012Validator, {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties, "uniqueItems": _unique_items,
})


def schema_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The one way docfence builds a validator: an empty registry, so no reference is ever retrieved,
    and the bounded keywords above in place of jsonschema's own."""
    validator: Draft202012Validator = _BoundedValidator(schema, registry=Registry())
    return validator


def validate_data(schema: dict[str, Any], data: Any) -> None:
    """Raise TemplateDataInvalid listing up to MAX_REPORTED violations (paths and rules, no values), or
    when the data exceeds MAX_DATA_BYTES or nests deeper than a check can follow; TemplateError if the
    schema itself is broken, refers outside itself or costs an unbounded amount (`check_schema`)."""
    check_schema(schema)
    try:
        if len(canonical_json(data).encode("utf-8")) > MAX_DATA_BYTES:
            raise TemplateDataInvalid(f"report data may hold at most {MAX_DATA_BYTES} bytes of JSON")
        errors = sorted(
            schema_validator(schema).iter_errors(data),
            key=lambda e: (list(map(str, e.absolute_path)), str(e.validator)),
        )
    except Unresolvable:
        # `from None`: never chain a resolver error; the schema is the template author's, not ours.
        raise TemplateError("the template's schema has a reference that does not resolve inside it") \
            from None
    except RecursionError:
        raise TemplateDataInvalid("the report data nests deeper than its check can follow") from None
    if not errors:
        return
    lines = [_describe(error) for error in errors[:MAX_REPORTED]]
    more = f" (+{len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
    # `from None`: the jsonschema error's own message quotes the offending value.
    raise TemplateDataInvalid(
        "report data does not match the template schema: " + "; ".join(lines) + more
    ) from None


def template_values(data: dict[str, Any], period: str | None) -> dict[str, Any]:
    """What the template sees: the data, with `period` set to the request's period when the report was
    requested for one (the request's period is authoritative; a `period` in the data is shadowed)."""
    return data if period is None else {**data, "period": period}

"""Validates report data against the template's JSON Schema (Draft 2020-12). Messages name the JSON path
and the broken rule, never a data value; object keys that the schema does not declare are masked as "*".

Schemas resolve references only inside themselves: every validator is built here, over an empty
`referencing` registry (nothing is ever fetched or read from disk), and `check_schema` refuses any
`$ref`/`$dynamicRef` that is not a fragment of the schema itself ("#..."). jsonschema's deprecated
RefResolver, which fetched http(s) and file URLs, is never used. `template_values` is what a template
sees: the data, with the request's period as `period`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable

from docfence.core.errors import TemplateDataInvalid, TemplateError

MAX_REPORTED = 5
_REF_KEYWORDS = ("$ref", "$dynamicRef")
MAX_SCHEMA_DEPTH = 200
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


def check_schema(schema: Any) -> None:
    """Raise TemplateError unless `schema` is a valid Draft 2020-12 schema whose references all stay
    inside it (the message names the first reference that does not)."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise TemplateError("the template's schema is not a valid JSON Schema (Draft 2020-12)") from exc
    refs = non_local_refs(schema)
    if refs:
        raise TemplateError(f"the template's schema may only use local references (\"#/...\"); "
                            f"it refers to {refs[0][:200]!r}")


def schema_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The one way docfence builds a validator: an empty registry, so no reference is ever retrieved."""
    return Draft202012Validator(schema, registry=Registry())


def validate_data(schema: dict[str, Any], data: Any) -> None:
    """Raise TemplateDataInvalid listing up to MAX_REPORTED violations (paths and rules, no values);
    TemplateError if the schema itself is broken or refers outside itself."""
    check_schema(schema)
    try:
        errors = sorted(
            schema_validator(schema).iter_errors(data),
            key=lambda e: (list(map(str, e.absolute_path)), str(e.validator)),
        )
    except Unresolvable:
        # `from None`: never chain a resolver error; the schema is the template author's, not ours.
        raise TemplateError("the template's schema has a reference that does not resolve inside it") \
            from None
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

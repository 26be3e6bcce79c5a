"""Checking report data against a template's schema costs a bounded amount: `uniqueItems` over canonical
JSON in linear time, `pattern` in RE2 (no backtracking), patterns RE2 cannot run refused when the
template is created, data over MAX_DATA_BYTES refused, and every request's check runs in a forked child
under a CPU budget, answering 422 render_resource_exceeded when it runs out, with nothing stored.

Costs are asserted as CPU budgets (RLIMIT_CPU in a forked child), never as wall time: jsonschema's own
`uniqueItems` took 22 s of CPU at 3,000 items and `^(a|a)*$` doubles its work with every character."""

from __future__ import annotations

import functools
import resource
from collections.abc import Callable
from typing import Any

import pytest

from docfence.core.errors import InvalidReportData, RenderResourceExceeded, TemplateDataInvalid, TemplateError
from docfence.engines.parallel import Forked
from docfence.engines.report.bundle import TemplateBundle
from docfence.engines.report.data import MAX_DATA_BYTES, canonical_json, validate_data
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.store.sqlstore import SqlStore

TEST_CPU_S = 5  # far above what the bounded checks need (milliseconds), far below the unbounded ones


def _within_cpu(fn: Callable[[], str]) -> str | None:
    """fn()'s answer from a forked child limited to TEST_CPU_S of CPU; None when it ran out."""
    def limited() -> str:
        resource.setrlimit(resource.RLIMIT_CPU, (TEST_CPU_S, TEST_CPU_S + 1))
        return fn()
    return Forked(limited).result()


def _outcome(schema: dict[str, Any], data: Any) -> str:
    try:
        validate_data(schema, data)
    except TemplateDataInvalid as exc:
        return exc.message
    return "ok"


UNIQUE = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}


def test_unique_items_of_3000_objects_within_budget() -> None:
    items = [{"id": i, "tags": [i, "x"]} for i in range(3000)]
    assert _within_cpu(functools.partial(_outcome, UNIQUE, {"xs": items})) == "ok"
    answer = _within_cpu(functools.partial(_outcome, UNIQUE, {"xs": [*items, {"tags": [0, "x"], "id": 0.0}]}))
    assert answer is not None and "$.xs: violates 'uniqueItems'" in answer


def test_unique_items_keeps_json_schema_equality() -> None:
    assert canonical_json({"b": [1.0], "a": True}) == canonical_json({"a": True, "b": [1]})
    assert canonical_json([True]) != canonical_json([1])
    with pytest.raises(TemplateDataInvalid):
        validate_data(UNIQUE, {"xs": [1, 1.0]})
    validate_data(UNIQUE, {"xs": [1, True, "1", [1], {"1": 1}]})


def test_exponential_pattern_runs_in_linear_time() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a|a)*$"}},
              "patternProperties": {"^(b|b)*$": {"type": "integer"}}, "additionalProperties": False}
    data = {"a": "a" * 60 + "!", "b" * 60 + "!": 1}
    answer = _within_cpu(functools.partial(_outcome, schema, data))
    assert answer is not None and "$.a: violates 'pattern'" in answer
    assert "violates 'additionalProperties'" in answer
    assert _within_cpu(functools.partial(_outcome, schema, {"a": "a" * 10_000, "b" * 100: 1})) == "ok"


def _bundle(schema: dict[str, Any]) -> TemplateBundle:
    return TemplateBundle(name="costly", html="<p>{{ a }}</p>", css="", assets={}, schema=schema)


@pytest.mark.parametrize("pattern", [r"^(a+)\1$", r"^(?=a)a$", r"^(?<!b)a$"])
def test_patterns_a_linear_engine_cannot_run_are_refused_at_creation(rstore: SqlStore, pattern: str) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    with pytest.raises(TemplateError) as refused:
        Templates(rstore).create_version("costly", _bundle(schema), actor="test")
    assert repr(pattern) in refused.value.message and "linear-time" in refused.value.message
    assert rstore.list_templates("costly") == []


def test_unevaluated_properties_with_pattern_properties_refused(rstore: SqlStore) -> None:
    schema = {"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False}
    with pytest.raises(TemplateError, match="unevaluatedProperties"):
        Templates(rstore).create_version("costly", _bundle(schema), actor="test")


def test_exponential_reference_expansion_refused(rstore: SqlStore) -> None:
    defs: dict[str, Any] = {"a0": {"type": "string"}}
    for i in range(1, 30):
        defs[f"a{i}"] = {"allOf": [{"$ref": f"#/$defs/a{i - 1}"}, {"$ref": f"#/$defs/a{i - 1}"}]}
    with pytest.raises(TemplateError, match="expands to more than"):
        Templates(rstore).create_version("costly", _bundle({"$defs": defs, "$ref": "#/$defs/a29"}),
                                         actor="test")


def _costly_template(rstore: SqlStore) -> str:
    """Within every static bound, yet far over the CPU budget for a big array: 4,000 checks an item."""
    checks = [{"type": "integer", "minimum": i % 7} for i in range(2000)]
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"allOf": checks}}}}
    info, _ = Templates(rstore).create_version("costly", _bundle(schema), actor="test")
    return info.ref


def test_a_check_over_its_cpu_budget_answers_a_coded_error(
    rstore: SqlStore, requests_uc: ReportRequests, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("docfence.reports.requests.DATA_CHECK_CPU_S", 1)
    ref = _costly_template(rstore)
    spec = RequestSpec(tenant="acme", subject="s1", period="2026-01", template=ref,
                       data={"xs": [7] * 150_000})
    with pytest.raises(RenderResourceExceeded) as exceeded:
        requests_uc.create(spec, actor="test")
    assert exceeded.value.code == "render_resource_exceeded" and "budget" in exceeded.value.message
    assert rstore.list_report_requests("acme") == []
    small = RequestSpec(tenant="acme", subject="s1", period="2026-01", template=ref, data={"xs": [7, 8]})
    detail, created = requests_uc.create(small, actor="test")  # the same template, affordable data
    assert created and len(detail.jobs) == 1


def test_data_over_the_size_cap_is_refused(rstore: SqlStore, requests_uc: ReportRequests) -> None:
    info, _ = Templates(rstore).create_version("plain", _bundle({"type": "object"}), actor="test")
    spec = RequestSpec(tenant="acme", subject="s1", period="2026-01", template=info.ref,
                       data={"blob": "x" * MAX_DATA_BYTES})
    with pytest.raises(InvalidReportData, match=f"at most {MAX_DATA_BYTES} bytes"):
        requests_uc.create(spec, actor="test")
    assert rstore.list_report_requests("acme") == []

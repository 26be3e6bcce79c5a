"""A template's schema has resolvable, acyclic local references: a cyclic or dangling `$ref` is refused
when the version is created (422 template_error naming the reference), and a schema stored before that
check (straight into the store) answers a coded 422 for every report request, never a 500
(RecursionError). Use cases on both dialects; the HTTP answers over a real loopback server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from docfence.core.errors import TemplateError
from docfence.engines.report.bundle import TemplateBundle, template_hash
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.service import Service
from docfence.store.sqlstore import SqlStore

CYCLES: dict[str, tuple[dict[str, Any], str]] = {  # name -> (schema, the reference the error names)
    "two_defs": ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                  "properties": {"x": {"$ref": "#/$defs/a"}}}, "#/$defs/"),
    "self": ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
             "#/$defs/a"),
    "root": ({"type": "object", "properties": {"child": {"$ref": "#"}}}, "'#'"),
    "through_anyof": ({"$defs": {"a": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/a"}]}},
                       "properties": {"x": {"$ref": "#/$defs/a"}}}, "#/$defs/a"),
}
DANGLING = {"properties": {"x": {"$ref": "#/$defs/missing"}}}


def _bundle(schema: dict[str, Any]) -> TemplateBundle:
    return TemplateBundle(name="cyc", html="<p>{{ x }}</p>", css="", assets={}, schema=schema)


def _store_unchecked(store: SqlStore, schema: dict[str, Any]) -> str:
    """A version written as an older docfence would have stored it, without today's checks."""
    bundle = _bundle(schema)
    version = store.insert_template_version("cyc", name="cyc", sha256=template_hash(bundle), html=bundle.html,
                                            css="", assets={}, schema=schema, actor="test", owner=None)
    return version.info.ref


@pytest.mark.parametrize("case", sorted(CYCLES))
def test_cyclic_refs_are_refused_at_creation_naming_the_ref(rstore: SqlStore, case: str) -> None:
    schema, named = CYCLES[case]
    with pytest.raises(TemplateError) as refused:
        Templates(rstore).create_version("cyc", _bundle(schema), actor="test")
    assert "cyclic reference" in refused.value.message and named in refused.value.message
    assert rstore.list_templates("cyc") == []


def test_dangling_ref_is_refused_at_creation_naming_it(rstore: SqlStore) -> None:
    with pytest.raises(TemplateError) as refused:
        Templates(rstore).create_version("cyc", _bundle(DANGLING), actor="test")
    assert "'#/$defs/missing'" in refused.value.message and "does not resolve" in refused.value.message


def test_shared_acyclic_refs_still_work(rstore: SqlStore, requests_uc: ReportRequests) -> None:
    schema = {"$defs": {"n": {"type": "integer"}, "pair": {"items": {"$ref": "#/$defs/n"}}},
              "type": "object", "properties": {"a": {"$ref": "#/$defs/pair"}, "b": {"$ref": "#/$defs/pair"}}}
    info, created = Templates(rstore).create_version("cyc", _bundle(schema), actor="test")
    assert created
    detail, _ = requests_uc.create(RequestSpec(tenant="acme", subject="s", period="2026-01",
                                               template=info.ref, data={"a": [1], "b": [2]}), actor="t")
    assert len(detail.jobs) == 1


@pytest.mark.parametrize("case", sorted(CYCLES))
def test_a_stored_cyclic_schema_answers_template_error(
    rstore: SqlStore, requests_uc: ReportRequests, case: str
) -> None:
    ref = _store_unchecked(rstore, CYCLES[case][0])
    data: dict[str, Any] = {"x": {"child": {}}, "child": {"child": {}}}
    with pytest.raises(TemplateError, match="cyclic reference"):
        requests_uc.create(RequestSpec(tenant="acme", subject="s", period="2026-01", template=ref, data=data),
                           actor="test")
    assert rstore.list_report_requests("acme") == []




def test_http_answers_are_coded_422(api: tuple[httpx.Client, Service]) -> None:
    client, service = api
    admin = {"Authorization": f"Bearer {service.create_api_key('acme', ('admin',))[1]}"}
    user = {"Authorization": f"Bearer {service.create_api_key('acme', ('submit', 'read'))[1]}"}
    schema = CYCLES["two_defs"][0]
    created = client.post("/v1/templates", json={"id": "cyc", "html": "<p/>", "schema": schema},
                          headers=admin)
    assert created.status_code == 422 and created.json()["error"]["code"] == "template_error"
    assert "#/$defs/" in created.json()["error"]["message"]
    ref = _store_unchecked(service.store, schema)
    body = {"subject": "s", "period": "2026-01", "template": ref, "data": {"x": {}}}
    answered = client.post("/v1/report-requests", json=body, headers=user)
    assert answered.status_code == 422, answered.text
    assert answered.json()["error"]["code"] == "template_error"

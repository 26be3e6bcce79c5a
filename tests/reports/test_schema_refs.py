"""Template JSON Schemas never make docfence fetch a URL or read a file: a non-local `$ref` is refused when
the version is created (the error names it), a schema stored before that check resolves nothing when a
job validates against it, and no error ever shows what such a reference points at.

A real loopback HTTP server records every request (it must receive none) and a real secret file holds
content that must never appear."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import docfence
from docfence.blobs.kek.jobs import RowKey, read_object
from docfence.core.errors import TemplateError
from docfence.engines.report.bundle import TemplateBundle
from docfence.engines.report.data import validate_data
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.reports.templates import encode_assets
from docfence.samples.monthly_report import load_monthly_bundle
from docfence.sandbox.report_job import render_report_job
from docfence.store.sqlstore import SqlStore
from docfence.testing.servers import recording_http_server

SECRET = "TOPSECRET-api-token-8812"


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """A loopback server that answers any GET with a schema naming the secret, and records it."""
    with recording_http_server(json.dumps({"enum": [SECRET]}).encode()) as served:
        yield served


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"api": {"enum": [SECRET]}}))
    return path


def _schemas(base: str, secret: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (schema, the reference the error must name)."""
    http_ref, file_ref = f"{base}/s.json", f"{secret.as_uri()}#/api"
    return {
        "http": ({"type": "object", "properties": {"a": {"$ref": http_ref}}}, http_ref),
        "file": ({"type": "object", "properties": {"a": {"$ref": file_ref}}}, file_ref),
        "relative_to_id": ({"$id": f"{base}/root.json", "properties": {"a": {"$ref": "s.json"}}}, "s.json"),
        "dynamic": ({"properties": {"a": {"$dynamicRef": http_ref}}}, http_ref),
        "nested": ({"$defs": {"x": {"anyOf": [{"$ref": file_ref}]}},
                    "properties": {"a": {"$ref": "#/$defs/x"}}}, file_ref),
    }


def _bundle(schema: dict[str, Any]) -> TemplateBundle:
    return TemplateBundle(name="evil", html="<p>{{ a }}</p>", css="", assets={}, schema=schema)


@pytest.mark.parametrize("case", ["http", "file", "relative_to_id", "dynamic", "nested"])
def test_non_local_refs_are_refused_at_creation_naming_the_ref(
    rstore: SqlStore, recorder: tuple[str, list[str]], secret_file: Path, case: str
) -> None:
    base, seen = recorder
    schema, ref = _schemas(base, secret_file)[case]
    with pytest.raises(TemplateError) as refused:
        Templates(rstore).create_version("evil", _bundle(schema), actor="test")
    assert ref in refused.value.message and "local references" in refused.value.message
    assert SECRET not in refused.value.message
    assert rstore.list_templates("evil") == []
    assert seen == []


def test_local_refs_still_work(rstore: SqlStore) -> None:
    schema = {"type": "object", "$defs": {"name": {"type": "string", "maxLength": 3}},
              "properties": {"a": {"$ref": "#/$defs/name"}}, "required": ["a"]}
    info, created = Templates(rstore).create_version("local", _bundle(schema), actor="test")
    assert created and info.ref == "local@1"
    validate_data(schema, {"a": "abc"})
    with pytest.raises(Exception, match=r"\$\.a: violates 'maxLength' 3"):
        validate_data(schema, {"a": "abcd"})


@pytest.mark.parametrize("case", ["http", "file", "relative_to_id"])
def test_a_stored_schema_with_remote_refs_resolves_nothing_when_a_job_runs(
    rstore: SqlStore, requests_uc: ReportRequests, recorder: tuple[str, list[str]], secret_file: Path,
    case: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A version stored before creation refused such refs: a request is refused, and a job queued before
    requests were checked fails closed; nothing is fetched either way."""
    base, seen = recorder
    schema, _ = _schemas(base, secret_file)[case]
    bundle = load_monthly_bundle()
    bundle = TemplateBundle(name="old", html="<p>{{ a }}</p>", css="", assets=bundle.assets, schema=schema)
    from docfence.engines.report.bundle import template_hash

    rstore.insert_template_version("old", name="old", sha256=template_hash(bundle), html=bundle.html,
                                   css=bundle.css, assets=encode_assets(bundle), schema=schema, actor="test")
    spec = RequestSpec(tenant="acme", subject="s1", period="2026-01", template="old@1", data={"a": 1})
    with pytest.raises(TemplateError, match="only use local references"):
        requests_uc.create(spec, actor="test")
    monkeypatch.setattr("docfence.reports.requests._check_data", lambda template, data: None)
    detail, _ = requests_uc.create(RequestSpec(tenant="acme", subject="s1", period="2026-01",
                                               template="old@1", data={"a": 1}), actor="test")
    job = detail.jobs[0]
    assert job.input_key is not None
    snapshot = read_object(requests_uc.router.for_region(job.region), job.input_key,
                           requests_uc.keys.key_for(RowKey.of(job)))
    for attempt in range(2):  # "once per attempt" used to mean one fetch per attempt
        with pytest.raises(TemplateError) as failed:
            render_report_job(snapshot, job.policy)
        assert SECRET not in failed.value.message and SECRET not in repr(failed.value.__cause__), attempt
    assert seen == []


def test_validators_are_built_only_over_the_empty_registry() -> None:
    """jsonschema's deprecated RefResolver (remote and file retrieval) is unreachable from docfence:
    no module names it, calls jsonschema.validate, or builds a validator outside schema_validator."""
    root = Path(docfence.__file__).parent
    builders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            named = getattr(node, "id", None) or getattr(node, "attr", None)
            if isinstance(node, ast.alias):
                named = node.name
            assert named != "RefResolver", path
            if isinstance(node, ast.ImportFrom) and node.module == "jsonschema":
                assert all(a.name != "validate" for a in node.names), path
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("Draft202012Validator", "_BoundedValidator", "validator_for") or (
                        name == "validate" and getattr(node.func, "value", None) is not None
                        and getattr(node.func.value, "id", "") == "jsonschema"):  # type: ignore[attr-defined]
                    builders.append((path.relative_to(root).as_posix(), name))
    assert builders == [("engines/report/data.py", "_BoundedValidator")]

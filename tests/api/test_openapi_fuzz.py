"""Schemathesis against the served OpenAPI document: no 5xx, and every answer conforms to the document."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.openapi import from_url

from .conftest import PDF, ApiEnv

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
EXAMPLES_PER_OPERATION = int(os.environ.get("DOCFENCE_FUZZ_EXAMPLES", "25"))  # bounded by default
# Headers that frame the HTTP message itself. A generated value for one of them ("content-length: H") makes
# the request malformed HTTP, which the HTTP server (uvicorn) answers with a bare 400 before the API sees
# it: that is the server's protocol layer, which the OpenAPI document does not and should not describe.
# They are dropped from a generated case; the rest of the case (its path, query and body) is still sent.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection", "expect", "te",
                             "trailer", "upgrade"})


def without_framing_headers(case: Case) -> None:
    if case.headers:
        case.headers = {k: v for k, v in case.headers.items() if k.lower() not in FRAMING_HEADERS}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_conforms_to_its_openapi_document(env: ApiEnv, mode: GenerationMode) -> None:
    key = env.key(scopes=("admin",))
    with env.client(key) as client:  # a real job, so some generated ids may also hit existing data
        env.finish(client.submit(PDF).id)
    schema = from_url(f"{env.base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case: Case) -> None:
            without_framing_headers(case)
            case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=CHECKS, timeout=30)

        try:
            check()
        except Unsatisfiable:
            # Operations without parameters or bodies have no invalid input to generate.
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert len(env.seen) > 5 * len(operations)

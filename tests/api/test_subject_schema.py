"""The API's subject field (its JSON Schema pattern) and the report use cases' check are one rule."""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from docfence.api.reports_routes import Subject
from docfence.core.errors import InvalidRequest
from docfence.reports.requests import SUBJECT_PATTERN, check_subject

ESCAPES = ["../acme/patient-7", "..", ".", "a/b", "/etc", "a\\b", "", "-x", "a" * 129, "x\n", "é"]
GOOD = ["patient-7", "clinic.1", "a:b", "A" * 128, "a..b"]


def test_one_rule_for_api_and_use_cases() -> None:
    """The API's subject field (its JSON Schema pattern) and the use cases' check say the same."""
    api = TypeAdapter(Subject)
    for subject in ESCAPES + GOOD:
        accepted = by_api = True
        try:
            check_subject(subject)
        except InvalidRequest:
            accepted = False
        try:
            api.validate_python(subject)
        except ValidationError:
            by_api = False
        assert accepted == by_api == (subject in GOOD), subject
    assert SUBJECT_PATTERN in api.json_schema()["pattern"]

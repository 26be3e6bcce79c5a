"""The OpenAPI document says what the server does: schemathesis with every check against a served API
(bounded), and each published pattern proved against the service check that enforces the same rule.

The full run (30 examples per operation, against `docfence serve` and a worker) and what the document
cannot state are in docs/api.md; both runs read tests/api/schemathesis.toml and its hooks."""

from __future__ import annotations

import base64
import binascii
import calendar
import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docfence.api.reports_routes import BASE64, PERIOD, TEMPLATE_REF
from docfence.api.webhooks_routes import URL_PATTERN
from docfence.api.wire import (
    LABEL_PATTERN,
    PAGES_PATTERN,
    PASSWORD_PATTERN,
    REASON_PATTERN,
    caller_value_pattern,
    ecma_compiled,
    mark_text_pattern,
)
from docfence.config import VerificationConfig, WebhooksConfig
from docfence.core.errors import DocfenceError
from docfence.core.fields import MAX_VALUE_CHARS, check_value, fill
from docfence.core.policy import WatermarkSpec
from docfence.intake import check_label, check_password
from docfence.maintenance.webhook_endpoints import check_endpoint_url
from docfence.reports.requests import check_period, parse_template_ref
from docfence.reports.templates import check_template_id
from docfence.service import check_reason

from .conftest import PDF, api_env
from .openapi_inherent import MAX_WAIT_ENV

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "api" / "schemathesis.toml"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
#: Bounded for CI (under a minute on 2 cores); the recorded run in docs/api.md takes 30 examples.
EXAMPLES = int(os.environ.get("DOCFENCE_CONFORMANCE_EXAMPLES", "5"))
SEED = os.environ.get("DOCFENCE_CONFORMANCE_SEED", "28")
#: The bound, over the shared settings: the two upload operations skip the coverage phase here. Their
#: caller-field patterns list every code point a mark can draw, and hypothesis enumerates such a class
#: each time it builds a strategy (a minute of the coverage phase); they are still fuzzed here, their
#: patterns are proved below, and the recorded run covers them.
BOUND = """
[[operations]]
include-name = ["POST /v1/jobs", "POST /v1/jobs/batch"]
phases.coverage.enabled = false
"""


def test_schemathesis_with_every_check_finds_nothing_the_document_does_not_say(tmp_path: Path) -> None:
    limits = VerificationConfig(requests_per_minute=100_000, burst=10_000)  # 429s would hide answers
    with api_env(tmp_path, verification=limits) as env:
        key = env.key(scopes=("submit", "read", "admin"))
        with env.client(key) as client:  # real jobs: the stateful phase finds their ids in GET /v1/jobs
            env.finish(client.submit(PDF).id)
            client.submit(PDF)
        report, config = tmp_path / "schemathesis.json", tmp_path / "schemathesis.toml"
        config.write_text(CONFIG.read_text() + BOUND)
        run = subprocess.run(
            [str(SCHEMATHESIS), "--config-file", str(config), "run", f"{env.base_url}/openapi.json",
             "--checks", "all", "--max-examples", str(EXAMPLES), "--seed", SEED, "--workers", "1",
             "--no-color", "--report", "json", "--report-json-path", str(report)],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "DOCFENCE_API_KEY": key, MAX_WAIT_ENV: "0"},  # no worker: no job ends
        )
    assert run.returncode == 0, run.stdout[-40000:] + run.stderr[-5000:]
    summary = json.loads(report.read_text())
    assert summary["failures"] == [] and summary["errors"] == []
    operations = summary["operations"]
    assert operations["tested"] == operations["selected"] == operations["total"] >= 26
    assert summary["test_cases"]["generated"] > 10 * operations["tested"]


# -- each published pattern is the service's own rule -------------------------------------------------
def _accepts(check: Callable[[str], Any]) -> Callable[[str], bool]:
    def accepts(value: str) -> bool:
        try:
            check(value)
        except DocfenceError:
            return False
        return True

    return accepts


def _text(pattern: str, alphabet: str = "") -> st.SearchStrategy[str]:
    """Values the pattern takes, arbitrary text, and text of the characters at the rule's edges."""
    edges = st.text(alphabet=alphabet + " \t\n\x0b\x1c\x1f\x7f\x85\xa0\u2028\u200bab{}", max_size=260)
    return st.from_regex(pattern, fullmatch=True) | st.text(max_size=260) | edges


def _agrees(pattern: str, accepts: Callable[[str], bool], value: str) -> None:
    assert bool(ecma_compiled(pattern).search(value)) is accepts(value), repr(value)


PROPERTY = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@PROPERTY
@given(st.data())
def test_reason_label_and_password_patterns_are_the_service_checks(data: st.DataObject) -> None:
    for pattern, check in ((REASON_PATTERN, check_reason), (LABEL_PATTERN, check_label),
                           (PASSWORD_PATTERN, check_password)):
        value = data.draw(_text(pattern, "\x00"))
        limit = {LABEL_PATTERN: 200, PASSWORD_PATTERN: 1024}.get(pattern)  # published as maxLength
        if limit is None or len(value) <= limit:
            _agrees(pattern, _accepts(check), value)


@PROPERTY
@given(st.sampled_from(sorted(MAX_VALUE_CHARS)), st.data())
def test_caller_field_patterns_are_check_value(name: str, data: st.DataObject) -> None:
    pattern = caller_value_pattern(name)
    value = data.draw(_text(pattern, "\u0378\ue000\U000e0001"))  # unassigned, private, format
    try:
        check_value(name, value)
        accepted = True
    except DocfenceError:
        accepted = False
    assert bool(ecma_compiled(pattern).search(value)) is accepted, repr(value)


def _calendar_exception(period: str) -> bool:
    """29 February of a common year, or week 53 of a 52-week year: what a pattern leaves to the calendar."""
    year = int(period[:4])
    if period[4:] == "-02-29":
        return not calendar.isleap(year)
    return period[4:] == "-W53" and dt.date(year, 12, 28).isocalendar()[1] == 52


@PROPERTY
@given(st.from_regex(PERIOD, fullmatch=True) | st.from_regex(r"[0-9]{4}(-.{1,6})?", fullmatch=True))
def test_the_period_pattern_is_check_period(value: str) -> None:
    published = bool(ecma_compiled(PERIOD).search(value))
    if value.startswith("0000"):  # the API refuses year 0 (the service's calendar has no year 0)
        assert not published
        return
    if published and _calendar_exception(value):
        assert not _accepts(check_period)(value)
        return
    _agrees(PERIOD, _accepts(check_period), value)


@PROPERTY
@given(_text(TEMPLATE_REF, "@0123456789"))
def test_the_template_reference_pattern_is_parse_template_ref(value: str) -> None:
    def check(ref: str) -> None:
        check_template_id(parse_template_ref(ref)[0])

    _agrees(TEMPLATE_REF, _accepts(check), value)


@PROPERTY
@given(_text(BASE64, "=+/AQgw") | st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()))
def test_the_base64_pattern_is_what_the_template_assets_decode(value: str) -> None:
    try:
        base64.b64decode(value, validate=True)
        decodes = True
    except (binascii.Error, ValueError):
        decodes = False
    assert bool(ecma_compiled(BASE64).search(value)) is decodes, repr(value)


@PROPERTY
@given(st.from_regex(URL_PATTERN, fullmatch=True).filter(lambda u: len(u) <= 2000))
def test_every_url_the_pattern_takes_is_a_receiver_url_unless_its_address_is_not_public(url: str) -> None:
    try:
        check_endpoint_url(url, WebhooksConfig())
    except DocfenceError as exc:
        assert "non-public address" in exc.message, (url, exc.message)


@PROPERTY
@given(_text(PAGES_PATTERN, "0123456789-,allfirstoddeven"))
def test_the_pages_pattern_is_the_watermark_pages_rule(value: str) -> None:
    def check(pages: str) -> None:
        WatermarkSpec(pages=pages)

    if len(value) <= 200:  # published as maxLength
        _agrees(PAGES_PATTERN, _accepts(check), value)


@PROPERTY
@given(_text(mark_text_pattern(), "{}"))
def test_the_mark_text_pattern_is_what_a_mark_draws(value: str) -> None:
    def check(text: str) -> None:
        spec = WatermarkSpec.from_mapping({"text": text})
        every_field = {name: "x" for name in re.findall(r"\{(\w+)\}", text)}
        if not fill(spec.text, every_field).strip():  # draws nothing (request_policy refuses it)
            raise DocfenceError("draws nothing")

    if 1 <= len(value) <= 200:  # published as minLength and maxLength
        _agrees(mark_text_pattern(), _accepts(check), value)


@pytest.mark.parametrize("period", ["2026-02", "2024-02-29", "2026-W53", "2026-Q4", "2026-H1", "2026"])
def test_the_period_pattern_takes_each_documented_form(period: str) -> None:
    assert ecma_compiled(PERIOD).search(period) and _accepts(check_period)(period)

"""Tests for the report renderer: the shipped sample, template hashing, schema errors without data values,
and the sandbox (no file reads, no sockets, no Jinja2 attribute escapes)."""

from __future__ import annotations

import dataclasses
import http.server
import io
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pikepdf
import pypdfium2 as pdfium
import pytest

from docfence.core.errors import RenderResourceExceeded, TemplateDataInvalid, TemplateError
from docfence.engines.report.data import validate_data
from docfence.engines.report.render import (
    RenderedReport,
    TemplateBundle,
    load_bundle,
    render_report,
    template_hash,
)
from docfence.samples.monthly_report import (
    MONTHLY_DIR,
    SAMPLE_CLINIC,
    load_monthly_bundle,
    sample_monthly_data,
)

PASSWD = "/etc/passwd"
SECRET = "SECRET-VALUE-4711"

# --- process-wide audit hook: records opens of /etc/passwd and every socket use while armed ----------
_AUDIT: dict[str, Any] = {"armed": False, "events": []}


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    if not _AUDIT["armed"]:
        return
    if event == "open" and args and str(args[0]) == PASSWD:
        _AUDIT["events"].append(("open", str(args[0])))
    elif event.startswith("socket."):
        _AUDIT["events"].append((event, repr(args)[:80]))


sys.addaudithook(_audit_hook)  # cannot be removed; disarmed it costs one dict lookup per event


@pytest.fixture
def audited() -> Iterator[list[tuple[str, str]]]:
    """Events seen while the test body runs: must stay empty for a sandboxed render."""
    _AUDIT["events"] = []
    _AUDIT["armed"] = True
    try:
        yield _AUDIT["events"]
    finally:
        _AUDIT["armed"] = False


def pdf_text(pdf: bytes) -> str:
    doc = pdfium.PdfDocument(pdf)
    try:
        return "\n".join(doc[i].get_textpage().get_text_range() for i in range(len(doc)))
    finally:
        doc.close()


def pdf_page_count(pdf: bytes) -> int:
    doc = pdfium.PdfDocument(pdf)
    try:
        return len(doc)
    finally:
        doc.close()


def bundle_with(
    html: str, css: str = "", assets: dict[str, bytes] | None = None, **schema: Any
) -> TemplateBundle:
    return TemplateBundle(
        name="t", html=html, css=css, assets=assets or {}, schema=schema or {"type": "object"}
    )


@pytest.fixture(scope="module")
def monthly() -> TemplateBundle:
    return load_monthly_bundle()


@pytest.fixture(scope="module")
def twenty_pages(monthly: TemplateBundle) -> RenderedReport:
    return render_report(monthly, sample_monthly_data(pages=20))


# --- the shipped sample -----------------------------------------------------------------------------


def test_sample_renders_one_page(monthly: TemplateBundle) -> None:
    report = render_report(monthly, sample_monthly_data(pages=1))
    assert report.pages == 1 == pdf_page_count(report.pdf)
    text = pdf_text(report.pdf)
    for expected in (SAMPLE_CLINIC, "Monthly activity report - 2026-01", "Cardiology", "Page 1 of 1"):
        assert expected in text
    assert report.refused_urls == ()  # the logo came from the bundle
    assert report.template_sha256 == template_hash(monthly)


def test_sample_renders_about_twenty_pages(twenty_pages: RenderedReport) -> None:
    assert 19 <= twenty_pages.pages <= 21
    assert pdf_page_count(twenty_pages.pdf) == twenty_pages.pages
    text = pdf_text(twenty_pages.pdf)
    assert f"Page {twenty_pages.pages} of {twenty_pages.pages}" in text
    assert "Site 04" in text and "Paediatrics" in text


def test_sample_data_is_deterministic_and_valid_for_its_schema(monthly: TemplateBundle) -> None:
    assert sample_monthly_data(3, seed=5) == sample_monthly_data(3, seed=5)
    validate_data(monthly.schema, sample_monthly_data(3, seed=5))
    assert sample_monthly_data(3, seed=5) != sample_monthly_data(3, seed=6)


def test_same_input_gives_same_pdf_bytes(monthly: TemplateBundle) -> None:
    data = sample_monthly_data(pages=1)
    first = render_report(monthly, data).pdf
    assert render_report(monthly, data).pdf == first
    assert render_report(monthly, sample_monthly_data(pages=1, seed=1)).pdf != first


@pytest.mark.parametrize("variant, part", [("pdf/a-3b", "3"), ("pdf/ua-1", None)])
def test_pdf_variants(monthly: TemplateBundle, variant: str, part: str | None) -> None:
    report = render_report(monthly, sample_monthly_data(pages=1), variant=variant)
    with pikepdf.open(io.BytesIO(report.pdf)) as pdf:
        meta = pdf.open_metadata()
        if part is not None:
            assert meta.pdfa_status == f"{part}B"
        else:
            assert "/StructTreeRoot" in pdf.Root  # PDF/UA is tagged
    assert report.variant == variant


def test_unknown_variant_is_a_template_error(monthly: TemplateBundle) -> None:
    with pytest.raises(TemplateError) as info:
        render_report(monthly, sample_monthly_data(), variant="pdf/x-4")
    assert info.value.code == "template_error"


def test_page_cap(monthly: TemplateBundle) -> None:
    with pytest.raises(RenderResourceExceeded) as info:
        render_report(monthly, sample_monthly_data(pages=3), max_pages=2)
    assert info.value.code == "render_resource_exceeded"


# --- template hash ----------------------------------------------------------------------------------


def test_template_hash_is_stable_and_order_independent(monthly: TemplateBundle) -> None:
    again = load_bundle(MONTHLY_DIR)
    assert template_hash(again) == template_hash(monthly)
    assert len(template_hash(monthly)) == 64
    a = bundle_with("x", assets={"a.svg": b"1", "b.svg": b"2"})
    b = bundle_with("x", assets={"b.svg": b"2", "a.svg": b"1"})
    assert template_hash(a) == template_hash(b)


@pytest.mark.parametrize(
    "change",
    [
        {"css": "html { color: red; }"},
        {"html": "<p>other</p>"},
        {"name": "monthly-v2"},
        {"schema": {"type": "object", "required": ["x"]}},
        {"assets": {"logo.svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>"}},
    ],
)
def test_template_hash_changes_with_any_part(monthly: TemplateBundle, change: dict[str, Any]) -> None:
    assert template_hash(dataclasses.replace(monthly, **change)) != template_hash(monthly)


def test_template_hash_has_no_boundary_ambiguity() -> None:
    assert template_hash(bundle_with("ab", css="c")) != template_hash(bundle_with("a", css="bc"))


def test_load_bundle_refuses_symlinks(tmp_path: Path) -> None:
    for name in ("template.html", "style.css", "schema.json"):
        (tmp_path / name).write_bytes((MONTHLY_DIR / name).read_bytes())
    (tmp_path / "secret.txt").symlink_to(PASSWD)
    with pytest.raises(TemplateError):
        load_bundle(tmp_path)


# --- data validation --------------------------------------------------------------------------------


def test_bad_data_names_path_and_rule_but_no_value(monthly: TemplateBundle) -> None:
    data = sample_monthly_data()
    data["rows"][2]["appointments"] = SECRET
    data["clinic"] = SECRET * 20  # too long
    data[f"patient {SECRET}"] = 1  # additional property: its key is data too
    del data["period"]
    with pytest.raises(TemplateDataInvalid) as info:
        render_report(monthly, data)
    message = str(info.value)
    assert info.value.code == "template_data_invalid"
    assert SECRET not in message and "4711" not in message
    assert "$.rows[2].appointments: violates 'type' 'integer'" in message
    assert "$.clinic: violates 'maxLength' 120" in message
    assert "violates 'required' ['period']" in message
    assert "violates 'additionalProperties'" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_unnamed_keys_are_masked_in_paths() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    with pytest.raises(TemplateDataInvalid) as info:
        render_report(bundle_with("x", **schema), {f"Jane {SECRET}": "x"})
    assert SECRET not in str(info.value)
    assert "$.*: violates 'type'" in str(info.value)


def test_invalid_schema_is_a_template_error() -> None:
    with pytest.raises(TemplateError) as info:
        render_report(bundle_with("x", type="no-such-type"), {})
    assert info.value.code == "template_error"


def test_html_in_data_is_escaped(audited: list[tuple[str, str]]) -> None:
    payload = f'<img src="file://{PASSWD}"><b>{{{{ 7*7 }}}}</b><script>x</script>'
    report = render_report(bundle_with("<p>{{ note }}</p>"), {"note": payload})
    text = pdf_text(report.pdf)
    assert '<img src="file:///etc/passwd">' in text and "{{ 7*7 }}" in text and "<script>" in text
    assert report.refused_urls == () and audited == []


def test_audit_hook_positive_control(audited: list[tuple[str, str]]) -> None:
    """The hook the sandbox tests rely on does see a read of the file and a socket."""
    import socket

    Path(PASSWD).read_bytes()
    socket.socket().close()
    assert ("open", PASSWD) in audited
    assert any(event.startswith("socket.") for event, _ in audited)


# --- sandbox: local files ---------------------------------------------------------------------------

FILE_URL = f"file://{PASSWD}"
FILE_CASES = {
    "img src": (f'<img src="{FILE_URL}">', ""),
    "css url()": ("<p class=x>x</p>", f".x {{ background: url({FILE_URL}); }}"),
    "link stylesheet": (f'<link rel="stylesheet" href="{FILE_URL}"><p>x</p>', ""),
    "@import in bundle css": ("<p>x</p>", f'@import url("{FILE_URL}");'),
    "@import in style tag": (f'<style>@import "{FILE_URL}";</style><p>x</p>', ""),
    "font-face": (
        "<p class=x>x</p>",
        f"@font-face {{ font-family: X; src: url({FILE_URL}); }} .x {{ font-family: X; }}",
    ),
    "object data": (f'<object data="{FILE_URL}"></object>', ""),
    "embed src": (f'<embed src="{FILE_URL}">', ""),
    "link attachment": (f'<link rel="attachment" href="{FILE_URL}"><p>x</p>', ""),
    "relative traversal": ('<img src="../../../../etc/passwd">', ""),
    "svg asset with image": ('<img src="evil.svg">', ""),
    "base href": ('<base href="file:///etc/"><img src="passwd">', ""),
    "inline svg use": (f'<svg width="9" height="9"><use href="{FILE_URL}#x"/></svg>', ""),
    "css content and list-style": (
        "<ul><li class=x>x</li></ul>",
        f".x {{ list-style-image: url({FILE_URL}); }} .x::before {{ content: url({FILE_URL}); }}",
    ),
}
NEVER_REQUESTED = {"inline svg use"}
EVIL_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
    b'<image href="file:///etc/passwd" width="10" height="10"/></svg>'
)


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_file_urls_are_refused_without_reading(case: str, audited: list[tuple[str, str]]) -> None:
    html, css = FILE_CASES[case]
    bundle = bundle_with(html, css=css, assets={"evil.svg": EVIL_SVG})
    report = render_report(bundle, {})
    assert audited == []
    assert "root:" not in pdf_text(report.pdf)
    # WeasyPrint does not even try external <use> references; every other case asks and is refused.
    assert report.refused_urls or case in NEVER_REQUESTED, "the refused URL is recorded"
    assert all("passwd" in url for url in report.refused_urls)


def test_assets_are_served_by_relative_name_only(monthly: TemplateBundle) -> None:
    logo = monthly.assets["logo.svg"]
    html = (
        '<img src="img/my logo.svg"><img src="docfence-asset://bundle/img/my%20logo.svg">'
        '<img src="logo.svg">'  # not an asset of this bundle
    )
    report = render_report(bundle_with(html, assets={"img/my logo.svg": logo}), {})
    assert report.refused_urls == ("docfence-asset://bundle/logo.svg",)


def test_url_from_data_is_refused(audited: list[tuple[str, str]]) -> None:
    report = render_report(bundle_with('<img src="{{ logo }}">'), {"logo": FILE_URL})
    assert report.refused_urls == (FILE_URL,) and audited == []
    assert report.warnings and not any("passwd" in warning for warning in report.warnings)


def test_data_uris_are_refused() -> None:
    svg = "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4="
    report = render_report(bundle_with(f'<img src="{svg}">'), {})
    assert report.refused_urls == ("data:image/svg+xml;base64,<56 chars>",)


# --- sandbox: network -------------------------------------------------------------------------------


@pytest.fixture
def loopback_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_network_urls_are_refused_without_connecting(
    loopback_server: tuple[str, list[str]], audited: list[tuple[str, str]]
) -> None:
    base, seen = loopback_server
    html = (
        f'<link rel="stylesheet" href="{base}/a.css"><style>@import "{base}/b.css";</style>'
        f'<img src="{base}/c.png"><object data="{base}/d.svg"></object><p class=x>x</p>'
    )
    css = f".x {{ background: url({base}/e.png); }} @font-face {{ font-family: Y; src: url({base}/f.ttf); }}"
    bundle = bundle_with(html, css=css.replace("@font-face", "p {} @font-face"))
    report = render_report(bundle, {})
    assert seen == []
    assert audited == []  # no socket was even created or connected
    refused = {url.rsplit("/", 1)[1] for url in report.refused_urls}
    assert refused >= {"a.css", "b.css", "c.png", "d.svg", "e.png"}


# --- sandbox: Jinja2 --------------------------------------------------------------------------------

JINJA_ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ request.application.__globals__ }}",
    "{{ config }}",
    "{% set x = [] %}{{ x.append(1) }}",
    "{{ 'x' * 1000000000 }}",
    "{{ 10 ** 10000000 }}",
    "{{ (10 ** 5000) ** 5000 }}",
    "{% for i in range(10**9) %}{% endfor %}",
    "{% include '/etc/passwd' %}",
    "{% extends 'base.html' %}",
    "{% import 'macros.html' as m %}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
    "{{ x",
]


@pytest.mark.parametrize("source", JINJA_ESCAPES)
def test_jinja_escapes_fail_with_coded_template_error(source: str, audited: list[tuple[str, str]]) -> None:
    with pytest.raises(TemplateError) as info:
        render_report(bundle_with(f"<p>{source}</p>"), {})
    assert info.value.code == "template_error"
    assert "root:" not in str(info.value)
    assert audited == []


def test_undefined_names_fail_and_do_not_echo_data() -> None:
    with pytest.raises(TemplateError) as info:
        render_report(bundle_with("{{ value | int }}{{ missing }}"), {"value": SECRET})
    assert SECRET not in str(info.value)

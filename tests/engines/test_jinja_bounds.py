"""The report sandbox bounds every way a template can grow a string or a list by a number it chooses:
padding widths, `%` and `str.format` widths, join/replace growth, `+` and `~` concatenation, batch and
slice counts, and the output while it is produced. Each refusal is a coded TemplateError (no MemoryError,
no long render); ordinary uses of the same filters and methods still work."""

from __future__ import annotations

import pytest

from docfence.core.errors import RenderResourceExceeded, TemplateError
from docfence.engines.report.jinja import render_html

GROWTH = [
    "{{ 'x'|center(10**9) }}",
    "{{ 'x'|center(1000000000) }}",
    "{{ 'x'.ljust(10**9) }}",
    "{{ 'x'.rjust(10**9) }}",
    "{{ 'x'.center(10**9) }}",
    "{{ '1'.zfill(10**9) }}",
    "{{ '%999999999d' % 1 }}",
    "{{ '%.999999999f' % 1.0 }}",
    "{{ '%*d' % (10**9, 1) }}",
    "{{ '%999999999d'|format(1) }}",
    "{{ '{:999999999}'.format(1) }}",
    "{{ '{:{w}}'.format(1, w=10**9) }}",
    "{{ '{:>999999999}'.format_map({}) }}",
    "{{ ('x' * 100000).replace('x', 'x' * 100000) }}",
    "{{ ('x' * 100000)|replace('x', 'x' * 100000) }}",
    "{{ ('x' * 100000).join(range(100000)|map('string')) }}",
    "{{ range(100000)|join('x' * 100000) }}",
    "{{ 'a\tb'.expandtabs(10**9) }}",
    "{{ 'x'|indent(10**9) }}",
    "{{ [1]|batch(10**9, 0)|list }}",
    "{{ [1]|slice(10**9)|list }}",
    "{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ f('x' * 1000, 40) }}",
    "{% macro f(s, n) %}{% if n %}{{ f(s + s, n - 1) }}{% endif %}{% endmacro %}{{ f('x' * 1000, 40) }}",
]


@pytest.mark.parametrize("source", GROWTH)
def test_string_growth_is_refused_before_it_grows(source: str) -> None:
    with pytest.raises(TemplateError) as refused:
        render_html(source, {})
    assert "sandbox" in refused.value.message


def test_output_is_counted_while_it_is_produced() -> None:
    source = "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}"  # 10^10 characters
    with pytest.raises(RenderResourceExceeded):
        render_html(source, {}, max_chars=1_000_000)


def test_ordinary_uses_still_render() -> None:
    source = ("{{ 'ab'|center(6) }}|{{ 'a'.ljust(3) }}|{{ '%5.1f' % 3.14159 }}|{{ '%.1f'|format(2.25) }}|"
              "{{ '{:>4}'.format('x') }}|{{ names|join(', ') }}|{{ ', '.join(names) }}|"
              "{{ 'a-b'.replace('-', '+') }}|{{ 'x' ~ 'y' }}|{{ 'p' + 'q' }}|{{ [1, 2, 3]|batch(2)|list }}")
    html = render_html(source, {"names": ["a", "b"]})
    assert html == ("  ab  |a  |  3.1|2.2|   x|a, b|a, b|a+b|xy|pq|[[1, 2], [3]]")

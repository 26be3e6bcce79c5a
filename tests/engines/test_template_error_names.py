"""A template's undefined name is named in its TemplateError (with the line), never a data value."""

from __future__ import annotations

import pytest

from docfence.core.errors import TemplateError
from docfence.engines.report.jinja import render_html

SECRET = "SECRET-VALUE-4711"


@pytest.mark.parametrize(("source", "data", "expected"), [
    ("<p>a</p>\n\n{{ patient_nme }}", {}, "template used an undefined name 'patient_nme' (line 3)"),
    ("{% for r in rows %}\n{{ r.nme }}{% endfor %}", {"rows": [{}]},
     "template used an undefined attribute or key 'nme' (line 2)"),
    ("{{ p['zz'] }}", {"p": {}}, "template used an undefined attribute or key 'zz' (line 1)"),
    # a key computed from data is not quoted: it could be a data value
    ("{{ p[k] }}", {"p": {}, "k": SECRET}, "template used an undefined name or attribute (line 1)"),
])
def test_undefined_name_is_named_without_data(source: str, data: dict[str, object], expected: str) -> None:
    with pytest.raises(TemplateError) as info:
        render_html(source, data)
    assert info.value.message == expected
    assert SECRET not in str(info.value)

"""Class mark settings in the TOML file: further marks, logos read at start-up, limits; each bad
setting fails at start-up with the key that names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from docfence import config
from docfence.core.errors import ConfigError

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20"/></svg>'


def _load(tmp_path: Path, body: str) -> config.Settings:
    path = tmp_path / "docfence.toml"
    path.write_text(body)
    return config.load_settings(env={"DOCFENCE_CONFIG": str(path)})


def test_class_marks_and_logos_load_and_reach_the_policy(tmp_path: Path) -> None:
    (tmp_path / "logo.svg").write_bytes(SVG)
    settings = _load(tmp_path, f"""
[classes.external]
timezone = "Europe/Berlin"
max_marks = 3
allowed_fields = ["recipient", "date", "page", "pages"]
images = {{ logo = "{tmp_path / 'logo.svg'}" }}

[classes.external.watermark]
image = "logo"
position = "center"

[[classes.external.marks]]
text = "{{recipient}} · {{date}} · {{page}}/{{pages}}"
position = "footer"
color = [0.2, 0.2, 0.2]

[[classes.external.marks]]
image = "logo"
position = "header"
""")
    rules = settings.document_class("external").mark_rules
    assert rules.timezone == "Europe/Berlin" and rules.max_marks == 3
    assert rules.marks[1].image is not None and rules.marks[1].image.startswith("data:image/svg+xml;base64,")
    policy = settings.policy_for("external")
    assert len(policy.all_marks()) == 3 and policy.marks[0].color == (0.2, 0.2, 0.2)
    assert policy.watermark is not None and policy.watermark.image == rules.marks[1].image


@pytest.mark.parametrize(("body", "words"), [
    ('timezone = "Mars/Olympus"', "[classes.c].timezone"),
    ("max_marks = 9", "[classes.c].max_marks"),
    ('allowed_fields = ["recipient", "colour"]', "[classes.c].allowed_fields"),
    ('images = { logo = "/nonexistent/logo.svg" }', "cannot be read"),
    ('images = { logo = "/etc/hostname" }', ".png or .svg"),
    ('marks = [{ text = "{nope}" }]', "{nope}"),
    ('marks = [{ image = "missing" }]', "not a logo of this class"),
    ('allowed_fields = ["page"]\nmarks = [{ text = "{recipient}" }]', "{recipient} is not allowed"),
    ("max_marks = 1\nmarks = [{ text = \"x\" }]", "exceed max_marks=1"),
    ('allowed_fields = ["page"]\n[classes.c.watermark]\ntext = "{tenant}"', "{tenant} is not allowed"),
])
def test_bad_class_mark_settings_fail_at_start_up_naming_the_key(tmp_path: Path, body: str,
                                                                 words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f"[classes.c]\n{body}\n")
    assert words in caught.value.message

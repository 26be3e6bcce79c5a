"""docs/configuration.md lists every settings key with its real default, and nothing that does not exist."""

from __future__ import annotations

import enum
import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from docfence import config
from docfence.core.policy import Limits, SanitizePolicy, SigningSpec, VerificationSpec, WatermarkSpec
from docfence.testing.doc_examples import collect

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

#: Section heading -> the dataclass its table documents, and keys the TOML file cannot set directly.
SECTIONS: dict[str, tuple[type, set[str]]] = {
    "## Top-level keys": (config.Settings, {"classes", "worker", "limits", "server", "webhooks",
                                            "verification", "signing", "encryption"}),
    "## `[classes.NAME]`: document classes": (config.DocumentClass, {"name", "mark_rules"}),
    "### `[classes.NAME.watermark]`": (WatermarkSpec, set()),
    "### `[classes.NAME.sanitize]`": (SanitizePolicy, set()),
    "### `[classes.NAME.verification]`": (VerificationSpec, {"url", "code"}),  # set per job
    "### `[classes.NAME.signing]`": (SigningSpec, set()),
    "## `[verification]`": (config.VerificationConfig, set()),
    "## `[signing]`": (config.SigningConfig, set()),
    "## `[worker]`": (config.WorkerConfig, set()),
    "## `[limits]`": (Limits, set()),
    "## `[server]`": (config.ServerConfig, set()),
    "## `[webhooks]`": (config.WebhooksConfig, set()),
    "## `[encryption]`": (config.EncryptionConfig, set()),
}
#: Keys the loader reads that are not dataclass fields.
LOADER_KEYS = {
    "## Top-level keys": {"builtin_classes": "true"},
    # read into the class's MarkRules (core/marks.py); defaults checked in test_mark_rule_defaults
    "## `[classes.NAME]`: document classes": {"marks": "[]", "max_marks": "4", "allowed_fields": "all",
                                              "timezone": "UTC", "images": "{}"},
}


def _tables() -> dict[str, dict[str, str]]:
    """Heading -> {key: default as written} from the doc's tables."""
    out: dict[str, dict[str, str]] = {}
    current = None
    for line in DOC.read_text("utf-8").splitlines():
        if line.startswith("#"):
            current = line.strip()
            out.setdefault(current, {})
            continue
        row = re.match(r"\| `([a-z0-9_]+)` \| (.*?) \|", line)
        if row and current is not None:
            out[current][row.group(1)] = row.group(2)
    return out


def _written(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, tuple) and not value:
        return "`[]`"
    return f"`{value!r}`"


@pytest.mark.parametrize("heading", sorted(SECTIONS))
def test_each_section_lists_exactly_the_keys_with_their_defaults(heading: str) -> None:
    cls, hidden = SECTIONS[heading]
    documented = _tables()[heading]
    expected = {f.name: f for f in fields(cls) if f.name not in hidden}
    loader = LOADER_KEYS.get(heading, {})
    assert set(documented) == set(expected) | set(loader), heading
    for name, f in expected.items():
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            continue
        if isinstance(default, WatermarkSpec | SanitizePolicy):
            assert documented[name] == "see below", name
            continue
        assert documented[name] == _written(default), (heading, name)
    for name, written in loader.items():
        assert documented[name] == f"`{written}`"


def test_the_example_file_loads(tmp_path: Path) -> None:
    """(Every TOML example also runs as a configuration in tests/docs/test_doc_examples.py.)"""
    example = next(e for e in collect(DOC.parents[1]) if e.id == "docs/configuration.md#toml1")
    path = tmp_path / "docfence.toml"
    path.write_text(example.text)
    settings = config.load_settings(env={"DOCFENCE_CONFIG": str(path)})
    assert set(settings.all_classes()) == {"default", "clinical-summary", "preview"}
    assert settings.document_class(None).watermark.text == "CONFIDENTIAL - external"
    assert settings.worker.lease_ttl_s == 60


def test_mark_rule_defaults() -> None:
    """The class mark keys' documented defaults are MarkRules' own."""
    from docfence.core.fields import FIELD_NAMES
    from docfence.core.marks import MarkRules

    rules = MarkRules()
    assert (rules.marks, rules.max_marks, rules.timezone, rules.images) == ((), 4, "UTC", ())
    assert rules.allowed_fields == FIELD_NAMES  # "all"

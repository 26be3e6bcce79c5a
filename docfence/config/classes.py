"""`[classes.NAME]`: document classes, the defaults a job of each class gets (mode, deadline, marks,
sanitising, verification, signing), read from their TOML tables and checked at start-up."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from docfence.config.tables import invalid, section
from docfence.core.errors import ConfigError
from docfence.core.marks import OBSCURE_RULES, MarkRules, image_uri
from docfence.core.policy import (
    VALIDATION_LEVELS,
    Limits,
    Mode,
    SanitizePolicy,
    SigningSpec,
    VerificationSpec,
    WatermarkSpec,
)


@dataclass(frozen=True)
class DocumentClass:
    """Defaults for a class of documents; `max_deadline_s` bounds what a caller may ask for."""

    name: str
    mode: Mode = Mode.VECTOR
    dpi: int = 150
    deadline_s: float = 600.0
    max_deadline_s: float = 3600.0
    max_attempts: int = 3
    retention_s: float = 30 * 86400.0
    region: str = "local"
    watermark: WatermarkSpec = field(default_factory=WatermarkSpec)
    sanitize: SanitizePolicy = field(default_factory=SanitizePolicy)  # default: strip (leaves the org)
    validation: str = "standard"  # standard | exhaustive (see JobPolicy.validation)
    owner_password_policy: str = "keep"  # keep | refuse (see JobPolicy.owner_password_policy)
    # where a mark more opaque than its legible limit would lie over the page's text and no free band
    # holds it: refuse (coded refusal) | reduce (drawn at the legible opacity) | allow (as configured)
    obscure: str = "reduce"
    limits: dict[str, Any] = field(default_factory=dict)  # per-class overrides of [limits], e.g. budgets
    # further marks, limits on a job's marks, fields allowed, time zone of {date}, logos (core/marks.py)
    mark_rules: MarkRules = field(default_factory=MarkRules)
    verification: VerificationSpec | None = None  # [classes.NAME.verification]: a QR verification code
    signing: SigningSpec | None = None  # [classes.NAME.signing]: a PAdES signature with [signing]'s key

    def __post_init__(self) -> None:
        if not 0 < self.deadline_s <= self.max_deadline_s:
            raise ConfigError(f"deadline_s={self.deadline_s:g}: must be in (0, max_deadline_s="
                              f"{self.max_deadline_s:g}] for class {self.name}")
        if self.validation not in VALIDATION_LEVELS:
            raise ConfigError(f"validation={self.validation!r}: allowed: {', '.join(VALIDATION_LEVELS)}"
                              f" for class {self.name}")
        if self.owner_password_policy not in ("keep", "refuse"):
            raise ConfigError(f"owner_password_policy={self.owner_password_policy!r}: allowed: keep, refuse"
                              f" for class {self.name}")
        if self.obscure not in OBSCURE_RULES:
            raise ConfigError(f"obscure={self.obscure!r}: allowed: {', '.join(OBSCURE_RULES)} for class "
                              f"{self.name}")
        unknown = sorted(set(self.limits) - {f.name for f in fields(Limits)})
        if unknown:
            raise ConfigError(f"limits.{unknown[0]}: unknown limit for class {self.name} (allowed: "
                              f"{', '.join(f.name for f in fields(Limits))})")
        Limits(**self.limits)  # each override is checked at start-up, not at the first job


def classes_from(tables: Any, builtin: bool) -> dict[str, DocumentClass]:
    """Configured classes added to the built-in `default` (kept unless `builtin_classes = false`)."""
    if not isinstance(tables, dict):
        raise invalid("classes", tables, "must be tables [classes.NAME]")
    classes = {"default": DocumentClass("default")} if builtin and tables else {}
    for name, spec in tables.items():
        classes[name] = _doc_class(name, spec)
    return classes


_MARK_KEYS = ("marks", "max_marks", "allowed_fields", "timezone", "images")


#: The keys a `[classes.NAME]` table may hold, as docs/configuration.md documents them.
_CLASS_KEYS = frozenset({f.name for f in fields(DocumentClass)} - {"name", "mark_rules"} | set(_MARK_KEYS))


def _mark_rules(label: str, spec: dict[str, Any]) -> MarkRules:
    """The class's mark settings (popped from `spec`): logos read from their files now, each class mark
    checked now, so a bad setting fails at start-up with the key that names it."""
    given = {key: spec.pop(key) for key in _MARK_KEYS if key in spec}
    try:
        images = given.get("images", {})
        if not isinstance(images, dict) or not all(isinstance(v, str) for v in images.values()):
            raise ConfigError("must be a table of logo name = path to a .png or .svg file", field="images")
        logos = MarkRules(images=tuple((str(k), image_uri(v)) for k, v in images.items()))
        marks = given.get("marks", [])
        if not isinstance(marks, list):
            raise ConfigError("must be an array of tables [[classes.NAME.marks]]", field="marks")
        specs = []
        for mark in marks:
            mark = dict(mark) if isinstance(mark, dict) else mark
            if isinstance(mark, dict) and mark.get("image") is not None:
                mark["image"] = logos.image(mark["image"])
            if isinstance(mark, dict) and isinstance(mark.get("color"), list):
                mark["color"] = tuple(mark["color"])
            specs.append(WatermarkSpec.from_mapping(mark))
        given.update(marks=tuple(specs), images=logos.images)
        return MarkRules(**given)
    except ConfigError as exc:
        key = exc.field if exc.field in _MARK_KEYS else "marks"
        raise ConfigError(f"{label}.{key}: {exc.message}") from None
    except TypeError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def _doc_class(name: str, spec: Any) -> DocumentClass:
    label = f"[classes.{name}]"
    if not isinstance(spec, dict):
        raise invalid(label, spec, "must be a table of class settings")
    spec = dict(spec)
    if "mode" in spec:
        try:
            spec["mode"] = Mode(spec["mode"])
        except ValueError:
            raise invalid(f"{label}.mode", spec["mode"], f"allowed: {', '.join(m.value for m in Mode)}") \
                from None
    unknown = sorted(set(spec) - _CLASS_KEYS)
    if unknown:  # before the mark keys are taken out, so the allowed list is the documented one
        raise ConfigError(f"{label}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_CLASS_KEYS))})")
    rules = _mark_rules(label, spec)
    if "watermark" in spec:
        wm = spec["watermark"]
        if isinstance(wm, dict) and isinstance(wm.get("color"), list):
            wm = {**wm, "color": tuple(wm["color"])}
        try:
            if isinstance(wm, dict) and wm.get("image") is not None:
                wm = {**wm, "image": rules.image(wm["image"])}  # a logo by name, as in marks
            spec["watermark"] = WatermarkSpec.from_mapping(wm)
            rules.check_fields(spec["watermark"])  # the class's own first mark keeps its field rules too
        except ConfigError as exc:
            raise ConfigError(f"{label}.watermark: {exc.message}") from None
    if "sanitize" in spec:
        policy = spec["sanitize"]
        if not isinstance(policy, dict):
            raise invalid(f"{label}.sanitize", policy, "must be a table of sanitiser settings")
        try:
            spec["sanitize"] = section(SanitizePolicy, f"{label}.sanitize", policy)
        except TypeError as exc:
            raise ConfigError(f"{label}.sanitize: {exc}") from None
    for key, spec_cls in (("verification", VerificationSpec), ("signing", SigningSpec)):
        if key in spec:
            table = f"[classes.{name}.{key}]"
            if not isinstance(spec[key], dict):
                raise invalid(table, spec[key], f"must be a table of {key} settings")
            if key == "verification" and {"url", "code"} & set(spec[key]):
                raise ConfigError(f"{table}: url and code are set per job, not per class")
            spec[key] = section(spec_cls, table, spec[key])
    return section(DocumentClass, label, spec, name=name, mark_rules=rules)  # type: ignore[no-any-return]

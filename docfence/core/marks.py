"""A document class's rules for marks (default marks, how many a job may have, which fields it may use,
its time zone, its logos) and the resolution of one submission into frozen marks and field values."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from docfence.core.errors import ConfigError
from docfence.core.fields import CALLER_FIELDS, FIELD_NAMES, check_value, fill
from docfence.core.policy import MAX_IMAGE_CHARS, MAX_MARKS, JobPolicy, WatermarkSpec

MAX_IMAGE_BYTES = MAX_IMAGE_CHARS * 3 // 4
#: A class's `obscure` choices, where a mark opaque enough to hide the page's text finds no free space
#: (engines/mark_obscure.py): refuse the job, reduce the mark to its legible opacity, or allow it.
OBSCURE_RULES = ("refuse", "reduce", "allow")
_IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}


@dataclass(frozen=True)
class MarkRules:
    """Per class: `marks` are drawn besides the class watermark unless a job sends its own list;
    `images` maps a logo name (what a mark's `image` names) to its data URI, read at start-up."""

    marks: tuple[WatermarkSpec, ...] = ()
    max_marks: int = 4
    allowed_fields: tuple[str, ...] = FIELD_NAMES
    timezone: str = "UTC"
    images: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "marks", tuple(self.marks))
        object.__setattr__(self, "allowed_fields", tuple(self.allowed_fields))
        if not isinstance(self.max_marks, int) or not 1 <= self.max_marks <= MAX_MARKS:
            raise ConfigError(f"max_marks={self.max_marks!r}: must be 1-{MAX_MARKS}", field="max_marks")
        unknown = sorted(set(self.allowed_fields) - set(FIELD_NAMES))
        if unknown:
            raise ConfigError(f"allowed_fields: unknown field {unknown[0]!r} (known: "
                              f"{', '.join(FIELD_NAMES)})", field="allowed_fields")
        zone(self.timezone)
        if 1 + len(self.marks) > self.max_marks:
            raise ConfigError(f"marks: the class watermark and {len(self.marks)} marks exceed max_marks="
                              f"{self.max_marks}", field="marks")
        for spec in self.marks:
            self.check_fields(spec)

    def check_fields(self, spec: WatermarkSpec) -> None:
        refused = [name for name in spec.fields if name not in self.allowed_fields]
        if refused:
            raise ConfigError(f"field {{{refused[0]}}} is not allowed in this class's marks (allowed: "
                              f"{', '.join('{' + n + '}' for n in self.allowed_fields)})", field=refused[0])

    def image(self, name: object) -> str:
        """The data URI of the class logo `name`; ConfigError naming it when the class has none such."""
        found = dict(self.images).get(name) if isinstance(name, str) else None
        if found is None:
            names = ", ".join(n for n, _ in self.images) or "none configured"
            raise ConfigError(f"image {name!r} is not a logo of this class (logos: {names})", field="image")
        return found


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigError(f"timezone={name!r}: not a known time zone (e.g. UTC, Europe/Berlin)",
                          field="timezone") from None


def image_uri(path: str) -> str:
    """A logo file (PNG or SVG, at most MAX_IMAGE_BYTES) as the data URI a mark carries."""
    kind = _IMAGE_TYPES.get(Path(path).suffix.lower())
    if kind is None:
        raise ConfigError(f"image {path!r}: must be a .png or .svg file", field="images")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"image {path!r}: cannot be read ({exc.strerror})", field="images") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise ConfigError(f"image {path!r}: {len(data)} bytes; at most {MAX_IMAGE_BYTES}", field="images")
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


Marks = tuple[WatermarkSpec, tuple[WatermarkSpec, ...]]


def resolve_marks(rules: MarkRules, watermark: WatermarkSpec, *, given_watermark: Mapping[str, Any] | None,
                  given_marks: Sequence[Mapping[str, Any]] | None) -> Marks:
    """(first mark, further marks) of a job: the class's, with `given_watermark` over the first, or the
    caller's own list (`given_marks`, each over the class mark at its place); ConfigError names the
    field at fault (unknown fields, too many marks, a field or logo the class does not allow)."""
    defaults = (watermark, *rules.marks)
    if given_marks is None:
        first = _mark(rules, given_watermark, watermark) if given_watermark else watermark
        chosen = [first, *rules.marks]
    else:
        if not isinstance(given_marks, Sequence) or isinstance(given_marks, str | bytes) or not given_marks:
            raise ConfigError("marks must be a non-empty list of mark objects", field="marks")
        if len(given_marks) > rules.max_marks:
            raise ConfigError(f"{len(given_marks)} marks; this class allows at most {rules.max_marks}",
                              field="marks")
        chosen = [_mark(rules, m, defaults[k] if k < len(defaults) else WatermarkSpec())
                  for k, m in enumerate(given_marks)]
    for spec in chosen:
        rules.check_fields(spec)
    return chosen[0], tuple(chosen[1:])


def _mark(rules: MarkRules, given: Mapping[str, Any], base: WatermarkSpec) -> WatermarkSpec:
    if not isinstance(given, Mapping):
        raise ConfigError("each mark must be an object of mark fields", field="marks")
    given = dict(given)
    if given.get("image") is not None:
        given["image"] = rules.image(given["image"])
    return WatermarkSpec.from_mapping(given, base)


def resolve_fields(rules: MarkRules, caller: Mapping[str, Any], *, job_id: str, tenant: str,
                   issued_at: datetime) -> dict[str, str]:
    """The field values frozen with the job (`{sha8}` is added once the upload's hash is known, `{page}`
    and `{pages}` at render time); ConfigError names a caller value that is too long or not text."""
    values = {name: check_value(name, caller[name]) for name in CALLER_FIELDS if caller.get(name) is not None}
    local = issued_at.astimezone(zone(rules.timezone))
    values.update(job_id=job_id, tenant=tenant, date=local.strftime("%Y-%m-%d"),
                  datetime=local.strftime("%Y-%m-%d %H:%M ") + (local.tzname() or rules.timezone))
    return values


def blank_marks(marks: Sequence[WatermarkSpec], values: Mapping[str, str]) -> list[int]:
    """1-based numbers of text marks that draw nothing once filled (e.g. only `{recipient}`, not given)."""
    sample = {**values, "page": "1", "pages": "1", "sha8": values.get("sha8", "0" * 8)}
    return [k + 1 for k, spec in enumerate(marks)
            if spec.image is None and not fill(spec.text, sample).strip()]


HIDDEN = "(hidden)"


def marks_view(policy: JobPolicy, *, recipient_visible: bool) -> dict[str, Any]:
    """What the API, the console and `docfence inspect` show of a job's marks: each mark's kind,
    placement and the fields it uses, and the field values. The text itself and the recipient,
    purpose and reference only to principals allowed `jobs.recipient` (others, operators included,
    see which fields were used and that values were set: mark text is the tenant's content)."""
    marks = [{"kind": "image" if m.image else "text",
              "text": m.text if recipient_visible and not m.image else None,
              "position": m.position, "pages": m.pages, "layer": m.layer, "opacity": m.opacity,
              "fields": list(m.fields) if policy.fields is not None else []}
             for m in policy.all_marks()]
    values = dict(policy.fields or {})
    if not recipient_visible:
        values.update({name: HIDDEN for name in CALLER_FIELDS if name in values})
    return {"marks": marks, "fields": values}


__all__ = ["HIDDEN", "OBSCURE_RULES", "MarkRules", "blank_marks", "image_uri", "marks_view", "resolve_fields",
           "resolve_marks", "zone"]

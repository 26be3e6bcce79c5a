"""Job policy, frozen on the job at submission: fidelity mode, watermark spec, limits and clocks.

A retry never changes a stored policy; `to_dict`/`from_dict` are the only (JSON) serialisation.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from docfence.core.errors import ConfigError
from docfence.core.fields import CALLER_FIELDS, fields_in


class Mode(enum.StrEnum):
    VECTOR = "vector"  # structure-preserving
    RASTER = "raster"  # appearance only, at a declared DPI


class Kind(enum.StrEnum):
    WATERMARK = "watermark"
    REPORT = "report"


VALIDATION_LEVELS = ("standard", "exhaustive")
POSITIONS = ("diagonal", "center", "header", "footer", "tiled")
_PAGES_RE = re.compile(r"^(all|first|last|odd|even|\d+(-\d+)?(,\d+(-\d+)?)*)$")
#: Image marks travel in the frozen policy as data URIs of one of these types.
IMAGE_PREFIXES = ("data:image/png;base64,", "data:image/svg+xml;base64,")
MAX_IMAGE_CHARS = 350_000  # base64 of a 256 KiB logo: a policy row stays small
MAX_MARKS = 8  # the most marks any class may allow per job


@dataclass(frozen=True)
class WatermarkSpec:
    """How one mark looks and where it goes. Every field is checked for its type, range and (for
    numbers) finiteness at construction, and each ConfigError names the field, so a caller's spec
    fails at submission with a message to fix, never later in the render.

    `text` may hold dynamic fields (`{recipient}`, `{page}`, core/fields.py); with `image` set (a PNG or
    SVG data URI, resolved from a class image at submission) the mark is that image and `text` is not
    drawn; `font_size` is then the image's height in points."""

    text: str = "CONFIDENTIAL"
    position: str = "diagonal"
    pages: str = "all"  # all | first | last | odd | even | "1-3,7"
    opacity: float = 0.25
    angle: float | None = None  # None: the page diagonal for "diagonal", 0 otherwise
    font_size: float | None = None  # None: auto-fit to each page
    color: tuple[float, float, float] = (0.8, 0.0, 0.0)
    layer: str = "overlay"  # overlay | underlay
    image: str | None = None  # data URI (IMAGE_PREFIXES) of a PNG or SVG logo

    def __post_init__(self) -> None:
        for name in ("text", "position", "pages", "layer"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"watermark {name} must be a string")
        if self.image is not None and (not isinstance(self.image, str) or len(self.image) > MAX_IMAGE_CHARS
                                       or not self.image.startswith(IMAGE_PREFIXES)):
            raise ConfigError("watermark image must be a PNG or SVG of at most 256 KiB", field="image")
        if not self.text or len(self.text) > 200:
            raise ConfigError("watermark text must be 1-200 characters")
        if self.position not in POSITIONS:
            raise ConfigError(f"watermark position must be one of {', '.join(POSITIONS)}")
        if len(self.pages) > 200 or not _PAGES_RE.match(self.pages.replace(" ", "")):
            raise ConfigError("watermark pages must be all, first, last, odd, even or ranges like 1-3,7")
        if not 0.0 < _number("opacity", self.opacity) <= 1.0:
            raise ConfigError("watermark opacity must be in (0, 1]")
        if self.angle is not None and not -360.0 <= _number("angle", self.angle) <= 360.0:
            raise ConfigError("watermark angle must be in [-360, 360] degrees")
        if self.font_size is not None and not 1 <= _number("font_size", self.font_size) <= 500:
            raise ConfigError("watermark font_size must be 1-500 pt")
        if self.layer not in ("overlay", "underlay"):
            raise ConfigError("watermark layer must be overlay or underlay")
        color = self.color
        if not isinstance(color, tuple | list) or len(color) != 3 or \
                not all(0.0 <= _number("color", c) <= 1.0 for c in color):
            raise ConfigError("watermark color must be three numbers in [0, 1]")
        object.__setattr__(self, "color", tuple(color))

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any], base: WatermarkSpec | None = None) -> WatermarkSpec:
        """`base` (the defaults) with the fields of `given`; raises ConfigError naming an unknown field
        or the first field of the wrong type or range."""
        if not isinstance(given, Mapping):
            raise ConfigError("watermark must be an object of WatermarkSpec fields")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in given if k not in known)
        if unknown:
            raise ConfigError(f"unknown watermark field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        spec = cls(**{**asdict(base or cls()), **given})
        fields_in(spec.text)  # unknown fields and stray braces are refused here, at submission
        return spec

    @property
    def fields(self) -> tuple[str, ...]:
        """The dynamic fields the mark's text uses (none for an image mark)."""
        return () if self.image is not None else fields_in(self.text)

    def page_selected(self, index: int, count: int) -> bool:
        """Whether 0-based page `index` of `count` pages gets the mark."""
        sel = self.pages.replace(" ", "")
        number = index + 1
        if sel == "all":
            return True
        if sel == "first":
            return index == 0
        if sel == "last":
            return index == count - 1
        if sel == "odd":
            return number % 2 == 1
        if sel == "even":
            return number % 2 == 0
        for part in sel.split(","):
            lo, _, hi = part.partition("-")
            if int(lo) <= number <= int(hi or lo):
                return True
        return False


def _spec_from_dict(data: Any) -> WatermarkSpec:
    """A stored mark (JSON object) back into its spec; stored text is not re-checked for fields."""
    if not isinstance(data, dict):
        raise ConfigError("a stored mark must be an object")
    spec = dict(data)
    if "color" in spec:
        spec["color"] = tuple(spec["color"])
    return WatermarkSpec(**spec)


def _number(name: str, value: Any) -> float:
    """`value` as a finite number; booleans, strings, NaN and infinities raise ConfigError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"watermark {name} must be a number")
    if not math.isfinite(value):
        raise ConfigError(f"watermark {name} must be a finite number")
    return float(value)


@dataclass(frozen=True)
class Limits:
    """Resource limits for untrusted input; a hostile file fails its own job, not the worker."""

    max_input_bytes: int = 100 * 1024 * 1024
    max_pages: int = 2000
    max_page_area_pt2: float = 200.0 * 72 * 200.0 * 72  # 200x200 inch: the PDF spec's largest page
    max_objects: int = 500_000
    max_stream_bytes: int = 256 * 1024 * 1024  # decompressed size of any one stream
    max_output_bytes: int = 512 * 1024 * 1024
    render_timeout_s: float = 600.0  # the cap of the wall-clock budget below, whatever the input
    render_memory_mb: int = 1024
    # Wall-clock budget of one render/validation = base + per page + per MB of input, capped by
    # render_timeout_s: a 3 KB one-page file is answered in seconds, a 2,000-page file gets its minutes.
    render_base_s: float = 10.0
    render_per_page_s: float = 0.05
    render_per_mb_s: float = 1.0
    # raster pages are drawn and compared as pixels: ~100 ms of CPU per dense page at 150 DPI (measured,
    # docs/benchmarks.md), so their per-page budget is larger and grows with the square of the DPI
    raster_per_page_s: float = 0.25

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                raise ConfigError(f"limit {f.name} must be positive")

    def render_budget_s(self, *, input_bytes: int, pages: int | None = None,
                        raster_dpi: int | None = None) -> float:
        """Seconds this input may take to render and validate. Before its page count is known (the
        render process reports it after preflight) only the base and the size count. `raster_dpi` is
        set for raster jobs: their pages cost `raster_per_page_s` at 150 DPI, scaled by (dpi/150)^2."""
        budget = self.render_base_s + self.render_per_mb_s * input_bytes / (1024 * 1024)
        per_page = self.render_per_page_s
        if raster_dpi is not None:
            per_page = max(per_page, self.raster_per_page_s * (raster_dpi / 150.0) ** 2)
        budget += per_page * (pages or 0)
        return min(self.render_timeout_s, budget)


CORNERS = ("bottom-right", "bottom-left", "top-right", "top-left")


@dataclass(frozen=True)
class VerificationSpec:
    """A QR verification code stamped after the marks (engines/verify_code.py). A class default has an
    empty `url` and `code`; submission fills both ({public_base_url}/v1/verify/{job_id}?c={code}) and
    they are frozen with the rest of the policy, so a retry draws the same code."""

    pages: str = "last"  # as WatermarkSpec.pages
    corner: str = "bottom-right"  # of the page as displayed
    size_pt: float = 72.0  # the symbol with its quiet zone; 72 pt decodes from a 150 DPI render
    margin_pt: float = 54.0  # clears a header or footer mark (they sit within ~45 pt of the edge)
    url: str = ""
    code: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.pages, str) or not _PAGES_RE.match(self.pages.replace(" ", "")):
            raise ConfigError("verification pages must be all, first, last, odd, even or ranges like 1-3,7")
        if self.corner not in CORNERS:
            raise ConfigError(f"verification corner must be one of {', '.join(CORNERS)}")
        for name, low, high in (("size_pt", 36.0, 288.0), ("margin_pt", 0.0, 144.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
                raise ConfigError(f"verification {name} must be a number in [{low:g}, {high:g}] pt")
        if not isinstance(self.url, str) or len(self.url) > 300:
            raise ConfigError("verification url must be a string of at most 300 characters")

    def page_selected(self, index: int, count: int) -> bool:
        """Whether 0-based page `index` of `count` carries the code (the watermark's page grammar)."""
        return WatermarkSpec(pages=self.pages).page_selected(index, count)


@dataclass(frozen=True)
class SigningSpec:
    """A PAdES signature added after validation (engines/signing.py) with the organisation's key
    ([signing] in the configuration; the key never enters a policy). Encrypted outputs are refused
    (`signing_refused`): a signature over bytes the recipient cannot check without a password proves
    nothing to them, and re-encrypting would change what the validator proved."""

    visible: bool = False
    page: str = "first"  # first | last: where a visible box goes ("last" reads every page object)
    reason: str = "Issued by docfence"
    field_name: str = "DocfenceSignature"

    def __post_init__(self) -> None:
        if not isinstance(self.visible, bool):
            raise ConfigError("signing visible must be true or false")
        if self.page not in ("first", "last"):
            raise ConfigError("signing page must be first or last")
        if not isinstance(self.reason, str) or len(self.reason) > 200:
            raise ConfigError("signing reason must be at most 200 characters")
        if not isinstance(self.field_name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}",
                                                                    self.field_name):
            raise ConfigError("signing field_name must be a letter then letters, digits or _")


SANITIZE_CHOICES = ("keep", "strip", "refuse")


@dataclass(frozen=True)
class SanitizePolicy:
    """What the sanitiser does with a document before it leaves the organisation (engines/sanitize.py).

    active_content: JavaScript (open action, names tree, document/page/field additional actions),
      Launch, URI (outside link annotations), SubmitForm, ImportData and similar actions, embedded
      files, XFA, RichMedia: keep | strip | refuse.
    hidden_data: Info and XMP metadata, embedded files, thumbnails, private page data (/PieceInfo),
      private catalog keys and objects no page, annotation or outline reaches: keep | strip.
    link_uris: URI actions of visible link annotations: keep (the default: a visible link stays a link)
      | strip (the link rectangle stays, it no longer opens anything).
    Default: strip everything hidden or active, keep visible links (documents leave the organisation)."""

    active_content: str = "strip"
    hidden_data: str = "strip"
    link_uris: str = "keep"

    def __post_init__(self) -> None:
        if self.active_content not in SANITIZE_CHOICES:
            raise ConfigError("sanitize.active_content must be keep, strip or refuse")
        if self.hidden_data not in ("keep", "strip"):
            raise ConfigError("sanitize.hidden_data must be keep or strip")
        if self.link_uris not in ("keep", "strip"):
            raise ConfigError("sanitize.link_uris must be keep or strip")

    @classmethod
    def keep_all(cls) -> SanitizePolicy:
        """For documents that stay inside the organisation."""
        return cls(active_content="keep", hidden_data="keep", link_uris="keep")


@dataclass(frozen=True)
class JobPolicy:
    """Everything that decides how a job runs; frozen at submission."""

    kind: Kind = Kind.WATERMARK
    document_class: str = "default"
    mode: Mode = Mode.VECTOR
    dpi: int = 150
    watermark: WatermarkSpec | None = field(default_factory=WatermarkSpec)
    raster_encoding: str = "auto"  # auto | jpeg | png | gray
    # standard: prove by structure, render where only pixels prove; exhaustive: also render and
    # text-extract every page of input and output (slower, same verdicts plus pixel evidence everywhere)
    validation: str = "standard"  # standard | exhaustive
    # owner-password-only files: keep (encryption and permissions written back as they were) | refuse
    owner_password_policy: str = "keep"
    # a mark opaque enough to hide the page's text with no free space for it: refuse | reduce | allow
    # (engines/mark_obscure.py); None (in process only): marks drawn as configured, nothing fitted
    obscure: str | None = "reduce"
    deadline_s: float = 600.0
    lease_ttl_s: float = 30.0
    max_attempts: int = 3
    retry_backoff_s: float = 2.0
    region: str = "local"
    retention_s: float = 30 * 86400.0
    limits: Limits = field(default_factory=Limits)
    report: dict[str, Any] | None = None  # report jobs: template id@version and data reference
    sanitize: SanitizePolicy = field(default_factory=SanitizePolicy)
    # marks drawn besides `watermark` (the first mark), each with its own text or image and placement
    marks: tuple[WatermarkSpec, ...] = ()
    # values of the dynamic fields, resolved at submission (recipient, date, job_id...). None: a policy
    # frozen before fields existed, whose mark text is drawn literally, as it was then.
    fields: dict[str, str] | None = None
    verification: VerificationSpec | None = None  # a QR code recipients check the document with
    signing: SigningSpec | None = None  # a PAdES signature of the validated output

    def __post_init__(self) -> None:
        object.__setattr__(self, "marks", tuple(self.marks))
        if len(self.all_marks()) > MAX_MARKS:
            raise ConfigError(f"at most {MAX_MARKS} marks per job", field="marks")
        if not 36 <= self.dpi <= 600:
            raise ConfigError("dpi must be 36-600")
        if self.deadline_s <= 0 or self.lease_ttl_s <= 0:
            raise ConfigError("deadline and lease TTL must be positive")
        if not 1 <= self.max_attempts <= 100:
            raise ConfigError("max_attempts must be 1-100")
        if self.retry_backoff_s < 0 or self.retention_s <= 0:
            raise ConfigError("retry backoff must be >= 0 and retention positive")
        if self.raster_encoding not in ("auto", "jpeg", "png", "gray"):
            raise ConfigError("raster_encoding must be auto, jpeg, png or gray")
        if self.validation not in VALIDATION_LEVELS:
            raise ConfigError("validation must be standard or exhaustive")
        if self.owner_password_policy not in ("refuse", "keep"):
            raise ConfigError("owner_password_policy must be refuse or keep")
        if self.obscure not in (None, "refuse", "reduce", "allow"):
            raise ConfigError("obscure must be refuse, reduce or allow")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", self.region):
            raise ConfigError("region must be a short lowercase name")

    def caller_fields(self) -> dict[str, str]:
        """Recipient, purpose and reference as the caller gave them (only those given): what the audit
        trail records of who received the document."""
        given = self.fields or {}
        return {name: given[name] for name in CALLER_FIELDS if given.get(name)}

    def all_marks(self) -> tuple[WatermarkSpec, ...]:
        """Every mark of the job in drawing order: `watermark` first, then `marks`."""
        return ((self.watermark,) if self.watermark is not None else ()) + tuple(self.marks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["mode"] = self.mode.value
        if self.watermark is not None:
            d["watermark"]["color"] = list(self.watermark.color)
        d["marks"] = [{**asdict(m), "color": list(m.color)} for m in self.marks]
        if not self.marks:
            del d["marks"]  # policies without extra marks serialise as they always did
        if self.fields is None:
            del d["fields"]
        if self.obscure in (None, "reduce"):
            # the default is not written: the release before the rule refuses policy fields it does not
            # know, and must read every job a rolling upgrade's new servers accept (docs/deploy.md)
            del d["obscure"]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobPolicy:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown policy fields: {', '.join(sorted(unknown))}")
        d = dict(data)
        # absent: the default, also for a policy stored before the rule existed (a job queued across the
        # upgrade gets its marks fitted: a mark that would hide text is moved, shrunk or made lighter)
        d.setdefault("obscure", "reduce")
        if "kind" in d:
            d["kind"] = Kind(d["kind"])
        if "mode" in d:
            d["mode"] = Mode(d["mode"])
        if isinstance(d.get("watermark"), dict):
            d["watermark"] = _spec_from_dict(d["watermark"])
        if isinstance(d.get("marks"), list):
            d["marks"] = tuple(_spec_from_dict(m) for m in d["marks"])
        if isinstance(d.get("limits"), dict):
            d["limits"] = Limits(**d["limits"])
        if isinstance(d.get("sanitize"), dict):
            d["sanitize"] = SanitizePolicy(**d["sanitize"])
        for name, spec_cls in (("verification", VerificationSpec), ("signing", SigningSpec)):
            if isinstance(d.get(name), dict):
                d[name] = spec_cls(**d[name])
        try:
            return cls(**d)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid policy: {exc}") from exc

    def evolve(self, **changes: Any) -> JobPolicy:
        return replace(self, **changes)

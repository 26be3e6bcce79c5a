"""The class features the all-pairs matrix combines, which combinations are possible, a greedy
pairwise covering set of them, and each combination as a `[classes.NAME]` table of its own."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

Combo = dict[str, str]
Pair = tuple[tuple[str, str], tuple[str, str]]

FEATURES: dict[str, tuple[str, ...]] = {
    "mode": ("vector", "raster"),
    "marks": ("text", "png", "svg"),  # the class's marks: text only, or text and a PNG / SVG logo
    "fields": ("none", "caller", "document"),  # mark text: static, {recipient}/{reference}, {page}/{pages}...
    "sanitize": ("strip", "keep", "strip-links"),
    "code": ("off", "on"),
    "signing": ("off", "invisible", "visible"),
    "variant": ("watermark", "report", "pdf/a-3b", "pdf/ua-1"),  # a watermark job, or a report job
    "encrypted": ("no", "yes"),  # the upload is encrypted and sent with its user password
}

#: Mark text per `fields` value (caller fields print nothing on reports: the static words remain).
FIELD_TEXT = {"none": "INTERNAL USE", "caller": "Issued to {recipient} ref {reference}",
              "document": "{page}/{pages} · {job_id} · {date}"}
SANITIZE = {"strip": {}, "keep": {"active_content": "keep", "hidden_data": "keep"},
            "strip-links": {"link_uris": "strip"}}


def possible(combo: Combo) -> bool:
    """Whether a combination applies every feature it names and succeeds. A report job has no upload
    (nothing encrypted) and neither a code nor a signature (docs/verification.md, "Scope"; its own test
    checks it carries none); a report variant needs vector mode (docs/templates.md); an encrypted
    output is never signed (docs/verification.md). The last two have tests of their refusals."""
    report = combo.get("variant", "watermark") != "watermark"
    if report and (combo.get("code", "off"), combo.get("signing", "off"), combo.get("encrypted", "no")) \
            != ("off", "off", "no"):
        return False
    if combo.get("variant", "").startswith("pdf/") and combo.get("mode") == "raster":
        return False
    return not (combo.get("encrypted") == "yes" and combo.get("signing", "off") != "off")


def _all(features: dict[str, tuple[str, ...]]) -> Iterator[Combo]:
    names = list(features)
    for values in itertools.product(*(features[n] for n in names)):
        yield dict(zip(names, values, strict=True))


def pairs_of(combo: Combo) -> set[Pair]:
    items = sorted(combo.items())
    return {(a, b) for a, b in itertools.combinations(items, 2)}


def required_pairs(features: dict[str, tuple[str, ...]], valid: Callable[[Combo], bool]) -> set[Pair]:
    """Every pair of feature values that some possible combination holds."""
    return set().union(*(pairs_of(c) for c in _all(features) if valid(c)))


def covering_set(features: dict[str, tuple[str, ...]], valid: Callable[[Combo], bool]) -> list[Combo]:
    """Possible combinations that together hold every required pair: each step takes the combination
    that covers most pairs still missing (the first such in product order: deterministic)."""
    candidates = [(c, pairs_of(c)) for c in _all(features) if valid(c)]
    missing = required_pairs(features, valid)
    chosen: list[Combo] = []
    while missing:
        combo, pairs = max(candidates, key=lambda cp: len(cp[1] & missing))
        chosen.append(combo)
        missing -= pairs
    return chosen


def class_table(combo: Combo, logos: dict[str, str]) -> dict[str, Any]:
    """The `[classes.NAME]` table that gives a job of this class the combination's features."""
    marks: list[dict[str, Any]] = [{"text": FIELD_TEXT[combo["fields"]], "position": "footer",
                                    "opacity": 0.9, "color": [0.25, 0.25, 0.25]}]
    table: dict[str, Any] = {"mode": combo["mode"], "timezone": "Europe/Berlin",
                             "watermark": {"text": "PAIRWISE CONFIDENTIAL", "opacity": 0.3}}
    if combo["marks"] != "text":
        table["images"] = {"logo": logos[combo["marks"]]}
        marks.append({"image": "logo", "position": "header", "font_size": 28})
    table["marks"] = marks
    if SANITIZE[combo["sanitize"]]:
        table["sanitize"] = SANITIZE[combo["sanitize"]]
    if combo["code"] == "on":
        table["verification"] = {"pages": "last"}
    if combo["signing"] != "off":
        table["signing"] = {"visible": combo["signing"] == "visible"}
    return table

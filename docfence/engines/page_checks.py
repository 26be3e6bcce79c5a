"""Per-page structural proof of a vector output against its input, as a pure function over a page range
(so a long document can be split across processes): page attributes and boxes kept, the original content
streams kept byte-for-byte inside q/Q, resources unchanged except the fresh-named marks, each mark the
expected Artifact Form XObject (with its page's text, e.g. "7/20") on exactly its pages, and which pages
only pixels can prove. A failure says what differed beside what broke (its detail: "/Annots 12 → 11",
"MediaBox [0 0 612 792] → [0 0 595 842]"), found by a second look only on the failure path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pikepdf

from docfence.engines import page_facts as facts
from docfence.engines.content_proof import PageIndex, Same, difference, stream_list
from docfence.engines.geometry import PageGeometry, inherited
from docfence.engines.mark_proof import (
    NAME_PREFIX,
    ExpectedForms,
    expected_wrappers,
    mark_names,
    scan_content,
)
from docfence.engines.marks import MarkSet, PageMark

# Failures are filed under the report check that names what broke.
GEOMETRY, ANNOTS, PAGE_DICT = "page_geometry", "annotations_and_links", "page_dictionary"
CONTENT, RESOURCES, FONTS, TEXT = "content_preserved", "resources_preserved", "fonts", "text_preserved"
MARK = "watermark_structure"
STRUCTURE_CHECKS = (GEOMETRY, ANNOTS, PAGE_DICT, FONTS, CONTENT, RESOURCES, TEXT, MARK)
_OWN_KEYS = frozenset({"/Contents", "/Resources", "/Parent"})
_BOX_KEYS = frozenset({"/MediaBox", "/CropBox", "/BleedBox", "/TrimBox", "/ArtBox", "/Rotate"})


@dataclass
class Pair:
    """Both files opened, their pages in order, and what the marks ask of each page."""

    src_pages: list[pikepdf.Dictionary]
    out_pages: list[pikepdf.Dictionary]
    marks: MarkSet
    selected: list[bool]  # the page gets at least one mark
    src_geos: list[PageGeometry]
    out_geos: list[PageGeometry]
    src_index: PageIndex = field(init=False)
    out_index: PageIndex = field(init=False)

    def __post_init__(self) -> None:
        self.src_index = facts.page_index(self.src_pages)
        self.out_index = facts.page_index(self.out_pages)


@dataclass
class RangeFindings:
    """What the structural checks found on a range of pages (picklable: it crosses process boundaries)."""

    first: int
    stop: int
    failures: dict[str, list[str]] = field(default_factory=dict)
    details: dict[str, list[str]] = field(default_factory=dict)  # what differed, one per failure
    needs_pixels: dict[int, str] = field(default_factory=dict)  # 0-based page -> why pixels must prove it
    links: int = 0

    def fail(self, check: str, page: int, message: str, detail: str | None = None) -> None:
        """File `message` under `check`, and `detail` (what differed; default: the message)."""
        self.failures.setdefault(check, []).append(f"page {page + 1}: {message}")
        self.details.setdefault(check, []).append(f"page {page + 1}: {detail or message}")


class _Prover:
    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.same = Same(pair.src_index, pair.out_index)
        self.forms = ExpectedForms()
        self.form_same = Same()

    def page(self, i: int, found: RangeFindings) -> None:
        a, b = self.pair.src_pages[i], self.pair.out_pages[i]
        boxes = self._attributes(i, a, b, found)
        geo_a, geo_b = self.pair.src_geos[i], self.pair.out_geos[i]
        if geo_a != geo_b or boxes:
            what = "; ".join(geo_a.changes_to(geo_b) or boxes)
            found.fail(GEOMETRY, i, "page boxes or rotation changed", what)
        found.links += len(a.get("/Annots") or []) if isinstance(a.get("/Annots"), pikepdf.Array) else 0
        src_streams, out_streams = stream_list(a.get("/Contents")), stream_list(b.get("/Contents"))
        if src_streams is None or out_streams is None:
            found.fail(CONTENT, i, "content is not a stream or an array of streams")
            found.fail(TEXT, i, "content cannot be compared")
            return
        if self.pair.selected[i]:
            drawn = self.pair.marks.on_page(i, len(self.pair.src_pages))
            names = self._marked_content(i, drawn, src_streams, out_streams, found)
            self._resources(i, a, b, names, found, drawn)
            self._occlusion(i, a, src_streams, drawn, found)
        else:
            if facts.has_watermark(b):
                found.fail(MARK, i, "watermark unexpected on an unselected page")
            if len(src_streams) != len(out_streams) or not all(
                self.same(x, y) for x, y in zip(src_streams, out_streams, strict=False)
            ):
                detail = self._streams_differ(src_streams, out_streams)
                found.fail(CONTENT, i, "content streams changed", detail)
                found.fail(TEXT, i, "content streams changed", detail)
            self._resources(i, a, b, None, found)

    def _attributes(
        self, i: int, a: pikepdf.Dictionary, b: pikepdf.Dictionary, found: RangeFindings
    ) -> list[str]:
        """Every page key besides content, resources and the tree link: same value (links by page number).
        Returns how each box or /Rotate on the page itself differs (inherited ones: see the geometry)."""
        keys_a, keys_b = set(a.keys()) - _OWN_KEYS, set(b.keys()) - _OWN_KEYS
        boxes: list[str] = []
        for key in sorted(keys_a | keys_b):
            if key in keys_a and key in keys_b and self.same(a[key], b[key]):
                continue
            what = difference(self.same, a.get(key), b.get(key), key)
            if key == "/Annots":
                found.fail(ANNOTS, i, "annotations or links changed", what)
            elif key in _BOX_KEYS:
                boxes.append(what)
            else:
                found.fail(PAGE_DICT, i, f"page entry {key} changed", what)
        return boxes

    def _streams_differ(self, src: list[pikepdf.Stream], out: list[pikepdf.Stream], offset: int = 0) -> str:
        """The first of the page's own streams that differs, or how many there are (failure path)."""
        if len(out) != len(src):
            return f"/Contents {len(src)} → {len(out)} streams"
        for k, (x, y) in enumerate(zip(src, out, strict=True)):
            if not self.same(x, y):
                return difference(self.same, x, y, f"/Contents[{k + offset}]")
        return "content streams changed"

    def _marked_content(
        self, i: int, drawn: tuple[PageMark, ...], src: list[pikepdf.Stream], out: list[pikepdf.Stream],
        found: RangeFindings,
    ) -> dict[int, str] | None:
        """[first wrapper, *the page's own streams, last wrapper]; each mark's name when all are drawn
        right (every mark of the page, in order, on its layer, and nothing else)."""
        if len(out) != len(src) + 2:
            found.fail(MARK, i, "watermark missing or content layout changed (structure)",
                       f"/Contents {len(out)} stream(s), {len(src) + 2} expected ({len(src)} of the "
                       "page's own between the mark's two)")
            if not self._contains_run(src, out):
                moved = f"/Contents {len(src)} → {len(out)} streams"
                found.fail(CONTENT, i, "content streams changed", moved)
                found.fail(TEXT, i, "content streams changed", moved)
            return None
        if not all(self.same(x, y) for x, y in zip(src, out[1:-1], strict=True)):
            detail = self._streams_differ(src, out[1:-1], offset=1)
            found.fail(CONTENT, i, "original content streams changed", detail)
            found.fail(TEXT, i, "original content streams changed", detail)
        first, last = out[0].read_bytes(), out[-1].read_bytes()
        names = mark_names(first, last)
        missing = [m.index + 1 for m in drawn if m.index not in names]
        if missing:
            found.fail(MARK, i, f"mark {', '.join(map(str, missing))} missing (structure)")
            return None
        if (first, last) != expected_wrappers(drawn, names):
            found.fail(MARK, i, "watermark wrapper is not the expected q/Q-isolated Artifact (structure)")
            return None
        return {m.index: names[m.index] for m in drawn}

    def _contains_run(self, src: list[pikepdf.Stream], out: list[pikepdf.Stream]) -> bool:
        """The page's own streams appear, in order and unchanged, somewhere in the output's list."""
        return any(
            all(self.same(x, y) for x, y in zip(src, out[k : k + len(src)], strict=True))
            for k in range(len(out) - len(src) + 1)
        )

    def _resources(
        self, i: int, a: pikepdf.Dictionary, b: pikepdf.Dictionary, names: dict[int, str] | None,
        found: RangeFindings, drawn: tuple[PageMark, ...] = (),
    ) -> None:
        """Output resources = input resources (inherited ones included) + the fresh-named mark forms."""
        ra, rb = inherited(a, "/Resources"), inherited(b, "/Resources")
        ra = ra if isinstance(ra, pikepdf.Dictionary) else pikepdf.Dictionary()
        rb = rb if isinstance(rb, pikepdf.Dictionary) else pikepdf.Dictionary()
        marked = self.pair.selected[i]
        keys = set(ra.keys()) | set(rb.keys()) | ({"/XObject"} if marked else set())
        for key in sorted(keys):
            if key == "/XObject" and marked:
                self._xobjects(i, ra.get("/XObject"), rb.get("/XObject"), names, drawn, found)
            elif not (key in ra and key in rb and self.same(ra[key], rb[key])):
                what = difference(self.same, ra.get(key), rb.get(key), f"resource {key}")
                found.fail(RESOURCES, i, f"resource {key} changed", what)
                found.fail(TEXT, i, f"resource {key} changed", what)
                if key == "/Font":
                    found.fail(FONTS, i, "fonts changed", what)

    def _xobjects(self, i: int, xa: Any, xb: Any, names: dict[int, str] | None,
                  drawn: tuple[PageMark, ...], found: RangeFindings) -> None:
        """The input's XObjects unchanged plus one fresh name per mark (when the wrappers were unreadable,
        added mark-prefixed names are let through here: the mark check has already failed)."""
        xa = xa if isinstance(xa, pikepdf.Dictionary) else pikepdf.Dictionary()
        xb = xb if isinstance(xb, pikepdf.Dictionary) else pikepdf.Dictionary()
        added = set(xb.keys()) - set(xa.keys())
        allowed = set(names.values()) if names else {k for k in added if k.startswith(NAME_PREFIX)}
        kept = all(k in xb and self.same(xa[k], xb[k]) for k in xa)
        if not added <= allowed or not kept:
            what = self._xobjects_differ(xa, xb, added - allowed)
            found.fail(RESOURCES, i, "resource /XObject changed", what)
            found.fail(TEXT, i, "resource /XObject changed", what)
        for mark in drawn if names else ():
            name = names[mark.index]  # type: ignore[index]
            if name in xa:
                found.fail(MARK, i, f"mark {mark.index + 1}'s resource name is not fresh")
                continue
            geo = self.pair.src_geos[i]
            if mark.per_page:
                right = name in xb and self.forms.matches(mark, geo, xb[name], self.form_same)
            else:
                right = name in xb and self.form_same(self.forms.form(mark, geo), xb[name])
            if not right:
                what = "page geometry and page number" if mark.per_page else "page geometry"
                found.fail(MARK, i, f"mark {mark.index + 1}'s form is not the expected one for this {what}")

    def _xobjects_differ(self, xa: pikepdf.Dictionary, xb: pikepdf.Dictionary, extra: set[str]) -> str:
        """The input's XObjects missing or changed, and the names added that are no mark's (failure path)."""
        what = [f"{k} removed" for k in sorted(k for k in xa.keys() if k not in xb)]  # noqa: SIM118
        what += [difference(self.same, xa[k], xb[k], k) for k in sorted(xa.keys())
                 if k in xb and not self.same(xa[k], xb[k])]
        what += [f"{k} added" for k in sorted(extra)]
        return "resource /XObject: " + ", ".join(what[:4]) + (", …" if len(what) > 4 else "")

    def _occlusion(
        self, i: int, a: pikepdf.Dictionary, src: list[pikepdf.Stream], drawn: tuple[PageMark, ...],
        found: RangeFindings,
    ) -> None:
        """Structure proves the marks visible only when nothing can draw over them; else pixels must."""
        underlay = any(m.spec.layer == "underlay" for m in drawn)
        scan = scan_content(src, paints_wanted=underlay)
        if not scan.balanced:
            found.needs_pixels[i] = "page content q/Q balance not provable by structure"
        elif underlay and scan.paints:
            found.needs_pixels[i] = "page content paints over the underlay"
        elif _has_appearances(a):
            found.needs_pixels[i] = "annotation appearances are drawn above the mark"


def _has_appearances(page: pikepdf.Dictionary) -> bool:
    annots = page.get("/Annots")
    if not isinstance(annots, pikepdf.Array):
        return False
    return any(isinstance(x, pikepdf.Dictionary) and "/AP" in x for x in annots)


def prove_range(pair: Pair, first: int, stop: int) -> RangeFindings:
    """Structural proof of pages [first, stop) (0-based); pure: reads `pair`, returns findings."""
    found = RangeFindings(first, stop)
    prover = _Prover(pair)
    for i in range(first, stop):
        prover.page(i, found)
    return found


def merge(parts: list[RangeFindings]) -> RangeFindings:
    parts = sorted(parts, key=lambda p: p.first)
    total = RangeFindings(parts[0].first if parts else 0, parts[-1].stop if parts else 0)
    for part in parts:
        for check, messages in part.failures.items():
            total.failures.setdefault(check, []).extend(messages)
        for check, messages in part.details.items():
            total.details.setdefault(check, []).extend(messages)
        total.needs_pixels.update(part.needs_pixels)
        total.links += part.links
    return total


__all__ = ["STRUCTURE_CHECKS", "Pair", "RangeFindings", "merge", "prove_range"]

"""The marks of one job as the engines see them: every mark's spec, the job's resolved field values, and
what each page gets (which marks, with which text), shared by the vector and raster engines and the
validator so all three agree on what a page must show, the per-page fits included (a mark moved or made
fainter where it would hide the page's own text: engines/mark_obscure.py)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from docfence.core.fields import fill, split_runs
from docfence.core.policy import JobPolicy, WatermarkSpec

Runs = tuple[tuple[str, bool], ...]  # (text, changes per page)


@dataclass(frozen=True)
class PageMark:
    """One mark as drawn on one page. `index` is its place in the job's list (its resource name is
    `/DfWm<index>`); `text` and `runs` are filled for this page ("" and () for an image mark)."""

    index: int
    spec: WatermarkSpec
    text: str
    runs: Runs

    @property
    def per_page(self) -> bool:
        """Drawn with a form of its own on each page (its text holds `{page}`)."""
        return any(dynamic for _, dynamic in self.runs)


Fit = tuple[int, int, WatermarkSpec]  # (0-based page, mark index, the spec drawn there instead)


@dataclass(frozen=True)
class MarkSet:
    """Hashable (caches key on it). `literal`: a policy frozen before fields existed, whose text is
    drawn exactly as written. `obscure`: what the class does where a mark would hide the page's text
    (core.marks.OBSCURE_RULES; None: a policy frozen before the rule existed, its marks drawn as configured).
    `fitted`: the pages where a mark is drawn with another spec than its own (mark_obscure.fit_marks),
    sorted by page and mark."""

    marks: tuple[WatermarkSpec, ...]
    values: tuple[tuple[str, str], ...] = ()
    literal: bool = False
    obscure: str | None = None
    fitted: tuple[Fit, ...] = ()

    @classmethod
    def of(cls, policy: JobPolicy) -> MarkSet:
        values = tuple(sorted((policy.fields or {}).items()))
        rule = getattr(policy, "obscure", None)  # JobPolicy.obscure: classes' `obscure` key
        return cls(policy.all_marks(), values, literal=policy.fields is None,
                   obscure=rule if isinstance(rule, str) else None)

    @functools.cached_property
    def _fits(self) -> dict[tuple[int, int], WatermarkSpec]:
        return {(page, mark): spec for page, mark, spec in self.fitted}

    @classmethod
    def coerce(cls, marks: MarkSet | WatermarkSpec) -> MarkSet:
        """A lone spec (the single-mark API of earlier callers) as a set of one, drawn literally."""
        return marks if isinstance(marks, MarkSet) else cls((marks,), (), literal=True)

    def selected(self, index: int, count: int) -> bool:
        """Whether page `index` (0-based) of `count` gets any mark."""
        return any(m.page_selected(index, count) for m in self.marks)

    def on_page(self, index: int, count: int) -> tuple[PageMark, ...]:
        """The marks page `index` of `count` gets, in drawing order, with their text for that page."""
        drawn = []
        number = str(index + 1)
        for k, (spec, static, runs) in enumerate(_compiled(self.marks, self.values, self.literal, count)):
            if not spec.page_selected(index, count):
                continue
            if static is not None:
                drawn.append(static)
            else:
                page_runs = tuple((text.replace("\x00", number), dynamic) for text, dynamic in runs)
                drawn.append(PageMark(k, spec, "".join(text for text, _ in page_runs), page_runs))
        if self.fitted:
            fits = self._fits
            drawn = [dataclasses.replace(m, spec=fits[(index, m.index)]) if (index, m.index) in fits else m
                     for m in drawn]
        return tuple(drawn)

    def min_opacity(self) -> float:
        return min((m.opacity for m in self.marks), default=1.0)


@functools.lru_cache(maxsize=4)
def _compiled(marks: tuple[WatermarkSpec, ...], values: tuple[tuple[str, str], ...], literal: bool,
              count: int) -> tuple[tuple[WatermarkSpec, PageMark | None, Runs], ...]:
    """Per mark: the PageMark every page shares (static marks), or the runs with every field but
    `{page}` filled (split_runs keeps `{page}` as a run of its own, filled per page). Keyed on the marks,
    not the MarkSet: a set's per-page fits would make every page's lookup hash them all."""
    filled = {**dict(values), "page": "\x00", "pages": str(count)}
    out: list[tuple[WatermarkSpec, PageMark | None, Runs]] = []
    for k, spec in enumerate(marks):
        if spec.image is not None:
            out.append((spec, PageMark(k, spec, "", ()), ()))
        elif literal:
            out.append((spec, PageMark(k, spec, spec.text, ((spec.text, False),)), ()))
        else:
            runs = split_runs(spec.text, filled)
            if any(dynamic for _, dynamic in runs):
                out.append((spec, None, runs))
            else:
                out.append((spec, PageMark(k, spec, fill(spec.text, filled), runs), ()))
    return tuple(out)


__all__ = ["Fit", "MarkSet", "PageMark", "Runs"]

"""Raster pages split into ranges across the cores: the output is the serial run's, page for page; a
range whose process dies fails as render_crashed; a range's coded refusal keeps its code."""

from __future__ import annotations

import io
import os

import pikepdf
import pytest

from docfence.core.errors import CorruptContent, RenderCrashed
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import raster
from docfence.engines.parallel import usable_cores
from docfence.engines.preflight import preflight
from docfence.samples import pdfs

POLICY = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(pages="odd"))
split_only = pytest.mark.skipif(usable_cores() < 2, reason="one core: pages are not split")


def _images(data: bytes) -> list[bytes]:
    with pikepdf.open(io.BytesIO(data)) as pdf:
        return [p.obj.Resources.XObject.DfIm.read_raw_bytes() for p in pdf.pages]


def _run(data: bytes) -> bytes:
    return raster.watermark_raster(data, preflight(data, POLICY), POLICY)


@split_only
def test_ranges_give_the_serial_output_page_for_page(monkeypatch: pytest.MonkeyPatch) -> None:
    data = pdfs.many_pages(7)
    split = _images(_run(data))
    monkeypatch.setattr(raster, "_PARALLEL_FROM_PAGES", 10**6)
    serial = _images(_run(data))
    assert len(split) == 7 and split == serial
    assert split[0] != split[1]  # page 1 is marked and page 2 is not: the order is checked


@split_only
def test_a_range_whose_process_dies_fails_as_render_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    parent, real = os.getpid(), raster._encode_pages

    def dies_in_child(*args: object) -> list[raster.EncodedImage]:
        if os.getpid() != parent:
            os._exit(3)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(raster, "_encode_pages", dies_in_child)
    with pytest.raises(RenderCrashed):
        _run(pdfs.many_pages(6))


@split_only
def test_a_coded_refusal_in_a_range_keeps_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    parent, real = os.getpid(), raster._encode_pages

    def refuses_in_child(*args: object) -> list[raster.EncodedImage]:
        if os.getpid() != parent:
            raise CorruptContent("planted")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(raster, "_encode_pages", refuses_in_child)
    with pytest.raises(CorruptContent, match="planted"):
        _run(pdfs.many_pages(6))


@split_only
def test_ranges_inherit_the_mark_layers_built_before_the_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct mark layer is built once, before forking, not once per range process."""
    from docfence.engines import mark_pixels

    parent, real = os.getpid(), mark_pixels._render_rgba
    mark_pixels.watermark_layer.cache_clear()

    def parent_only(*args: object, **kwargs: object) -> object:
        if os.getpid() != parent:
            raise AssertionError("a range process built a mark layer")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mark_pixels, "_render_rgba", parent_only)
    data = pdfs.mixed_sizes()
    policy = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec())
    assert raster.watermark_raster(data, preflight(data, policy), policy)

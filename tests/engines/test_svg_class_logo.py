"""An SVG class logo through the service, configured exactly as docs/watermarks.md shows (its TOML example
with the docs' own `marks-example-logo.svg`): the submission through the real API is accepted (it
answered 500 when checking the SVG read a page of a Pdf already destroyed), a real worker publishes the
PDF, and its page draws the logo as vector graphics, in blue ink, in the header."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pikepdf
import pytest
from PIL import Image

from docfence.api import create_app
from docfence.blobs.regions import RegionRouter
from docfence.client import DocfenceClient
from docfence.config import Settings, WorkerConfig, load_settings
from docfence.core.errors import ConfigError
from docfence.samples.pdfs import many_pages
from docfence.service import build_service
from docfence.store.base import open_store
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.testing.servers import running
from docfence.testing.stores import temporary_pg_database
from docfence.worker.runner import Worker

DOCS = Path(__file__).resolve().parents[2] / "docs"
LOGO = DOCS / "img" / "marks-example-logo.svg"
DPI = 72  # one pixel per point: the header band is easy to name


def docs_class_toml() -> str:
    """The TOML example of docs/watermarks.md that configures the SVG logo, its path made this file's."""
    blocks = re.findall(r"```toml\n(.*?)```", (DOCS / "watermarks.md").read_text(), re.S)
    chosen = [block for block in blocks if "images = {" in block and 'image = "logo"' in block]
    assert len(chosen) == 1, "docs/watermarks.md has no single TOML example with a class logo"
    path = re.search(r'images = \{ logo = "([^"]+)" \}', chosen[0])
    assert path is not None and path.group(1).endswith(".svg")
    return str(chosen[0]).replace(path.group(1), str(LOGO))


@contextmanager
def served(tmp: Path, database_url: str) -> Iterator[tuple[Settings, DocfenceClient]]:
    config = tmp / "docfence.toml"
    config.write_text(f'database_url = "{database_url}"\nstorage_url = "file://{tmp}/objects"\n\n'
                      + docs_class_toml())
    settings = dataclasses.replace(load_settings(config, env={}), limits=LONG_BUDGET_LIMITS,
                                   worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False))
    store = open_store(settings.database_url)
    try:
        service = build_service(settings, store)
        key = service.create_api_key("acme", ("submit", "read"), name="test")[1]
        app = create_app(settings, service=service)
        with running(app) as base_url, DocfenceClient(base_url, key) as client:
            yield settings, client
    finally:
        store.close()


def blue_pixels(pdf: Path, out: Path) -> list[tuple[int, int]]:
    """(x, y) of page 1's pixels at 72 DPI in the logo's blues (blended at the mark's opacity): the
    class watermark is red, the footer grey and the sample's text black, so only the logo is blue."""
    subprocess.run(["pdftoppm", "-r", str(DPI), "-f", "1", "-l", "1", "-singlefile", "-png", str(pdf),
                    str(out)], check=True, capture_output=True, timeout=60)
    with Image.open(f"{out}.png") as img:
        width = img.size[0]
        rgb = img.convert("RGB").tobytes()  # r, g, b bytes, row by row
    return [(i // 3 % width, i // 3 // width) for i in range(0, len(rgb), 3)
            if rgb[i + 2] - rgb[i] > 30 and rgb[i + 2] - rgb[i + 1] > 20]


def svg_forms(pdf: Path) -> list[str]:
    """The names of page 1's mark forms whose drawing is a Form (an SVG; a PNG would be an Image)."""

    def xobjects(obj: pikepdf.Object) -> dict[str, pikepdf.Object]:
        resources = obj.get("/Resources") if isinstance(obj, pikepdf.Dictionary | pikepdf.Stream) else None
        found = resources.get("/XObject") if isinstance(resources, pikepdf.Dictionary) else None
        return {str(k): v for k, v in found.items()} if isinstance(found, pikepdf.Dictionary) else {}

    with pikepdf.open(pdf) as doc:
        names = []
        for name, mark in xobjects(doc.pages[0].obj).items():
            for piece in xobjects(mark).values():
                art = xobjects(piece).get("/DfArt")
                if isinstance(art, pikepdf.Stream) and art.get("/Subtype") == "/Form" \
                        and art.read_bytes().strip():
                    names.append(name)
        return names


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/docfence.db"
        return
    with temporary_pg_database("docfence_svg_logo") as url:
        yield url


def test_a_class_svg_logo_is_accepted_and_drawn_in_the_published_pdf(
    tmp_path: Path, database_url: str
) -> None:
    source = tmp_path / "three.pdf"
    source.write_bytes(many_pages(3))
    assert blue_pixels(source, tmp_path / "source") == []  # nothing blue before the logo is drawn
    with served(tmp_path, database_url) as (settings, client):
        job = client.submit(source, document_class="external", recipient="Dr. Ada Example")
        assert job.state == "queued"
        store = open_store(settings.database_url)
        try:
            Worker(settings, store, RegionRouter.from_config(settings.region_urls())).run(until_idle=True)
        finally:
            store.close()
        done = client.get(job.id)
        assert done.state == "succeeded", done.raw.get("error")
        published = client.download(job.id, tmp_path / "out.pdf")

    assert svg_forms(published), "page 1 draws no mark form holding the SVG's vector drawing"
    blue = blue_pixels(published, tmp_path / "published")
    with pikepdf.open(published) as doc:
        page_height = float(doc.pages[0].mediabox[3]) - float(doc.pages[0].mediabox[1])
    # the logo is 28 pt tall in the header: plenty of its ink, all of it in the page's top band
    assert len(blue) > 300, f"only {len(blue)} blue pixels: the logo is not drawn"
    assert max(y for _, y in blue) < 0.15 * page_height * DPI / 72
    assert max(y for _, y in blue) - min(y for _, y in blue) <= 28 + 2


def test_a_class_logo_that_cannot_be_drawn_stops_start_up_naming_it(tmp_path: Path) -> None:
    """A class SVG outside the supported subset (here a <text> element) used to load and then refuse
    every submission to its class with a 400; now the service does not start, and says which logo."""
    bad = tmp_path / "bad-logo.svg"
    bad.write_text(LOGO.read_text().replace("</svg>", '<text x="1" y="9">Clinic</text></svg>'))
    config = tmp_path / "docfence.toml"
    config.write_text(f'database_url = "sqlite:///{tmp_path}/db.sqlite"\nstorage_url = "file://{tmp_path}/o"\n\n'
                      + docs_class_toml().replace(str(LOGO), str(bad)))
    settings = load_settings(config, env={})
    store = open_store(settings.database_url)
    try:
        with pytest.raises(ConfigError, match=r"\[classes\.\w+\]\.images\.logo: "):
            build_service(settings, store)
    finally:
        store.close()

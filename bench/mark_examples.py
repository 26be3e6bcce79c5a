"""Renders the example pictures of docs/watermarks.md: each layout applied by the real engines (with full
validation) to a generated 3-page text document, page 2 of the output rendered by poppler's pdftoppm
into docs/img/marks-*.png. Prints JSON: the files written and whether each output validated.

Usage: python bench/mark_examples.py [--out docs/img] [--dpi 60]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import base64
import json
import subprocess
import tempfile
from pathlib import Path

from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import watermark_document
from docfence.samples import pdfs

LOGO_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="160" height="48" viewBox="0 0 160 48">'
            b'<path d="M24 2 L44 9 V24 C44 36 35 43 24 46 C13 43 4 36 4 24 V9 Z" fill="#1d4ed8"/>'
            b'<path d="M15 24 L22 31 L34 17" fill="none" stroke="#ffffff" stroke-width="4"/>'
            b'<rect x="54" y="12" width="100" height="8" rx="4" fill="#1d4ed8"/>'
            b'<rect x="54" y="28" width="70" height="8" rx="4" fill="#93c5fd"/></svg>')
FIELDS = {"recipient": "Dr. Ada Example", "purpose": "second opinion", "reference": "REF-2026-0042",
          "date": "2026-12-01", "datetime": "2026-12-01 10:30 CET", "job_id": "01JDEXAMPLE7Q4",
          "tenant": "acme", "sha8": "0123abcd"}
FOOTER = WatermarkSpec.from_mapping({"text": "{recipient} · {date} · {job_id} · {page}/{pages}",
                                     "position": "footer", "opacity": 0.9, "color": (0.25, 0.25, 0.25)})
LOGO = WatermarkSpec(image="data:image/svg+xml;base64," + base64.b64encode(LOGO_SVG).decode(),
                     position="header", opacity=0.9, font_size=28)


def layouts() -> dict[str, JobPolicy]:
    diagonal = WatermarkSpec(text="CONFIDENTIAL")
    issued = WatermarkSpec.from_mapping({"text": "{recipient} · {reference}", "position": "tiled",
                                         "opacity": 0.3, "layer": "underlay", "color": (0.1, 0.3, 0.7)})
    return {
        "diagonal-footer": JobPolicy(watermark=diagonal, marks=(FOOTER,), fields=dict(FIELDS)),
        "logo-footer": JobPolicy(watermark=LOGO, marks=(diagonal, FOOTER), fields=dict(FIELDS)),
        "tiled-underlay": JobPolicy(watermark=issued, marks=(FOOTER,), fields=dict(FIELDS)),
        "raster-logo-footer": JobPolicy(mode=Mode.RASTER, dpi=100, watermark=LOGO, marks=(diagonal, FOOTER),
                                        fields=dict(FIELDS)),
    }


def render(pdf: bytes, target: Path, dpi: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "out.pdf"
        src.write_bytes(pdf)
        subprocess.run(["pdftoppm", "-png", "-r", str(dpi), "-f", "2", "-l", "2", "-singlefile", str(src),
                        str(target.with_suffix(""))], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--dpi", type=int, default=60)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    document = pdfs.many_pages(3)
    written = []
    for name, policy in layouts().items():
        result = watermark_document(document, policy)
        target = args.out / f"marks-{name}.png"
        render(result.output, target, args.dpi)
        written.append({"file": str(target), "validated": bool(result.validation["ok"]),
                        "mode": result.mode})
    (args.out / "marks-example-logo.svg").write_bytes(LOGO_SVG)
    print(json.dumps({"pictures": written}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

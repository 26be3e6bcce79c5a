"""Renders the example pictures of docs/watermarks.md: each layout applied by the real engines (with full
validation) to a generated 3-page text document, page 2 of the output rendered by poppler's pdftoppm
into docs/img/marks-*.png, and the footer case: a form whose own footer line sits near the bottom edge,
marked as before the `obscure` rule (the footer over the line) and as now (the footer in the free band
below it), the bottom of the page rendered into marks-footer-before.png and marks-footer-after.png.
Prints JSON: the files written and whether each output validated.

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
import io
import json
import subprocess
import tempfile
from pathlib import Path

import pikepdf

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


def form_page() -> bytes:
    """A Letter form page: body lines, and the form's own footer line 22 pt above the bottom edge."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name.Helvetica))
    lines = [(72, 720 - 18 * k, 11, f"Field {k + 1}: ____________________________") for k in range(12)]
    lines += [(72, 22, 9, "Form XYZ-1490S version 04/18"), (470, 22, 9, "Page 1 of 1")]
    ops = "".join(f"BT /F1 {s} Tf {x} {y} Td ({t}) Tj ET\n" for x, y, s, t in lines)
    pdf.pages.append(pikepdf.Page(pikepdf.Dictionary(
        Type=pikepdf.Name.Page, MediaBox=pikepdf.Array([0, 0, 612, 792]),
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)),
        Contents=pdf.make_stream(ops.encode()))))
    out = io.BytesIO()
    pdf.save(out, deterministic_id=True)
    return out.getvalue()


def footer_case(out: Path) -> list[dict[str, object]]:
    """The bottom 80 pt of the form page at 110 DPI, marked before the `obscure` rule and now."""
    document, written = form_page(), []
    policy = JobPolicy(watermark=WatermarkSpec(text="CONFIDENTIAL"), marks=(FOOTER,), fields=dict(FIELDS))
    for name, rule in (("before", None), ("after", "reduce")):
        result = watermark_document(document, policy.evolve(obscure=rule))
        target = out / f"marks-footer-{name}.png"
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "out.pdf"
            src.write_bytes(result.output)
            subprocess.run(["pdftoppm", "-png", "-r", "110", "-singlefile", "-x", "0", "-y",
                            str(round((792 - 80) * 110 / 72)), "-W", str(round(612 * 110 / 72)), "-H",
                            str(round(80 * 110 / 72)), str(src), str(target.with_suffix(""))], check=True)
        written.append({"file": str(target), "validated": bool(result.validation["ok"]), "mode": result.mode})
    return written


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
    written += footer_case(args.out)
    (args.out / "marks-example-logo.svg").write_bytes(LOGO_SVG)
    print(json.dumps({"pictures": written}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

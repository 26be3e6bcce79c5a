"""Renders the example picture of docs/verification.md: a generated one-page document through the real
stages (marks with validation, the verification code and its proof, a visible signature and its proof),
rendered by poppler's pdftoppm into docs/img/verification-code-signature.png. Prints JSON: the file
written, the checks that ran, and what zbarimg reads from a 150 DPI render.

Usage: python bench/verification_example.py [--out docs/img] [--dpi 72]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from docfence.core.policy import JobPolicy, SigningSpec, VerificationSpec, WatermarkSpec
from docfence.engines import watermark_document
from docfence.engines.issue import issue, sign_validated
from docfence.engines.signing import SigningKey
from docfence.samples import pdfs
from docfence.testing.signing_ca import make_test_ca

URL = "https://verify.example.org/v1/verify/01JDEXAMPLE7Q4?c=K7QF2M4XJ3TZ6P5A"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img")
    parser.add_argument("--dpi", type=int, default=72)
    args = parser.parse_args()
    footer = WatermarkSpec.from_mapping({"text": "{recipient} · {date} · {job_id}", "position": "footer",
                                         "opacity": 0.9, "color": (0.25, 0.25, 0.25)})
    fields = {"recipient": "Dr. Ada Example", "date": "2026-12-01", "job_id": "01JDEXAMPLE7Q4"}
    policy = JobPolicy(watermark=WatermarkSpec(text="CONFIDENTIAL"), marks=(footer,), fields=fields,
                       verification=VerificationSpec(url=URL, pages="last"),
                       signing=SigningSpec(visible=True, reason="Issued by Example Health"))
    made = make_test_ca()
    result = watermark_document(pdfs.many_pages(1), policy)
    coded = issue(result.output, result.validation, policy)
    signed, report = sign_validated(coded, policy, SigningKey.from_pkcs12(made.pkcs12, made.password))
    target = Path(args.out) / "verification-code-signature.png"
    with tempfile.TemporaryDirectory() as tmp:
        pdf = Path(tmp) / "issued.pdf"
        pdf.write_bytes(signed)
        subprocess.run(["pdftoppm", "-png", "-r", str(args.dpi), "-singlefile", str(pdf),
                        str(target.with_suffix(""))], check=True)
        subprocess.run(["pdftoppm", "-png", "-r", "150", "-singlefile", str(pdf), f"{tmp}/p150"], check=True)
        read = subprocess.run(["zbarimg", "-q", "--raw", f"{tmp}/p150.png"], capture_output=True, text=True)
    checks = [*result.validation["checks"], *report["checks"]]
    print(json.dumps({"written": str(target), "ok": all(c["ok"] for c in checks),
                      "checks": [c["name"] for c in checks][-4:], "zbarimg_150dpi": read.stdout.split()},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

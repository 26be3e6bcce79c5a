"""Run one corpus file through `process` in a child process and print one JSON line (used by test_corpus).

Usage: python corpus_child.py PATH MODE OWNER_POLICY [PASSWORD]
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pikepdf

from docfence.core.errors import DocumentError
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import watermark_document


def main(argv: list[str]) -> int:
    path, mode, owner_policy = argv[0], argv[1], argv[2]
    password = argv[3] if len(argv) > 3 else None
    spec = WatermarkSpec(text="Vertraulich \u2013 Dr. Müller / 患者")
    policy = JobPolicy(mode=Mode(mode), watermark=spec, owner_password_policy=owner_policy)
    try:
        result = watermark_document(Path(path).read_bytes(), policy, password=password)
    except DocumentError as exc:
        failed = [c["name"] for c in getattr(exc, "report", {"checks": []})["checks"] if not c["ok"]]
        print(json.dumps({"code": exc.code, "message": exc.message, "failed": failed}))
        return 0
    out = pikepdf.open(io.BytesIO(result.output), password=password or "")
    print(json.dumps({"code": "ok", "pages": result.pages, "encrypted": out.is_encrypted}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

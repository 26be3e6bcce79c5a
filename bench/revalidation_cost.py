"""What re-validating a signing class's output in a fresh render process would cost (worth asking because
the signature covers bytes that only the render process which parsed the untrusted input checked). Per
document, in one warm process: CPU ms of the render (engines.watermark_document, its validation
included), of the validation alone (engines.validate on the same source and output: the least a re-check
must redo) and of the signing stage, each with the CPU of the subprocesses it ran (qpdf, pdfinfo). CPU
time, not wall time, so the figure moves less with the machine's load; the load average is printed with it.

Usage: python bench/revalidation_cost.py [--repeat N] [--pages 1,20]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import json
import platform
import resource
import statistics
from collections.abc import Callable
from typing import Any

from docfence import engines
from docfence.core.policy import JobPolicy, SigningSpec, WatermarkSpec
from docfence.engines.issue import sign_validated
from docfence.engines.marks import MarkSet
from docfence.engines.signing import SigningKey
from docfence.engines.validate import validate
from docfence.samples import pdfs
from docfence.testing.signing_ca import make_test_ca


def cpu_ms() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime) * 1000.0


def cpu_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    fn()  # warm: imports and caches, as in the zygote
    samples_ms, result = [], None
    for _ in range(repeat):
        before = cpu_ms()
        result = fn()
        samples_ms.append(cpu_ms() - before)
    return round(statistics.median(samples_ms), 1), result


def measure(pages: int, repeat: int, key: SigningKey) -> dict[str, Any]:
    policy = JobPolicy(watermark=WatermarkSpec(text="CONFIDENTIAL"), signing=SigningSpec())
    data = pdfs.many_pages(pages)
    render_ms, result = cpu_of(lambda: engines.watermark_document(data, policy), repeat)
    validate_ms, _ = cpu_of(lambda: validate(data, result.output, MarkSet.of(policy), mode=policy.mode.value,
                                             dpi=policy.dpi, sanitize=policy.sanitize,
                                             level=policy.validation), repeat)
    sign_ms, _ = cpu_of(lambda: sign_validated(result.output, policy, key), repeat)
    return {"pages": pages, "render_cpu_ms": render_ms, "validate_cpu_ms": validate_ms,
            "sign_cpu_ms": sign_ms, "validate_share_of_render": round(validate_ms / render_ms, 2),
            "revalidation_adds_to_signed_job": round(validate_ms / (render_ms + sign_ms), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pages", default="1,20")
    args = parser.parse_args()
    made = make_test_ca()
    key = SigningKey.from_pkcs12(made.pkcs12, made.password)
    rows = [measure(int(n), args.repeat, key) for n in args.pages.split(",")]
    print(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                      "loadavg_1m_at_end": round(os.getloadavg()[0], 2), "repeat": args.repeat,
                      "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

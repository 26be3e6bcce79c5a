"""Signing and verification-code stage benchmark: what each adds per document, on generated 1- and
20-page documents and the dense 2,000-page one, in one warm process (as a render process forked from the
warm zygote runs them). The target: signing adds <= 50 ms per document plus the hash of its
bytes. Signing hashes the file once to sign and once to validate, so `overhead` = sign + prove - 2 x
sha256 of the signed bytes; all three are also printed, each as wall time and as this process's CPU time
(getrusage: user + system), which a machine loaded by other work inflates far less. The key is a
throwaway CA's (RSA 2048), opened once from PKCS#12 as the worker does at start-up and handed over as the
render process receives it. `--pdf PATH` adds a document of your own (watermarked first, as a job's).
`sandbox`: the whole sign task of a worker (fork from the sign zygote, sign, prove, write, exit) on the
1-page document, the dense one and each `--pdf`, against the same target.

Usage: python bench/signing.py [--json] [--repeat N] [--quick] [--no-sandbox] [--pdf PATH ...]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import hashlib
import inspect
import json
import platform
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

from docfence import engines
from docfence.benchmarks.dense import dense_pdf
from docfence.core.clock import monotonic
from docfence.core.policy import JobPolicy, SigningSpec, VerificationSpec
from docfence.engines import signing, verify_code
from docfence.samples import pdfs
from docfence.testing.signing_ca import make_test_ca

URL = "https://verify.example.org/v1/verify/01JABCDEFGHJKMNPQRSTVWXYZ0?c=ABCDEFGHJKMNPQRS"
TARGET_MS = 50.0


def cpu_ms() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return (used.ru_utime + used.ru_stime) * 1000


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any, list[float]]:
    """Wall and CPU milliseconds of each of `repeat` calls, and the last result."""
    times, cpu, result = [], [], None
    for _ in range(repeat):
        started, cpu_started = monotonic(), cpu_ms()
        result = fn()
        times.append((monotonic() - started) * 1000)
        cpu.append(cpu_ms() - cpu_started)
    return times, result, cpu


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 2)}


def measure(name: str, data: bytes, key: signing.SigningKey, repeat: int, with_code: bool) -> dict[str, Any]:
    marked = engines.watermark_document(data, JobPolicy()).output
    out: dict[str, Any] = {"document": name, "bytes": len(marked), "objects": _objects(marked)}
    for visible in (False, True):
        spec = SigningSpec(visible=visible)
        sign_t, signed, sign_c = timed(lambda spec=spec: signing.sign(marked, spec, key), repeat)
        prove_t, checks, prove_c = timed(
            lambda spec=spec, signed=signed: signing.prove(signed, spec, key, **_validated(marked)), repeat)
        assert all(c["ok"] for c in checks), checks
        hash_t, _, hash_c = timed(lambda signed=signed: hashlib.sha256(signed).digest(), repeat)
        overhead = [s + p - 2 * h for s, p, h in zip(sign_t, prove_t, hash_t, strict=True)]
        overhead_c = [s + p - 2 * h for s, p, h in zip(sign_c, prove_c, hash_c, strict=True)]
        out["visible" if visible else "invisible"] = {
            "sign": summary(sign_t), "prove": summary(prove_t), "sha256": summary(hash_t),
            "overhead": summary(overhead), "meets_target": statistics.median(overhead) <= TARGET_MS,
            "cpu": {"sign": summary(sign_c), "prove": summary(prove_c), "sha256": summary(hash_c),
                    "overhead": summary(overhead_c),
                    "meets_target": statistics.median(overhead_c) <= TARGET_MS}}
    if not with_code:
        return out
    code = VerificationSpec(url=URL, pages="last")
    stamp_t, stamped, _ = timed(lambda: verify_code.stamp(marked, code, mode="vector", dpi=150), repeat)
    check_t, checks, _ = timed(lambda: verify_code.prove(marked, stamped, code, mode="vector", dpi=150),
                               repeat)
    assert all(c["ok"] for c in checks), checks
    out["verification_code"] = {"stamp": summary(stamp_t), "prove": summary(check_t)}
    return out


def _validated(marked: bytes) -> dict[str, bytes]:
    """prove's `validated=` where it has one, so this bench also measures older code (an A/B with
    PYTHONPATH set to another checkout)."""
    return {"validated": marked} if "validated" in inspect.signature(signing.prove).parameters else {}


def _objects(data: bytes) -> int:
    import io

    import pikepdf

    with pikepdf.open(io.BytesIO(data)) as pdf:
        return len(pdf.objects)


def through_sandbox(key: signing.SigningKey, p12: str, password: str, repeat: int,
                    documents: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """Wall time of the worker's signing task (fork from the warm zygote, read, sign, prove, write,
    exit) on each document, watermarked first as a job's: what signing adds to a job. The zygote reads
    a configuration with a signing class, so it imports pyHanko once, as a worker's does."""
    import tempfile
    from pathlib import Path

    from docfence.sandbox import Sandbox, Task

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = folder / "docfence.toml"
        config.write_text(f'[signing]\npkcs12 = "{p12}"\n[classes.signed.signing]\n')
        os.environ["DOCFENCE_CONFIG"], os.environ["DOCFENCE_SIGNING_PKCS12_PASSWORD"] = str(config), password
        policy = JobPolicy(signing=SigningSpec())
        with Sandbox("sign") as sandbox:
            sandbox.start()
            time.sleep(15.0)  # idle: the zygote's later warm-up steps (pyHanko's warm-up among them) run
            for name, data in documents:
                (folder / "in.pdf").write_bytes(engines.watermark_document(data, JobPolicy()).output)
                task = Task("sign", folder / "in.pdf", folder / "out.pdf", policy, signing=key.to_request())
                times, cpu = [], []
                for _ in range(repeat):
                    started = monotonic()
                    outcome = sandbox.run(task)
                    times.append((monotonic() - started) * 1000)
                    assert outcome.ok, outcome
                    cpu.append(float(outcome.process["cpu_ms"]["task"]))  # the signing process's own CPU
                signed = (folder / "out.pdf").read_bytes()
                hash_t, _, _ = timed(lambda signed=signed: hashlib.sha256(signed).digest(), repeat)
                wall = summary(times)
                out.append({"document": name, "sign_task_wall": wall, "sign_task_cpu": summary(cpu),
                            "sha256_ms": summary(hash_t)["median_ms"],
                            "meets_target": wall["median_ms"] <= TARGET_MS + statistics.median(hash_t)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="skip the 2,000-page document")
    parser.add_argument("--no-sandbox", action="store_true", help="skip the sign task through the sandbox")
    parser.add_argument("--no-code", action="store_true", help="skip the verification-code stage")
    parser.add_argument("--pdf", action="append", default=[], help="a document of your own (repeatable)")
    args = parser.parse_args()
    made = make_test_ca()
    opened = signing.SigningKey.from_pkcs12(made.pkcs12, made.password)
    key = signing.SigningKey.from_request(opened.to_request())  # as a render process receives it
    assert key is not None
    warm = engines.watermark_document(pdfs.many_pages(1), JobPolicy()).output
    signing.sign(warm, SigningSpec(), key)  # imports, as the warm zygote has them
    documents = [("1 page", pdfs.many_pages(1)), ("20 pages", pdfs.many_pages(20))]
    if not args.quick:
        documents.append(("dense 2,000 pages", dense_pdf(2000)))
    for path in args.pdf:
        with open(path, "rb") as fh:
            documents.append((os.path.basename(path), fh.read()))
    results = [measure(name, data, key, args.repeat if len(data) < 1_000_000 else max(3, args.repeat // 3),
                       not args.no_code)
               for name, data in documents]
    import tempfile

    sandboxed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        p12 = os.path.join(tmp, "signer.p12")
        with open(p12, "wb") as fh:
            fh.write(made.pkcs12)
        if not args.no_sandbox:
            sandboxed = through_sandbox(key, p12, made.password, args.repeat,
                                        [d for d in documents if d[0] != "20 pages"])
    report = {"bench": "signing", "target_overhead_ms": TARGET_MS, "repeat": args.repeat,
              "machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                          "python": platform.python_version()},
              "results": results, "sandbox": sandboxed}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for row in sandboxed:
        wall, cpu = row["sign_task_wall"]["median_ms"], row["sign_task_cpu"]["median_ms"]
        print(f"signing task through the sandbox ({row['document']}): {wall} ms wall, {cpu} ms CPU "
              f"(target {TARGET_MS} + sha256 {row['sha256_ms']} ms)")
    for r in results:
        for kind in ("invisible", "visible"):
            row = r[kind]
            print(f"{r['document']:>18} {kind:>9}: overhead {row['overhead']['median_ms']} ms wall, "
                  f"{row['cpu']['overhead']['median_ms']} ms CPU (sign {row['cpu']['sign']['median_ms']}, "
                  f"prove {row['cpu']['prove']['median_ms']}, sha256 {row['sha256']['median_ms']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

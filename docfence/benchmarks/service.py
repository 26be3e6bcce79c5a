"""`docfence bench service`: real dense documents through a real `docfence serve` (HTTP on loopback)
and real `docfence worker` processes, beside the engine alone and a `qpdf --overlay` shell loop over the
same files in the same run. Two modes: throughput (N jobs submitted at once) and single-job latency
(submit -> ?wait= -> download, one at a time). Prints one JSON object; never asserts on time."""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from docfence.benchmarks.dense import dense_pdf, stamp_pdf
from docfence.config import load_settings
from docfence.config.environment import environment
from docfence.core.clock import monotonic
from docfence.core.interpreter import module_command
from docfence.harness.databases import temporary_pg_database
from docfence.harness.workers import REPO, start_worker, stop, wait_for
from docfence.service import build_service

HANG_GUARD_S = 600.0  # a stuck job fails the run; it bounds nothing that is measured


def run(store: str, jobs: int, workers: int, pages: int, *, latency: bool = False) -> dict[str, Any]:
    with bench_setup(store) as (tmp, url, env, key):
        doc = dense_pdf(pages)
        result: dict[str, Any] = {"bench": "service", "store": store, "jobs": jobs, "workers": workers,
                                  "pages": pages, "mode": "latency" if latency else "throughput",
                                  "load_before": os.getloadavg()[0], "cores": os.cpu_count()}
        result["engine"] = _engine_only(doc, env, samples=min(jobs, 30), width=workers)
        with _server(env, tmp / "serve.log") as (base, server), _workers(env, tmp, workers) as procs:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
                _submit_and_wait(http, [doc] * (2 * workers))  # warm: zygotes ready, connections open
                _until_zygotes_settle(procs)  # their idle-time warm-up steps must not count as job cost
                workers_before, zygotes_before = _worker_cpu_s(procs)
                server_before = _own_cpu_s(server)
                if latency:
                    result["latency"] = _latency(base, http, doc, jobs)
                else:
                    result["service"] = _throughput(http, doc, jobs, pages, url)
                workers_after, zygotes_after = _worker_cpu_s(procs)
                server_ms = (_own_cpu_s(server) - server_before) * 1000
                result["api_server_cpu_ms_per_job"] = round(server_ms / jobs, 2)
                own, forked = workers_after - workers_before, zygotes_after - zygotes_before
                result["worker_cpu_ms_per_job"] = round((own + forked) * 1000 / jobs, 2)
                result["cpu_ms_per_job_split"] = {
                    "worker_processes": round(own * 1000 / jobs, 2),
                    "zygotes_and_render_processes": round(forked * 1000 / jobs, 2)}
            result["peak_rss_mb"] = _peak_rss(procs)
        if not latency:
            result["qpdf_loop"] = _qpdf_loop(tmp, doc, jobs, pages)
            _ratios(result)
        result["load_after"] = os.getloadavg()[0]
        return result


@contextlib.contextmanager
def bench_setup(store: str) -> Iterator[tuple[Path, str, dict[str, str], str]]:
    """(scratch folder, database URL, environment for serve and workers, API key) of a fresh store
    of kind `store` and a local object folder, removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="docfence-bench-") as tmp_name, \
            _database(store, Path(tmp_name)) as url:
        tmp = Path(tmp_name)
        env = {**environment(), "DOCFENCE_DATABASE_URL": url, "DOCFENCE_STORAGE_URL": f"file://{tmp}/objects",
               "PYTHONPATH": str(REPO)}
        env.pop("DOCFENCE_FAULTS", None)
        yield tmp, url, env, _api_key(env)


@contextlib.contextmanager
def _database(store: str, tmp: Path) -> Iterator[str]:
    if store == "sqlite":
        yield f"sqlite:///{tmp}/jobs.db"
    else:
        with temporary_pg_database("docfence_bench_service") as url:
            yield url


def _api_key(env: dict[str, str]) -> str:
    service = build_service(load_settings(env=env))
    try:
        return service.create_api_key("bench", ("submit", "read"), name="bench")[1]
    finally:
        service.store.close()


@contextlib.contextmanager
def _server(env: dict[str, str], log: Path) -> Iterator[tuple[str, int]]:
    """(base URL, pid) of a real `docfence serve` on a free loopback port, until the block ends."""
    port = _free_port()
    with log.open("wb") as out:
        command = module_command("docfence.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--log-level", "warning")
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"docfence serve exited ({proc.returncode}); see {log}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
            return False
        wait_for(ready, HANG_GUARD_S, "docfence serve to be ready")
        yield base, proc.pid
    finally:
        stop(proc)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def _workers(env: dict[str, str], tmp: Path, count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [start_worker(env, tmp / f"worker-{i}.log", "--no-reconcile") for i in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            stop(proc)


def _submit(http: httpx.Client, doc: bytes) -> str:
    response = http.post("/v1/jobs", files={"file": ("doc.pdf", doc, "application/pdf")})
    response.raise_for_status()
    job_id: str = response.json()["id"]
    return job_id


def _wait(http: httpx.Client, job_id: str) -> dict[str, Any]:
    end = monotonic() + HANG_GUARD_S
    while monotonic() < end:
        response = http.get(f"/v1/jobs/{job_id}", params={"wait": 30})
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        if job["state"] in ("succeeded", "failed", "canceled"):
            return job
    raise RuntimeError(f"job {job_id} did not end")


def _submit_and_wait(http: httpx.Client, docs: list[bytes]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda d: _submit(http, d), docs))
        done = list(pool.map(lambda i: _wait(http, i), ids))
    failed = [j for j in done if j["state"] != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} jobs did not succeed, e.g. {failed[0]}")
    return done


def _throughput(http: httpx.Client, doc: bytes, jobs: int, pages: int, url: str) -> dict[str, Any]:
    started = monotonic()
    done = _submit_and_wait(http, [doc] * jobs)
    wall = monotonic() - started
    in_service, submit_to_done = _store_times(url, [j["id"] for j in done])
    return {"wall_s": round(wall, 3), "jobs_per_s": round(jobs / wall, 1),
            "pages_per_s": round(jobs * pages / wall, 1),
            "submit_to_succeeded_ms": _pcts(submit_to_done), "claim_to_commit_ms": _pcts(in_service)}


def _store_times(url: str, ids: list[str]) -> tuple[list[float], list[float]]:
    """Per job, from the store's own clock: claim -> commit of the winning attempt, and created ->
    finished."""
    from docfence.store import open_store

    store = open_store(url, migrate=False)
    try:
        in_service, total = [], []
        for job_id in ids:
            job = store.get(job_id)
            attempt = store.attempts(job_id)[-1]
            if job.finished_at is None or attempt.ended_at is None:
                continue
            in_service.append((attempt.ended_at - attempt.claimed_at).total_seconds() * 1000)
            total.append((job.finished_at - job.created_at).total_seconds() * 1000)
        return in_service, total
    finally:
        store.close()


def _engine_only(doc: bytes, env: dict[str, str], samples: int, width: int) -> dict[str, Any]:
    """The engine alone (preflight, mark, validation) on the same document with the same class policy:
    one warm process for the per-job time, then `width` processes at once (the service's workers'
    cores) for pages/s."""
    import multiprocessing as mp

    policy = load_settings(env=env).policy_for(None)
    wall, cpu, pages = _engine_loop(doc, policy.to_dict(), max(3, samples))
    with mp.get_context("fork").Pool(width) as pool:  # nothing threaded has started in this process yet
        started = monotonic()
        done = pool.starmap(_engine_loop, [(doc, policy.to_dict(), max(3, samples))] * width)
        parallel_wall = monotonic() - started
    total_pages = sum(p * max(3, samples) for _, _, p in done)
    return {"samples": max(3, samples), "ms_per_job_p50": round(wall * 1000, 2),
            "cpu_ms_per_job": round(cpu * 1000, 2), "pages": pages,
            "pages_per_s_one_process": round(pages / wall, 1),
            "pages_per_s": round(total_pages / parallel_wall, 1), "processes": width}


def _engine_loop(doc: bytes, policy_dict: dict[str, Any], samples: int) -> tuple[float, float, int]:
    """(median wall s, mean CPU s, pages) of `samples` warm runs of the engine in this process. The
    CPU counts the subprocesses the engine runs (validation's second reader: qpdf, pdfinfo; forked
    validation pieces), as the render processes' CPU does (the zygote's cutime includes them)."""
    from docfence import engines
    from docfence.core.policy import JobPolicy

    policy = JobPolicy.from_dict(policy_dict)
    result = engines.watermark_document(doc, policy)  # warm
    times = []
    cpu_started = _cpu_with_subprocesses()
    for _ in range(samples):
        started = monotonic()
        result = engines.watermark_document(doc, policy)
        times.append(monotonic() - started)
    return statistics.median(times), (_cpu_with_subprocesses() - cpu_started) / samples, result.pages


def _cpu_with_subprocesses() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _worker_cpu_s(procs: list[subprocess.Popen[bytes]]) -> tuple[float, float]:
    """CPU seconds used so far by (the worker processes, their zygotes with the reaped render
    processes: the zygote's cutime/cstime): a per-job cost that a loaded machine does not inflate the
    way it inflates wall time."""
    tick = os.sysconf("SC_CLK_TCK")

    def used(pid: int, fields: slice) -> float:
        with contextlib.suppress(OSError):
            values = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            return sum(int(v) for v in values[fields]) / tick
        return 0.0

    own = forked = 0.0
    for proc in procs:
        own += used(proc.pid, slice(11, 13))  # utime stime (its own threads)
        for zygote in (c for c in _children(proc.pid) if _comm(c) == "docfence-zygote"):
            forked += used(zygote, slice(11, 15))  # + cutime cstime: the render processes it reaped
    return own, forked


def _own_cpu_s(pid: int) -> float:
    """utime + stime of `pid` (all its threads), in seconds; 0 once it is gone."""
    with contextlib.suppress(OSError):
        values = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(values[11]) + int(values[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def _until_zygotes_settle(procs: list[subprocess.Popen[bytes]]) -> None:
    """Until the idle zygotes use no more CPU (their deferred warm-up steps are done)."""
    import time

    end = monotonic() + HANG_GUARD_S
    last = _worker_cpu_s(procs)[1]
    while monotonic() < end:
        time.sleep(1.0)
        now = _worker_cpu_s(procs)[1]
        if now == last:
            return
        last = now


def _latency(base: str, http: httpx.Client, doc: bytes, count: int) -> dict[str, Any]:
    times = []
    with httpx.Client(base_url=base, timeout=120) as anonymous:  # signed URLs take no Authorization
        for _ in range(count):
            started = monotonic()
            job_id = _submit(http, doc)
            if _wait(http, job_id)["state"] != "succeeded":
                raise RuntimeError(f"job {job_id} failed")
            redirect = http.get(f"/v1/jobs/{job_id}/artifact")
            body = anonymous.get(redirect.headers["location"])
            body.raise_for_status()
            if not body.content.startswith(b"%PDF-"):
                raise RuntimeError("the download is not a PDF")
            times.append((monotonic() - started) * 1000)
    return {"submit_wait_download_ms": _pcts(times)}


def _peak_rss(procs: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    """VmHWM (peak resident set) of each worker and of its zygote, read before they stop."""
    out = []
    for proc in procs:
        entry = {"worker_mb": _hwm_mb(proc.pid)}
        zygotes = [c for c in _children(proc.pid) if _comm(c) == "docfence-zygote"]
        entry["zygote_mb"] = _hwm_mb(zygotes[0]) if zygotes else None
        out.append(entry)
    return {"per_worker": out}


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.extend(int(c) for c in (task / "children").read_text().split())
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _hwm_mb(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def _qpdf_loop(tmp: Path, doc: bytes, jobs: int, pages: int) -> dict[str, Any]:
    """`for f in in/*.pdf; do qpdf --overlay stamp.pdf -- "$f" out/...; done` over the same N files;
    it stamps and validates nothing."""
    src, out = tmp / "qpdf-in", tmp / "qpdf-out"
    src.mkdir()
    out.mkdir()
    for index in range(jobs):
        (src / f"doc_{index:05d}.pdf").write_bytes(doc)
    (tmp / "stamp.pdf").write_bytes(stamp_pdf())
    loop = 'for f in qpdf-in/*.pdf; do qpdf --overlay stamp.pdf -- "$f" "qpdf-out/${f##*/}"; done'
    started = monotonic()
    subprocess.run(["bash", "-c", loop], check=True, cwd=tmp)
    wall = monotonic() - started
    return {"command": loop, "wall_s": round(wall, 3), "files_per_s": round(jobs / wall, 1),
            "pages_per_s": round(jobs * pages / wall, 1)}


def _ratios(result: dict[str, Any]) -> None:
    service, engine, qpdf = result["service"], result["engine"], result["qpdf_loop"]
    workers = result["workers"]
    result["ratio_service_to_engine_pages"] = round(service["pages_per_s"] / engine["pages_per_s"], 3)
    result["ratio_service_to_qpdf_files"] = round(service["jobs_per_s"] / qpdf["files_per_s"], 3)
    claim_to_commit = service["claim_to_commit_ms"]
    # per-job overhead: a worker's time on a job (claim -> commit) minus the engine's own time for it;
    # and the same in CPU time (workers + zygotes + render processes, per job, minus the engine's CPU)
    result["per_job_overhead_ms"] = {
        "wall_p50": round(claim_to_commit["p50"] - engine["ms_per_job_p50"], 2),
        "cpu_mean": round(result["worker_cpu_ms_per_job"] - engine["cpu_ms_per_job"], 2),
        "note": f"claim->commit p50 minus engine-only p50; {workers} workers on {result['cores']} cores",
    }


def _pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0, "n": 0}
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 2),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2), "n": len(ordered)}

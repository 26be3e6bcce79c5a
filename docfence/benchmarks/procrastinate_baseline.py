"""procrastinate's no-op throughput on the same PostgreSQL (bench-only dependency: pip install .[bench])."""

from __future__ import annotations

from typing import Any


def _app(url: str, *, sync: bool = True) -> Any:
    import procrastinate

    connector = procrastinate.SyncPsycopgConnector if sync else procrastinate.PsycopgConnector
    app = procrastinate.App(connector=connector(conninfo=url))

    @app.task(name="noop")
    def noop() -> None:
        return None

    return app


def _worker(url: str, start: Any) -> None:
    import asyncio

    app = _app(url, sync=False)
    start.wait()

    async def work() -> None:
        async with app.open_async():
            await app.run_worker_async(wait=False, concurrency=1, install_signal_handlers=False,
                                       listen_notify=False, delete_jobs="never")

    asyncio.run(work())


def _analyze(url: str) -> None:
    """Give procrastinate current planner statistics on its backlog, its best case: without them its
    job fetch may sort every waiting job (docfence's claim is pinned to its index instead)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def measure_procrastinate(jobs: int, workers: int) -> float | None:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return None
    from docfence.harness.databases import temporary_pg_database
    from docfence.harness.processes import run_processes

    with temporary_pg_database("docfence_bench_proc") as url:
        app = _app(url)
        with app.open():
            app.schema_manager.apply_schema()
            task = app.tasks["noop"]
            for _ in range(jobs):
                task.defer()
        _analyze(url)
        elapsed = run_processes(_worker, lambda i, s: (url, s), workers)
    return round(jobs / (elapsed + 0.5), 1)  # run_processes subtracts a no-op drain's 0.5 s idle tail

"""`docfence demo`: the embedded default in one command. A SQLite file and a local folder under
./docfence-demo/, generated sample PDFs (vector and raster), a worker and reconciler in-process,
live progress, and each job's terminal state, artifact path, sha256 and validation summary."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import TextIO

from docfence.config import DocumentClass, Settings, WorkerConfig
from docfence.core.clock import monotonic
from docfence.core.policy import Mode, SanitizePolicy, WatermarkSpec
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.logs import configure as configure_logs
from docfence.service import Principal, Service, SubmitRequest
from docfence.wiring import Runtime, run_worker

SAMPLES = [  # (sample name, document class)
    ("links", "clinical-summary"), ("rotated", "clinical-summary"), ("offset_boxes", "clinical-summary"),
    ("form", "clinical-summary"), ("unicode", "clinical-summary"), ("mixed_sizes", "preview"),
    ("rotated", "preview"), ("long_40_pages", "clinical-summary"),
]


WATERMARK = "Vertraulich \u2013 Dr. M\u00fcller / \u60a3\u8005"  # German and Chinese ("patient")


def demo_watermark() -> str:
    """The Unicode demo mark; without a CJK font installed, its Latin part (and a note saying so)."""
    from docfence.core.errors import ConfigError
    from docfence.engines.outline_text import outline_text

    try:
        outline_text(WATERMARK)
        return WATERMARK
    except ConfigError:
        print("note: no installed font draws the CJK part of the demo watermark (install "
              "fonts-wqy-microhei); using its Latin part", file=sys.stderr)
        return WATERMARK.split(" / ")[0]


def demo_settings(base: Path) -> Settings:
    mark = WatermarkSpec(text=demo_watermark(), opacity=0.3)
    return Settings(
        database_url=f"sqlite:///{base / 'docfence.db'}",
        storage_url=f"file:{base / 'objects'}",
        default_class="clinical-summary",
        classes={  # both leave the organisation: active content and hidden data are stripped (the default)
            "clinical-summary": DocumentClass("clinical-summary", mode=Mode.VECTOR, deadline_s=120,
                                              watermark=mark, sanitize=SanitizePolicy()),
            "preview": DocumentClass("preview", mode=Mode.RASTER, dpi=100, deadline_s=120, watermark=mark),
            # stays inside: nothing is stripped, what is found is still listed in the validation report
            "internal-archive": DocumentClass("internal-archive", mode=Mode.VECTOR, deadline_s=120,
                                              watermark=mark, sanitize=SanitizePolicy.keep_all()),
        },
        worker=WorkerConfig(lease_ttl_s=10, heartbeat_interval_s=2, batch=1, poll_interval_s=0.2,
                            reconcile_interval_s=1),
    )


def _sample(name: str) -> bytes:
    from docfence.samples import pdfs

    if name == "long_40_pages":
        return pdfs.many_pages(40)
    if name == "form":
        return with_active_content(pdfs.all_samples()[name])
    return pdfs.all_samples()[name]


def with_active_content(data: bytes) -> bytes:
    """The form sample as documents often arrive: an open-action script, an embedded CSV of (made-up)
    rows and an author in the metadata; the clinical-summary class strips all three."""
    import pikepdf

    pdf = pikepdf.open(io.BytesIO(data))
    pdf.Root.OpenAction = pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String("app.alert(1)"))
    rows = pdf.make_stream(b"id,name\n1,Sample Person\n")
    rows.Type = pikepdf.Name.EmbeddedFile
    spec = pikepdf.Dictionary(Type=pikepdf.Name.Filespec, F=pikepdf.String("rows.csv"),
                              EF=pikepdf.Dictionary(F=rows))
    pdf.Root.Names = pikepdf.Dictionary(EmbeddedFiles=pikepdf.Dictionary(
        Names=pikepdf.Array([pikepdf.String("rows.csv"), spec])))
    pdf.docinfo["/Author"] = "Dr. Sample"
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def run_demo(base: Path, out: TextIO) -> int:
    base.mkdir(parents=True, exist_ok=True)
    (base / "objects").mkdir(exist_ok=True)
    configure_logs("WARNING")
    settings = demo_settings(base.resolve())
    rt = Runtime.open(settings)
    service = Service(settings, rt.store, rt.regions)
    principal = Principal("demo", "demo", ("admin",))
    started = monotonic()
    jobs: list[tuple[str, Job]] = []
    for name, cls in SAMPLES:
        job, _ = service.submit(principal, io.BytesIO(_sample(name)), SubmitRequest(document_class=cls))
        jobs.append((name, job))
        print(f"submitted {job.id}  {name:<14} class={cls:<17} mode={job.mode}", file=out)
    done = threading.Event()
    monitor = threading.Thread(target=_progress, args=(rt, [j.id for _, j in jobs], done, out), daemon=True)
    monitor.start()
    run_worker(rt, until_idle=True, install_signals=False)
    done.set()
    monitor.join()
    ok = _summary(rt, service, base, jobs, out)
    print(f"finished in {monotonic() - started:.1f} s; database {base / 'docfence.db'}", file=out)
    rt.close()
    return 0 if ok else 1


def _progress(rt: Runtime, ids: list[str], done: threading.Event, out: TextIO) -> None:
    from docfence.store import open_store

    store = open_store(rt.settings.database_url, migrate=False)  # its own connection for this thread
    last = ""
    while not done.wait(0.5):
        counts: dict[str, int] = {}
        for job_id in ids:
            state = store.get(job_id).state.value
            counts[state] = counts.get(state, 0) + 1
        line = "progress: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        if line != last:
            print(line, file=out, flush=True)
            last = line
    store.close()


def _summary(rt: Runtime, service: Service, base: Path, jobs: list[tuple[str, Job]], out: TextIO) -> bool:
    all_ok = True
    print("\nresults:", file=out)
    for name, submitted in jobs:
        job = rt.store.get(submitted.id)
        art = rt.store.artifact(job.id)
        if job.state is JobState.SUCCEEDED and art is not None:
            checks = art.validation.get("checks", [])
            passed = sum(1 for c in checks if c.get("ok"))
            path = _plaintext_copy(rt, service, base, job, art.key, art.sha256)
            verdict = "ok" if art.validation.get("ok") else "FAILED"
            print(f"  {job.id} {name:<14} {job.mode:<6} succeeded  pages={art.pages:<3} "
                  f"validation={verdict} ({passed}/{len(checks)} checks)", file=out)
            stripped = art.validation.get("sanitize", {}).get("stripped", {})
            if stripped:
                items = ", ".join(f"{kind} {count}" for kind, count in stripped.items())
                print(f"      sanitised: {items}", file=out)
            print(f"      sha256 {art.sha256}\n      {path}", file=out)
        else:
            all_ok = False
            print(f"  {job.id} {name:<14} {job.mode:<6} {job.state.value}  "
                  f"{job.last_error_code}: {job.last_error_message}", file=out)
    return all_ok


def _plaintext_copy(rt: Runtime, service: Service, base: Path, job: Job, key: str, sha256: str) -> Path:
    """The artifact as a recipient gets it, in `base`/artifacts: the stored object is sealed under the
    job's data key (docs/encryption.md), so the demo opens it the way a download does."""
    from docfence.blobs.kek.jobs import RowKey, read_object

    data = read_object(rt.regions.for_region(job.region), key, service.job_keys.key_for(RowKey.of(job)),
                       expected_sha256=sha256)
    path = base / "artifacts" / f"{job.id}.pdf"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path

"""One deployment per store for every test of tests/docs: a real `docfence serve` and `docfence worker`
over a fresh SQLite file and over a throwaway PostgreSQL database, both configured with every TOML
example of the docs (the files they name supplied by the test, see TOML_GIVENS) plus one class per
combination of the all-pairs matrix. Both run for the whole package, so the two workers render side
by side on the two cores while the tests judge what they published."""

from __future__ import annotations

import io
import os
import secrets
import sys
import tomllib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from docfence.client import DocfenceClient
from docfence.client.models import JobView
from docfence.config import Settings, load_settings
from docfence.core.clock import monotonic
from docfence.core.errors import ConfigError
from docfence.service import Service, build_service
from docfence.testing.doc_examples import Example, collect, merge, toml_text
from docfence.testing.judges import Expect
from docfence.testing.procs import start_worker, stop
from docfence.testing.servers import serve_process
from docfence.testing.signing_ca import write_test_ca
from docfence.testing.stores import temporary_pg_database

from .pairs import FEATURES, class_table, covering_set, possible

ROOT = Path(__file__).resolve().parents[2]
STORES = ("sqlite", "postgres")
EXAMPLES = collect(ROOT)
TOML_EXAMPLES = [e for e in EXAMPLES if e.lang == "toml"]
PAIRS = covering_set(FEATURES, possible)
PAIR_CLASSES = {f"pair-{n:02d}": combo for n, combo in enumerate(PAIRS, start=1)}
SVG_LOGO = ROOT / "docs" / "img" / "marks-example-logo.svg"
P12_PASSWORD = "docs-pkcs12-pass"
INPUT_TEXT = "Links: external and internal"  # the text of pdfs.links(), the jobs' input
JOB_BUDGET_S = 240.0  # a hang guard: every job here renders in seconds
# A render budget load cannot run out of (the docs' examples set none; budgets are not tested here).
LIMITS = {"limits": {"render_base_s": 600.0, "render_timeout_s": 600.0}}


@dataclass(frozen=True)
class Givens:
    """The files the test supplies where an example names one of the reader's own: a throwaway CA's
    PKCS#12 file, the docs' SVG logo and a generated PNG logo."""

    folder: Path

    @property
    def p12(self) -> Path:
        return self.folder / "signer.p12"

    @property
    def logos(self) -> dict[str, str]:
        return {"svg": str(SVG_LOGO), "png": str(self.folder / "logo.png")}

    def toml(self) -> dict[str, tuple[str, str]]:
        """`<!-- run-with: NAME -->` of a TOML example -> (the path the docs write, the file supplied)."""
        return {"logo.svg": ("/etc/docfence/logo.svg", str(SVG_LOGO)),
                "signer.p12": ("/etc/docfence/signer.p12", str(self.p12))}

    def example_text(self, example: Example) -> str:
        """The example's text with the files its run-with marker names supplied."""
        text, known = example.text, self.toml()
        for name in example.givens:
            if name not in known:
                raise ValueError(f"{example.id}: unknown given {name!r} (known: {', '.join(known)})")
            written, supplied = known[name]
            text = text.replace(written, supplied)
        return text

    def load(self, example: Example, env: dict[str, str]) -> Settings:
        """The example as the whole configuration (DOCFENCE_* of `env` over it, as the docs say)."""
        path = self.folder / f"{example.id.replace('/', '_').replace('#', '_')}.toml"
        path.write_text(self.example_text(example), "utf-8")
        return load_settings(env={**env, "DOCFENCE_CONFIG": str(path)})


def png_logo(path: Path) -> Path:
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (160, 48), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((2, 2, 46, 46), radius=8, fill=(29, 78, 216, 255))
    draw.rectangle((54, 12, 154, 20), fill=(29, 78, 216, 255))
    draw.rectangle((54, 28, 124, 36), fill=(147, 197, 253, 200))
    image.save(path)
    return path


@dataclass
class Deployment:
    store: str
    root: Path
    base_url: str
    env: dict[str, str]  # what a user's shell holds: DOCFENCE_* of this deployment, DOCFENCE_URL
    settings: Settings
    service: Service  # in the test process, on the same database: keys and templates only
    examples: list[str]  # ids of the TOML examples in its configuration
    keys: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict)

    def key(self, tenant: str, scopes: tuple[str, ...] = ("submit", "read", "admin")) -> str:
        if (tenant, scopes) not in self.keys:
            self.keys[tenant, scopes] = self.service.create_api_key(tenant, scopes, name="docs")[1]
        return self.keys[tenant, scopes]

    def client(self, tenant: str) -> DocfenceClient:
        return DocfenceClient(self.base_url, self.key(tenant), timeout_s=60)

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{(self.root / name).read_text('utf-8', 'replace')[-3000:]}"
                         for name in ("server.log", "worker.log"))


def _base_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCFENCE_", "PROMETHEUS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(root)  # nothing a command writes lands in the real home
    return env


def _configuration(givens: Givens, env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Every TOML example that loads on its own (the others fail their own test), merged, plus the
    pair classes and LIMITS. Two examples that set one key differently stop the deployment."""
    merged: dict[str, Any] = {}
    used = []
    for example in TOML_EXAMPLES:
        if example.marker == "not-run":
            continue
        try:
            givens.load(example, env)
        except (ConfigError, ValueError):
            continue
        merge(merged, tomllib.loads(givens.example_text(example)))
        used.append(example.id)
    pairs = {"classes": {name: class_table(combo, givens.logos) for name, combo in PAIR_CLASSES.items()}}
    return merge(merge(merged, pairs), LIMITS), used


def _write(path: Path, text: str) -> str:
    path.write_text(text, "utf-8")
    return str(path)


def store_env(root: Path, db_url: str) -> dict[str, str]:
    """The DOCFENCE_* a deployment (or a loaded example) runs with: its database and storage over
    whatever the examples write there, as the docs' order of precedence says."""
    return {**_base_env(root), "DOCFENCE_DATABASE_URL": db_url, "DOCFENCE_STORAGE_URL": f"file://{root}/objects",
            "DOCFENCE_METRICS_DIR": str(root / "metrics"), "DOCFENCE_SIGNING_PKCS12_PASSWORD": P12_PASSWORD}


def _start(store: str, root: Path, givens: Givens, stack: ExitStack) -> Deployment:
    root.mkdir(parents=True)
    db_url = (f"sqlite:///{root}/docfence.db" if store == "sqlite"
              else stack.enter_context(temporary_pg_database("docfence_docs")))
    env = {**store_env(root, db_url), "DOCFENCE_SIGNING_SECRET": secrets.token_hex(32),
           "DOCFENCE_PASSWORD_KEY": Fernet.generate_key().decode()}
    config, used = _configuration(givens, env)
    env["DOCFENCE_CONFIG"] = _write(root / "docfence.toml", toml_text(config))
    settings = load_settings(env=env)
    service = build_service(settings)
    stack.callback(service.store.close)
    _proc, base_url = stack.enter_context(serve_process(env, root / "server.log"))
    worker = start_worker(env, root / "worker.log")
    stack.callback(stop, worker)
    deployment = Deployment(store, root, base_url, {**env, "DOCFENCE_URL": base_url}, settings, service, used)
    deployment.env["DOCFENCE_API_KEY"] = deployment.key("docs")
    return deployment


@pytest.fixture(scope="package")
def givens(tmp_path_factory: pytest.TempPathFactory) -> Givens:
    made = Givens(tmp_path_factory.mktemp("givens"))
    write_test_ca(made.folder, P12_PASSWORD)
    png_logo(made.folder / "logo.png")
    return made


@pytest.fixture(scope="package")
def deployments(givens: Givens, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Deployment]]:
    root = tmp_path_factory.mktemp("deployments")
    with ExitStack() as stack:
        yield {store: _start(store, root / store, givens, stack) for store in STORES}


def finish(deployment: Deployment, tenant: str, job_id: str) -> JobView:
    """The job once it ended (bounded by JOB_BUDGET_S), as its tenant's client sees it."""
    until = monotonic() + JOB_BUDGET_S
    with deployment.client(tenant) as client:
        job = client.get(job_id)
        while not job.terminal and monotonic() < until:
            job = client.get(job_id, wait_s=20)
    assert job.terminal, f"{job_id} still {job.state} after {JOB_BUDGET_S:g} s\n{deployment.logs()}"
    return job


def fetch(deployment: Deployment, tenant: str, job: JobView, folder: Path) -> Path:
    """The succeeded job's artifact, downloaded (sha256 verified by the client) into `folder`."""
    assert job.state == "succeeded", (f"{job.id} ({job.document_class}) {job.state}: {job.error_code}: "
                                      f"{job.error_message}")
    folder.mkdir(parents=True, exist_ok=True)
    with deployment.client(tenant) as client:
        return client.download(job.id, folder / f"{job.id}.pdf")


def class_expect(deployment: Deployment, job: JobView, **given: Any) -> Expect:
    """What the job's class promises every output: its code on the selected pages (and nowhere else),
    its signature; a report job of such a class carries neither (docs/verification.md, "Scope")."""
    cls = deployment.settings.document_class(job.document_class)
    assert job.artifact is not None
    pages = job.artifact.pages
    issued = job.raw.get("kind", "watermark") == "watermark"
    code = cls.verification
    code_url = None if code is None else (job.raw.get("verification_url") or "") if issued else ""
    return Expect(pages=pages, code_url=code_url,
                  code_pages=selected_pages(code.pages, pages) if code and issued else (),
                  signed=cls.signing is not None and issued, **given)


def content_expect(deployment: Deployment, name: str, source: Path) -> dict[str, Any]:
    """What the input keeps through the class's mode and sanitiser (docs/sanitising.md)."""
    cls = deployment.settings.document_class(name)
    if cls.mode.value == "raster":  # rebuilt from page images: nothing of the input's objects
        return {"no_text": (INPUT_TEXT,), "differs_from": source, "author": "", "embedded": 0,
                "javascript": False, "urls": ()}
    keep_active, keep_hidden = cls.sanitize.active_content == "keep", cls.sanitize.hidden_data == "keep"
    return {"text": (INPUT_TEXT,), "differs_from": source, "author": "Dr. Sample" if keep_hidden else "",
            "embedded": 1 if keep_active and keep_hidden else 0, "javascript": keep_active,
            "urls": ("https://example.org/docfence",) if cls.sanitize.link_uris == "keep" else ()}


def selected_pages(spec: str, count: int) -> tuple[int, ...]:
    """Pages (1-based) a pages setting names: all, first, last, odd, even or ranges like 1-3,7."""
    named = {"all": range(1, count + 1), "first": [1], "last": [count], "odd": range(1, count + 1, 2),
             "even": range(2, count + 1, 2)}
    if spec in named:
        return tuple(named[spec])
    pages: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        pages.update(range(int(low), int(high or low) + 1))
    return tuple(p for p in sorted(pages) if p <= count)


def encrypted(data: bytes, user: str, owner: str) -> bytes:
    import pikepdf

    out = io.BytesIO()
    with pikepdf.open(io.BytesIO(data)) as pdf:
        pdf.save(out, encryption=pikepdf.Encryption(owner=owner, user=user, R=6))
    return out.getvalue()

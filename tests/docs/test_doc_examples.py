"""The documentation is the test matrix: every example of README.md and docs/*.md runs through every
path it applies to, and what it produced is judged by outside tools (docfence/testing/judges.py).

- Shell blocks marked ```sh runnable run as one bash script on both deployments (SQLite and
  PostgreSQL, conftest.py), in one folder per document so later blocks see earlier ones' files.
  Blocks marked `<!-- run-commands[: GIVEN, ...] -->` run command by command: `client.` lines in
  Python with `client` a DocfenceClient, the rest in bash; `whe_...`-style placeholders are the id an
  earlier command printed; a comment after a command showing JSON is its answer (the same keys).
  Givens: `in.pdf` (a sample PDF in the folder), `verified-job` (JOB and CODE of an issued document
  of a class with a verification code, and the file as received.pdf).
- Every job a block created is waited for, must succeed, and its artifact is judged.
- TOML blocks load on their own (`<!-- run-with: logo.svg, signer.p12 -->` supply the files they
  name) and are all part of both deployments' configuration. Each `[classes.NAME]` they define goes
  through `docfence watermark` (its marks as flags), the API on both stores, the Python client,
  and the console in Chromium.
- Every `docfence ...` command written anywhere names only subcommands and options the CLI has.
- `<!-- not-run: WHY -->` marks what cannot run here; every block but JSON and plain output is run
  or marked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from docfence.cli import build_parser
from docfence.core.errors import ApiError
from docfence.demo import with_active_content
from docfence.samples import pdfs
from docfence.testing.doc_examples import (
    Command,
    Example,
    commands,
    docfence_commands,
    inline_commands,
    unknown_options,
)
from docfence.testing.judges import Expect, ToolError, assert_holds, judge, pdfinfo

from .conftest import (
    EXAMPLES,
    INPUT_TEXT,
    ROOT,
    STORES,
    TOML_EXAMPLES,
    Deployment,
    Givens,
    class_expect,
    content_expect,
    fetch,
    finish,
    store_env,
)

RUN_AS_SCRIPT = [e for e in EXAMPLES if e.lang == "sh" and e.runnable]
RUN_BY_COMMAND = [e for e in EXAMPLES if e.lang == "sh" and e.marker == "run-commands"]
OUTPUT_LANGS = ("json", "")  # blocks that show an answer or a listing; every other block is run or marked
SH_GIVENS = ("in.pdf", "verified-job")
TENANT, CLASS_TENANT = "docs", "classes"  # the tenant of the docs' own key; of the class jobs
FIELDS = {"recipient": "Dr. Ada Example", "reference": "REF-7", "purpose": "second opinion"}


def _class_examples() -> list[tuple[Example, str]]:
    return [(e, name) for e in TOML_EXAMPLES if e.marker != "not-run"
            for name in tomllib.loads(e.text).get("classes", {})]


CLASS_EXAMPLES = _class_examples()
# the API on each store; the Python client (an HTTP client like any other) on one of them
CLASS_PATHS = ("api-sqlite", "api-postgres", "client-sqlite")


def _ids(pairs: list[tuple[Example, str]]) -> list[str]:
    return [f"{e.id}-{name}" for e, name in pairs]


# -- every example is run or says why -------------------------------------------------------------
@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.lang not in OUTPUT_LANGS],
                         ids=lambda e: e.id)
def test_every_example_runs_or_says_why(example: Example) -> None:
    if example.marker == "not-run":
        assert example.detail, f"{example.id}: <!-- not-run: --> needs the reason"
        return
    if example.lang == "toml":
        assert example.marker in (None, "run-with"), f"{example.id}: a TOML block takes run-with"
        return
    assert example.lang == "sh", f"{example.id}: a {example.lang} block runs nowhere: mark it not-run"
    assert example.runnable or example.marker == "run-commands", (
        f"{example.id} (line {example.line}) is neither ```sh runnable nor marked <!-- run-commands -->"
        " or <!-- not-run: why -->")
    unknown = set(example.givens) - set(SH_GIVENS)
    assert not unknown, f"{example.id}: unknown givens {unknown} (known: {SH_GIVENS})"


def test_the_docs_hold_examples_of_every_kind() -> None:
    """The collection cannot come back empty and pass."""
    assert {e.source for e in RUN_AS_SCRIPT} >= {"docs/api.md", "docs/client.md", "docs/templates.md"}
    assert RUN_BY_COMMAND and len(CLASS_EXAMPLES) >= 5 and len(TOML_EXAMPLES) >= 5


# -- every docfence command names real options ------------------------------------------------------
def _written_commands() -> list[tuple[str, str]]:
    fenced = [(e.id, c) for e in EXAMPLES if e.lang == "sh" for c in docfence_commands(e.text)]
    return inline_commands(ROOT) + fenced


@pytest.mark.parametrize("source,written", _written_commands(),
                         ids=[f"{s}: {c[:70]}" for s, c in _written_commands()])
def test_docfence_command_names_real_options(source: str, written: str) -> None:
    assert unknown_options(build_parser(), written) == [], f"{source}: `{written}`"


# -- TOML examples ------------------------------------------------------------------------------------
@pytest.mark.parametrize("example", [e for e in TOML_EXAMPLES if e.marker != "not-run"], ids=lambda e: e.id)
def test_config_example_loads_and_is_deployed(example: Example, givens: Givens,
                                              deployments: dict[str, Deployment], tmp_path: Path) -> None:
    alone = givens.load(example, store_env(tmp_path, f"sqlite:///{tmp_path}/x.db"))
    for deployment in deployments.values():
        assert example.id in deployment.examples
        deployed = deployment.settings
        for table in tomllib.loads(example.text):
            if table == "classes":
                for name in tomllib.loads(example.text)["classes"]:
                    assert deployed.document_class(name) == alone.document_class(name), name
            elif table not in ("database_url", "storage_url"):  # DOCFENCE_* win over the file, as documented
                assert getattr(deployed, table) == getattr(alone, table), table


# -- shell examples -----------------------------------------------------------------------------------
def _script_cases() -> list[Any]:
    return [pytest.param(e, store, id=f"{e.id}-{store}") for e in [*RUN_AS_SCRIPT, *RUN_BY_COMMAND]
            for store in STORES]


@pytest.mark.parametrize("example,store", _script_cases())
def test_shell_example(example: Example, store: str, deployments: dict[str, Deployment],
                       class_jobs: dict[tuple[str, str], str],
                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """(class_jobs: the class jobs render while the examples run; one of them is the verified job.)"""
    deployment = deployments[store]
    folder = deployment.root / "work" / example.source.replace("/", "_")
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(deployment.env)
    for given in example.givens:
        env.update(_give(given, deployment, folder, class_jobs))
    before = _job_ids(deployment)
    if example.runnable:
        done = _bash(example.text, folder, env)
        assert done.returncode == 0, f"{example.id} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    else:
        _run_commands(example, folder, env)
    new = [j for j in _job_ids(deployment) if j not in before]
    _judge_jobs(deployment, new, example, tmp_path_factory.mktemp("judged"))


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def _give(name: str, deployment: Deployment, folder: Path, class_jobs: dict[tuple[str, str], str]
          ) -> dict[str, str]:
    """Set up a given in `folder`; returns the variables it defines. The verified job is the API job
    of the docs' class with a verification code (test_class_example_through_the_service judges it)."""
    if name == "in.pdf":
        (folder / "in.pdf").write_bytes(pdfs.links())
        return {}
    assert name == "verified-job", name
    coded = [c for e, c in CLASS_EXAMPLES if deployment.settings.document_class(c).verification]
    assert coded, "no docs example defines a class with a verification code"
    job_id = class_jobs[coded[0], f"api-{deployment.store}"]
    assert job_id.startswith("job_"), job_id
    done = finish(deployment, CLASS_TENANT, job_id)
    fetch(deployment, CLASS_TENANT, done, folder).rename(folder / "received.pdf")
    code = re.search(r"[?&]c=([A-Za-z0-9]+)", done.raw["verification_url"])
    assert code, done.raw["verification_url"]
    return {"JOB": job_id, "CODE": code.group(1)}


def _run_commands(example: Example, folder: Path, env: dict[str, str]) -> None:
    printed = ""
    for command in commands(example.text):
        text = _fill_placeholders(command.text, printed, example)
        if text.startswith("client."):
            script = ("import os\nfrom docfence.client import DocfenceClient\n"
                      "with DocfenceClient(os.environ['DOCFENCE_URL'],\n"
                      "                    os.environ['DOCFENCE_API_KEY']) as client:\n"
                      f"    print({text})\n")
            done = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env, capture_output=True,
                                  text=True, timeout=600, check=False)
        else:
            done = _bash(text, folder, env)
        assert done.returncode == 0, f"{example.id}: `{text}` exit {done.returncode}:\n{done.stderr[-2000:]}"
        _check_answer(example, command, text, done.stdout)
        printed += done.stdout


def _fill_placeholders(text: str, printed: str, example: Example) -> str:
    """`whe_...` (any `prefix_...`) -> the last such id an earlier command printed."""
    def fill(match: re.Match[str]) -> str:
        ids = re.findall(rf"\b{match.group(1)}_[A-Za-z0-9]+", printed)
        assert ids, f"{example.id}: {match.group(0)} but no earlier command printed a {match.group(1)}_ id"
        return str(ids[-1])
    return re.sub(r"\b([a-z]+)_\.\.\.", fill, text)


def _check_answer(example: Example, command: Command, text: str, out: str) -> None:
    """An API answer is not an error; a documented answer (a comment showing JSON) has its keys."""
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        assert not answer.get("error"), f"{example.id}: `{text}` answered {answer}"
    for shown in command.answer:
        if "{" not in shown:
            continue
        keys = re.findall(r'"(\w+)":', shown)
        assert isinstance(answer, dict), f"{example.id}: `{text}` printed {out[:300]!r}, documented {shown}"
        if "..." in shown.split(",")[-1]:
            assert set(keys) <= set(answer), (example.id, shown, answer)
        else:
            assert set(keys) == set(answer), (example.id, shown, answer)
        for key, value in re.findall(r'"(\w+)":\s*(true|false)', shown):
            assert answer[key] is (value == "true"), (example.id, key, answer)


def _job_ids(deployment: Deployment) -> list[str]:
    with deployment.client(TENANT) as client:
        return [j.id for j in client.iter_jobs(limit=200)]


def _judge_jobs(deployment: Deployment, job_ids: list[str], example: Example, folder: Path) -> None:
    passwords = [None, *re.findall(r"""user=["']([^"']+)["']""", example.text)]
    problems = []
    for job_id in job_ids:
        job = finish(deployment, TENANT, job_id)
        if job.state != "succeeded":
            problems.append(f"{job_id} ({job.document_class}): {job.state} {job.error_code}: "
                            f"{job.error_message}")
            continue
        path = fetch(deployment, TENANT, job, folder)
        password = _opening_password(path, passwords)
        expect = class_expect(deployment, job, password=password)
        problems.extend(f"{job_id}: {p}" for p in judge(path, expect, folder / job_id))
    assert not problems, f"{example.id} on {deployment.store}:\n" + "\n".join(problems)


def _opening_password(path: Path, candidates: list[str | None]) -> str | None:
    for candidate in candidates:
        try:
            info = pdfinfo(path, candidate)
        except ToolError:
            continue
        return candidate if info.get("Encrypted", "no").startswith("yes") else None
    raise AssertionError(f"{path.name}: no password of the example opens it")


# -- class examples: the API, the client, docfence watermark, the console ------------------------------
def _input(folder: Path) -> Path:
    path = folder / "clinic-letter.pdf"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(with_active_content(pdfs.links()))
    return path


@pytest.fixture(scope="module")
def class_jobs(deployments: dict[str, Deployment], tmp_path_factory: pytest.TempPathFactory
               ) -> dict[tuple[str, str], str]:
    """Every class of the examples submitted once per path before any test waits: (class, path) -> job
    id, or the refusal as text."""
    source = _input(tmp_path_factory.mktemp("class-input"))
    jobs: dict[tuple[str, str], str] = {}
    for _example, name in CLASS_EXAMPLES:
        for path in CLASS_PATHS:
            how, store = path.split("-")
            deployment = deployments[store]
            try:
                jobs[name, path] = _submit_class_job(deployment, how, name, source)
            except (httpx.HTTPError, ApiError, AssertionError) as exc:  # the pair's own test reports it
                jobs[name, path] = f"refused: {exc}"
    return jobs


def _submit_class_job(deployment: Deployment, how: str, name: str, source: Path) -> str:
    if how == "client":
        with deployment.client(CLASS_TENANT) as client:
            return client.submit(source, document_class=name, label="docs-class", **FIELDS).id
    answer = httpx.post(f"{deployment.base_url}/v1/jobs", timeout=60,
                        headers={"Authorization": f"Bearer {deployment.key(CLASS_TENANT)}"},
                        files={"file": (source.name, source.read_bytes(), "application/pdf")},
                        data={"document_class": name, "label": "docs-class", **FIELDS})
    assert answer.status_code == 201, f"HTTP {answer.status_code}: {answer.text[:500]}"
    return str(answer.json()["id"])


@pytest.mark.parametrize("path", CLASS_PATHS)
@pytest.mark.parametrize("example,name", CLASS_EXAMPLES, ids=_ids(CLASS_EXAMPLES))
def test_class_example_through_the_service(example: Example, name: str, path: str,
                                           class_jobs: dict[tuple[str, str], str],
                                           deployments: dict[str, Deployment], tmp_path: Path) -> None:
    job_id = class_jobs[name, path]
    assert job_id.startswith("job_"), f"{example.id} [classes.{name}] via {path}: {job_id}"
    deployment = deployments[path.split("-")[1]]
    job = finish(deployment, CLASS_TENANT, job_id)
    artifact = fetch(deployment, CLASS_TENANT, job, tmp_path)
    expect = class_expect(deployment, job, **content_expect(deployment, name, _input(tmp_path / "in")))
    assert_holds(artifact, expect, tmp_path / "judged")


@pytest.mark.parametrize("example,name", CLASS_EXAMPLES, ids=_ids(CLASS_EXAMPLES))
def test_class_example_through_docfence_watermark(example: Example, name: str, givens: Givens,
                                                 tmp_path: Path) -> None:
    """The class's marks as `docfence watermark` flags (docs/watermarks.md: --mark, --timezone, a logo
    by its file), in a real process; the local command neither sanitises, codes nor signs."""
    table = tomllib.loads(givens.example_text(example))["classes"][name]
    source = _input(tmp_path)
    argv = [sys.executable, "-m", "docfence.cli", "watermark", str(source), "--out", str(tmp_path / "out"),
            "--json", *_watermark_flags(table)]
    for field_name, value in FIELDS.items():
        argv += [f"--{field_name}", value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                          env=store_env(tmp_path, f"sqlite:///{tmp_path}/unused.db"))
    assert done.returncode == 0, f"{' '.join(argv[3:])}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    out = tmp_path / "out" / "clinic-letter.watermarked.pdf"
    raster = table.get("mode") == "raster"
    expect = Expect(pages=2, differs_from=source, text=() if raster else (INPUT_TEXT,),
                    no_text=(INPUT_TEXT,) if raster else ())
    assert_holds(out, expect, tmp_path / "judged")


def _watermark_flags(table: dict[str, Any]) -> list[str]:
    """`docfence watermark` flags for a class table: --mode, --dpi, --timezone, the class watermark as
    --text/--position/--pages/--opacity, every further mark as --mark (a logo by its file)."""
    flags = ["--mode", table.get("mode", "vector"), "--dpi", str(table.get("dpi", 150)),
             "--timezone", table.get("timezone", "UTC")]
    watermark = dict(table.get("watermark", {}))
    for key in ("text", "position", "pages", "opacity"):
        if key in watermark:
            flags += [f"--{key}", str(watermark.pop(key))]
    assert not watermark, f"watermark keys docfence watermark has no flag for: {sorted(watermark)}"
    images = table.get("images", {})
    for mark in table.get("marks", []):
        mark = dict(mark)
        if "image" in mark:
            mark["image"] = images[mark["image"]]
        flags += ["--mark", json.dumps(mark)]
    return flags


@pytest.fixture(scope="module")
def consoles(browser: Any, deployments: dict[str, Deployment]) -> Iterator[dict[str, Any]]:
    """One page per store, signed in once with a read key of the class jobs' tenant."""
    contexts, pages = [], {}
    for store, deployment in deployments.items():
        contexts.append(context := browser.new_context(viewport={"width": 1280, "height": 1000}))
        page = pages[store] = context.new_page()
        page.set_default_timeout(120_000)  # a hang guard: every wait ends on what the page shows
        page.goto(f"{deployment.base_url}/console")
        page.fill("#key", deployment.key(CLASS_TENANT, ("read",)))
        page.click("#key-form button[type=submit]")
        page.wait_for_selector("#overview:not([hidden])")
    try:
        yield pages
    finally:
        for context in contexts:
            context.close()


@pytest.mark.browser
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("example,name", CLASS_EXAMPLES, ids=_ids(CLASS_EXAMPLES))
def test_class_example_in_the_console(example: Example, name: str, store: str, consoles: dict[str, Any],
                                      class_jobs: dict[tuple[str, str], str],
                                      deployments: dict[str, Deployment]) -> None:
    """The console cannot submit: it lists the class's job (from the API path) and shows it succeeded,
    with its class, mode, passed checks and, where the class issues them, the code and the signature."""
    job_id = class_jobs[name, f"api-{store}"]
    assert job_id.startswith("job_"), job_id
    deployment, page = deployments[store], consoles[store]
    finish(deployment, CLASS_TENANT, job_id)
    page.evaluate("location.hash = '#/'")
    page.wait_for_selector(f'tr[data-job-id="{job_id}"][data-state="succeeded"]')
    page.evaluate(f"location.hash = '#/job/{job_id}'")
    page.wait_for_selector(f'#job-title:text-is("Job {job_id}")')  # the page's fields are set together
    summary = page.inner_text("#job-summary")
    cls = deployment.settings.document_class(name)
    assert "succeeded" in summary, summary
    assert f"{cls.mode.value}, " in summary and f"class {name}," in summary, summary
    assert page.locator("#validation li.bad").count() == 0, page.inner_text("#validation")
    assert page.locator("#validation li.ok").count() >= 5, page.inner_text("#validation")
    issue = page.inner_text("#issue")
    assert ("code ok" in issue) == (cls.verification is not None), issue
    assert ("signature ok" in issue) == (cls.signing is not None), issue

"""A bounded fuzz run through the real CLI: no tracebacks, no answer over budget, no output an outside
checker rejects. Timing figures (p99 time to refusal) are benchmark output, not asserted here. The long run
(2,000 inputs) is marked soak: DOCFENCE_SOAK=1 runs it."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .helpers import CORPUS

FUZZ = Path(__file__).parents[2] / "bench" / "fuzz.py"


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docfence_bench_fuzz", FUZZ)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(result: dict[str, object]) -> None:
    examples = result["examples"]
    assert result["tracebacks"] == 0, examples
    assert result["over_budget"] == 0, examples
    assert result["outputs_rejected"] == 0, examples


def test_mutations_are_deterministic_and_cover_every_kind() -> None:
    fuzz = _harness()
    seeds = [p for p in fuzz.seed_files(CORPUS)] if CORPUS.is_dir() else []
    if not seeds:
        pytest.skip("shared corpus ../shared/corpus is absent")
    first = [fuzz.make_input(seeds, 7, i) for i in range(60)]
    assert first == [fuzz.make_input(seeds, 7, i) for i in range(60)]
    assert {mutation for _, mutation, _ in first} == set(fuzz.MUTATIONS)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus ../shared/corpus is absent")
def test_bounded_fuzz_run_has_no_crash_no_overrun_no_rejected_output() -> None:
    # 100 inputs (10 also in raster mode), 50 per CLI call: the CLI's warm sandbox pool forks each
    # render process, so an input costs its own work, not an interpreter start
    result = _harness().fuzz(CORPUS, 100, 1, ["vector", "raster"], 10, 50, None)
    assert result["inputs"] == 100 and result["runs"] == 110
    _check(result)


CRASHING_CLI = """
import sys
from pathlib import Path
from docfence.cli import main
if any(Path(arg).name == "crash.pdf" for arg in sys.argv):
    raise RuntimeError("planted CLI crash")
sys.exit(main(sys.argv[1:]))
"""


def test_a_crashing_batch_is_rerun_file_by_file_so_only_the_crashing_input_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fuzz = _harness()
    script = tmp_path / "cli.py"
    script.write_text(CRASHING_CLI)
    monkeypatch.setattr(fuzz, "_cli", lambda: [sys.executable, str(script)])
    paths = [tmp_path / "a.pdf", tmp_path / "crash.pdf", tmp_path / "c.pdf"]
    for path in paths:  # refused at once: the outcome does not depend on the render budget
        path.write_bytes(b"not a pdf")
    files, _, stderr = fuzz.run_cli(paths, "vector", tmp_path / "out", 120.0)
    assert [(f["input"], f["code"]) for f in files] == [
        (str(paths[0]), "not_a_pdf"), (str(paths[1]), "cli_crashed"), (str(paths[2]), "not_a_pdf")]
    assert stderr.count("Traceback") == 1  # the crashing input's own run


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("DOCFENCE_SOAK") != "1", reason="DOCFENCE_SOAK=1 runs the long fuzz run")
def test_long_fuzz_run() -> None:
    _check(_harness().fuzz(CORPUS, 2000, 1, ["vector", "raster"], 1, 50, None))

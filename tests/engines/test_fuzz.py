"""A bounded fuzz run through the real CLI: no tracebacks, no answer over budget, no output an outside
checker rejects. Timing figures (p99 time to refusal) are benchmark output, not asserted here. The long run
(2,000 inputs) is marked soak: DOCFENCE_SOAK=1 runs it."""

from __future__ import annotations

import importlib.util
import os
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
    # 30 inputs (6 also in raster mode): each file costs a fresh interpreter in the CLI's child
    result = _harness().fuzz(CORPUS, 30, 1, ["vector", "raster"], 5, 30, None)
    assert result["inputs"] == 30 and result["runs"] == 36
    _check(result)


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("DOCFENCE_SOAK") != "1", reason="DOCFENCE_SOAK=1 runs the long fuzz run")
def test_long_fuzz_run() -> None:
    _check(_harness().fuzz(CORPUS, 2000, 1, ["vector", "raster"], 1, 50, None))

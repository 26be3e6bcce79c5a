"""The capacity model: Erlang C, the fit from bench output, and plans that scale by pages and mode."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from docfence.cli import capacity as capacity_cli
from docfence.observability.capacity import CostModel, JobClass, cost_from_bench, erlang_c, parse_mix, plan


def test_erlang_c_matches_the_textbook() -> None:
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert erlang_c(3, 3.0) == 1.0


def test_fit_from_bench_json(tmp_path: Path) -> None:
    bench = {"pages_per_second": [
        {"pages": 1, "vector_validated": 50.0, "raster_150dpi_validated": 10.0},
        {"pages": 20, "vector_validated": 400.0, "raster_150dpi_validated": 20.0},
        {"pages": 200, "vector_validated": 500.0}]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench), "utf-8")
    cost = cost_from_bench(path)
    fixed, per_page = cost.per_mode["raster"]
    assert fixed + per_page == pytest.approx(0.1) and fixed + 20 * per_page == pytest.approx(1.0)
    assert cost.per_mode["vector"][1] > 0 and cost.source == str(path)


def test_plans_by_pages_and_mode_not_job_count() -> None:
    small = plan(1.0, [JobClass("vector", 2, 1.0)], 30.0, sim_jobs=10_000)
    heavy = plan(1.0, [JobClass("raster", 200, 1.0)], 30.0, sim_jobs=10_000)
    assert small.feasible and heavy.feasible
    assert heavy.workers > 5 * small.workers  # one 200-page raster job is not one 2-page vector job
    assert heavy.utilisation <= 0.85 and heavy.p99_s <= 30.0
    tighter = plan(1.0, [JobClass("raster", 200, 1.0)], heavy.p99_s * 0.6, sim_jobs=10_000)
    assert tighter.workers >= heavy.workers
    big_files = plan(1.0, [JobClass("vector", 2, 1.0, input_bytes=50_000_000)], 30.0, sim_jobs=10_000)
    assert big_files.mean_service_s > small.mean_service_s + 0.4


def test_mix_parsing_and_errors() -> None:
    mix = parse_mix("vector:5:0.7,raster:20:0.3:1000000")
    assert mix[1] == JobClass("raster", 20, 0.3, 1_000_000)
    with pytest.raises(ValueError):
        parse_mix("vector:5")
    with pytest.raises(ValueError):
        parse_mix("hologram:5:1")
    assert CostModel().service_s(JobClass("vector", 1, 1.0)) > 0.15


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    capacity_cli.register(parser.add_subparsers())
    mix = "vector:10:0.9,raster:10:0.1"
    args = parser.parse_args(["capacity", "--rate", "3", "--mix", mix, "--p99", "20"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "workers needed:" in out and "p99" in out
    args = parser.parse_args(["capacity", "--rate", "3", "--mix", "bad", "--p99", "20"])
    assert args.func(args) == 2

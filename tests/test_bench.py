"""The benchmark script: it runs end to end, writes its schema, counts FLOPs and plots.

Nothing here asserts an absolute time: the suite runs on shared machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from attention import sliding_window_mask

ROOT = Path(__file__).resolve().parents[1]
SIZES = [32, 512]
IMPLEMENTATIONS = ["naive", "numpy", "flash", "flash_keys_only", "sdpa"]


@pytest.fixture(scope="module")
def bench():
    import attention_bench  # installed with the package (pyproject.toml)

    return attention_bench


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    command = [
        sys.executable,
        "-m",
        "attention_bench",
        "--quick",
        "--out",
        str(out),
        "--sizes",
        *map(str, SIZES),
        "--implementations",
        *IMPLEMENTATIONS,
        "--budget",
        "0.01",
        "--threads",
        "1",  # two threads that wait for each other crawl on a busy machine
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"wrote {out}" in run.stdout
    return json.loads(out.read_text())


def test_the_results_file_has_the_documented_schema(results, bench):
    assert results["schema"] == bench.SCHEMA_VERSION
    expected = {"created", "machine", "run", "conventions", "matmul", "copy_bandwidth", "accuracy"}
    assert expected <= set(results)
    machine = results["machine"]
    for key in ["cpu_model", "logical_cpus", "python", "torch", "numpy", "torch_threads"]:
        assert machine[key], key
    assert machine["torch_threads"] == 1
    run = results["run"]
    assert run["quick"] is True and run["sizes"] == SIZES
    assert run["shape"] == {"B": 1, "H": 8, "D": 64}
    assert results["matmul"]["peak_gflops"] > 0
    assert results["copy_bandwidth"]["gbytes_per_s"] > 0
    assert results["first_touch"]["gbytes_per_s"] > 0
    assert list(results["implementations"]) == IMPLEMENTATIONS


def test_every_point_is_measured_or_skipped_with_a_reason(results, bench):
    measured = {(r["implementation"], r["n"], r["mode"], r["causal"]) for r in results["results"]}
    skipped = {
        (s["implementation"], s["n"], s["mode"], s["causal"]): s["reason"]
        for s in results["skipped"]
    }
    assert len(measured) == len(results["results"]), "a point was measured twice"
    expected = {
        (name, n, mode, causal)
        for name in IMPLEMENTATIONS
        for n in SIZES
        for mode in bench.MODES
        for causal in (False, True)
    }
    assert measured | set(skipped) == expected and not measured & set(skipped)
    # The key-blocks-only variant is a forward-only illustration.
    assert set(skipped) == {p for p in expected if p[0] == "flash_keys_only" and p[2] != "forward"}
    assert all("forward only" in reason for reason in skipped.values())


def test_each_record_is_consistent(results):
    peak = results["matmul"]["peak_gflops"]
    for record in results["results"]:
        assert record["median_s"] > 0 and record["iqr_s"] >= 0 and record["repeats"] >= 1
        # Written with 5 significant digits.
        gflops = record["flops"] / record["median_s"] / 1e9
        assert record["gflops"] == pytest.approx(gflops, rel=1e-3)
        assert record["fraction_of_matmul_peak"] == pytest.approx(gflops / peak, rel=1e-3)
        assert isinstance(record["peak_extra_bytes"], int) and record["peak_extra_bytes"] >= 0
        assert record["memory_method"]


def test_peak_memory_sees_the_n_by_n_matrix_and_its_absence(results, bench):
    one_matrix = 8 * 512 * 512 * 4  # (B, H, n, n) float32 at n = 512: 8 MiB
    naive = bench.find(results, "naive", 512)["peak_extra_bytes"]
    numpy = bench.find(results, "numpy", 512)["peak_extra_bytes"]
    flash = bench.find(results, "flash", 512)["peak_extra_bytes"]
    assert one_matrix <= naive <= 4 * one_matrix
    assert numpy >= one_matrix  # NumPy's allocations are seen too
    assert flash < naive / 2  # no n x n matrix: tiles of 256 x 256 and the output


def test_accuracy_is_recorded_against_float64_and_meets_its_targets(results, bench):
    rows = results["accuracy"]
    assert [(row["n"], row["causal"]) for row in rows] == [(bench.ACCURACY_N, c) for c in (0, 1)]
    for row in rows:
        # float32 against float64: errors of a few ulps of the outputs, never zero.
        assert 0 < row["naive_max_error"] < 1e-5 and 0 < row["flash_max_error"] < 1e-5
        assert row["error_ratio"] == pytest.approx(
            row["flash_max_error"] / row["naive_max_error"], rel=1e-3
        )
        assert row["error_ratio"] <= 2
        assert row["gradient_max_difference_float64"] <= 1e-8


def test_paired_ratio_interleaves_and_decides_the_time_targets(bench):
    config = bench.Config(sizes=(64,), threads=1)
    flash, sdpa = (bench.Point(name, 64, False, "forward") for name in ("flash", "sdpa"))
    row = bench.paired_ratio(flash, sdpa, config, rounds=3)
    assert row["rounds"] == 3 and row["ratio"] > 0 and row["iqr"] >= 0
    assert (row["implementation"], row["reference"], row["n"]) == ("flash", "sdpa", 64)

    # A paired ratio, where present, overrides the ratio of two separate medians.
    record = {"n": 4096, "mode": "forward", "causal": False, "peak_extra_bytes": None}
    data = {
        "results": [
            {**record, "implementation": "flash", "median_s": 3.0},
            {**record, "implementation": "sdpa", "median_s": 1.0},
        ],
        "paired_ratios": [],
    }
    assert bench.check_targets(data)[0]["value"] == 3.0
    data["paired_ratios"] = [{**row, "n": 4096, "ratio": 1.25}]
    assert bench.check_targets(data)[0]["value"] == 1.25
    assert bench.check_targets(data)[0]["met"] is True


def test_attended_pairs_match_the_masks(bench):
    for n, window in [(7, 3), (10, 1), (9, 20)]:
        for causal in (False, True):
            mask = sliding_window_mask(n, window=window, causal=causal)
            assert bench.attended_pairs(n, causal, window) == int(mask.sum())
    assert bench.attended_pairs(10, causal=True) == 55
    assert bench.attended_pairs(10, causal=False) == 100


def test_flop_convention(bench):
    config = bench.Config()
    forward = bench.flop_count(bench.Point("sdpa", 1024, False, "forward"), config)
    assert forward == 4 * 1024 * 1024 * 64 * 8  # 4 n² D per head, 8 heads
    causal = bench.flop_count(bench.Point("flash", 1024, True, "forward"), config)
    assert causal == 4 * 64 * 8 * 1024 * 1025 // 2
    both = bench.flop_count(bench.Point("naive", 1024, False, "forward+backward"), config)
    assert both == 3.5 * forward  # backward = 2.5 forward, FlashAttention's count
    linear = bench.flop_count(bench.Point("linear", 1024, False, "forward"), config)
    assert linear == 4 * 1024 * 64 * 64 * 8


def test_slow_dense_points_are_skipped_with_a_reason(bench):
    config = bench.Config()

    def reason(name, n, causal=False, mode="forward", available=None):
        return bench.skip_reason(bench.Point(name, n, causal, mode), config, available)

    assert "GiB" in reason("naive", 4096, mode="forward+backward")
    assert "causal mask saves nothing" in reason("numpy", 4096, causal=True)
    assert reason("naive", 2048, causal=True, mode="forward+backward") is None
    assert reason("naive", 8192) is None  # the forward pass, no mask: measured
    assert reason("flash", 8192, causal=True, mode="forward+backward") is None
    assert "available" in reason("naive", 4096, available=2**30)


def test_fit_slope_recovers_the_power_above_the_fixed_cost(bench):
    ns = np.array([64, 128, 256, 512, 1024, 2048, 4096], dtype=float)
    times = 1e-5 + 1e-9 * ns**2  # a fixed cost that dominates small n
    assert bench.fit_slope(ns, times) == pytest.approx(2, abs=0.05)
    assert bench.fit_slope(ns, times, upper=1.0) < 1.8  # the fixed cost bends a full fit
    assert bench.fit_slope(ns, 3 * ns) == pytest.approx(1)
    assert bench.fit_slope(ns[:1], ns[:1]) is None
    assert bench.fit_slope(ns[:2], np.array([0.0, 1.0])) is None  # zeros are dropped


def test_plots_and_tables_render_from_the_file(results, bench, tmp_path):
    matplotlib.use("Agg")
    fig = bench.plot_results(results)
    assert len(fig.axes) == 8  # time and memory for 2 modes x 2 masks
    time_panel = fig.axes[0]
    assert time_panel.get_xscale() == "log" and time_panel.get_yscale() == "log"
    slopes = [text.get_text() for text in time_panel.texts]
    assert len(slopes) == len(IMPLEMENTATIONS)  # one slope at the end of each line
    assert all(np.isfinite(float(slope)) for slope in slopes)
    fig.savefig(tmp_path / "plot.svg")
    assert (tmp_path / "plot.svg").stat().st_size > 10_000

    table = bench.markdown_table(results, "time")
    assert table.count("\n") == 1 + len(IMPLEMENTATIONS)
    assert "(1.00×)" in table.splitlines()[2 + IMPLEMENTATIONS.index("sdpa")]
    backward = bench.markdown_table(results, "time", "forward+backward")
    assert "flash, key blocks only" not in backward  # no point measured: no row
    targets = bench.check_targets(results)
    timed = [row for row in targets if "time" in row["target"] or "memory" in row["target"]]
    assert len(timed) == 3 and all(row["met"] is None for row in timed)  # no n = 2048 ... 8192
    assert all(row["met"] is True for row in targets if row not in timed)  # accuracy: measured
    assert "quick (reduced) run" in bench.summary(results)


def test_the_committed_results_load(bench):
    # The Performance page is built from this file: it must exist and parse.
    data = bench.load(ROOT / "benchmarks" / "results" / "latest.json")
    assert data["results"] and data["machine"]["cpu_model"]
    for record in data["results"]:
        assert record["implementation"] in data["implementations"]
    # The page quotes the targets from it: a smoke run has no n = 4096 or 8192.
    assert not data["run"]["quick"], "commit the output of `make bench`, not a quick run"
    assert all(row["value"] is not None for row in bench.check_targets(data))

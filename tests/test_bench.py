"""The benchmark script: it runs end to end, writes its schema, counts FLOPs and plots.

Nothing here asserts an absolute time: the suite runs on shared machines. The quick run
includes the sequence-parallel section (two processes, short sequences): its byte
counts must equal the formulas, written out again here.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import matplotlib
import numpy as np
import pytest

from attention import sliding_window_mask
from tests.conftest import ROOT

SIZES = [32, 512]
IMPLEMENTATIONS = ["naive", "numpy", "flash", "flash_keys_only", "sdpa"]
STRATEGIES = ["ring", "all_gather", "ulysses"]
PARALLEL_SIZES = [64, 512]  # two ranks: shards of 32 and 256 positions


@pytest.fixture(scope="module")
def bench():
    import attention_bench  # a distribution of its own (benchmarks/pyproject.toml)

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
        "--parallel-sizes",
        *map(str, PARALLEL_SIZES),
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"wrote {out}" in run.stdout
    return json.loads(out.read_text())


def test_the_results_file_has_the_documented_schema(results, bench):
    assert results["schema"] == bench.SCHEMA_VERSION
    expected = {"created", "machine", "run", "conventions", "matmul", "copy_bandwidth", "accuracy"}
    assert expected | {"sequence_parallel"} <= set(results)
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
    data["paired_ratios"] = [{**row, "n": 4096, "ratio": 1.2}]
    assert bench.check_targets(data)[0]["value"] == 1.2
    assert bench.check_targets(data)[0]["met"] is True

    # The causal target reads the causal pair, and only it.
    causal = next(i for i, t in enumerate(bench.TARGETS) if t.causal)
    assert bench.check_targets(data)[causal]["value"] is None  # no causal point yet
    data["paired_ratios"].append({**row, "n": 4096, "causal": True, "ratio": 1.4})
    verdicts = bench.check_targets(data)
    assert verdicts[0]["value"] == 1.2 and verdicts[causal]["value"] == 1.4
    assert verdicts[causal]["met"] is False  # the causal limit is 1.3


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
    assert len(timed) == 4 and all(row["met"] is None for row in timed)  # no n = 2048 ... 8192
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


def test_the_committed_sequence_parallel_section_is_complete(bench):
    # The Performance page's section on sequence parallelism reads it.
    data = bench.load(ROOT / "benchmarks" / "results" / "latest.json")
    section = data["sequence_parallel"]
    run = section["run"]
    assert not run["quick"], "commit the output of `make bench-parallel`, not a quick run"
    assert run["world_sizes"] == [2, 4] and list(section["strategies"]) == STRATEGIES
    assert section["machine"]["cpu_model"] and section["created"]
    check_parallel_records(section, bench)
    assert all(min(r["peak_extra_bytes"]) > 2**20 for r in section["results"])


def check_parallel_records(section, bench):
    """Every point present, bytes equal to the formulas, memory and time well-formed."""
    run = section["run"]
    points = [(r["strategy"], r["world_size"], r["n"]) for r in section["results"]]
    expected = [(s, W, n) for W in run["world_sizes"] for s in STRATEGIES for n in run["sizes"]]
    assert sorted(points) == sorted(expected)
    config = bench.ParallelConfig(sizes=tuple(run["sizes"]), world_sizes=tuple(run["world_sizes"]))
    for record in section["results"]:
        strategy, W, n = record["strategy"], record["world_size"], record["n"]
        s = 4 * 1 * 8 * (n // W) * 64  # one (B, H, n / W, D) float32 shard
        assert record["shard_bytes"] == s
        assert record["traffic_formula"] == bench.traffic_formula(strategy, W, s)
        for mode in bench.MODES:
            formula = record["traffic_formula"][mode]
            ranks = record["traffic_by_rank"][mode]
            assert len(ranks) == W and all(rank == formula for rank in ranks), (points, mode)
            assert record["traffic"][mode]["sent_by_operation"]["shape check"] == 96
        terms = bench.memory_formula(strategy, config, n, W)
        assert record["memory_formula_terms"] == terms
        assert record["memory_formula_bytes"] == sum(terms.values())
        peaks = record["peak_extra_bytes"]
        # 0 is possible for tiny shards: blocks under 128 KiB come from the heap.
        assert len(peaks) == W and all(isinstance(p, int) and p >= 0 for p in peaks)
        assert record["memory_ratio"] == pytest.approx(
            max(peaks) / record["memory_formula_bytes"], rel=1e-3
        )
        forward, both = (record["time"][mode] for mode in bench.MODES)
        assert 0 < forward["median_s"] <= both["median_s"]  # the forward is part of the call
        assert len(both["rank_median_s"]) == W and both["repeats"] == run["repeats"]


def test_sequence_parallel_bytes_equal_the_formulas_on_two_processes(results, bench):
    section = results["sequence_parallel"]
    run = section["run"]
    assert run["quick"] is True and run["world_sizes"] == [2] and run["sizes"] == PARALLEL_SIZES
    assert run["shape"] == {"B": 1, "H": 8, "D": 64} and run["threads_per_rank"] == {"2": 1}
    check_parallel_records(section, bench)
    largest = [r for r in section["results"] if r["n"] == max(PARALLEL_SIZES)]
    assert all(min(r["peak_extra_bytes"]) > 0 for r in largest)
    for record in section["results"]:
        s = record["shard_bytes"]
        # Written out for W = 2 (forward sent, received; forward + backward sent, received):
        # ring: 1 hop of k and v; backward 1 hop again and 2 hops of their gradients.
        # all-gather: k, v out once, 1 of each in; backward reduce-scatters 1 of each.
        # Ulysses: half of q, k, v, out each way; backward the same again. Plus 96 bytes
        # of shape check sent to, and received from, the other rank.
        expected = {
            "ring": (2 * s, 2 * s, 8 * s, 8 * s),
            "all_gather": (2 * s, 2 * s, 4 * s, 4 * s),
            "ulysses": (2 * s, 2 * s, 4 * s, 4 * s),
        }[record["strategy"]]
        ways = ("sent", "received")
        measured = tuple(record["traffic"][m][way] - 96 for m in bench.MODES for way in ways)
        assert measured == expected, record["strategy"]


def test_traffic_formula_for_four_ranks(bench):
    # The numbers tests/test_distributed.py measures on four processes (N = 64, H = 8,
    # D = 16: shards of 8 KiB).
    block = 4 * 8 * 16 * 16
    ring, gather, ulysses = (bench.traffic_formula(strategy, 4, block) for strategy in STRATEGIES)
    assert ring["forward"] == {"sent": 6 * block + 96, "received": 6 * block + 3 * 96}
    assert ring["forward+backward"]["sent"] == 6 * block + 96 + (6 + 8) * block
    assert gather["forward"] == {"sent": 2 * block + 96, "received": 6 * block + 3 * 96}
    assert gather["forward+backward"]["sent"] == 2 * block + 96 + 6 * block
    assert ulysses["forward"] == {"sent": 3 * block + 96, "received": 3 * block + 3 * 96}
    assert ulysses["forward+backward"]["received"] == 6 * block + 3 * 96


def test_memory_formula_grows_as_each_strategy_holds(bench):
    config = bench.ParallelConfig()
    MiB = 2**20

    def total(strategy, n, W):
        return sum(bench.memory_formula(strategy, config, n, W).values()) / MiB

    # n = 4096, W = 2: shards of 4 MiB, tiles of 2 MiB (8 heads of 256 x 256).
    assert total("ring", 4096, 2) == 12 * 4 + 2 * 2
    assert total("all_gather", 4096, 2) == (4 + 4 * 2) * 4 + 2 * 2
    assert total("ulysses", 4096, 2) == 9 * 4 + 2 * 1  # tiles of 4 heads
    # Ring and Ulysses hold O(n / W): twice the length on twice the ranks costs the same.
    assert total("ring", 8192, 4) == total("ring", 4096, 2)
    assert total("ulysses", 8192, 4) < total("ulysses", 4096, 2)  # and smaller tiles
    # All-gather holds all n keys and values, and their gradients: O(n).
    assert total("all_gather", 8192, 4) > 1.5 * total("all_gather", 4096, 2)


def test_a_wrong_byte_count_fails_the_run(results, bench):
    from attention_bench.sequence_parallel import check_traffic

    record = copy.deepcopy(results["sequence_parallel"]["results"][0])
    check_traffic([record])
    record["traffic_by_rank"]["forward+backward"][1]["received"] += 1
    with pytest.raises(RuntimeError, match=r"rank 1 measured .* the formula gives"):
        check_traffic([record])


def test_parallel_tables_render_from_the_file(results, bench):
    for what in ("traffic", "memory", "time"):
        table = bench.parallel_table(results, what)
        assert table.count("\n") == 1 + len(STRATEGIES)  # one world size, W = 2
        assert "≠" not in table
    traffic = bench.parallel_table(results, "traffic").splitlines()
    assert traffic[2].startswith("| ring_attention, W = 2 | 8 s / 8 s |")
    assert bench.parallel_table(results, "traffic", "forward").splitlines()[2].split("|")[2] == (
        " 2 s / 2 s "
    )
    memory = bench.parallel_table(results, "memory").splitlines()
    assert "| 12 s + 2 T |" in memory[2] and "| 9 s + 1 T |" in memory[4]


def test_merge_sections_replaces_only_what_was_measured(bench):
    old = {"schema": 2, "run": {"sizes": [256]}, "results": ["old"]}
    parallel = {"run": {"world_sizes": [2]}, "results": ["parallel"]}
    merged = bench.merge_sections(old, {"schema": 3, "sequence_parallel": parallel})
    assert merged == {**old, "schema": bench.SCHEMA_VERSION, "sequence_parallel": parallel}
    # A new run of the implementations keeps the file's sequence-parallel section.
    again = bench.merge_sections(merged, {"schema": 3, "run": {}, "results": ["new"]})
    assert again["results"] == ["new"] and again["sequence_parallel"] == parallel
    with pytest.raises(ValueError, match="schema 1"):
        bench.merge_sections({"schema": 1}, merged)


def test_only_one_section_merged_by_the_command_line(tmp_path, monkeypatch, bench):
    from attention_bench import cli

    out = tmp_path / "results.json"
    out.write_text(json.dumps({"schema": 2, "run": {"quick": False}, "results": ["kept"]}))

    def fake_run(config, progress):  # what would run on the processes
        return {"run": {"sizes": list(config.sizes)}, "results": [{"memory_ratio": 1.5}]}

    monkeypatch.setattr(cli.parallel, "run_sequence_parallel", fake_run)
    argv = ["--only", "sequence-parallel", "--merge", "--out", str(out), "--no-progress"]
    assert cli.main([*argv, "--parallel-sizes", "64", "128"]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == bench.SCHEMA_VERSION and data["results"] == ["kept"]
    assert data["sequence_parallel"]["run"] == {"sizes": [64, 128]}

"""The command line: ``python -m attention_bench --out results.json [--quick] ...``.

A run measures two sections, or the one ``--only`` names: ``implementations`` (every
implementation in one process, `attention_bench.run`) and ``sequence-parallel``
(`attention_bench.sequence_parallel`, on several processes). With ``--merge``, the
sections measured replace theirs in an existing ``--out`` file and the others stay::

    python -m attention_bench --only sequence-parallel --merge --out results.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attention_bench import sequence_parallel as parallel
from attention_bench.cases import IMPLEMENTATIONS, MODES, QUICK_SIZES, Config
from attention_bench.report import (
    PARALLEL_SECTION,
    SCHEMA_VERSION,
    merge_sections,
    plot_results,
)
from attention_bench.run import Progress, run_benchmark
from attention_bench.targets import check_targets

SECTIONS = ("implementations", parallel.SECTION)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m attention_bench",
        description="Benchmark attention implementations on the CPU (time, GFLOP/s, memory).",
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"sizes {' '.join(map(str, QUICK_SIZES))}, short budgets, small matmul: a smoke run",
    )
    parser.add_argument("--sizes", type=int, nargs="+", help="sequence lengths n")
    parser.add_argument(
        "--implementations", nargs="+", choices=list(IMPLEMENTATIONS), help="default: all"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, help="default: both")
    parser.add_argument("--masks", nargs="+", choices=("none", "causal"), help="default: both")
    parser.add_argument("--budget", type=float, help="seconds of timing per point at least")
    parser.add_argument("--min-repeats", type=int, help="timed calls per point at least")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory processes")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (default: torch's); in the sequence-parallel section, per "
        "process (default: the cores shared out among them)",
    )
    parser.add_argument("--plot", type=Path, help="also render the plots to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress line")
    parser.add_argument("--only", choices=SECTIONS, help="measure this section only")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the sections of an existing --out file that this run does not measure",
    )
    sp = parser.add_argument_group(
        "sequence-parallel section", "ring, all-gather and Ulysses attention on W processes"
    )
    sp.add_argument(
        "--world-sizes",
        type=int,
        nargs="+",
        help="numbers of processes W (default: "
        f"{' '.join(map(str, parallel.WORLD_SIZES))}; --quick: "
        f"{' '.join(map(str, parallel.QUICK_WORLD_SIZES))})",
    )
    sp.add_argument(
        "--parallel-sizes",
        type=int,
        nargs="+",
        help="sequence lengths n (default: "
        f"{' '.join(map(str, parallel.SIZES))}; --quick: "
        f"{' '.join(map(str, parallel.QUICK_SIZES))})",
    )
    sp.add_argument(
        "--strategies", nargs="+", choices=list(parallel.STRATEGIES), help="default: all"
    )
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> Config:
    """Turn the command line into a `Config`; --quick sets the defaults of a smoke run."""
    config = (
        Config(sizes=QUICK_SIZES, budget_s=0.05, min_repeats=1, matmul_sizes=(512,), quick=True)
        if args.quick
        else Config()
    )
    changes: dict[str, Any] = {"memory": not args.no_memory}
    if args.sizes:
        changes["sizes"] = tuple(sorted(set(args.sizes)))
    if args.implementations:
        changes["implementations"] = tuple(dict.fromkeys(args.implementations))
    if args.modes:
        changes["modes"] = tuple(dict.fromkeys(args.modes))
    if args.masks:
        changes["causal"] = tuple(dict.fromkeys(mask == "causal" for mask in args.masks))
    if args.budget is not None:
        changes["budget_s"] = args.budget
    if args.min_repeats is not None:
        changes["min_repeats"] = args.min_repeats
    if args.threads is not None:
        changes["threads"] = args.threads
    return replace(config, **changes)


def parallel_config_from_args(args: argparse.Namespace) -> parallel.ParallelConfig:
    """The sequence-parallel section's `ParallelConfig`; --threads is per rank there."""
    config = (
        parallel.ParallelConfig(
            sizes=parallel.QUICK_SIZES,
            world_sizes=parallel.QUICK_WORLD_SIZES,
            repeats=2,
            quick=True,
        )
        if args.quick
        else parallel.ParallelConfig()
    )
    changes: dict[str, Any] = {}
    if args.parallel_sizes:
        changes["sizes"] = tuple(sorted(set(args.parallel_sizes)))
    if args.world_sizes:
        changes["world_sizes"] = tuple(sorted(set(args.world_sizes)))
    if args.strategies:
        changes["strategies"] = tuple(dict.fromkeys(args.strategies))
    if args.threads is not None:
        changes["threads"] = args.threads
    return replace(config, **changes)


def _rounded(value: Any) -> Any:
    """Floats to 5 significant digits, far below the run-to-run noise: a smaller diff."""
    if isinstance(value, float):
        return float(f"{value:.5g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write the JSON (and the plots, if asked)."""
    args = parse_args(argv)
    sections = [args.only] if args.only else list(SECTIONS)
    started = time.perf_counter()
    data: dict[str, Any] = {"schema": SCHEMA_VERSION}
    if "implementations" in sections:
        data = run_benchmark(config_from_args(args), progress=not args.no_progress)
    if parallel.SECTION in sections:
        config = parallel_config_from_args(args)
        bar = Progress(len(config.world_sizes), enabled=not args.no_progress)
        data[PARALLEL_SECTION] = parallel.run_sequence_parallel(config, bar)
    if args.merge and args.out.exists():  # read as is: it may be of an older schema
        data = merge_sections(json.loads(args.out.read_text()), data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_rounded(data), indent=1) + "\n")
    merged = " (other sections kept)" if args.merge else ""
    print(f"wrote {args.out}{merged} ({time.perf_counter() - started:.0f} s)")
    if "implementations" in sections:
        for row in check_targets(data):
            value = "not measured" if row["value"] is None else f"{row['value']:.3g}"
            verdict = {None: "", True: "met", False: "NOT met"}[row["met"]]
            print(f"  {row['target']}: {value} (target {row['bound']} {row['limit']:g}) {verdict}")
    if parallel.SECTION in sections:
        records = data[PARALLEL_SECTION]["results"]
        ratios = [record["memory_ratio"] for record in records]
        print(
            f"  sequence-parallel: bytes equal to the formulas at all {len(records)} points;"
            f" peak memory / formula {min(ratios):.2f} to {max(ratios):.2f}"
        )
    if args.plot and "results" in data:
        import matplotlib

        matplotlib.use("Agg")
        figure = plot_results(data)
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return 0

"""The command line: ``python -m attention_bench --out results.json [--quick] ...``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attention_bench.cases import IMPLEMENTATIONS, MODES, QUICK_SIZES, Config
from attention_bench.report import plot_results
from attention_bench.run import run_benchmark
from attention_bench.targets import check_targets


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
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--plot", type=Path, help="also render the plots to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress line")
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
    config = config_from_args(args)
    data = run_benchmark(config, progress=not args.no_progress)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_rounded(data), indent=1) + "\n")
    print(f"wrote {args.out} ({data['run']['duration_s']:.0f} s)")
    for row in check_targets(data):
        value = "not measured" if row["value"] is None else f"{row['value']:.3g}"
        verdict = {None: "", True: "met", False: "NOT met"}[row["met"]]
        print(f"  {row['target']}: {value} (target {row['bound']} {row['limit']:g}) {verdict}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        figure = plot_results(data)
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return 0

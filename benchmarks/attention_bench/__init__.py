r"""Benchmark attention on the CPU: median time, GFLOP/s, share of the matmul peak, peak memory.

Installed with the project (``make install``); ``make bench`` runs the full version::

    python -m attention_bench --out benchmarks/results/latest.json
    python -m attention_bench --out /tmp/quick.json --quick --sizes 256 512
    python -m attention_bench --only sequence-parallel --merge --out results.json

Every implementation computes attention for ``B = 1`` sequence of ``H = 8`` heads of
size ``D = 64`` in float32, self-attention with ``L = S = n``, with and without a causal
mask, forward only and forward + backward.

Time is measured in one process for all implementations at each ``n``
(`attention_bench.timing`), FLOPs are credited by a stated convention
(`attention_bench.cost`), and peak memory is measured in a fresh process per point
(`attention_bench.memory`); each module's docstring gives the method.

A second section runs one sequence split across $W$ processes with the three
strategies of `attention.distributed` (ring, all-gather, Ulysses) and measures the
bytes, peak memory and time of each rank against their formulas
(`attention_bench.sequence_parallel`).

The modules, in the order a run uses them: `cases` (what is measured), `cost` (FLOPs
and skipped points), `timing`, `memory`, `accuracy`, `machine`, `run` (a whole run,
with progress), `sequence_parallel` (the section on several processes), `report`
(reading a results file: tables, plots), `targets` (the project's targets as frozen
dataclasses) and `cli` (the command line).

References:
    - Dao et al., "FlashAttention", 2022. [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)
    - Dao, "FlashAttention-2", 2023. [arXiv:2307.08691](https://arxiv.org/abs/2307.08691)
    - Rabe and Staats, "Self-attention Does Not Need O(n²) Memory", 2021.
      [arXiv:2112.05682](https://arxiv.org/abs/2112.05682)
"""

from __future__ import annotations

from attention_bench.accuracy import ACCURACY_N, measure_accuracy
from attention_bench.cases import (
    BACKWARD,
    FORWARD,
    IMPLEMENTATIONS,
    MODES,
    Config,
    Implementation,
    Point,
    make_step,
    naive_attention,
)
from attention_bench.cost import attended_pairs, flop_count, skip_reason
from attention_bench.machine import machine_info
from attention_bench.report import (
    SCHEMA_VERSION,
    find,
    fit_slope,
    load,
    markdown_table,
    merge_sections,
    plot_results,
    ratio_comparison,
    series,
    summary,
)
from attention_bench.run import run_benchmark
from attention_bench.sequence_parallel import (
    ParallelConfig,
    find_parallel,
    memory_formula,
    parallel_table,
    run_sequence_parallel,
    traffic_formula,
)
from attention_bench.targets import ACCURACY_TARGETS, TARGETS, AccuracyTarget, Target, check_targets
from attention_bench.timing import median_time, paired_ratio

__all__ = [
    "ACCURACY_N",
    "ACCURACY_TARGETS",
    "BACKWARD",
    "FORWARD",
    "IMPLEMENTATIONS",
    "MODES",
    "SCHEMA_VERSION",
    "TARGETS",
    "AccuracyTarget",
    "Config",
    "Implementation",
    "ParallelConfig",
    "Point",
    "Target",
    "attended_pairs",
    "check_targets",
    "find",
    "find_parallel",
    "fit_slope",
    "flop_count",
    "load",
    "machine_info",
    "make_step",
    "markdown_table",
    "measure_accuracy",
    "median_time",
    "memory_formula",
    "merge_sections",
    "naive_attention",
    "paired_ratio",
    "parallel_table",
    "plot_results",
    "ratio_comparison",
    "run_benchmark",
    "run_sequence_parallel",
    "series",
    "skip_reason",
    "summary",
    "traffic_formula",
]

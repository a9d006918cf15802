"""Measuring time: medians, interleaved ratios, and the machine's ceilings.

Medians come from `torch.utils.benchmark.Timer`; the ceilings are the matmul peak, the
copy bandwidth and the speed of writing into fresh memory.

All implementations at a given ``n`` are timed in one process, one after another, so
their ratios compare like with like: a first call is discarded (lazy initialisation,
first use of new memory), then ``blocked_autorange`` repeats the call for at least the
budget, or, for a call too slow for that, exactly ``min_repeats`` calls are made (a
call of a second or more is not worth a warm-up: its first run counts).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.benchmark import Timer

from attention_bench.cases import Config, MiB, Point, make_step


def median_time(
    step: Callable[[], object], budget_s: float, min_repeats: int, long_call_s: float = 1.0
) -> dict[str, Any]:
    """Median seconds per call with `torch.utils.benchmark.Timer`.

    The first call is discarded (lazy initialisation, first use of a buffer), unless it
    took ``long_call_s`` or more: then those costs are a negligible part of it, and it
    counts as one of the ``min_repeats`` calls.
    """
    timer = Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
    first = timer.timeit(1).times[0]
    if first >= long_call_s:
        times = [first] + [timer.timeit(1).times[0] for _ in range(min_repeats - 1)]
        repeats = len(times)
    elif first * min_repeats >= budget_s:
        times = [timer.timeit(1).times[0] for _ in range(min_repeats)]
        repeats = min_repeats
    else:
        measurement = timer.blocked_autorange(min_run_time=budget_s)
        times = list(measurement.times)
        repeats = len(times) * measurement.number_per_run
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    return {"median_s": float(median), "iqr_s": float(q3 - q1), "repeats": int(repeats)}


def paired_ratio(point: Point, reference: Point, config: Config, rounds: int = 9) -> dict[str, Any]:
    """Median over ``rounds`` of (time of ``point``) / (time of ``reference``), interleaved.

    Timing one implementation's calls and then the other's lets a burst of load from
    another process land on one side only; alternating single calls exposes both to
    the same conditions, so the ratio that decides a target is far steadier than the
    ratio of two medians taken minutes apart.
    """
    steps = [make_step(point, config), make_step(reference, config)]
    for step in steps:
        step()  # warm up: lazy initialisation, first use of the buffers
    ratios = []
    for _ in range(rounds):
        times = []
        for step in steps:
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        ratios.append(times[0] / times[1])
    q1, median, q3 = np.percentile(ratios, [25, 50, 75])
    return {
        "implementation": point.implementation,
        "reference": reference.implementation,
        "n": point.n,
        "causal": point.causal,
        "mode": point.mode,
        "ratio": float(median),
        "iqr": float(q3 - q1),
        "rounds": rounds,
    }


def measure_matmul_peak(sizes: Sequence[int], budget_s: float, min_repeats: int) -> dict[str, Any]:
    """GFLOP/s of square float32 `torch.matmul`, the ceiling attention is compared with."""
    results = {}
    generator = torch.Generator().manual_seed(0)
    for size in sizes:
        a, b = (torch.randn(size, size, generator=generator) for _ in range(2))
        timing = median_time(functools.partial(torch.matmul, a, b), budget_s, min_repeats)
        results[str(size)] = {**timing, "gflops": 2 * size**3 / timing["median_s"] / 1e9}
    return {"sizes": results, "peak_gflops": max(r["gflops"] for r in results.values())}


def measure_copy_bandwidth(mib: int, budget_s: float, min_repeats: int) -> dict[str, Any]:
    """Main-memory bandwidth of a large copy, bytes read plus bytes written per second."""
    source = torch.randn(mib * MiB // 4)
    target = torch.empty_like(source)
    timing = median_time(lambda: target.copy_(source), budget_s, min_repeats)
    return {"mib": mib, **timing, "gbytes_per_s": 2 * source.nbytes / timing["median_s"] / 1e9}


def measure_first_touch(mib: int, budget_s: float, min_repeats: int) -> dict[str, Any]:
    """Bytes per second written into *freshly allocated* memory: allocate, fill, free.

    A large block comes straight from the operating system, which maps its pages on
    first touch (a page fault, and the page zeroed) instead of at allocation: this is
    what every new ``(B, H, n, n)`` matrix of the textbook version costs.
    """
    numel = mib * MiB // 4
    timing = median_time(lambda: torch.empty(numel).fill_(1.0), budget_s, min_repeats)
    return {"mib": mib, **timing, "gbytes_per_s": 4 * numel / timing["median_s"] / 1e9}

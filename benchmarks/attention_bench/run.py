"""A whole benchmark run: plan the points, measure them with progress, return the JSON."""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import asdict
from typing import Any

import torch

from attention_bench.accuracy import measure_accuracy
from attention_bench.cases import IMPLEMENTATIONS, Config, Point, make_step
from attention_bench.cost import flop_count, skip_reason
from attention_bench.machine import machine_info, proc_bytes
from attention_bench.memory import fresh_processes, peak_memory_in_fresh_process
from attention_bench.report import SCHEMA_VERSION
from attention_bench.targets import TARGETS
from attention_bench.timing import (
    measure_copy_bandwidth,
    measure_first_touch,
    measure_matmul_peak,
    median_time,
    paired_ratio,
)


class Progress:
    """A progress line on stderr: in place on a terminal, a line every 10 s otherwise."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.start = self.last_print = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, what: str) -> None:
        """Count one step done, ``what``."""
        self.done += 1
        now = time.perf_counter()
        if not self.enabled or (
            not self.tty and now - self.last_print < 10 and self.done < self.total
        ):
            return
        self.last_print = now
        width = 24
        filled = width * self.done // max(self.total, 1)
        elapsed = now - self.start
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
            f" {elapsed:5.0f} s  {what}"
        )
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150])
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def plan(config: Config) -> tuple[list[Point], list[dict[str, Any]]]:
    """The points to measure, in order, and the points skipped with their reason."""
    available = proc_bytes("/proc/meminfo", "MemAvailable")
    points, skipped = [], []
    for n in sorted(config.sizes):
        for mode in config.modes:
            for causal in config.causal:
                for name in config.implementations:
                    point = Point(name, n, causal, mode)
                    reason = skip_reason(point, config, available)
                    if reason is None:
                        points.append(point)
                    else:
                        skipped.append({**asdict(point), "reason": reason})
    return points, skipped


CONVENTIONS = {
    "flops": (
        "softmax attention: 4*D per attended query-key pair and head, forward (causal: "
        "n(n+1)/2 pairs; sliding window: the pairs inside the band); backward = 2.5 x "
        "forward (FlashAttention's count: 5 products, scores recomputed), so "
        "forward+backward = 3.5 x forward for every softmax implementation. "
        "linear attention: its own products, 4*n*D*D forward (+ 4*n*C*D causal, C = 64), "
        "backward = 2 x forward."
    ),
    "time": (
        "torch.utils.benchmark.Timer in one process for all implementations at each n; "
        "one discarded call, then blocked_autorange for budget_s seconds, or min_repeats "
        "calls for slow ones (calls of 1 s or more: no discarded call); median"
    ),
    "memory": (
        "a fresh process per point (forkserver); warm-up at n <= 128, then "
        "VmHWM - VmRSS around one call after resetting VmHWM (clear_refs); "
        "MALLOC_MMAP_THRESHOLD_=131072; includes outputs and gradients, excludes inputs"
    ),
    "matmul_peak": "median GFLOP/s of square float32 torch.matmul, best of the sizes",
    "copy_bandwidth": "bytes read + written per second by a large tensor copy_",
    "first_touch": "bytes per second of torch.empty(...).fill_(1.0): fresh pages, faulted in",
}


def run_benchmark(
    config: Config, progress: bool = True, command: str | None = None
) -> dict[str, Any]:
    """Measure every point of ``config``; return the JSON-ready results.

    ``command`` says in the results what ran them (default: this process's command line).
    """
    torch.set_num_threads(config.threads)
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.timezone.utc)
    points, skipped = plan(config)
    memory_points = points if config.memory else []
    # Each timed target's point, with and without a mask (the page shows both).
    timed = dict.fromkeys((t.implementation, t.n, t.mode) for t in TARGETS if t.unit == "ratio")
    pairs = [
        (Point(name, n, causal, mode), Point("sdpa", n, causal, mode))
        for name, n, mode in timed
        if {name, "sdpa"} <= set(config.implementations)
        and n in config.sizes
        and mode in config.modes
        for causal in config.causal
    ]
    bar = Progress(len(points) + len(memory_points) + len(pairs) + 3, enabled=progress)

    calibration = (min(config.budget_s, 0.5), max(config.min_repeats, 1))
    matmul = measure_matmul_peak(config.matmul_sizes, *calibration)
    bar.update("torch.matmul peak")
    mib = 64 if config.quick else 256
    bandwidth = measure_copy_bandwidth(mib, *calibration)
    first_touch = measure_first_touch(mib, *calibration)
    bar.update("copy and first-touch bandwidth")
    accuracy = measure_accuracy(config) if "flash" in config.implementations else []
    bar.update("accuracy against float64")

    records: dict[Point, dict[str, Any]] = {}
    for point in points:
        timing = median_time(make_step(point, config), config.budget_s, config.min_repeats)
        bar.update("time " + point.label())
        flops = flop_count(point, config)
        gflops = flops / timing["median_s"] / 1e9
        records[point] = {
            **asdict(point),
            **timing,
            "flops": round(flops),
            "gflops": gflops,
            "fraction_of_matmul_peak": gflops / matmul["peak_gflops"],
            "peak_extra_bytes": None,
        }
    paired = []
    for point, reference in pairs:
        paired.append(paired_ratio(point, reference, config))
        bar.update("paired " + point.label())
    if memory_points:
        with fresh_processes() as context:
            for point in memory_points:
                records[point].update(peak_memory_in_fresh_process(context, point, config))
                bar.update("memory " + point.label())

    run = {
        "quick": config.quick,
        "sizes": sorted(config.sizes),
        "modes": list(config.modes),
        "causal": list(config.causal),
        "shape": {"B": config.batch, "H": config.heads, "D": config.head_dim},
        "dtype": "float32",
        "window": config.window,
        "budget_s": config.budget_s,
        "min_repeats": config.min_repeats,
        "memory": config.memory,
        "command": command or " ".join(["python -m attention_bench", *sys.argv[1:]]),
        "duration_s": round(time.perf_counter() - started, 1),
    }
    return {
        "schema": SCHEMA_VERSION,
        "created": created.isoformat(timespec="seconds"),
        "machine": machine_info(),
        "run": run,
        "conventions": CONVENTIONS,
        "matmul": matmul,
        "copy_bandwidth": bandwidth,
        "first_touch": first_touch,
        "accuracy": accuracy,
        "paired_ratios": paired,
        "implementations": {
            name: {"label": IMPLEMENTATIONS[name].label, "description": impl.description}
            for name, impl in IMPLEMENTATIONS.items()
            if name in config.implementations
        },
        "results": list(records.values()),
        "skipped": skipped,
    }

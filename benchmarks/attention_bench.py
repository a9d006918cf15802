r"""Benchmark attention on the CPU: median time, GFLOP/s, share of the matmul peak, peak memory.

Run from the repository root (``make bench`` runs the full version)::

    python benchmarks/attention_bench.py --out benchmarks/results/latest.json
    python benchmarks/attention_bench.py --out /tmp/quick.json --quick --sizes 256 512

Every implementation computes attention for ``B = 1`` sequence of ``H = 8`` heads of
size ``D = 64`` in float32, self-attention with ``L = S = n``, with and without a causal
mask, forward only and forward + backward.

**Time.** All implementations at a given ``n`` are timed in this one process, one after
another, with `torch.utils.benchmark.Timer`, so that their ratios compare like with
like: a first call is discarded (lazy initialisation, first use of new memory), then
``blocked_autorange`` repeats the call for at least ``--budget`` seconds, or, for a
call too slow for that, exactly ``--min-repeats`` calls are made (a call of a second
or more is not worth a warm-up: its first run counts). The median is reported. The
three implementations that materialise the ``(B, H, n, n)`` matrix run backward and
causal only up to ``n = 2048``; skipped points are listed with their reason.

**FLOPs.** Softmax attention does two products of $2 \cdot L S D$ FLOPs each per head:
$4 L S D$ forward, counted over the query-key pairs the function *attends to* (causal:
$n(n+1)/2$ pairs; a window of $w$: the pairs inside the band). Work done and then
masked away is not credited. The backward pass is counted as 2.5 forward passes, the
FlashAttention convention (five products of the forward's size: $dV$, $dP$, $dQ$, $dK$
and the recomputed scores), so forward + backward is 3.5 forward, for every softmax
implementation, whether or not it recomputes. Linear attention is counted as its own
products (no $n \times n$ matrix) and its backward as 2 forward passes (each product's
gradient is two products). GFLOP/s is that count over the median time, and the
fraction of peak divides it by the GFLOP/s of a large `torch.matmul` measured in the
same run.

**Peak memory.** For each point a fresh process is forked from a server process that
has only imported the libraries (`multiprocessing`'s ``forkserver``), so nothing
allocated for an earlier point is still around. The child runs the same call once at a
small size (loading code and starting threads), builds the inputs, resets the
kernel's high-water mark of its resident memory (``/proc/self/clear_refs``), makes the
call, and reports ``VmHWM - VmRSS before the call``: the most memory the call held at
once on top of its inputs, output and gradients included. Resident memory sees NumPy's
allocations as well as PyTorch's (the profiler sees only PyTorch's), and glibc is told
to give every block of 128 KiB or more back to the system when freed
(``MALLOC_MMAP_THRESHOLD_``), so a buffer freed earlier cannot hide a new one. Where
``clear_refs`` cannot be written, the growth of ``ru_maxrss`` is used instead.

References:
    - Dao et al., "FlashAttention", 2022. [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)
    - Dao, "FlashAttention-2", 2023. [arXiv:2307.08691](https://arxiv.org/abs/2307.08691)
    - Rabe and Staats, "Self-attention Does Not Need O(n²) Memory", 2021.
      [arXiv:2112.05682](https://arxiv.org/abs/2112.05682)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import multiprocessing
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

import attention
from attention import (
    flash_attention,
    linear_attention,
    numpy_reference,
    scaled_dot_product_attention,
    sliding_window_attention,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SCHEMA_VERSION = 2  # 2: adds "accuracy" and "paired_ratios"
FORWARD, BACKWARD = "forward", "forward+backward"
MODES = (FORWARD, BACKWARD)
FULL_SIZES = (256, 512, 1024, 2048, 4096, 8192)
QUICK_SIZES = (256, 512, 1024)
MiB = 2**20
# Softmax attention's backward pass, in forward passes (FlashAttention's count).
BACKWARD_FACTOR = {"softmax": 2.5, "linear": 2.0}


@dataclass(frozen=True)
class Implementation:
    """One way of computing attention, and what its cost model is."""

    name: str
    label: str
    description: str
    kind: str = "dense"  # "dense": every allowed pair; "window"; "linear"
    backend: str = "torch"  # or "numpy"
    forward_only: bool = False
    # Builds (B, H, n, n) matrices: how many are alive at the peak, forward / forward +
    # backward (read off the memory this benchmark measures, rounded up).
    dense_matrices: tuple[int, int] = (0, 0)


IMPLEMENTATIONS = {
    impl.name: impl
    for impl in [
        Implementation(
            "naive",
            "naive torch",
            "softmax(q @ k.T / sqrt(D)) @ v in PyTorch, the n x n matrix materialised; "
            "causal: masked_fill with a triu mask built per call",
            dense_matrices=(2, 3),
        ),
        Implementation(
            "numpy",
            "NumPy reference",
            "attention.numpy_reference.scaled_dot_product_attention (and its hand-derived "
            "backward); causal: a tril bool mask built per call",
            backend="numpy",
            dense_matrices=(3, 4),
        ),
        Implementation(
            "package",
            "package SDPA (readable)",
            "attention.scaled_dot_product_attention: the package's readable version, "
            "the n x n matrix materialised",
            dense_matrices=(2, 3),
        ),
        Implementation(
            "flash",
            "flash_attention",
            "attention.flash_attention: tiled online softmax in plain PyTorch, 256 x 256 "
            "blocks (FlashAttention-2 loop order), recomputing backward",
        ),
        Implementation(
            "flash_keys_only",
            "flash, key blocks only",
            "attention.flash_attention with block_q = n: the loop over key blocks only, "
            "so the score tile is n x 256 (1-D tiling); shows why the query blocks matter",
            forward_only=True,
        ),
        Implementation(
            "sdpa",
            "F.scaled_dot_product_attention",
            "torch.nn.functional.scaled_dot_product_attention: PyTorch's fused CPU "
            "flash-attention kernel for these inputs",
        ),
        Implementation(
            "linear",
            "linear_attention",
            "attention.linear_attention (elu + 1 features): a different function, "
            "O(n D^2) work; causal in chunks of 64",
            kind="linear",
        ),
        Implementation(
            "sliding_window",
            "sliding_window_attention",
            "attention.sliding_window_attention: only the blocks of the band of `window` "
            "keys are computed (two-sided band when not causal)",
            kind="window",
        ),
    ]
}


@dataclass(frozen=True)
class Config:
    """What to measure, and how long to spend on it."""

    sizes: tuple[int, ...] = FULL_SIZES
    implementations: tuple[str, ...] = tuple(IMPLEMENTATIONS)
    modes: tuple[str, ...] = MODES
    causal: tuple[bool, ...] = (False, True)
    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    window: int = 256
    budget_s: float = 0.3  # minimum measuring time per point (blocked_autorange)
    # Timed calls per point at least. Calls of a second or more get exactly this many,
    # so it sets how far one disturbed call can move a median (5: two of five).
    min_repeats: int = 5
    matmul_sizes: tuple[int, ...] = (2048, 4096)
    memory: bool = True
    # The implementations that materialise (B, H, n, n) matrices run backward, and with
    # a causal mask, only up to this n: beyond it a call takes seconds to minutes and
    # GiB, and a causal mask makes them no cheaper (they compute every score).
    dense_limit: int = 2048
    threads: int = field(default_factory=torch.get_num_threads)
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.implementations) - set(IMPLEMENTATIONS)
        if unknown:
            raise ValueError(
                f"unknown implementations {sorted(unknown)}; known: {list(IMPLEMENTATIONS)}"
            )
        if set(self.modes) - set(MODES):
            raise ValueError(f"modes must be among {MODES}; got {self.modes}")
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"sizes must be positive; got {self.sizes}")


@dataclass(frozen=True)
class Point:
    """One measurement: an implementation at one length, mask and mode."""

    implementation: str
    n: int
    causal: bool
    mode: str

    def label(self) -> str:
        """Short description for the progress line."""
        mask = "causal" if self.causal else "full"
        return f"n={self.n} {self.mode} {mask} {self.implementation}"


# --- the implementations, as calls to time ----------------------------------------------


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Any:
    """The textbook version: the whole ``(..., L, S)`` score matrix, then softmax."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, S)
    if causal:
        L, S = scores.shape[-2:]
        future = torch.ones(L, S, dtype=torch.bool).triu(1)  # True above the diagonal
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, L, D)


def _torch_function(name: str, n: int, causal: bool, window: int) -> Callable[..., Any]:
    functions: dict[str, Callable[..., Any]] = {
        "naive": lambda q, k, v: naive_attention(q, k, v, causal),
        "package": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=causal),
        "flash": lambda q, k, v: flash_attention(q, k, v, is_causal=causal),
        "flash_keys_only": lambda q, k, v: flash_attention(
            q, k, v, is_causal=causal, block_q=max(n, 1)
        ),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "linear": lambda q, k, v: linear_attention(q, k, v, is_causal=causal),
        "sliding_window": lambda q, k, v: sliding_window_attention(
            q, k, v, window=window, causal=causal
        ),
    }
    return functions[name]


def make_step(point: Point, config: Config) -> Callable[[], None]:
    """Inputs for one point, and a call that runs it once (forward, or forward + backward).

    The inputs are built here, outside the call, from a fixed seed.
    """
    impl = IMPLEMENTATIONS[point.implementation]
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.batch, config.heads, point.n, config.head_dim)  # (B, H, n, D)
    q, k, v, grad_out = (torch.randn(shape, generator=generator) for _ in range(4))
    backward = point.mode == BACKWARD

    if impl.backend == "numpy":
        qn, kn, vn, don = (t.numpy() for t in (q, k, v, grad_out))
        n = point.n

        def numpy_step() -> None:
            mask = np.tril(np.ones((n, n), dtype=bool)) if point.causal else None
            _, weights = numpy_reference.scaled_dot_product_attention(qn, kn, vn, mask)
            if backward:
                numpy_reference.scaled_dot_product_attention_backward(don, qn, kn, vn, weights)

        return numpy_step

    function = _torch_function(point.implementation, point.n, point.causal, config.window)
    if not backward:

        def forward_step() -> None:
            with torch.no_grad():
                function(q, k, v)

        return forward_step

    leaves = [t.requires_grad_() for t in (q, k, v)]

    def backward_step() -> None:
        for t in leaves:
            t.grad = None  # every call allocates its gradients afresh
        function(q, k, v).backward(grad_out)

    return backward_step


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


# --- accuracy ---------------------------------------------------------------------------

ACCURACY_N = 1024  # float64 references of (1, 8, n, n) at 1024: 64 MiB, a second


def measure_accuracy(config: Config, n: int = ACCURACY_N) -> list[dict[str, Any]]:
    """Errors against float64, and gradients against SDPA's in float64, at length ``n``.

    FlashAttention's own criterion: the tiled result in float32 may be no further from
    a float64 reference than twice the textbook float32 result is. Its gradients,
    computed in float64, must equal those of ``F.scaled_dot_product_attention`` to
    rounding (a wrong backward formula is off by far more than 1e-8).
    """
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.batch, config.heads, n, config.head_dim)  # (B, H, n, D)
    q, k, v, grad_out = (torch.randn(shape, generator=generator) for _ in range(4))
    rows = []
    for causal in config.causal:
        with torch.no_grad():
            exact = naive_attention(q.double(), k.double(), v.double(), causal)
            naive_error = (naive_attention(q, k, v, causal).double() - exact).abs().max()
            flash_error = (flash_attention(q, k, v, is_causal=causal).double() - exact).abs().max()

        def gradients(fn: Callable[..., torch.Tensor], causal: bool = causal) -> list[torch.Tensor]:
            leaves = [t.double().requires_grad_() for t in (q, k, v)]
            fn(*leaves, is_causal=causal).backward(grad_out.double())
            return [t.grad for t in leaves if t.grad is not None]

        differences = zip(
            gradients(flash_attention), gradients(F.scaled_dot_product_attention), strict=True
        )
        rows.append(
            {
                "n": n,
                "causal": causal,
                "naive_max_error": naive_error.item(),
                "flash_max_error": flash_error.item(),
                "error_ratio": (flash_error / naive_error).item(),
                "gradient_max_difference_float64": max(
                    (ours - theirs).abs().max().item() for ours, theirs in differences
                ),
            }
        )
    return rows


# --- cost model -------------------------------------------------------------------------


def attended_pairs(n: int, causal: bool, window: int | None = None) -> int:
    """Query-key pairs one head attends to, for ``L = S = n``."""
    i = np.arange(n)
    if window is None:
        return n * (n + 1) // 2 if causal else n * n
    if causal:  # keys i - window + 1 .. i
        return int(np.minimum(i + 1, window).sum())
    low, high = np.maximum(0, i - window + 1), np.minimum(n - 1, i + window - 1)
    return int((high - low + 1).sum())


def flop_count(point: Point, config: Config, chunk: int = 64) -> float:
    """FLOPs credited to a point (see the module docstring for the convention)."""
    impl = IMPLEMENTATIONS[point.implementation]
    n, D, heads = point.n, config.head_dim, config.batch * config.heads
    if impl.kind == "linear":
        forward = 4 * n * D * D  # φ(K)ᵀV and φ(Q)·that, (D, D) each
        if point.causal:  # plus the C x C products inside each chunk
            forward += 2 * n * min(chunk, n) * (D + D)
        factor = BACKWARD_FACTOR["linear"]
    else:
        window = config.window if impl.kind == "window" else None
        forward = 4 * D * attended_pairs(n, point.causal, window)
        factor = BACKWARD_FACTOR["softmax"]
    total = float(heads * forward)
    return total * (1 + factor) if point.mode == BACKWARD else total


def skip_reason(point: Point, config: Config, available_bytes: int | None = None) -> str | None:
    """Why a point is not measured, or None if it is."""
    impl = IMPLEMENTATIONS[point.implementation]
    if impl.forward_only and point.mode == BACKWARD:
        return "forward only: it is here to show the effect of the query blocks"
    matrices = impl.dense_matrices[point.mode == BACKWARD]
    one = config.batch * config.heads * point.n**2 * 4  # one (B, H, n, n) float32 matrix
    limit = f"run only up to n = {config.dense_limit}, to keep the benchmark short"
    if matrices and point.mode == BACKWARD and point.n > config.dense_limit:
        return (
            f"materialises (B, H, n, n) matrices, about {matrices} alive in the backward"
            f" pass ({matrices * one / 2**30:.2g} GiB at n = {point.n}); {limit}"
        )
    if matrices and point.causal and point.n > config.dense_limit:
        return f"computes all n² scores and masks them, so a causal mask saves nothing; {limit}"
    if matrices and available_bytes is not None and matrices * one > available_bytes / 2:
        return (
            f"needs about {matrices * one / 2**30:.1f} GiB, more than half of the "
            f"{available_bytes / 2**30:.1f} GiB available"
        )
    return None


# --- measuring --------------------------------------------------------------------------


def median_time(
    step: Callable[[], None], budget_s: float, min_repeats: int, long_call_s: float = 1.0
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


def measure_matmul_peak(sizes: Sequence[int], budget_s: float, min_repeats: int) -> dict[str, Any]:
    """GFLOP/s of square float32 `torch.matmul`, the ceiling attention is compared with."""
    results = {}
    generator = torch.Generator().manual_seed(0)
    for size in sizes:
        a, b = (torch.randn(size, size, generator=generator) for _ in range(2))
        timing = median_time(lambda a=a, b=b: torch.matmul(a, b), budget_s, min_repeats)
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


def _status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        pass
    return None


def _maxrss_bytes() -> int:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # Linux reports KiB


def _reset_peak_rss() -> bool:
    """Set the high-water mark VmHWM to the current resident size (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def measure_peak_memory(point: Point, config: Config) -> dict[str, Any]:
    """Peak resident memory a call adds on top of its inputs; meant for a fresh process."""
    torch.set_num_threads(config.threads)
    warm_up = replace(point, n=min(point.n, 128))
    make_step(warm_up, config)()  # code pages, thread pool, BLAS buffers: not the call's
    step = make_step(point, config)
    before = _status_bytes("VmRSS")
    if before is not None and _reset_peak_rss():
        step()
        peak, method = _status_bytes("VmHWM"), "VmHWM after clear_refs"
    else:
        before, method = _maxrss_bytes(), "ru_maxrss growth (an upper bound)"
        step()
        peak = _maxrss_bytes()
    assert peak is not None and before is not None
    return {"peak_extra_bytes": max(peak - before, 0), "memory_method": method}


def _memory_child(connection: Any, point: Point, config: Config) -> None:
    try:
        connection.send(measure_peak_memory(point, config))
    except BaseException as error:  # reported to the parent, which records it
        connection.send({"memory_error": f"{type(error).__name__}: {error}"})
    finally:
        connection.close()


@contextlib.contextmanager
def fresh_processes() -> Iterator[Any]:
    """A forkserver context whose children start from freshly imported libraries."""
    context = multiprocessing.get_context("forkserver")
    module = "__main__" if __name__ == "__main__" else __name__
    # The first backward pass imports this module (over a second): do it once, here.
    backward_import = "torch.fx.experimental.symbolic_shapes"
    context.set_forkserver_preload([module, "numpy", "torch", "attention", backward_import])
    # Read by glibc when the server starts: blocks of 128 KiB or more are mmapped and
    # returned on free, so the resident size follows what is allocated.
    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    try:
        yield context
    finally:
        if saved is None:
            os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved


def peak_memory_in_fresh_process(context: Any, point: Point, config: Config) -> dict[str, Any]:
    """Run `measure_peak_memory` in a new process and return its result."""
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_memory_child, args=(sender, point, config))
    process.start()
    sender.close()
    try:
        result: dict[str, Any] = receiver.recv()
    except EOFError:  # killed, e.g. by the out-of-memory killer
        result = {"memory_error": f"the process died (exit code {process.exitcode})"}
    process.join()
    if process.exitcode not in (0, None) and "memory_error" not in result:
        result["memory_error"] = f"exit code {process.exitcode}"
    return result


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


# --- the run ----------------------------------------------------------------------------


def plan(config: Config) -> tuple[list[Point], list[dict[str, Any]]]:
    """The points to measure, in order, and the points skipped with their reason."""
    available = _status_bytes_meminfo("MemAvailable")
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


def _status_bytes_meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    """CPU, caches, memory, and the versions of everything that sets the speed."""
    cpu_model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    caches: dict[str, dict[str, str]] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        with contextlib.suppress(OSError):
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text()
            name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind.strip(), "")
            caches[name] = {
                "size": (index / "size").read_text().strip(),
                "cpus": (index / "shared_cpu_list").read_text().strip(),  # sharing it
            }
    total = _status_bytes_meminfo("MemTotal")
    return {
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "caches": caches,
        "memory_gib": None if total is None else round(total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "attention": attention.__version__,
        "torch_threads": torch.get_num_threads(),
    }


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
    pairs = [
        (Point(name, n, causal, mode), Point("sdpa", n, causal, mode))
        for _, name, n, mode, unit, _ in TARGETS
        if unit == "ratio"
        and {name, "sdpa"} <= set(config.implementations)
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
        "command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
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


# --- reading the results ----------------------------------------------------------------


def load(path: str | Path) -> dict[str, Any]:
    """Read a results file written by this script."""
    data: dict[str, Any] = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema {data.get('schema')}, expected {SCHEMA_VERSION}")
    return data


def find(
    data: dict[str, Any], implementation: str, n: int, mode: str = FORWARD, causal: bool = False
) -> dict[str, Any] | None:
    """The record of one point, or None if it was not measured."""
    for record in data["results"]:
        if (record["implementation"], record["n"], record["mode"], record["causal"]) == (
            implementation,
            n,
            mode,
            causal,
        ):
            return dict(record)
    return None


def series(
    data: dict[str, Any], implementation: str, key: str, mode: str = FORWARD, causal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(n, value)`` arrays of one implementation, for the points that have the value."""
    pairs = sorted(
        (r["n"], r[key])
        for r in data["results"]
        if r["implementation"] == implementation
        and r["mode"] == mode
        and r["causal"] == causal
        and r.get(key) is not None
    )
    ns = np.array([n for n, _ in pairs], dtype=float)
    return ns, np.array([value for _, value in pairs], dtype=float)


def fit_slope(ns: np.ndarray, values: np.ndarray, upper: float = 0.5) -> float | None:
    """Log-log slope fitted on the largest ``upper`` share of the points (at least 2).

    Small ``n`` measure fixed costs (Python, dispatch, thread start-up), not growth.
    """
    keep = values > 0
    ns, values = ns[keep], values[keep]
    if len(ns) < 2:
        return None
    count = max(2, math.ceil(upper * len(ns)))
    order = np.argsort(ns)[-count:]
    if len(set(ns[order].tolist())) < 2:
        return None
    return float(np.polyfit(np.log(ns[order]), np.log(values[order]), 1)[0])


def _style(name: str) -> dict[str, Any]:
    order = list(IMPLEMENTATIONS)
    colors = ["C3", "C5", "C1", "C0", "C9", "C2", "C4", "C7"]
    markers = "o^vsDx*P"
    i = order.index(name) if name in order else len(order) - 1
    return {"color": colors[i % len(colors)], "marker": markers[i % len(markers)]}


# Size of the slope labels at the line ends, in points. The site shows the two-column
# figure (8 in) shrunk to its 720 px column and enlarges any text below 10.24 pt to stay
# readable (scripts/site_figures.py); drawn at this size they are never enlarged, so the
# spacing computed for it is the spacing of the text on the page.
_SLOPE_LABEL_PT = 10.5


def _label_line_ends(ax: Any, ends: list[tuple[float, float, str, str]]) -> None:
    """Write each line's slope right of its last point, spread so that none overlap.

    Call it once the figure is laid out: the spacing is one line of
    ``_SLOPE_LABEL_PT`` text in the axes' final height. Labels of lines that end at
    the same n share a column and are spread apart; columns at different n do not
    meet, so each is spread on its own.
    """
    if not ends:
        return
    low, high = (math.log10(v) for v in ax.get_ylim())
    height_pt = ax.get_window_extent().height * 72 / ax.figure.dpi
    gap = 1.25 * _SLOPE_LABEL_PT / height_pt * (high - low)  # one line of text, in decades
    for x_end in sorted({x for x, _, _, _ in ends}):
        column = sorted((end for end in ends if end[0] == x_end), key=lambda end: end[1])
        levels = [math.log10(y) for _, y, _, _ in column]
        for i in range(1, len(levels)):  # push up what sits too close to the label below
            levels[i] = max(levels[i], levels[i - 1] + gap)
        if levels[-1] > high - gap / 2:  # then down again from the top of the panel
            levels[-1] = high - gap / 2
            for i in range(len(levels) - 2, -1, -1):
                levels[i] = min(levels[i], levels[i + 1] - gap)
        for (x, y, text, color), level in zip(column, levels, strict=True):
            ax.annotate(
                text,
                (x, y),
                xytext=(x * 1.12, 10**level),
                fontsize=_SLOPE_LABEL_PT,
                color=color,
                va="center",
            )


def plot_results(data: dict[str, Any], combos: Sequence[tuple[str, bool]] | None = None) -> Figure:
    """Log-log time and peak-memory plots, one column per (mode, causal), with slopes.

    The number at the end of each line is its log-log slope, fitted on the upper half
    of the sizes (`fit_slope`). The dotted line in the time panels is the time the
    FLOPs would take at the measured matmul peak; in the memory panels, the size of one
    ``(B, H, n, n)`` float32 matrix. Points without a value (skipped, or a peak of 0 at
    the method's resolution) are left out.
    """
    import matplotlib.pyplot as plt

    if combos is None:
        combos = [(m, c) for m in data["run"]["modes"] for c in data["run"]["causal"]]
    shape = data["run"]["shape"]
    peak = data["matmul"]["peak_gflops"]
    fig, axes = plt.subplots(
        2,
        len(combos),
        figsize=(3.6 * len(combos) + 0.8, 6.4),
        layout="constrained",
        squeeze=False,
    )
    handles: dict[str, Any] = {}
    line_ends: list[tuple[Any, list[tuple[float, float, str, str]]]] = []
    for column, (mode, causal) in enumerate(combos):
        panels = (
            (axes[0, column], "median_s", 1e3, "median time (ms)"),
            (axes[1, column], "peak_extra_bytes", 1 / MiB, "peak extra memory (MiB)"),
        )
        all_ns: set[float] = set()
        for ax, key, scale, ylabel in panels:
            ends = []
            for name, info in data["implementations"].items():
                ns, values = series(data, name, key, mode, causal)
                positive = values > 0  # a log axis cannot show 0
                ns, values = ns[positive], values[positive]
                if not len(ns):
                    continue
                all_ns.update(ns.tolist())
                (line,) = ax.loglog(ns, values * scale, lw=1.2, ms=4, **_style(name))
                handles[info["label"]] = line
                slope = fit_slope(ns, values)
                if slope is not None:
                    ends.append((ns[-1], values[-1] * scale, f"{slope:.2f}", line.get_color()))
            ns = np.array(sorted(all_ns))
            if len(ns) and key == "median_s":
                config = _config_from(data)
                flops = [flop_count(Point("sdpa", int(n), causal, mode), config) for n in ns]
                (line,) = ax.loglog(ns, np.array(flops) / (peak * 1e9) * 1e3, "k:", lw=1)
                handles["softmax FLOPs at the matmul peak"] = line
            elif len(ns):
                one = shape["B"] * shape["H"] * ns**2 * 4 / MiB
                (line,) = ax.loglog(ns, one, "k--", lw=0.8)
                handles["one (B, H, n, n) float32 matrix"] = line
            ax.set(ylabel=ylabel)
            if len(ns):
                ax.set_xlim(ns[0] / 1.25, ns[-1] * 1.9)  # room for the slopes
                ax.set_xticks(ns, [str(int(n)) for n in ns], fontsize=8)
                ax.set_xticks([], minor=True)
            ax.grid(True, which="major", alpha=0.3)
            line_ends.append((ax, ends))
        axes[0, column].set_title(f"{mode}, {'causal' if causal else 'no mask'}", fontsize=10)
        axes[1, column].set_xlabel("sequence length n")
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="outside lower center",
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        f"B={shape['B']}, H={shape['H']}, D={shape['D']}, {data['run']['dtype']};"
        f" {data['machine']['cpu_model']}, {data['machine']['torch_threads']} threads,"
        f" {data['created'][:10]}\nnumbers at the line ends: log-log slopes (upper half of n)",
        fontsize=8.5,
    )
    fig.draw_without_rendering()  # lay the figure out: the labels are spaced in its units
    for ax, ends in line_ends:
        _label_line_ends(ax, ends)
    return fig


def _config_from(data: dict[str, Any]) -> Config:
    shape = data["run"]["shape"]
    return Config(
        batch=shape["B"], heads=shape["H"], head_dim=shape["D"], window=data["run"]["window"]
    )


def _cell(record: dict[str, Any] | None, key: str, reference: dict[str, Any] | None) -> str:
    if record is None:
        return "—"
    if key == "time":
        ms = record["median_s"] * 1e3
        text = f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"
        if reference is not None:
            text += f" ({record['median_s'] / reference['median_s']:.2f}×)"
        return text
    if key == "gflops":
        return f"{record['gflops']:.0f} ({100 * record['fraction_of_matmul_peak']:.0f} %)"
    value = record.get("peak_extra_bytes")
    return "—" if value is None else f"{value / MiB:.1f}"


def markdown_table(
    data: dict[str, Any], key: str, mode: str = FORWARD, causal: bool = False
) -> str:
    """A Markdown table, implementations by n, of ``key``: "time", "gflops" or "memory".

    "time" is the median in ms with the ratio to ``F.scaled_dot_product_attention`` at
    the same n; "gflops" the GFLOP/s with the share of the matmul peak; "memory" the
    peak extra memory in MiB. A dash marks a point not measured.
    """
    sizes = data["run"]["sizes"]
    header = {"time": "ms (× SDPA)", "gflops": "GFLOP/s (% of peak)", "memory": "MiB"}[key]
    lines = [
        f"| {header} | " + " | ".join(f"n = {n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, info in data["implementations"].items():
        cells = [
            _cell(find(data, name, n, mode, causal), key, find(data, "sdpa", n, mode, causal))
            for n in sizes
        ]
        if all(cell == "—" for cell in cells):
            continue
        lines.append(f"| {info['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_comparison(
    first: dict[str, Any], second: dict[str, Any], labels: tuple[str, str] = ("first", "second")
) -> str:
    """Markdown table of the time relative to SDPA's in two runs: "first / second".

    Rows are the implementations of ``first``, columns its sizes; a dash marks a point
    that a run does not have.
    """

    def ratio(data: dict[str, Any], name: str, n: int) -> str:
        record, sdpa = find(data, name, n), find(data, "sdpa", n)
        if record is None or sdpa is None:
            return "—"
        return f"{record['median_s'] / sdpa['median_s']:.2f}"

    sizes = first["run"]["sizes"]
    lines = [
        f"| × SDPA: {labels[0]} / {labels[1]} | " + " | ".join(f"n = {n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, info in first["implementations"].items():
        cells = [f"{ratio(first, name, n)} / {ratio(second, name, n)}" for n in sizes]
        lines.append(f"| {info['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(data: dict[str, Any]) -> str:
    """One paragraph: where, when, with what, and how long the run took."""
    machine, run = data["machine"], data["run"]
    caches = ", ".join(f"{k} {v['size']}" for k, v in machine["caches"].items())
    kind = "quick (reduced) run" if run["quick"] else "full run"
    return (
        f"{kind} of {data['created'].replace('T', ' ')}, `{run['command']}`, "
        f"{run['duration_s']:.0f} s; {machine['cpu_model']} ({machine['cpu_capability']}), "
        f"{machine['logical_cpus']} logical CPUs, {machine['torch_threads']} torch threads, "
        f"caches {caches or 'unknown'}, {machine['memory_gib']} GiB; "
        f"Python {machine['python']}, torch {machine['torch']}, NumPy {machine['numpy']}; "
        f"torch.matmul peak {data['matmul']['peak_gflops']:.0f} GFLOP/s, "
        f"copy bandwidth {data['copy_bandwidth']['gbytes_per_s']:.1f} GB/s, writing into"
        f" fresh memory {data['first_touch']['gbytes_per_s']:.1f} GB/s."
    )


TARGETS = (
    ("flash_attention forward time / SDPA's, n = 4096", "flash", 4096, FORWARD, "ratio", 1.6),
    ("flash_attention forward peak extra memory, n = 8192", "flash", 8192, FORWARD, "mib", 64),
    (
        "flash_attention forward+backward time / SDPA's, n = 2048",
        "flash",
        2048,
        BACKWARD,
        "ratio",
        1.6,
    ),
)
# (what, key in an accuracy row, limit); the value may not exceed the limit.
ACCURACY_TARGETS = (
    (
        f"flash_attention max error / naive's, against float64, n = {ACCURACY_N}",
        "error_ratio",
        2.0,
    ),
    (
        f"flash_attention gradients - SDPA's, in float64, n = {ACCURACY_N}",
        "gradient_max_difference_float64",
        1e-8,
    ),
)


def check_targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The project's five targets against a results file.

    Time and memory are read without a mask; a time ratio is the interleaved one of
    `paired_ratio` where the file has it, else the ratio of the two medians. Accuracy
    is the worse of the runs with and without a causal mask.
    """
    rows = []
    for what, name, n, mode, unit, limit in TARGETS:
        record, sdpa = find(data, name, n, mode), find(data, "sdpa", n, mode)
        paired = [
            row
            for row in data.get("paired_ratios", [])
            if (row["implementation"], row["n"], row["mode"], row["causal"])
            == (name, n, mode, False)
        ]
        value: float | None = None
        if unit == "ratio" and paired:
            value = paired[0]["ratio"]
        elif unit == "ratio" and record is not None and sdpa is not None:
            value = record["median_s"] / sdpa["median_s"]
        elif unit == "mib" and record is not None and record.get("peak_extra_bytes") is not None:
            value = record["peak_extra_bytes"] / MiB
        rows.append(_target_row(what, limit, unit, value))
    accuracy = data.get("accuracy", [])  # empty when flash_attention was not benchmarked
    for what, key, limit in ACCURACY_TARGETS:
        value = max((row[key] for row in accuracy), default=None)
        unit = "ratio" if key == "error_ratio" else "absolute"
        rows.append(_target_row(what, limit, unit, value, inclusive=True))
    return rows


def _target_row(
    what: str, limit: float, unit: str, value: float | None, inclusive: bool = False
) -> dict[str, Any]:
    met = None if value is None else bool(value <= limit if inclusive else value < limit)
    bound = "≤" if inclusive else "<"
    return {
        "target": what,
        "bound": bound,
        "limit": limit,
        "unit": unit,
        "value": value,
        "met": met,
    }


# --- command line -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
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


if __name__ == "__main__":
    sys.exit(main())

r"""Sequence-parallel attention across processes: bytes, memory and time of each rank.

The three strategies of `attention.distributed` (ring, all-gather, Ulysses) run on
$W$ local processes joined in a gloo group (`attention.distributed.run_on_ranks`),
each rank holding $n / W$ of the $n$ positions of one sequence (``B = 1``, ``H = 8``,
``D = 64``, float32, no mask, the contiguous layout). For every strategy, length $n$
and $W$, each rank measures:

* **Traffic**: the bytes it sent and received in one forward pass and in one forward
  + backward pass (`attention.distributed.count_traffic`). The run fails unless every
  rank's count equals `traffic_formula` to the byte.
* **Memory**: the most resident memory one forward + backward adds to what the rank
  holds before it (its inputs), by `attention_bench.memory`'s method (``VmHWM`` after
  ``clear_refs``, freed blocks of 128 KiB or more given back to the system). It is
  compared with `memory_formula`, the buffers the algorithm cannot do without, as a
  ratio: what the ratio says is measured, not asserted.
* **Time**: the wall time of a forward + backward call and of its forward pass (up to
  the output, autograd recording as in training), after one call that is not
  counted; each timed call starts at a barrier, a call's time is that of the slowest
  rank, and the median of the repeats is kept.

Memory is measured in one group of processes, time (and traffic) in another: the
allocator setting that makes memory measurable (every large block mapped afresh)
would make every tile of the loop a trip through the kernel, and the time wrong.

The numbers are those of CPU processes on one machine, sharing its cores and its
memory bandwidth; the time says nothing about a cluster of accelerators, and more
ranks than cores share the cores.

References:
    - Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for
      Near-Infinite Context", 2023. [arXiv:2310.01889](https://arxiv.org/abs/2310.01889)
    - Jacobs et al., "DeepSpeed Ulysses", 2023.
      [arXiv:2309.14509](https://arxiv.org/abs/2309.14509)
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from attention.distributed import (
    BLOCK,
    Traffic,
    all_gather_attention,
    count_traffic,
    ring_attention,
    run_on_ranks,
    ulysses_attention,
)
from attention_bench.cases import BACKWARD, FORWARD, MODES, MiB
from attention_bench.machine import machine_info
from attention_bench.memory import freed_memory_returned, peak_extra_memory
from attention_bench.report import PARALLEL_SECTION

SECTION = "sequence-parallel"  # its name on the command line; "sequence_parallel" in the JSON

STRATEGIES = {
    "ring": ("ring_attention", ring_attention),
    "all_gather": ("all_gather_attention", all_gather_attention),
    "ulysses": ("ulysses_attention", ulysses_attention),
}

# n = 8192 as well would take the section from about two minutes to about six on
# two cores: the work grows as n², and every point is run four times.
SIZES = (1024, 2048, 4096)


QUICK_SIZES = (256, 512)


WORLD_SIZES = (2, 4)


QUICK_WORLD_SIZES = (2,)


# Every call first agrees on its arguments across ranks: an all-gather of 24 int32
# (attention.distributed: the function, shapes, dtypes, mask, flags, scale).
SHAPE_CHECK_BYTES = 24 * 4


TILES = "backward tiles P and dZ, (B, heads, 256, 256) each"  # memory_formula's term


@dataclass(frozen=True)
class ParallelConfig:
    """What the sequence-parallel section measures, and how many times."""

    sizes: tuple[int, ...] = SIZES
    world_sizes: tuple[int, ...] = WORLD_SIZES
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    repeats: int = 3  # timed calls per point and mode, after one that is not counted
    threads: int | None = None  # torch threads per rank; None: the cores shared out
    timeout_s: float = 1800.0  # for a whole group's run, and for each collective
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.strategies) - set(STRATEGIES)
        if unknown:
            raise ValueError(f"unknown strategies {sorted(unknown)}; known: {list(STRATEGIES)}")
        for W in self.world_sizes:
            if W < 2 or self.heads % W:
                raise ValueError(
                    f"world sizes must be at least 2 and divide the {self.heads} heads "
                    f"(Ulysses splits them); got {W}"
                )
            bad = [n for n in self.sizes if n % W]
            if bad:
                raise ValueError(f"lengths {bad} cannot be split evenly across {W} ranks")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1; got {self.repeats}")

    def threads_per_rank(self, world_size: int) -> int:
        """Torch threads of each rank: as configured, else this machine's cores shared out."""
        return self.threads or max(1, (os.cpu_count() or 1) // world_size)


def shard_bytes(config: ParallelConfig, n: int, world_size: int) -> int:
    """Bytes of one rank's shard of one tensor: ``(B, H, n / W, D)`` float32."""
    return 4 * config.batch * config.heads * (n // world_size) * config.head_dim


def traffic_formula(strategy: str, world_size: int, shard: int) -> dict[str, dict[str, int]]:
    r"""Bytes one rank sends and receives, by mode, with ``shard`` bytes per tensor shard.

    Ring: forward, $W - 1$ hops of a key and a value shard; backward, $W - 1$ hops of
    them again and $W$ hops of their gradients. All-gather: forward, its key and value
    shards go out once (to all ranks) and $W - 1$ of each come in; backward, the
    reduce-scatter sends and receives $W - 1$ gradient shards of each. Ulysses: each of
    four all-to-alls (q, k, v, and the output back; their gradients in backward) keeps
    $1 / W$ of a shard and exchanges the rest. Every call adds the shape check, an
    all-gather of `SHAPE_CHECK_BYTES`.
    """
    W, s = world_size, shard
    exchanged = {  # (forward sent, forward received, backward sent = received)
        "ring": (2 * (W - 1) * s, 2 * (W - 1) * s, (2 * (W - 1) + 2 * W) * s),
        "all_gather": (2 * s, 2 * (W - 1) * s, 2 * (W - 1) * s),
        "ulysses": (4 * s * (W - 1) // W, 4 * s * (W - 1) // W, 4 * s * (W - 1) // W),
    }
    sent, received, backward = exchanged[strategy]
    forward = {
        "sent": sent + SHAPE_CHECK_BYTES,
        "received": received + SHAPE_CHECK_BYTES * (W - 1),
    }
    return {
        FORWARD: forward,
        BACKWARD: {"sent": forward["sent"] + backward, "received": forward["received"] + backward},
    }


def tile_bytes(config: ParallelConfig, n: int, world_size: int, heads: int) -> int:
    """One score tile of the loop inside a rank: ``heads`` heads of (at most) 256 x 256."""
    side = min(BLOCK, n // world_size)  # the loop's blocks never span two ranks' chunks
    return 4 * config.batch * heads * side * side


def memory_formula(
    strategy: str, config: ParallelConfig, n: int, world_size: int
) -> dict[str, int]:
    r"""What one rank must hold at the peak of a forward + backward pass, term by term.

    Bytes beyond its inputs (q, k, v and the output's gradient, ``s`` bytes each, with
    $n / W$ positions), at the backward pass, where the peak is; the log-sum-exps
    ($1/D$ of a shard) are left out. Each term is what the algorithm needs, not what a
    given implementation allocates on top (temporaries, copies, the backend's buffers):
    the measured peak divided by the sum says how much that is.

    * Ring, $O(n / W)$: the output and the gradient of q; a key/value block in use and
      the next one arriving; key/value gradients three times over, since they travel
      while the next are computed: those of the block in use (being computed), of the
      block before it (being sent on) and of the block after it (arriving).
    * All-gather, $O(n)$: the output and the gradients of q, k, v; all $n$ keys and
      values, gathered; their gradients before the reduce-scatter.
    * Ulysses, $O(n / W)$: q, k, v and the output re-sharded to $H / W$ heads of all
      $n$ positions (each the size of a shard), saved for the backward pass; the output
      in the sequence layout; the gradients of the four in the head layout.

    Every strategy adds two tiles of the tiled loop's backward pass, the block's
    probabilities $P$ and the score gradient $dZ = P \circ (dP - \Delta)$, each
    256 x 256 for each head the rank attends (all $H$; Ulysses $H / W$).
    """
    W, s = world_size, shard_bytes(config, n, world_size)
    if strategy == "ring":
        terms = {
            "output and dq": 2 * s,
            "k/v block in use and the next arriving": 4 * s,
            "dk/dv being computed, sent on, and arriving": 6 * s,
        }
        heads = config.heads
    elif strategy == "all_gather":
        terms = {
            "output and dq, dk, dv": 4 * s,
            "all n keys and values, gathered": 2 * W * s,
            "their gradients, before the reduce-scatter": 2 * W * s,
        }
        heads = config.heads
    else:
        terms = {
            "q, k, v, output as H/W heads of all n positions": 4 * s,
            "output in the sequence layout": s,
            "their gradients as H/W heads": 4 * s,
        }
        heads = config.heads // W
    terms[TILES] = 2 * tile_bytes(config, n, W, heads)
    return terms


# ---------------------------------------------------------------------------------------
# On each rank


def _inputs(config: ParallelConfig, n: int) -> list[torch.Tensor]:
    """This rank's shards of q, k, v and of the output's gradient, ``(B, H, n / W, D)``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(config.seed + 1000 * rank + n)
    shape = (config.batch, config.heads, n // world, config.head_dim)
    return [torch.randn(shape, generator=generator) for _ in range(4)]


def _forward_backward(strategy: str, inputs: list[torch.Tensor]) -> Callable[[], dict[str, Any]]:
    """One training step's attention: forward, then backward from the output's gradient.

    The call returns its wall times and traffic, for the forward pass (up to the
    output) and for the whole step.
    """
    attend = STRATEGIES[strategy][1]
    q, k, v, grad_out = inputs
    leaves = [t.requires_grad_() for t in (q, k, v)]

    def forward_backward() -> dict[str, Any]:
        for t in leaves:
            t.grad = None  # every call allocates its gradients afresh
        # One counter, read after the forward pass: count_traffic inside count_traffic
        # loses count (its exit removes the first *equal* counter from its list).
        with count_traffic() as traffic:
            started = time.perf_counter()
            out = attend(q, k, v)
            forward_done = time.perf_counter()
            forward = _counted(traffic)  # a copy
            out.backward(grad_out)  # type: ignore[no-untyped-call]
            done = time.perf_counter()
        return {
            "times_s": {FORWARD: forward_done - started, BACKWARD: done - started},
            "traffic": {FORWARD: forward, BACKWARD: _counted(traffic)},
        }

    return forward_backward


def _counted(traffic: Traffic) -> dict[str, Any]:
    return {
        "sent": traffic.sent_bytes,
        "received": traffic.received_bytes,
        "sent_by_operation": dict(sorted(traffic.sent.items())),
        "received_by_operation": dict(sorted(traffic.received.items())),
    }


def time_on_rank(config: ParallelConfig) -> list[dict[str, Any]]:
    """Run by every rank: traffic and wall times of each strategy and length.

    Each point starts with one call that is not timed (lazy initialisation, first use
    of memory); then ``repeats`` calls, each after a barrier, timed on this rank: the
    forward pass up to the output (with autograd recording, as in training) and the
    whole forward + backward. The traffic of every call is counted, and must be the
    same from call to call.
    """
    records = []
    for strategy in config.strategies:
        for n in config.sizes:
            step = _forward_backward(strategy, _inputs(config, n))
            step()
            calls = []
            for _ in range(config.repeats):
                dist.barrier()  # the ranks start together
                calls.append(step())
            traffic = calls[0]["traffic"]
            if any(call["traffic"] != traffic for call in calls):
                raise RuntimeError(f"{strategy}, n = {n}: the traffic varies from call to call")
            times = {mode: [call["times_s"][mode] for call in calls] for mode in MODES}
            records.append({"strategy": strategy, "n": n, "traffic": traffic, "times_s": times})
    return records


def memory_on_rank(config: ParallelConfig) -> list[dict[str, Any]]:
    """Run by every rank, started with freed memory given back: peak extra memory.

    For each strategy, one forward + backward at a small length first (code, thread
    pools, the connections between ranks: not the call's); then, for each length, the
    peak this rank's resident memory rises above what it holds with its inputs built,
    during one forward + backward.
    """
    world = dist.get_world_size()
    records = []
    for strategy in config.strategies:
        _forward_backward(strategy, _inputs(config, 64 * world))()
        for n in config.sizes:
            step = _forward_backward(strategy, _inputs(config, n))
            dist.barrier()  # the ranks start the measured call together
            records.append({"strategy": strategy, "n": n, **peak_extra_memory(step)})
    return records


# ---------------------------------------------------------------------------------------
# In the parent: start the ranks, check the traffic, put the results together


CONVENTIONS = {
    "traffic": (
        "bytes this rank sent and received, counted by attention.distributed."
        "count_traffic in one forward pass and in one forward + backward pass; equal "
        "on every rank to traffic_formula (checked: the run fails otherwise)"
    ),
    "memory": (
        "in a group of processes started with MALLOC_MMAP_THRESHOLD_=131072: one "
        "forward + backward after a warm-up at a small length; VmHWM - VmRSS around "
        "the call after resetting VmHWM (clear_refs); excludes the inputs (q, k, v and "
        "the output's gradient), includes the output and the gradients; one value per rank"
    ),
    "time": (
        "wall time of one forward + backward call, and of its forward pass up to the "
        "output (autograd recording), each call after a barrier, in a group of "
        "processes with the default allocator; a call's time is the slowest rank's; "
        "median over the repeats, after one call that is not timed"
    ),
}


def check_traffic(records: list[dict[str, Any]]) -> None:
    """Fail unless every rank's measured bytes equal `traffic_formula` exactly."""
    wrong = [
        f"{r['strategy']}, W = {r['world_size']}, n = {r['n']}, {mode}: rank {rank} "
        f"measured {got['sent']} sent / {got['received']} received, the formula gives "
        f"{r['traffic_formula'][mode]['sent']} / {r['traffic_formula'][mode]['received']}"
        for r in records
        for mode in MODES
        for rank, got in enumerate(r["traffic_by_rank"][mode])
        if (got["sent"], got["received"])
        != (r["traffic_formula"][mode]["sent"], r["traffic_formula"][mode]["received"])
    ]
    if wrong:
        raise RuntimeError("traffic differs from the formulas:\n" + "\n".join(wrong))


def _time_summary(per_rank: list[list[float]]) -> dict[str, Any]:
    steps = np.max(np.array(per_rank), axis=0)  # each call: the slowest rank's time
    q1, median, q3 = np.percentile(steps, [25, 50, 75])
    return {
        "median_s": float(median),
        "iqr_s": float(q3 - q1),
        "repeats": len(steps),
        "rank_median_s": [float(np.median(times)) for times in per_rank],
    }


def measure_world(config: ParallelConfig, world_size: int) -> list[dict[str, Any]]:
    """Every strategy and length on ``world_size`` ranks: the section's records."""
    threads = config.threads_per_rank(world_size)
    # Fresh interpreters, not forks: a forked rank runs on one thread (OpenMP is not
    # fork-safe), and glibc reads the allocator settings of freed_memory_returned()
    # only when a process starts.
    timed = run_on_ranks(
        time_on_rank,
        world_size,
        config,
        timeout=config.timeout_s,
        threads=threads,
        start_method="spawn",
    )
    with freed_memory_returned():  # read by glibc as each rank starts
        memory = run_on_ranks(
            memory_on_rank,
            world_size,
            config,
            timeout=config.timeout_s,
            threads=threads,
            start_method="spawn",
        )
    records = []
    for i, first in enumerate(timed[0]):
        strategy, n = first["strategy"], first["n"]
        peaks = [rank[i] for rank in memory]
        assert all((p["strategy"], p["n"]) == (strategy, n) for p in peaks)
        terms = memory_formula(strategy, config, n, world_size)
        formula = sum(terms.values())
        largest = max(p["peak_extra_bytes"] for p in peaks)
        records.append(
            {
                "strategy": strategy,
                "world_size": world_size,
                "n": n,
                "threads_per_rank": threads,
                "shard_bytes": shard_bytes(config, n, world_size),
                "tile_bytes": tile_bytes(config, n, world_size, config.heads),
                "traffic": first["traffic"],  # rank 0's; every rank's equals the formula
                "traffic_by_rank": {
                    mode: [
                        {key: rank[i]["traffic"][mode][key] for key in ("sent", "received")}
                        for rank in timed
                    ]
                    for mode in MODES
                },
                "traffic_formula": traffic_formula(
                    strategy, world_size, shard_bytes(config, n, world_size)
                ),
                "peak_extra_bytes": [p["peak_extra_bytes"] for p in peaks],
                "memory_method": peaks[0]["memory_method"],
                "memory_formula_terms": terms,
                "memory_formula_bytes": formula,
                "memory_ratio": largest / formula,
                "time": {
                    mode: _time_summary([rank[i]["times_s"][mode] for rank in timed])
                    for mode in MODES
                },
            }
        )
    check_traffic(records)
    return records


def run_sequence_parallel(
    config: ParallelConfig, progress: Any = None, command: str | None = None
) -> dict[str, Any]:
    """Measure every point of ``config``; return the results file's ``sequence_parallel``.

    ``progress``, if given, is a `attention_bench.run.Progress` updated after each
    world size (one group of processes for time, one for memory). ``command`` says in
    the results what ran them (default: this process's command line).
    """
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.timezone.utc)
    records = []
    for world_size in config.world_sizes:
        records += measure_world(config, world_size)
        if progress is not None:
            progress.update(f"sequence-parallel, W = {world_size}")
    run = {
        **{
            key: value
            for key, value in asdict(config).items()
            if key not in ("batch", "heads", "head_dim", "threads", "timeout_s")
        },
        "shape": {"B": config.batch, "H": config.heads, "D": config.head_dim},
        "dtype": "float32",
        "causal": False,
        "layout": "contiguous",
        "backend": "gloo",
        "threads_per_rank": {str(W): config.threads_per_rank(W) for W in config.world_sizes},
        "command": command or " ".join(["python -m attention_bench", *sys.argv[1:]]),
        "duration_s": round(time.perf_counter() - started, 1),
    }
    return {
        "created": created.isoformat(timespec="seconds"),
        "machine": machine_info(),
        "run": run,
        "conventions": CONVENTIONS,
        "strategies": {name: {"label": label} for name, (label, _) in STRATEGIES.items()},
        "results": records,
    }


def find_parallel(
    data: dict[str, Any], strategy: str, world_size: int, n: int
) -> dict[str, Any] | None:
    """The record of one strategy, world size and length in a results file, or None."""
    for record in data.get(PARALLEL_SECTION, {}).get("results", []):
        if (record["strategy"], record["world_size"], record["n"]) == (strategy, world_size, n):
            return dict(record)
    return None


def _formula_in_units(record: dict[str, Any], what: str, mode: str) -> str:
    """A record's formula in shards ``s`` (and tiles ``T``), e.g. ``"12 s + 4 T"``."""
    s, W = record["shard_bytes"], record["world_size"]
    if what == "traffic":
        formula = record["traffic_formula"][mode]
        sent = (formula["sent"] - SHAPE_CHECK_BYTES) / s
        received = (formula["received"] - SHAPE_CHECK_BYTES * (W - 1)) / s
        return f"{sent:g} s / {received:g} s"
    terms = record["memory_formula_terms"]
    tiles = terms[TILES] / record["tile_bytes"]
    shards = (record["memory_formula_bytes"] - terms[TILES]) / s
    return f"{shards:g} s + {tiles:g} T"


def _parallel_cell(record: dict[str, Any] | None, what: str, mode: str) -> str:
    if record is None:
        return "—"
    if what == "traffic":
        got, formula = record["traffic"][mode], record["traffic_formula"][mode]
        exact = all(
            (rank["sent"], rank["received"]) == (formula["sent"], formula["received"])
            for rank in record["traffic_by_rank"][mode]
        )
        mark = "" if exact else " (≠ formula)"
        return f"{got['sent'] / MiB:.2f} / {got['received'] / MiB:.2f}{mark}"
    if what == "memory":
        peak, formula = max(record["peak_extra_bytes"]), record["memory_formula_bytes"]
        return f"{peak / MiB:.1f} / {formula / MiB:.1f} ({peak / formula:.2f}×)"
    forward, both = (record["time"][m]["median_s"] * 1e3 for m in MODES)
    return f"{forward:.0f} / {both:.0f}"


def parallel_table(data: dict[str, Any], what: str, mode: str = BACKWARD) -> str:
    """A Markdown table of the sequence-parallel section: a row per strategy and W, n across.

    ``what``: "traffic", MiB one rank sent / received in ``mode`` (rank 0's; marked
    where any rank's count differs from the formula), with the formula in shards
    ``s``; "memory", the peak extra MiB of the rank that peaked highest / the formula's
    MiB (their ratio), with the formula in shards ``s`` and tiles ``T``; "time", the
    median ms of a forward pass / a forward + backward pass, the slowest rank's. A
    dash marks a point not measured.
    """
    section = data[PARALLEL_SECTION]
    run = section["run"]
    header = {
        "traffic": f"MiB sent / received, {mode}",
        "memory": "peak MiB / formula (×)",
        "time": "ms, forward / fwd + bwd",
    }[what]
    formula = [] if what == "time" else ["formula"]
    columns = [*formula, *(f"n = {n}" for n in run["sizes"])]
    lines = [
        f"| {header} | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for strategy, info in section["strategies"].items():
        for W in run["world_sizes"]:
            records = [find_parallel(data, strategy, W, n) for n in run["sizes"]]
            if all(record is None for record in records):
                continue
            cells = [_parallel_cell(record, what, mode) for record in records]
            if what != "time":
                measured = next(record for record in records if record is not None)
                cells.insert(0, _formula_in_units(measured, what, mode))
            lines.append(f"| {info['label']}, W = {W} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

"""What each rank runs in tests/test_distributed.py.

The ranks are forked from the test process, so they need not import this module; the
test of spawned ranks does, by name (tests/ is on ``sys.path``).

Every rank builds the same full tensors from one seed, keeps its shard, runs a strategy,
and gathers the output and the gradients back; rank 0 compares them with dense
attention on the full sequence and returns the largest differences.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from attention import scaled_dot_product_attention
from attention.distributed import (
    all_gather_attention,
    count_traffic,
    gather_sequence,
    ring_attention,
    shard_sequence,
    ulysses_attention,
)

STRATEGIES = {
    "ring": ring_attention,
    "all_gather": all_gather_attention,
    "ulysses": ulysses_attention,
}


@dataclass(frozen=True)
class Case:
    strategy: str
    is_causal: bool
    layout: str
    padding: bool
    gqa: bool
    dtype: str  # "float64" or "float32"
    N: int = 48

    @property
    def name(self) -> str:
        flags = [
            self.strategy,
            "causal" if self.is_causal else "full",
            self.layout,
            "padded" if self.padding else "unpadded",
            "gqa" if self.gqa else "mha",
            self.dtype,
            f"N{self.N}",
        ]
        return "-".join(flags)


def all_cases() -> list[Case]:
    cases = [
        Case(*flags)
        for flags in itertools.product(
            STRATEGIES,
            (False, True),
            ("contiguous", "zigzag"),
            (False, True),
            (False, True),
            ("float64", "float32"),
        )
    ]
    # Shards longer than one 256-wide tile: the loop inside each rank visits several.
    cases += [Case(s, True, "zigzag", True, False, "float64", N=1040) for s in STRATEGIES]
    return cases


def full_inputs(case: Case, B: int = 2, H: int = 8, D: int = 8) -> dict[str, torch.Tensor]:
    """The whole sequence's tensors, identical on every rank (one seed)."""
    gen = torch.Generator().manual_seed(0)
    dtype = getattr(torch, case.dtype)
    Hkv = H // 2 if case.gqa else H
    q = torch.randn(B, H, case.N, D, generator=gen, dtype=dtype)
    k = torch.randn(B, Hkv, case.N, D, generator=gen, dtype=dtype)
    v = torch.randn(B, Hkv, case.N, D + 2, generator=gen, dtype=dtype)
    grad = torch.randn(B, H, case.N, D + 2, generator=gen, dtype=dtype)
    padding = torch.zeros(B, case.N, dtype=torch.bool)
    if case.padding:
        padding[0, -7:] = True  # trailing padding
        padding[1, :3] = True  # leading: with causal masking, queries 0-2 see no key at all
        padding[1, case.N // 2 :: 5] = True
    return {"q": q, "k": k, "v": v, "grad": grad, "padding": padding}


def dense(case: Case, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Output and gradients of attention over the whole sequence, on one process."""
    q, k, v = (t[name].clone().requires_grad_() for name in "qkv")
    keep = ~t["padding"][:, None, None, :]  # (B, 1, 1, N)
    if case.is_causal:
        keep = keep & torch.ones(case.N, case.N, dtype=torch.bool).tril()
    if case.dtype == "float64":
        out = scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=case.gqa)
    else:  # PyTorch's own kernel; rows with no key give NaN there, and 0 in the package
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=case.gqa)
        out = out.nan_to_num(0.0)
    out.backward(t["grad"])
    return out.detach(), q.grad, k.grad, v.grad


def run_case(case: Case) -> dict[str, float] | None:
    rank, world = dist.get_rank(), dist.get_world_size()
    t = full_inputs(case)

    def shard(x: torch.Tensor, dim: int = -2) -> torch.Tensor:
        return shard_sequence(x, rank, world, layout=case.layout, dim=dim)  # type: ignore[arg-type]

    q, k, v = (shard(t[name]).requires_grad_() for name in "qkv")
    padding = shard(t["padding"], dim=-1) if case.padding else None
    out = STRATEGIES[case.strategy](
        q,
        k,
        v,
        is_causal=case.is_causal,
        key_padding_mask=padding,
        enable_gqa=case.gqa,
        layout=case.layout,  # type: ignore[arg-type]
    )
    out.backward(shard(t["grad"]))
    got = [gather_sequence(x, layout=case.layout) for x in (out.detach(), q.grad, k.grad, v.grad)]  # type: ignore[arg-type]
    if rank != 0:
        return None
    expected = dense(case, t)
    names = ("out", "grad_q", "grad_k", "grad_v")
    return {n: float((g - e).abs().max()) for n, g, e in zip(names, got, expected, strict=True)} | {
        "finite": float(all(bool(g.isfinite().all()) for g in got))
    }


def run_cases(cases: list[Case]) -> dict[str, Any]:
    """Every case on this rank; rank 0's dictionary holds the differences."""
    results = {case.name: run_case(case) for case in cases}
    return results if dist.get_rank() == 0 else {}


def errors_raised() -> dict[str, str]:
    """The message each bad call raises on this rank (all ranks raise, none hangs)."""
    rank = dist.get_rank()
    q = torch.randn(1, 4, 8, 8)
    calls = {
        "ulysses_heads": lambda: ulysses_attention(
            torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8)
        ),
        "uneven": lambda: ring_attention(*(torch.randn(1, 4, 8 + 2 * rank, 8),) * 3),
        "padding_dtype": lambda: all_gather_attention(q, q, q, key_padding_mask=torch.zeros(1, 8)),
        "padding_shape": lambda: ring_attention(
            q, q, q, key_padding_mask=torch.zeros(1, 9, dtype=torch.bool)
        ),
        "zigzag_odd": lambda: ring_attention(*(torch.randn(1, 4, 7, 8),) * 3, layout="zigzag"),
        "layout": lambda: ring_attention(q, q, q, layout="striped"),  # type: ignore[arg-type]
        "cross": lambda: ring_attention(q, torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)),
    }
    messages = errors_of(calls)
    return messages if rank == 0 else {}


def traffic(N: int, H: int = 8, D: int = 16) -> dict[str, dict[str, int]]:
    """Bytes this rank sent and received in one forward and backward, per strategy."""
    world = dist.get_world_size()
    counts = {}
    for strategy, attend in STRATEGIES.items():
        q, k, v = (torch.randn(1, H, N // world, D, requires_grad=True) for _ in range(3))
        with count_traffic() as forward:
            out = attend(q, k, v)
        with count_traffic() as backward:
            out.sum().backward()
        counts[strategy] = {
            "forward_sent": forward.sent_bytes,
            "forward_received": forward.received_bytes,
            "backward_sent": backward.sent_bytes,
            "backward_received": backward.received_bytes,
        }
    return counts


def fail_on_rank_one() -> None:
    if dist.get_rank() == 1:
        raise ArithmeticError("rank one gives up")
    dist.barrier()  # rank 0 waits here for a rank that never comes


def sleep_forever() -> None:
    time.sleep(600)


def sleep_forever_on_rank_one() -> int:
    if dist.get_rank() == 1:
        time.sleep(600)
    return dist.get_rank()


def exit_on_rank_one() -> None:
    """Rank 1 vanishes without an exception (as a crash in C would); rank 0 waits for it."""
    if dist.get_rank() == 1:
        os._exit(3)
    dist.barrier()


def world_and_threads() -> tuple[int, int]:
    return dist.get_world_size(), torch.get_num_threads()


def multithreaded_work() -> int:
    """A matrix product and an elementwise op large enough that each runs an OpenMP
    parallel region when more than one thread is allowed."""
    a = torch.randn(512, 512)
    (a @ a).sum()
    torch.randn(1 << 20).exp().sum()
    dist.barrier()
    return torch.get_num_threads()


def disagreements() -> dict[str, str]:
    """The message each call raises on this rank when the ranks disagree about it.

    Each call is valid on every rank by itself, but the ranks pass different arguments
    (or one rank's are invalid): every rank must raise at once, and none may hang or
    abort inside a collective.
    """
    rank = dist.get_rank()
    q = torch.randn(1, 4, 8, 8)
    pad = torch.zeros(1, 8, dtype=torch.bool)
    wide = torch.randn(1, 4, 8, 8, dtype=torch.float64)
    calls: dict[str, Any] = {}
    for name, attend in STRATEGIES.items():
        calls[f"{name}-mask"] = lambda f=attend: f(q, q, q, key_padding_mask=pad if rank else None)
        calls[f"{name}-dtype"] = lambda f=attend: f(*((wide,) * 3 if rank else (q,) * 3))
    calls |= {
        "is_causal": lambda: ring_attention(q, q, q, is_causal=rank == 0),
        "scale": lambda: all_gather_attention(q, q, q, scale=0.5 if rank else None),
        "layout": lambda: ulysses_attention(q, q, q, layout="zigzag" if rank else "contiguous"),
        "strategy": lambda: (ulysses_attention if rank else ring_attention)(q, q, q),
        "enable_gqa": lambda: ring_attention(q, q, q, enable_gqa=rank == 0),
        "grad": lambda: ring_attention(torch.randn(1, 4, 8, 8).requires_grad_(rank == 0), q, q),
        "heads": lambda: ulysses_attention(*(torch.randn(1, 4 - 2 * rank, 8, 8),) * 3),
        "invalid_on_rank_1": lambda: ring_attention(
            q, q, q, key_padding_mask=torch.zeros(1, 8) if rank else None
        ),
        "ulysses_heads_on_rank_1": lambda: ulysses_attention(
            *(torch.randn(1, 4 - rank, 8, 8),) * 3
        ),
    }
    return errors_of(calls)


def grouped_heads_that_do_not_divide() -> dict[str, float]:
    """Each strategy with H = 12 query heads, 4 key heads and 6 value heads (each head
    count divides H, and is even for Ulysses on 2 ranks, but 4 and 6 do not divide each
    other), causal, zigzag, float64: rank 0's largest differences from PyTorch."""
    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(0)
    N = 16
    full = [
        torch.randn(1, heads, N, size, generator=gen, dtype=torch.float64)
        for heads, size in ((12, 8), (4, 8), (6, 5), (12, 5))
    ]
    q, k, v, grad = (t.clone().requires_grad_() for t in full)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected.backward(grad)
    differences = {}
    for name, attend in STRATEGIES.items():
        q_r, k_r, v_r, grad_r = (
            shard_sequence(t, rank, world, layout="zigzag").requires_grad_() for t in full
        )
        out = attend(q_r, k_r, v_r, is_causal=True, enable_gqa=True, layout="zigzag")
        out.backward(grad_r)
        got = [
            gather_sequence(t, layout="zigzag")
            for t in (out.detach(), q_r.grad, k_r.grad, v_r.grad)
        ]
        wanted = (expected.detach(), q.grad, k.grad, v.grad)
        differences[name] = max(
            float((g - e).abs().max()) for g, e in zip(got, wanted, strict=True)
        )
    return differences if rank == 0 else {}


def errors_of(calls: dict[str, Any]) -> dict[str, str]:
    """The error each call raises (or "no error"), then a barrier: every rank got
    through all of them, so nobody is stuck in a collective."""
    messages = {}
    for name, call in calls.items():
        try:
            call()
        except (TypeError, ValueError) as error:
            messages[name] = f"{type(error).__name__}: {error}"
        else:
            messages[name] = "no error"
    dist.barrier()
    return messages

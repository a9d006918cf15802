r"""Sequence-parallel attention: one sequence split across processes, attended exactly.

When a sequence is too long for one device, each of $W$ processes (*ranks*) keeps
$n / W$ of its $n$ positions: its own rows of $Q$, $K$ and $V$. Every query still has to
see every key, so the ranks must exchange something. Three ways, each a function that
takes the local shard of ``query``, ``key`` and ``value`` on each rank and returns the
local shard of the output, differentiable through the communication:

* [`ring_attention`][attention.distributed.ring_attention] (Liu et al., 2023): the
  key/value blocks travel around a ring of ranks, one hop per step; each rank attends
  its queries to the block it holds and merges the partial results with the online
  softmax's rule. Memory per rank stays $O(n / W)$; each rank sends $W - 1$ blocks.
* [`all_gather_attention`][attention.distributed.all_gather_attention] (the context
  parallelism of Llama 3's training): every rank gathers all keys and values, attends
  its queries to them, and the key/value gradients are reduce-scattered back.
  Same traffic, one collective, but $O(n)$ keys and values per rank.
* [`ulysses_attention`][attention.distributed.ulysses_attention] (DeepSpeed-Ulysses,
  Jacobs et al., 2023): an all-to-all re-shards $Q$, $K$, $V$ from "all heads, $n/W$
  positions" to "$H/W$ heads, all positions", each rank attends its heads over the
  whole sequence, and a second all-to-all re-shards the output back. Each rank sends
  $4 \cdot \frac{W-1}{W}$ of its shard: traffic falls as $W$ grows. Needs $H$ and
  $H_{kv}$ divisible by $W$.

Inside each rank, attention is the package's tiled loop (`flash_attention`'s): no
$L \times S$ matrix is built, forward or backward. Partial results over disjoint key
sets are merged by their log-sum-exps (`attention._tiled.merge_partials`), the same
rule the tiled loop applies tile by tile.

**Causal attention** needs the global position of every local row. With the
``"contiguous"`` layout, rank $r$ holds positions $rn/W$ to $(r+1)n/W - 1$, and the
first rank has almost nothing to attend to while the last attends to everything.
The ``"zigzag"`` layout cuts the sequence into $2W$ chunks and gives rank $r$ chunks
$r$ and $2W - 1 - r$: every rank then does the same work. Use
[`shard_sequence`][attention.distributed.shard_sequence] to split a full tensor and
[`gather_sequence`][attention.distributed.gather_sequence] to put it back together.

Every function here must be called by all ranks of the process group, with shards of
the same shape and the same arguments. Each attention call first checks that with one
all-gather of 96 bytes (the function, shapes, dtypes, whether a padding mask is given,
flags, scale, layout): where the ranks differ, or one rank refuses its arguments, every
rank raises a ``ValueError`` saying what differs on which ranks, instead of aborting or
waiting in a later transfer. Collectives wait at most the process group's ``timeout``
(`torch.distributed.init_process_group`); [`run_on_ranks`][attention.distributed.run_on_ranks]
starts a group on this machine and fails cleanly when one rank fails or hangs.

References:
    - Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for
      Near-Infinite Context", 2023. [arXiv:2310.01889](https://arxiv.org/abs/2310.01889)
    - Jacobs, Tanaka, Zhang, Zhang, Song, Rajbhandari and He, "DeepSpeed Ulysses:
      System Optimizations for Enabling Training of Extreme Long Sequence Transformer
      Models", 2023. [arXiv:2309.14509](https://arxiv.org/abs/2309.14509)
    - Llama Team, "The Llama 3 Herd of Models", 2024, section 3.3.2 (context
      parallelism by all-gather). [arXiv:2407.21783](https://arxiv.org/abs/2407.21783)
    - Brandon, Nrusimha, Qian, Ankner, Jin, Song and Ragan-Kelley, "Striped
      Attention: Faster Ring Attention for Causal Transformers", 2023 (load balance).
      [arXiv:2311.09431](https://arxiv.org/abs/2311.09431)
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from attention._checks import (
    broadcast_shapes,
    check_choice,
    check_flag,
    check_key_padding_mask,
    check_query_key_value,
    check_scale,
    shape_str,
)
from attention._heads import group_heads, ungroup_heads
from attention._tiled import (
    Band,
    make_schedule,
    merge_partials,
    tiled_backward,
    tiled_forward,
)
from attention.functional import _working_dtype, default_scale

__all__ = [
    "Traffic",
    "all_gather_attention",
    "count_traffic",
    "gather_sequence",
    "ring_attention",
    "run_on_ranks",
    "shard_sequence",
    "ulysses_attention",
    "unshard_sequence",
]

Layout = Literal["contiguous", "zigzag"]
LAYOUTS = ("contiguous", "zigzag")
BLOCK = 256  # query and key tile size of the loop inside each rank, as flash_attention's
_KV_TAG, _GRAD_TAG = 0, 8  # message tags: keys, values and mask; their gradients


# ---------------------------------------------------------------------------------------
# Splitting a sequence across ranks


def chunk_ids(rank: int, world_size: int, layout: Layout) -> tuple[int, ...]:
    """The chunks of the sequence rank ``rank`` holds, in order (see the module docstring)."""
    if layout == "contiguous":
        return (rank,)  # W chunks
    return (rank, 2 * world_size - 1 - rank)  # 2W chunks


def shard_sequence(
    x: Tensor,
    rank: int,
    world_size: int,
    *,
    layout: Layout = "contiguous",
    dim: int = -2,
) -> Tensor:
    """The part of a full sequence that rank ``rank`` of ``world_size`` holds.

    Args:
        x: Full tensor; its sequence axis is ``dim`` (``(B, H, n, D)``: ``-2``).
        rank: This rank, ``0 <= rank < world_size``.
        world_size: Number of ranks $W$.
        layout: ``"contiguous"``: rank $r$ holds positions $rn/W$ to $(r+1)n/W - 1$.
            ``"zigzag"``: cut into $2W$ chunks, rank $r$ holds chunks $r$ and
            $2W - 1 - r$ (balanced causal work).
        dim: The sequence axis.

    Returns:
        A copy of the shard, with ``n / W`` of the ``n`` positions along ``dim``.

    Raises:
        ValueError: If the length does not divide evenly (``W`` chunks, or ``2W`` for
            ``"zigzag"``), or ``rank``, ``world_size`` or ``layout`` is invalid.

    Examples:
        >>> import torch
        >>> from attention.distributed import shard_sequence
        >>> x = torch.arange(8).view(1, 8, 1)  # (B, n, D): positions 0..7
        >>> shard_sequence(x, 0, 2, layout="zigzag").flatten().tolist()
        [0, 1, 6, 7]
        >>> shard_sequence(x, 1, 2, layout="zigzag").flatten().tolist()
        [2, 3, 4, 5]
    """
    chunks = _chunks(x, world_size, layout, dim)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}); got {rank}")
    ids = chunk_ids(rank, world_size, layout)
    return torch.cat([chunks[i] for i in ids], dim=dim)


def unshard_sequence(
    shards: list[Tensor], *, layout: Layout = "contiguous", dim: int = -2
) -> Tensor:
    """The full sequence from every rank's shard, in rank order: `shard_sequence` undone.

    Args:
        shards: The shard of each rank, rank 0 first.
        layout: How the sequence was split (see `shard_sequence`).
        dim: The sequence axis.

    Returns:
        The full tensor, with ``len(shards)`` times a shard's length along ``dim``.

    Raises:
        ValueError: If ``layout`` is not one of ``"contiguous"``, ``"zigzag"``.

    Examples:
        >>> import torch
        >>> from attention.distributed import shard_sequence, unshard_sequence
        >>> x = torch.arange(12).view(1, 12, 1)
        >>> shards = [shard_sequence(x, r, 3, layout="zigzag") for r in range(3)]
        >>> [s.flatten().tolist() for s in shards]
        [[0, 1, 10, 11], [2, 3, 8, 9], [4, 5, 6, 7]]
        >>> torch.equal(unshard_sequence(shards, layout="zigzag"), x)
        True
    """
    check_choice("layout", layout, LAYOUTS)
    world_size = len(shards)
    chunks: dict[int, Tensor] = {}
    for rank, shard in enumerate(shards):
        ids = chunk_ids(rank, world_size, layout)
        for i, chunk in zip(ids, shard.chunk(len(ids), dim=dim), strict=True):
            chunks[i] = chunk
    return torch.cat([chunks[i] for i in sorted(chunks)], dim=dim)


def gather_sequence(
    x: Tensor,
    *,
    layout: Layout = "contiguous",
    dim: int = -2,
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    """The full sequence, on every rank, from each rank's shard ``x`` (not differentiable).

    Args:
        x: This rank's shard (every rank's has the same shape).
        layout: How the sequence was split (see `shard_sequence`).
        dim: The sequence axis.
        group: The process group; the default group if ``None``.

    Returns:
        The tensor `shard_sequence` was given, with ``W`` times the shard's length.

    Raises:
        ValueError: If ``layout`` is not one of ``"contiguous"``, ``"zigzag"``.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> from attention.distributed import gather_sequence
        >>> # A group of one rank, in this process (torchrun would start W of them).
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> gather_sequence(torch.arange(4).view(1, 4, 1)).flatten().tolist()
        [0, 1, 2, 3]
        >>> dist.destroy_process_group()
    """
    check_choice("layout", layout, LAYOUTS)
    shards = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(shards, x.contiguous(), group=group)
    _record("all_gather", sent=_bytes(x), received=_bytes(x) * (len(shards) - 1))
    return unshard_sequence(shards, layout=layout, dim=dim)


def _chunks(x: Tensor, world_size: int, layout: Layout, dim: int) -> tuple[Tensor, ...]:
    check_choice("layout", layout, LAYOUTS)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1; got {world_size!r}")
    count = world_size * len(chunk_ids(0, world_size, layout))
    if x.shape[dim] % count:
        raise ValueError(
            f"a sequence of length {x.shape[dim]} (axis {dim} of {shape_str(x)}) cannot be "
            f"split into {count} equal chunks for {world_size} ranks with layout "
            f"{layout!r}; pad it to a multiple of {count}"
        )
    return x.chunk(count, dim=dim)


# ---------------------------------------------------------------------------------------
# Counting what is sent


@dataclass
class Traffic:
    """Bytes this rank sent and received inside `count_traffic`, by operation.

    Args:
        sent: Bytes sent, by operation (``"send/recv"``, ``"all_gather"``,
            ``"reduce_scatter"``, ``"all_to_all"``, ``"shape check"``: the ranks'
            agreement on the call, 96 bytes).
        received: Bytes received, by operation.

    Examples:
        >>> from collections import Counter
        >>> from attention.distributed import Traffic
        >>> traffic = Traffic(sent=Counter({"send/recv": 4096, "shape check": 96}))
        >>> traffic.sent_bytes, traffic.received_bytes
        (4192, 0)
    """

    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)

    @property
    def sent_bytes(self) -> int:
        """All bytes sent, every operation together."""
        return sum(self.sent.values())

    @property
    def received_bytes(self) -> int:
        """All bytes received, every operation together."""
        return sum(self.received.values())


_counters: list[Traffic] = []


@contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Count the bytes this rank sends and receives through the functions of this module.

    What is counted is each rank's share of the data an operation moves, as the
    algorithm sees it (an all-gather of $W$ blocks sends this rank's block and
    receives the $W - 1$ others): how the backend routes it is not visible here.

    Returns:
        A context manager; its target, a `Traffic`, fills up while the block runs.

    Raises:
        RuntimeError: Only as the counted code does; counting adds no failure of its own.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> from attention.distributed import count_traffic, ring_attention
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> q = torch.randn(1, 2, 16, 8)  # (B, H, n / W, D), float32
        >>> with count_traffic() as traffic:
        ...     _ = ring_attention(q, q, q)
        >>> dict(traffic.sent)  # one rank: no block to pass, only the shape check
        {'shape check': 96}
        >>> dist.destroy_process_group()
    """
    traffic = Traffic()
    _counters.append(traffic)
    try:
        yield traffic
    finally:  # by identity: two counters that counted the same are equal, not the same
        del _counters[next(i for i, t in enumerate(_counters) if t is traffic)]


def _record(op: str, *, sent: int, received: int) -> None:
    for traffic in _counters:
        traffic.sent[op] += sent
        traffic.received[op] += received


def _bytes(*tensors: Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


# ---------------------------------------------------------------------------------------
# Attention of local queries to one block of keys, in chunks of known global position


@dataclass(frozen=True)
class _Blocks:
    """Where the rows are: chunk ids of the queries and of each key/value block."""

    causal: bool
    scale: float
    query_chunks: tuple[int, ...]
    chunk: int  # positions per chunk

    def pairs(self, key_chunks: tuple[int, ...]) -> Iterator[tuple[int, int, Any]]:
        """``(query chunk index, key chunk index, schedule)`` for every pair to compute.

        With causal masking a key chunk after a query chunk is skipped, a chunk against
        itself is the causal diagonal, and an earlier key chunk is seen whole.
        """
        for a, qa in enumerate(self.query_chunks):
            for b, kb in enumerate(key_chunks):
                if self.causal and kb > qa:
                    continue  # every key is in the query's future
                band = Band(low=0, high=None) if self.causal and kb == qa else None
                yield a, b, make_schedule(self.chunk, self.chunk, BLOCK, BLOCK, band=band)


def _mask_keys(mask: Tensor | None, keys: slice) -> Tensor | None:
    """The keys ``keys`` of a keep-mask (its last axis), or ``None`` for no mask."""
    return None if mask is None else mask[..., keys]


def _attend_block(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, spec: _Blocks, key_chunks: tuple[int, ...]
) -> tuple[Tensor, Tensor]:
    """Output and log-sum-exp (``-inf``: no key) of the local queries over one block."""
    n = spec.chunk
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = q.new_zeros(*batch, q.shape[-2], v.shape[-1])
    lse = out.new_full(out.shape[:-1], float("-inf"))
    for a, b, schedule in spec.pairs(key_chunks):
        rows, cols = slice(a * n, (a + 1) * n), slice(b * n, (b + 1) * n)
        keys = (k[..., cols, :], v[..., cols, :], _mask_keys(mask, cols))
        o, s = tiled_forward(q[..., rows, :], *keys, schedule, spec.scale)
        s = s.masked_fill(torch.isposinf(s), float("-inf"))  # the loop's "no key" is +inf
        out[..., rows, :], lse[..., rows] = merge_partials(out[..., rows, :], lse[..., rows], o, s)
    return out, lse


def _block_grads(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    out: Tensor,
    lse: Tensor,
    spec: _Blocks,
    key_chunks: tuple[int, ...],
) -> tuple[Tensor, Tensor, Tensor]:
    r"""This block's share of the gradients, given the final output and log-sum-exp.

    With the *global* log-sum-exp, $P = e^{Z - \text{lse}}$ of a block is exactly that
    block's part of the softmax, so the tiled loop's backward applied block by block
    gives each block's gradient terms; they add up to the full gradient.
    """
    n = spec.chunk
    lse = lse.masked_fill(torch.isneginf(lse), float("inf"))  # the loop's "no key"
    grad_q, grad_k, grad_v = (torch.zeros_like(t) for t in (q, k, v))
    for a, b, schedule in spec.pairs(key_chunks):
        rows, cols = slice(a * n, (a + 1) * n), slice(b * n, (b + 1) * n)
        gq, gk, gv, _ = tiled_backward(
            grad_out[..., rows, :],
            q[..., rows, :],
            k[..., cols, :],
            v[..., cols, :],
            _mask_keys(mask, cols),
            out[..., rows, :],
            lse[..., rows],
            schedule,
            spec.scale,
            False,
        )
        grad_q[..., rows, :] += gq
        grad_k[..., cols, :] += gk
        grad_v[..., cols, :] += gv
    return grad_q, grad_k, grad_v


class _LocalAttention(torch.autograd.Function):
    """Local queries against keys given as ``W`` blocks (all-gather, Ulysses)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        spec: _Blocks,
        blocks: tuple[tuple[int, ...], ...],
    ) -> Tensor:
        out, lse = q.new_zeros(0), q.new_zeros(0)
        width = k.shape[-2] // len(blocks)
        for i, key_chunks in enumerate(blocks):
            cols = slice(i * width, (i + 1) * width)
            part = _attend_block(
                q, k[..., cols, :], v[..., cols, :], _mask_keys(mask, cols), spec, key_chunks
            )
            out, lse = part if i == 0 else merge_partials(out, lse, *part)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.spec, ctx.blocks = spec, blocks
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, mask, out, lse = ctx.saved_tensors
        width = k.shape[-2] // len(ctx.blocks)
        grad_q = torch.zeros_like(q)
        grad_k, grad_v = torch.zeros_like(k), torch.zeros_like(v)
        for i, key_chunks in enumerate(ctx.blocks):
            cols = slice(i * width, (i + 1) * width)
            gq, gk, gv = _block_grads(
                grad_out,
                q,
                k[..., cols, :],
                v[..., cols, :],
                _mask_keys(mask, cols),
                out,
                lse,
                ctx.spec,
                key_chunks,
            )
            grad_q += gq
            grad_k[..., cols, :] = gk
            grad_v[..., cols, :] = gv
        return grad_q, grad_k, grad_v, None, None, None


# ---------------------------------------------------------------------------------------
# Ring attention


class _RingAttention(torch.autograd.Function):
    """Keys and values go around the ring; in backward, so do their gradients."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        spec: _Blocks,
        layout: Layout,
        group: dist.ProcessGroup | None,
    ) -> Tensor:
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        block = (k, v, mask)
        out = lse = None
        for step in range(world):
            # Post the next block's transfer first: it travels while this one is used.
            pending = _pass_along(block, group, _KV_TAG) if step < world - 1 else None
            source = (rank - step) % world  # whose keys this rank holds now
            part = _attend_block(
                q, block[0], block[1], block[2], spec, chunk_ids(source, world, layout)
            )
            out, lse = part if out is None else merge_partials(out, lse, *part)  # type: ignore[arg-type]
            if pending is not None:
                block = pending()
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.spec, ctx.layout, ctx.group = spec, layout, group
        return out  # type: ignore[return-value]

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, mask, out, lse = ctx.saved_tensors
        group = ctx.group
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        grad_q = torch.zeros_like(q)
        block = (k, v, mask)
        travelling = None  # the transfer of the gradients of the block held next
        for step in range(world):
            pending = _pass_along(block, group, _KV_TAG) if step < world - 1 else None
            source = (rank - step) % world
            key_chunks = chunk_ids(source, world, ctx.layout)
            gq, gk, gv = _block_grads(
                grad_out, q, block[0], block[1], block[2], out, lse, ctx.spec, key_chunks
            )
            grad_q += gq
            if travelling is not None:  # what the ranks this block visited before added
                earlier_k, earlier_v = travelling()  # arrived during the compute above
                gk, gv = gk + earlier_k, gv + earlier_v
            # Send them on; after W hops they are back with the block's owner, complete.
            travelling = _pass_along((gk, gv), group, _GRAD_TAG)
            if pending is not None:
                block = pending()
        assert travelling is not None  # world >= 1
        grad_k, grad_v = travelling()
        return grad_q, grad_k, grad_v, None, None, None, None


def _pass_along(
    tensors: tuple[Tensor | None, ...], group: dist.ProcessGroup | None, tag: int
) -> Callable[[], tuple[Any, ...]]:
    """Send ``tensors`` to the next rank and receive the previous rank's, asynchronously.

    Returns a function that waits for the transfer and gives the received tensors
    (``None`` where ``tensors`` has ``None``). With one rank, the block stays.
    """
    if dist.get_world_size(group) == 1:
        return lambda: tensors
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to, frm = _global_rank((rank + 1) % world, group), _global_rank((rank - 1) % world, group)
    present = [t.contiguous() for t in tensors if t is not None]
    received = [torch.empty_like(t) for t in present]
    # One tag per tensor of a message, distinct between messages in flight together
    # (a block's keys and values, and the gradients travelling beside them).
    ops = [dist.P2POp(dist.isend, t, to, group, tag + i) for i, t in enumerate(present)]
    ops += [dist.P2POp(dist.irecv, t, frm, group, tag + i) for i, t in enumerate(received)]
    works = dist.batch_isend_irecv(ops)
    _record("send/recv", sent=_bytes(*present), received=_bytes(*received))

    def wait() -> tuple[Any, ...]:
        for work in works:
            work.wait()
        it = iter(received)
        return tuple(None if t is None else next(it) for t in tensors)

    return wait


def _global_rank(rank: int, group: dist.ProcessGroup | None) -> int:
    """A rank of ``group`` as the default group numbers it (what P2P operations take)."""
    return rank if group is None else dist.get_global_rank(group, rank)


# ---------------------------------------------------------------------------------------
# Collectives with their adjoints


class _AllGather(torch.autograd.Function):
    """Forward: every rank's shard, stacked along the sequence. Backward: reduce-scatter."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        world = dist.get_world_size(group)
        gathered = x.new_empty(world * x.shape[0], *x.shape[1:])  # ranks along axis 0
        dist.all_gather_single(gathered, x.contiguous(), group=group)
        gathered = gathered.unflatten(0, (world, x.shape[0]))  # type: ignore[no-untyped-call]
        _record("all_gather", sent=_bytes(x), received=_bytes(x) * (world - 1))
        ctx.group = group
        return torch.cat(gathered.unbind(0), dim=-2)  # (..., W * n, D)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        world = dist.get_world_size(ctx.group)
        parts = torch.cat(grad.chunk(world, dim=-2))  # (W * B, ..., n, D): ranks along axis 0
        mine = parts.new_empty(parts.shape[0] // world, *parts.shape[1:])
        dist.reduce_scatter_single(mine, parts, group=ctx.group)
        _record(
            "reduce_scatter", sent=_bytes(parts) - _bytes(mine), received=_bytes(mine) * (world - 1)
        )
        return mine, None


class _SequenceToHeads(torch.autograd.Function):
    """All-to-all: ``(B, H, n, D)`` per rank to ``(B, H / W, W * n, D)``; backward inverts it."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        ctx.group = group
        return _sequence_to_heads(x, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return _heads_to_sequence(grad, ctx.group), None


class _HeadsToSequence(torch.autograd.Function):
    """All-to-all: ``(B, H / W, W * n, D)`` per rank back to ``(B, H, n, D)``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        ctx.group = group
        return _heads_to_sequence(x, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return _sequence_to_heads(grad, ctx.group), None


def _all_to_all(x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """Row ``w`` of ``x`` ``(W, ...)`` goes to rank ``w``; row ``w`` of the result came from it."""
    x = x.contiguous()  # before empty_like, which would copy a view's strides
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    kept = _bytes(x) // x.shape[0]  # the row a rank keeps for itself
    _record("all_to_all", sent=_bytes(x) - kept, received=_bytes(out) - kept)
    return out


def _sequence_to_heads(x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    world = dist.get_world_size(group)
    B, H, n, D = x.shape
    parts = x.view(B, world, H // world, n, D).transpose(0, 1)  # (W, B, H/W, n, D): row w to rank w
    got = _all_to_all(parts, group)  # (W, B, H/W, n, D): row w is rank w's positions
    return got.permute(1, 2, 0, 3, 4).reshape(B, H // world, world * n, D)


def _heads_to_sequence(x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    world = dist.get_world_size(group)
    B, h, N, D = x.shape
    parts = x.view(B, h, world, N // world, D).permute(2, 0, 1, 3, 4)  # (W, B, H/W, n, D)
    got = _all_to_all(parts, group)  # (W, B, H/W, n, D): row w is rank w's heads
    return got.transpose(0, 1).reshape(B, world * h, N // world, D)


# ---------------------------------------------------------------------------------------
# The three strategies


def ring_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    layout: Layout = "contiguous",
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    r"""Exact attention over a sequence split across ranks, keys and values passed in a ring.

    At step $s = 0, \dots, W - 1$ rank $r$ holds the key/value block of rank
    $r - s \pmod W$: it posts that block's transfer to rank $r + 1$ (asynchronous
    ``isend``/``irecv``, so the transfer overlaps the compute), attends its queries to
    it with the tiled loop, and merges the result into its running output with the
    log-sum-exp rule. In backward the blocks go around again, and with each block
    travel the gradients of its keys and values, accumulated by every rank it visits,
    until they are back with its owner; they too travel while the next block's
    gradients are computed.

    Args:
        query: ``(B, H, n / W, D)``: this rank's $n / W$ of the sequence's $n$ positions.
        key: ``(B, H, n / W, D)``, or ``(B, Hkv, n / W, D)`` with ``enable_gqa``.
        value: ``(B, H, n / W, Dv)``, or ``(B, Hkv, n / W, Dv)`` with ``enable_gqa``.
        is_causal: Causal self-attention over the *global* positions, which the
            ``layout`` gives.
        key_padding_mask: Optional bool ``(B, n / W)``, this rank's keys; True marks a
            padding key (PyTorch's meaning). A query with no key left gets zeros.
        scale: Factor applied to $QK^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in `flash_attention`.
        layout: How the sequence was split: ``"contiguous"`` or ``"zigzag"`` (see
            `shard_sequence`); ``"zigzag"`` balances causal work across ranks.
        group: The process group; the default group if ``None``.

    Returns:
        This rank's shard of the output, ``(B, H, n / W, Dv)``.

    Raises:
        TypeError: As `flash_attention`, or if ``key_padding_mask`` is not bool.
        ValueError: As `flash_attention`; if the shard's query and key lengths differ,
            a chunk would be uneven, or the ranks' calls differ (shapes, dtypes, a
            padding mask on some ranks only, flags, scale, layout, or another function)
            or another rank refused its arguments: then every rank raises.

    Examples:
        On one rank in this process (the sequence "split" in one shard), the result
        is plain attention; `run_on_ranks` or ``torchrun`` start several ranks.

        >>> import torch
        >>> import torch.distributed as dist
        >>> import torch.nn.functional as F
        >>> from attention.distributed import ring_attention
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> q, k, v = torch.randn(3, 1, 2, 16, 8).unbind(0)  # (B, H, n / W, D) each
        >>> out = ring_attention(q, k, v, is_causal=True)
        >>> expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, expected, atol=1e-6)
        True
        >>> dist.destroy_process_group()
    """
    q, k, v, mask, spec = _prepare(
        "ring_attention",
        query,
        key,
        value,
        is_causal,
        key_padding_mask,
        scale,
        enable_gqa,
        layout,
        group,
    )
    q, k, v, mask = group_heads(q, k, v, mask, enable_gqa)
    out = _apply(_RingAttention, q, k, v, mask, spec, layout, group)
    return _finish(out, query, enable_gqa)


def all_gather_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    layout: Layout = "contiguous",
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    r"""Exact attention over a sequence split across ranks, by gathering all keys and values.

    Every rank gathers the keys and values of all ranks (one ``all_gather`` each) and
    attends its own queries to them; in backward the gradients of the gathered keys
    and values are summed back to their owners (``reduce_scatter``). Simple and one
    collective per tensor, but each rank holds all $n$ keys and values, and (unlike the
    ring) the transfer cannot overlap the compute. With grouped-query attention the
    gathered tensors are small: Llama 3 trains with this scheme for that reason.

    Args:
        query: ``(B, H, n / W, D)``: this rank's $n / W$ of the sequence's $n$ positions.
        key: ``(B, H, n / W, D)``, or ``(B, Hkv, n / W, D)`` with ``enable_gqa``.
        value: ``(B, H, n / W, Dv)``, or ``(B, Hkv, n / W, Dv)`` with ``enable_gqa``.
        is_causal: Causal self-attention over the global positions.
        key_padding_mask: Optional bool ``(B, n / W)``; True marks a padding key.
        scale: Factor applied to $QK^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in `flash_attention`.
        layout: How the sequence was split: ``"contiguous"`` or ``"zigzag"``.
        group: The process group; the default group if ``None``.

    Returns:
        This rank's shard of the output, ``(B, H, n / W, Dv)``.

    Raises:
        TypeError: As `ring_attention`.
        ValueError: As `ring_attention`.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> import torch.nn.functional as F
        >>> from attention.distributed import all_gather_attention
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> q = torch.randn(1, 8, 16, 8)  # (B, H, n / W, D): 8 query heads
        >>> k, v = torch.randn(2, 1, 2, 16, 8).unbind(0)  # 2 key/value heads
        >>> out = all_gather_attention(q, k, v, enable_gqa=True)
        >>> expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        >>> torch.allclose(out, expected, atol=1e-6)
        True
        >>> dist.destroy_process_group()
    """
    q, k, v, mask, spec = _prepare(
        "all_gather_attention",
        query,
        key,
        value,
        is_causal,
        key_padding_mask,
        scale,
        enable_gqa,
        layout,
        group,
    )
    world = dist.get_world_size(group)
    k_all, v_all = _apply(_AllGather, k, group), _apply(_AllGather, v, group)
    mask_all = None if mask is None else _gather_keys_mask(mask, group)
    q, k_all, v_all, mask_all = group_heads(q, k_all, v_all, mask_all, enable_gqa)
    blocks = tuple(chunk_ids(rank, world, layout) for rank in range(world))
    out = _apply(_LocalAttention, q, k_all, v_all, mask_all, spec, blocks)
    return _finish(out, query, enable_gqa)


def ulysses_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    layout: Layout = "contiguous",
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    r"""Exact attention over a sequence split across ranks, re-sharded over heads (Ulysses).

    One ``all_to_all`` per tensor turns "all $H$ heads of $n/W$ positions" into
    "$H / W$ heads of all $n$ positions"; each rank attends those heads over the whole
    sequence, and one more ``all_to_all`` turns the output back. The backward pass is
    the same exchanges in reverse. Each rank sends $\frac{W-1}{W}$ of each of four
    shards: the traffic per rank *falls* as $W$ grows, where the ring's stays about
    the size of all keys and values. The limit: $W$ may not exceed the number of heads.

    Args:
        query: ``(B, H, n / W, D)``: this rank's $n / W$ of the sequence's $n$ positions.
        key: ``(B, H, n / W, D)``, or ``(B, Hkv, n / W, D)`` with ``enable_gqa``.
        value: ``(B, H, n / W, Dv)``, or ``(B, Hkv, n / W, Dv)`` with ``enable_gqa``.
        is_causal: Causal self-attention over the global positions.
        key_padding_mask: Optional bool ``(B, n / W)``; True marks a padding key.
        scale: Factor applied to $QK^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in `flash_attention`.
        layout: How the sequence was split: ``"contiguous"`` or ``"zigzag"``.
        group: The process group; the default group if ``None``.

    Returns:
        This rank's shard of the output, ``(B, H, n / W, Dv)``.

    Raises:
        TypeError: As `ring_attention`.
        ValueError: As `ring_attention`, or if the number of query, key or value heads
            is not divisible by the number of ranks.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> import torch.nn.functional as F
        >>> from attention.distributed import ulysses_attention
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> q, k, v = torch.randn(3, 1, 4, 16, 8).unbind(0)  # (B, H, n / W, D) each
        >>> pad = torch.zeros(1, 16, dtype=torch.bool)
        >>> pad[:, -3:] = True  # the last three keys are padding
        >>> out = ulysses_attention(q, k, v, key_padding_mask=pad)
        >>> keep = ~pad[:, None, None, :]  # (B, 1, 1, n), True = may attend
        >>> expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        >>> torch.allclose(out, expected, atol=1e-6)
        True
        >>> dist.destroy_process_group()
    """
    q, k, v, mask, spec = _prepare(
        "ulysses_attention",
        query,
        key,
        value,
        is_causal,
        key_padding_mask,
        scale,
        enable_gqa,
        layout,
        group,
    )
    world = dist.get_world_size(group)
    q_h, k_h, v_h = (_apply(_SequenceToHeads, t, group) for t in (q, k, v))  # (B, H/W, N, ·)
    mask_all = None if mask is None else _gather_keys_mask(mask, group)
    q_h, k_h, v_h, mask_all = group_heads(q_h, k_h, v_h, mask_all, enable_gqa)
    blocks = tuple(chunk_ids(rank, world, layout) for rank in range(world))
    all_chunks = tuple(i for ids in blocks for i in ids)
    full = _Blocks(spec.causal, spec.scale, all_chunks, spec.chunk)
    out_h = _apply(_LocalAttention, q_h, k_h, v_h, mask_all, full, blocks)
    out_h = ungroup_heads(out_h, enable_gqa)  # (B, H/W, N, Dv)
    out = _apply(_HeadsToSequence, out_h, group)  # (B, H, n, Dv)
    return out.to(query.dtype)


def _apply(function: type[torch.autograd.Function], *args: Any) -> Tensor:
    """``function.apply(*args)``, typed (``Function.apply`` is not)."""
    return function.apply(*args)  # type: ignore[no-untyped-call,no-any-return]


def _gather_keys_mask(mask: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """The keep-masks ``(B, 1, 1, n)`` of every rank, side by side: ``(B, 1, 1, W * n)``."""
    world = dist.get_world_size(group)
    parts = [torch.empty_like(mask) for _ in range(world)]
    dist.all_gather(parts, mask.contiguous(), group=group)
    _record("all_gather", sent=_bytes(mask), received=_bytes(mask) * (world - 1))
    return torch.cat(parts, dim=-1)


def _prepare(
    strategy: str,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool,
    key_padding_mask: Tensor | None,
    scale: float | None,
    enable_gqa: bool,
    layout: Layout,
    group: dist.ProcessGroup | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, _Blocks]:
    """Validate, agree with the other ranks on the call, and lay out heads for the loop.

    Returns q, k, v in the working dtype; the padding mask as a keep-mask that
    broadcasts over heads and queries; and where this rank's chunks lie.
    """
    world = dist.get_world_size(group)
    problem, effective_scale = None, 0.0
    try:
        effective_scale = _check_call(
            strategy,
            world,
            query,
            key,
            value,
            is_causal,
            key_padding_mask,
            scale,
            enable_gqa,
            layout,
        )
    except (TypeError, ValueError) as error:
        problem = error  # raised after the agreement, which the other ranks wait for
    call = _Call.of(
        strategy,
        problem is None,
        query,
        key,
        value,
        key_padding_mask,
        is_causal,
        enable_gqa,
        layout,
        effective_scale,
    )
    _check_same_call_everywhere(strategy, call, query, group)
    if problem is not None:
        raise problem
    n = query.shape[-2]
    mask = None if key_padding_mask is None else (~key_padding_mask)[:, None, None, :]
    parts = len(chunk_ids(0, world, layout))
    spec = _Blocks(
        causal=is_causal,
        scale=effective_scale,
        query_chunks=chunk_ids(dist.get_rank(group), world, layout),
        chunk=n // parts,
    )
    dtype = _working_dtype(query.dtype)
    q, k, v = (t.to(dtype) for t in (query, key, value))
    return q, k, v, mask, spec  # mask: keep-mask (B, 1, 1, n)


def _check_call(
    strategy: str,
    world: int,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool,
    key_padding_mask: Tensor | None,
    scale: float | None,
    enable_gqa: bool,
    layout: Layout,
) -> float:
    """What this rank alone can check of its arguments; returns the scale to apply."""
    check_flag("is_causal", is_causal)
    check_choice("layout", layout, LAYOUTS)
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != 4:
            raise ValueError(
                f"{name} must be (B, H, n / W, D), this rank's positions; got {shape_str(t)}"
            )
    if query.shape[-2] != key.shape[-2]:
        raise ValueError(
            "sequence-parallel attention is self-attention over one split sequence: query "
            f"and key must have the same length on this rank; got query {shape_str(query)}, "
            f"key {shape_str(key)}"
        )
    B, n = query.shape[0], query.shape[-2]
    if key_padding_mask is not None:
        check_key_padding_mask(key_padding_mask, B, n, query.dtype, shape="(B, n / W)")
        _check_bool_key_padding_mask(key_padding_mask)
    parts = len(chunk_ids(0, world, layout))
    if n % parts:
        raise ValueError(
            f"with layout {layout!r} each rank holds {parts} chunks: the length on each rank "
            f"must be divisible by {parts}; got query {shape_str(query)}"
        )
    if strategy == "ulysses_attention":
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.shape[1] % world:
                raise ValueError(
                    f"ulysses_attention splits the heads across ranks: the number of {name} "
                    f"heads must be divisible by the number of ranks ({world}); got {name} "
                    f"{shape_str(t)} with {t.shape[1]} heads. Use ring_attention or "
                    "all_gather_attention for this model"
                )
    return default_scale(query, check_scale(scale))


def _finish(out: Tensor, query: Tensor, enable_gqa: bool) -> Tensor:
    return ungroup_heads(out, enable_gqa).to(query.dtype)  # (B, H, n, Dv)


_STRATEGIES = ("ring_attention", "all_gather_attention", "ulysses_attention")
_DTYPES = tuple(sorted({t for t in vars(torch).values() if isinstance(t, torch.dtype)}, key=str))


@dataclass(frozen=True)
class _Call:
    """What every rank's call must agree on, as 24 int32 (96 bytes) to all-gather.

    Fields: the function; whether this rank's arguments passed its own checks; the
    shapes of query, key and value (4 each); their dtypes; whether a key padding mask
    was given; ``is_causal``; ``enable_gqa``; the layout; the scale applied (a float64
    as two int32); whether autograd records the call for a backward pass (which is
    collective too). With a valid call the padding mask's shape and dtype follow from
    the query's; the process group is the one the collective runs in.
    """

    fields: tuple[int, ...]

    @classmethod
    def of(
        cls,
        strategy: str,
        valid: bool,
        query: object,
        key: object,
        value: object,
        key_padding_mask: object,
        is_causal: object,
        enable_gqa: object,
        layout: object,
        scale: float,
    ) -> _Call:
        tensors = (query, key, value)
        shapes = [_shape_fields(t) for t in tensors]
        dtypes = [_DTYPES.index(t.dtype) if isinstance(t, Tensor) else -1 for t in tensors]
        high, low = struct.unpack("<ii", struct.pack("<d", scale))
        graph = torch.is_grad_enabled() and any(
            isinstance(t, Tensor) and t.requires_grad for t in tensors
        )
        return cls(
            (
                _STRATEGIES.index(strategy),
                int(valid),
                *(size for shape in shapes for size in shape),
                *dtypes,
                int(key_padding_mask is not None),
                int(is_causal is True),
                int(enable_gqa is True),
                LAYOUTS.index(layout) if layout in LAYOUTS else -1,
                high,
                low,
                int(graph),
            )
        )

    @property
    def valid(self) -> bool:
        return bool(self.fields[1])

    def described(self) -> dict[str, str]:
        """The agreed arguments, by name, as the error message shows them."""
        f = self.fields
        shapes = [f[i : i + 4] for i in (2, 6, 10)]
        names = ("query", "key", "value")
        (scale,) = struct.unpack("<d", struct.pack("<ii", f[21], f[22]))
        return {
            "function": _STRATEGIES[f[0]],
            "shapes": ", ".join(
                f"{n} {tuple(shape)}" for n, shape in zip(names, shapes, strict=True)
            ),
            "dtypes": ", ".join(f"{n} {_DTYPES[d]}" for n, d in zip(names, f[14:17], strict=True)),
            "key_padding_mask": "given" if f[17] else "None",
            "is_causal": str(bool(f[18])),
            "enable_gqa": str(bool(f[19])),
            "layout": repr(LAYOUTS[f[20]]),
            "scale": repr(scale),
            "autograd": "records the graph for backward"
            if f[23]
            else "no graph (grad mode off, or no input requires grad)",
        }


def _shape_fields(t: object) -> tuple[int, ...]:
    """A 4-D tensor's shape, each size capped to an int32 (no shard comes near 2**31)."""
    if not isinstance(t, Tensor) or t.ndim != 4:
        return (-1,) * 4
    return tuple(min(size, 2**31 - 1) for size in t.shape)


def _check_bool_key_padding_mask(key_padding_mask: Tensor) -> None:
    """Sequence-parallel attention takes a bool key padding mask only, not a float one.

    Its kernels treat the gathered padding as a keep-mask; a float bias is refused
    rather than read wrongly.
    """
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(
            "key_padding_mask must be bool (True marks padding) for sequence-parallel "
            f"attention, which does not take a float mask; got {key_padding_mask.dtype}"
        )


def _check_same_call_everywhere(
    strategy: str, call: _Call, query: object, group: dist.ProcessGroup | None
) -> None:
    """Every rank's call agrees with every other's: checked before any other collective.

    Transfers whose shapes or dtypes differ between ranks abort inside the backend or
    wait forever; so would one rank's error, raised while the others wait. One small
    all-gather instead, and then every rank raises the same error.
    """
    mine = torch.tensor(call.fields, dtype=torch.int32, device=_check_device(query, group))
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    _record("shape check", sent=_bytes(mine), received=_bytes(mine) * (len(every) - 1))
    calls = [_Call(tuple(t.tolist())) for t in every]
    refused = [rank for rank, c in enumerate(calls) if not c.valid]
    if refused:
        if not call.valid:
            return  # this rank raises its own error, which says why
        raise ValueError(
            f"{strategy} could not run: its arguments were refused on {_ranks(refused)} "
            "(the error raised there says why); every rank stops here instead of waiting"
        )
    described = [c.described() for c in calls]
    differences = []
    for name in described[0]:
        values: dict[str, list[int]] = {}
        for rank, d in enumerate(described):
            values.setdefault(d[name], []).append(rank)
        if len(values) > 1:
            listed = "; ".join(f"{_ranks(ranks)}: {value}" for value, ranks in values.items())
            differences.append(f"{name} ({listed})")
    if differences:
        raise ValueError(
            "sequence-parallel attention needs the same call on every rank: the same "
            "function, shards of one shape (split the sequence evenly, e.g. with "
            "shard_sequence), the same dtypes, a key_padding_mask on every rank or on none, "
            "and the same flags, scale and layout; the ranks differ in "
            + ", and in ".join(differences)
        )


def _ranks(ranks: list[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _check_device(query: object, group: dist.ProcessGroup | None) -> torch.device:
    """Where the agreement's tensor lives: the query's device (NCCL moves only GPU tensors).

    Where this rank's query is no tensor, the device the backend takes.
    """
    if isinstance(query, Tensor):
        return query.device
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------
# Running a function on W local processes


def run_on_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    threads: int | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` in ``world_size`` new processes joined in one gloo process group.

    Each process is a rank of a `torch.distributed` group on ``127.0.0.1`` (a free
    port) with the gloo backend, so ``dist.get_rank()`` tells it which it is. Returns
    what ``fn`` returned on each rank, in rank order. If any rank raises, the others
    are stopped and the error is raised here, with the rank's traceback; if the ranks
    have not all finished after ``timeout`` seconds (a rank stuck in a collective), all
    are stopped and `TimeoutError` is raised. Every collective also waits at most
    ``timeout`` seconds.

    Args:
        fn: A function importable by name, from a module on ``sys.path`` (not one
            defined in a notebook or a script's ``__main__``): each rank is a new
            Python interpreter, which imports it.
        world_size: Number of processes.
        *args: Passed to ``fn`` on every rank (pickled).
        timeout: Seconds for the whole run, and for each collective.
        threads: Torch threads per rank; default: this machine's cores divided among
            the ranks (at least one).

    Returns:
        ``[fn(*args) on rank 0, ..., on rank world_size - 1]``.

    Raises:
        ValueError: If ``world_size`` is not a positive int.
        RuntimeError: If a rank raised (the message holds the traceback of the first
            rank that failed) or died.
        TimeoutError: If the ranks did not finish within ``timeout`` seconds.

    Examples:
        >>> import torch.distributed as dist
        >>> from attention.distributed import run_on_ranks
        >>> run_on_ranks(dist.get_world_size, 2)  # each rank's answer, rank 0 first
        [2, 2]
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1; got {world_size!r}")
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    with tempfile.TemporaryDirectory(prefix="run_on_ranks-") as name:
        folder = Path(name)
        # The ranks import fn by name, with this process's sys.path: as a script, a
        # notebook or a REPL would. They are plain new interpreters, not forks, and
        # (unlike multiprocessing's spawn) they never re-run this process's __main__.
        (folder / "sys_path.json").write_text(json.dumps(sys.path), encoding="utf-8")
        torch.save((fn, args), folder / "task.pt")
        command = [sys.executable, "-c", _RANK_MAIN, name, str(world_size)]
        command += [f"tcp://127.0.0.1:{_free_port()}", str(timeout), str(threads)]
        ranks = [
            subprocess.Popen([*command, str(rank)], stdin=subprocess.DEVNULL)
            for rank in range(world_size)
        ]
        try:
            returned, failed = _collect(ranks, folder, timeout)
        finally:
            for process in ranks:
                if process.poll() is None:
                    process.kill()
                process.wait()
    if failed:
        first = min(failed, key=lambda rank: failed[rank][0])
        others = sorted(set(failed) - {first})
        after = f"\n(after it, ranks {others} failed too)" if others else ""
        raise RuntimeError(f"rank {first} of {world_size} failed:\n{failed[first][1]}{after}")
    return [returned[rank] for rank in range(world_size)]


def _collect(
    ranks: list[subprocess.Popen[bytes]], folder: Path, timeout: float
) -> tuple[dict[int, Any], dict[int, tuple[float, str]]]:
    """Each rank's outcome, as it writes it; stop early after a failure or the timeout.

    Returns what each rank returned and, for each rank that failed, when and how.
    After the first failure the others get a second to report (a rank left waiting in
    a collective fails too, later, and its error is not the cause).
    """
    returned: dict[int, Any] = {}
    failed: dict[int, tuple[float, str]] = {}
    deadline = time.monotonic() + timeout
    waiting = set(range(len(ranks)))
    first_failure = None
    while waiting:
        for rank in sorted(waiting):
            outcome = folder / f"rank{rank}.pt"
            exit_code = ranks[rank].poll()
            if outcome.exists():
                ok, when, payload = torch.load(outcome, weights_only=False)
            elif exit_code is not None:  # gone without a word: killed, a crash in C
                ok, when, payload = False, time.time(), f"the process died (exit code {exit_code})"
            else:
                continue
            waiting.discard(rank)
            if ok:
                returned[rank] = payload
            else:
                failed[rank] = (when, payload)
                first_failure = first_failure or time.monotonic()
        if first_failure is not None and time.monotonic() > first_failure + 1.0:
            break
        if waiting and time.monotonic() > deadline and not failed:
            raise TimeoutError(
                f"ranks {sorted(waiting)} of {len(ranks)} did not finish within {timeout} s"
            )
        time.sleep(0.02)
    return returned, failed


# What each rank's interpreter runs: the parent's sys.path first, then the package.
_RANK_MAIN = (
    "import json, sys; from pathlib import Path; "
    "sys.path[:] = json.loads(Path(sys.argv[1], 'sys_path.json').read_text()); "
    "from attention.distributed import _rank_main; _rank_main(*sys.argv[1:])"
)


def _rank_main(
    folder: str, world_size: str, address: str, timeout: str, threads: str, rank: str
) -> None:
    """One rank: join the group, run the task, write the outcome for `run_on_ranks`."""
    torch.set_num_threads(int(threads))
    try:
        dist.init_process_group(
            "gloo",
            init_method=address,
            rank=int(rank),
            world_size=int(world_size),
            timeout=datetime.timedelta(seconds=float(timeout)),
        )
        fn, args = torch.load(Path(folder, "task.pt"), weights_only=False)
        outcome: tuple[bool, float, Any] = (True, time.time(), fn(*args))
    except BaseException:  # reported to the parent, which raises it
        outcome = (False, time.time(), traceback.format_exc())
    # Written before leaving the group: the ranks this one leaves waiting fail after it,
    # and their errors ("connection reset") are stamped later than the cause. Renamed
    # into place, so the parent never reads half a file.
    partial = Path(folder, f"rank{rank}.partial")
    torch.save(outcome, partial)
    partial.replace(Path(folder, f"rank{rank}.pt"))
    if dist.is_initialized():
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

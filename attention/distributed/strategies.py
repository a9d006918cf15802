"""The three strategies: ring, all-gather and Ulysses attention, with their backward passes.

Each takes this rank's shard of ``query``, ``key`` and ``value`` and returns this rank's
shard of the output. Inside a rank, attention is the package's tiled loop
(`attention._tiled`), applied to blocks of keys whose global positions the layout gives;
partial results over disjoint key sets are merged by their log-sum-exps. Each transfer
is an autograd function whose backward is the adjoint transfer: all-gather and
reduce-scatter, an all-to-all and its inverse, the ring walked again with the gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from attention._checks import broadcast_shapes
from attention._heads import group_heads, ungroup_heads
from attention._kernels import working_dtype
from attention._tiled import (
    Band,
    make_schedule,
    merge_partials,
    tiled_backward,
    tiled_forward,
)
from attention.distributed._calls import check_call
from attention.distributed.sharding import Layout, chunk_ids
from attention.distributed.traffic import _bytes, _record

BLOCK = 256  # query and key tile size of the loop inside each rank, as flash_attention's
_KV_TAG, _GRAD_TAG = 0, 8  # message tags: keys, values and mask; their gradients


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
    effective_scale = check_call(
        strategy,
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
    n = query.shape[-2]
    mask = None if key_padding_mask is None else (~key_padding_mask)[:, None, None, :]
    parts = len(chunk_ids(0, world, layout))
    spec = _Blocks(
        causal=is_causal,
        scale=effective_scale,
        query_chunks=chunk_ids(dist.get_rank(group), world, layout),
        chunk=n // parts,
    )
    dtype = working_dtype(query.dtype)
    q, k, v = (t.to(dtype) for t in (query, key, value))
    return q, k, v, mask, spec  # mask: keep-mask (B, 1, 1, n)


def _finish(out: Tensor, query: Tensor, enable_gqa: bool) -> Tensor:
    """The output with the query's heads and dtype, as the caller passed them."""
    return ungroup_heads(out, enable_gqa).to(query.dtype)  # (B, H, n, Dv)

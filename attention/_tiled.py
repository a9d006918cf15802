r"""The tiled, online-softmax loop behind `attention.efficient` and `attention.distributed`.

One loop serves three public functions of `attention.efficient`. FlashAttention visits
every key block (or, when causal, every block on or below the diagonal), sliding-window
attention only the blocks near the diagonal, block-sparse attention the blocks a layout
marks. They differ only in their `Schedule`: which key blocks each query block visits,
and which pairs inside a visited block are masked. Skipping a block is where the saving
comes from; the arithmetic inside a block is the same for all three. Sequence-parallel
attention (`attention.distributed`) runs the same forward and backward
(`tiled_forward`, `tiled_backward`) on each block of keys a rank holds, and combines the
partial results with `merge_partials`.

Forward (FlashAttention-2 loop order: query blocks outer, key blocks inner). For one
query block, keep a running row maximum $m$, a running row sum $\ell$ of
$e^{z - m}$ and an unnormalised output $\tilde{O}$. For each key block with scores
$Z_{ij} = Q_i K_j^\top \cdot \text{scale} + M_{ij}$:

$$
m' = \max\bigl(m, \operatorname{rowmax} Z_{ij}\bigr), \quad
\ell \leftarrow e^{m - m'} \ell + \operatorname{rowsum} e^{Z_{ij} - m'}, \quad
\tilde{O} \leftarrow e^{m - m'} \tilde{O} + e^{Z_{ij} - m'} V_j, \quad m \leftarrow m'.
$$

At the end $O_i = \tilde{O} / \ell$ and the log-sum-exp $\operatorname{lse} = m + \log \ell$
is kept: one number per query.

The shift $m$ need not be the maximum: any $m$ gives the same $O_i$ and lse, as long
as no $e^{z - m}$ overflows and some do not underflow. So once every row of the query
block has met a key (then $\ell \ge 1$: the maximum's own term), the loop holds $m$
and skips the row maximum, the subtraction and both rescalings. The subtraction is
folded into the matrix product, $[Q_i \cdot \text{scale}, -m]\,[K_j, \mathbf{1}]^\top
= Q_i K_j^\top \cdot \text{scale} - m$, so a block then costs its two products, one
``exp`` and one row sum. If a later score rose so far above the held $m$ that a term
overflowed ($\ell$ or $\tilde{O}$ not finite at the end), the query block is done
again with the update above at every block. (FlashAttention-4 likewise rescales only
when the maximum grows by more than a threshold.)

Backward. With $P = e^{Z_{ij} - \operatorname{lse}}$ recomputed block by block (never
stored whole; $[Q_i \cdot \text{scale}, -\operatorname{lse}]\,[K_j, \mathbf{1}]^\top$ gives
$Z_{ij} - \operatorname{lse}$ in one product) and $\Delta = \operatorname{rowsum}(dO \circ O)$:

$$
dV_j \mathrel{+}= P^\top dO_i, \quad dP = dO_i V_j^\top, \quad
dZ = P \circ (dP - \Delta_i), \quad
dQ_i \mathrel{+}= dZ\,K_j \cdot \text{scale}, \quad
dK_j \mathrel{+}= dZ^\top Q_i \cdot \text{scale}.
$$

A query with no key to attend to has $\ell = 0$: its output is $0$ and its
log-sum-exp is stored as $+\infty$, so the recomputed $P$ row is $e^{-\infty} = 0$ and
every gradient it touches stays finite.

FlexAttention's functions (``score_mod``, ``mask_mod``; `Schedule`). ``mask_mod`` is
evaluated once per block before the loop: blocks where it keeps nothing are left out
of the schedule, blocks where it keeps everything are not masked, and only the rest
("partial") evaluate it again on the tile. ``score_mod`` maps each tile's scaled
scores $s$ to $z$ before the masks, with the tile's absolute indices, so the shift
cannot be folded into the product and is never held. Backward, each tile's $s$ is
recomputed and $dS = (\partial z / \partial s)^\top dZ$ is taken by autograd through
``score_mod`` on that tile alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attention._checks import broadcast_shapes
from attention._heads import group_heads, ungroup_heads
from attention._kernels import (
    MaskMod,
    ScoreMod,
    apply_score_mod,
    mask_mod_keep,
    masked_softmax,
    mod_indices,
    working_dtype,
)

# On a CPU, PyTorch's vectorised float32 exp falls back to a scalar loop for any
# argument below about -87 (where e^x leaves the normal float range), and a masked
# pair's -inf is such an argument: a block with masked pairs took 15-25 times longer to
# exponentiate than one without. In a block with masked pairs, arguments are clamped to
# _EXP_FLOOR first and every result at or below e^-79 (all clamped ones) is then set to
# exactly 0: only terms under e^-79 ~ 5e-35 of the row maximum's change, by less than
# themselves. A block without masked pairs keeps the plain exp: the two extra passes
# would cost it ~15 % of the forward time, and a genuine score 87 below its row maximum
# costs only time there, never exactness.
_EXP_FLOOR = -80.0
_EXP_ZERO = math.exp(-79.0)


def _exp_(shifted: Tensor, masked: bool) -> Tensor:
    """``exp`` in place; exactly 0 for ``-inf``, and for anything below ``e^-79`` if ``masked``."""
    if not masked:
        return shifted.exp_()
    return torch.threshold_(shifted.clamp_min_(_EXP_FLOOR).exp_(), _EXP_ZERO, 0.0)


@dataclass(frozen=True)
class Band:
    r"""Pairs whose distance $d = (i + \text{offset}) - j$ lies in ``[low, high]``.

    ``None`` leaves a side open. Causal attention is ``Band(0, None)``; a causal window
    of $w$ keys is ``Band(0, w - 1)``; a two-sided one ``Band(-(w - 1), w - 1)``.
    ``offset`` is $S - L$ for bottom-right alignment, else 0.
    """

    low: int | None
    high: int | None
    offset: int = 0

    def key_range(self, i0: int, i1: int, S: int) -> tuple[int, int]:
        """The keys ``[lo, hi)`` that any of the queries ``i0 .. i1 - 1`` may see."""
        lo = 0 if self.high is None else max(0, i0 + self.offset - self.high)
        hi = S if self.low is None else min(S, i1 - 1 + self.offset - self.low + 1)
        return lo, hi

    def masks_some(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        """Whether any pair of queries ``i0 .. i1 - 1`` and keys ``j0 .. j1 - 1`` is outside."""
        nearest = i0 + self.offset - (j1 - 1)  # smallest distance in the block
        farthest = i1 - 1 + self.offset - j0  # largest
        return (self.low is not None and nearest < self.low) or (
            self.high is not None and farthest > self.high
        )

    def block_mask(self, i0: int, i1: int, j0: int, j1: int, device: torch.device) -> Tensor | None:
        """Bool ``(i1 - i0, j1 - j0)``, True inside the band; ``None`` if all of it is."""
        if not self.masks_some(i0, i1, j0, j1):
            return None  # no pair to mask: skip the work
        rows = torch.arange(i0, i1, device=device).unsqueeze(-1) + self.offset  # (bq, 1)
        distance = rows - torch.arange(j0, j1, device=device)  # (bq, bk)
        inside = torch.ones_like(distance, dtype=torch.bool)
        if self.low is not None:
            inside &= distance >= self.low
        if self.high is not None:
            inside &= distance <= self.high
        return inside

    def block_bias(
        self,
        i0: int,
        i1: int,
        j0: int,
        j1: int,
        like: Tensor,
        cache: dict[tuple[int, int, int], Tensor],
    ) -> Tensor | None:
        """``block_mask`` as an additive ``0``/``-inf`` mask; ``None`` if nothing is masked.

        A block's mask depends only on its size and its first distance
        ``i0 + offset - j0``, and a tiled loop meets the same few again and again: each
        is built once per call, with ``like``'s dtype and device, and kept in ``cache``
        (read-only from then on: callers add it to their own scores).
        """
        if not self.masks_some(i0, i1, j0, j1):
            return None
        key = (i0 + self.offset - j0, i1 - i0, j1 - j0)
        if key not in cache:
            inside = self.block_mask(i0, i1, j0, j1, like.device)
            assert inside is not None  # masks_some said so
            zeros = torch.zeros(inside.shape, dtype=like.dtype, device=like.device)
            cache[key] = zeros.masked_fill_(~inside, float("-inf"))
        return cache[key]


@dataclass(frozen=True)
class Schedule:
    """Which key blocks each query block visits, and the mask inside a visited block.

    ``key_blocks[n]`` lists the ``(j0, j1)`` key ranges that query block ``n`` (queries
    ``n * block_q`` to ``(n + 1) * block_q - 1``) visits; every other key is skipped.
    ``band`` masks pairs inside the visited blocks, and so does ``mask_mod`` in the
    blocks ``(i0, j0)`` listed in ``partial`` (in the others it keeps every pair).
    ``score_mod`` changes each score of a visited block before the masks apply. The
    mods see ``(B, H, L, S)`` scores: the inputs are 4-D.
    """

    L: int
    S: int
    block_q: int
    key_blocks: tuple[tuple[tuple[int, int], ...], ...]
    band: Band | None = None
    score_mod: ScoreMod | None = None
    mask_mod: MaskMod | None = None
    partial: frozenset[tuple[int, int]] = frozenset()

    @property
    def has_mods(self) -> bool:
        """Whether a ``score_mod`` or ``mask_mod`` applies."""
        return self.score_mod is not None or self.mask_mod is not None

    def query_blocks(self) -> list[tuple[int, int]]:
        """The ``(i0, i1)`` ranges of the query blocks."""
        return [(i0, min(i0 + self.block_q, self.L)) for i0 in range(0, self.L, self.block_q)]

    def block_shape(self) -> tuple[int, int]:
        """The largest block visited: ``(queries, keys)``."""
        widest = max((j1 - j0 for blocks in self.key_blocks for j0, j1 in blocks), default=0)
        return min(self.block_q, self.L), widest


def make_schedule(
    L: int,
    S: int,
    block_q: int,
    block_k: int,
    *,
    band: Band | None = None,
    layout: Tensor | None = None,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    batch: tuple[int, int] = (1, 1),
    device: torch.device | None = None,
) -> Schedule:
    """Visit, for each query block, the key blocks that hold a pair the pattern keeps.

    Key blocks lie on the grid ``0, block_k, 2 * block_k, ...`` (the grid a block
    ``layout`` of shape ``(ceil(L / block_q), ceil(S / block_k))`` refers to) and are
    clipped to the band's key range, so no visited key lies wholly outside the band.
    ``mask_mod`` is evaluated on each such block, for the ``batch`` ``(B, H)`` of the
    scores (like FlexAttention's ``create_block_mask``): a block where it keeps no pair
    (inside the band) is skipped, and one where it keeps every pair is not masked.
    """
    allowed = None if layout is None else layout.tolist()
    device = torch.device("cpu") if device is None else device
    key_blocks = []
    partial = set()
    for n, i0 in enumerate(range(0, L, block_q)):
        i1 = min(i0 + block_q, L)
        lo, hi = (0, S) if band is None else band.key_range(i0, i1, S)
        ranges = []
        for j0 in range(lo - lo % block_k, hi, block_k):
            if allowed is not None and not allowed[n][j0 // block_k]:
                continue
            start, stop = max(j0, lo), min(j0 + block_k, hi)
            if start >= stop:
                continue
            if mask_mod is not None:
                indices = mod_indices(*batch, i0, i1, start, stop, device)
                keep = mask_mod_keep(mask_mod, torch.Size((*batch, i1 - i0, stop - start)), indices)
                inside = None if band is None else band.block_mask(i0, i1, start, stop, device)
                kept = keep if inside is None else keep & inside
                if not bool(kept.any()):
                    continue  # mask_mod keeps no pair here: skip the block
                if not bool((keep if inside is None else keep | ~inside).all()):
                    partial.add((i0, start))  # some pair in the band is masked
            ranges.append((start, stop))
        key_blocks.append(tuple(ranges))
    return Schedule(L, S, block_q, tuple(key_blocks), band, score_mod, mask_mod, frozenset(partial))


def tiled_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    schedule: Schedule,
    scale: float,
    enable_gqa: bool,
) -> Tensor:
    """Run the tiled loop on validated inputs; differentiable with respect to all four.

    Nothing is copied to make shapes meet, except key and value heads whose counts
    differ (6 query, 2 key, 3 value heads): `group_heads` first repeats those to a
    common count (``_heads.share_heads``). Leading dimensions that broadcast (keys
    shared by every head, batch 1 against batch B) broadcast inside each block's matrix
    products, and their gradients are summed back to the input's shape. Grouped-query
    attention views the ``H`` query heads as ``(Hkv, H / Hkv)`` and each key/value head
    as ``(Hkv, 1)``: the group axis broadcasts, so a shared head is read, not repeated.
    """
    compute_dtype = working_dtype(query.dtype)  # float16/bfloat16 compute in float32
    dtype = query.dtype
    query, key, value = (t.to(compute_dtype) for t in (query, key, value))
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.to(compute_dtype)
    query, key, value, attn_mask = group_heads(query, key, value, attn_mask, enable_gqa)
    # Where only the value has a leading axis (3 values of one query and key, say), the
    # scores of a block would be updated in place at a shape they lack: the query is
    # broadcast to every leading axis first (a view; autograd sums it back).
    batch = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    query = query.expand(*batch, *query.shape[-2:])
    if schedule.score_mod is not None and torch.is_grad_enabled():
        _refuse_captured_grads(schedule.score_mod, query)
    out, _ = _TiledAttention.apply(query, key, value, attn_mask, schedule, scale)  # type: ignore[no-untyped-call]
    return ungroup_heads(out, enable_gqa).to(dtype)


def _refuse_captured_grads(score_mod: ScoreMod, query: Tensor) -> None:
    """Raise if ``score_mod`` captures a tensor that requires grad (a learned bias table).

    The tiled backward differentiates ``score_mod`` with respect to the score only; a
    captured tensor's gradient would be silently lost. One call on a single score (all
    indices 0) tells: its result requires grad although the score does not.
    """
    score = query.new_zeros(1, 1, 1, 1)
    zero = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=query.device)
    with torch.enable_grad():
        result = score_mod(score, zero, zero, zero, zero)
    if isinstance(result, Tensor) and result.requires_grad:
        raise NotImplementedError(
            "flash_attention's backward cannot differentiate a score_mod with respect to "
            "a tensor it captures that requires grad (a learned bias, say); use "
            "attention.scaled_dot_product_attention with the same score_mod, which can, "
            "or detach the captured tensor"
        )


def _refuse_mods(schedule: Schedule, what: str) -> None:
    """Raise if ``schedule`` has a mod: ``what`` (a dense rule) does not apply them."""
    if schedule.has_mods:
        raise NotImplementedError(
            f"flash_attention with score_mod or mask_mod does not support {what}; use "
            "attention.scaled_dot_product_attention with the same mods"
        )


class _TiledAttention(torch.autograd.Function):
    """Forward by the online softmax; backward recomputes each block's probabilities.

    Only ``query``, ``key``, ``value``, the output and the per-query log-sum-exp are
    saved (plus the caller's ``attn_mask``, which already exists): memory linear in the
    sequence length. Autograd through the tile loop would instead save every block's
    probabilities, an ``L x S`` matrix in pieces.

    A second derivative (``create_graph=True``: ``hessian``, ``gradgradcheck``, a
    gradient penalty) needs a backward that autograd can differentiate in turn; the
    tiled backward is not one (its log-sum-exp is a constant to autograd). In that case
    the gradient is computed by dense attention with the same mask instead: exact, and
    differentiable, at the dense ``L x S`` memory cost. So are the ``torch.func``
    transforms (``vmap``, ``grad``, ``jacrev``), which run the backward on batched
    tensors the in-place tile updates cannot take. Forward mode (``torch.func.jvp``,
    ``jacfwd``, ``hessian``) has a dense rule too: `_dense_jvp`.
    """

    generate_vmap_rule = False  # vmap is below: the loop already takes any batch axes

    @staticmethod
    def forward(
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None,
        schedule: Schedule,
        scale: float,
    ) -> tuple[Tensor, Tensor]:
        return tiled_forward(query, key, value, attn_mask, schedule, scale)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        query, key, value, attn_mask, schedule, scale = inputs
        out, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse)
        ctx.save_for_forward(query, key, value, attn_mask)
        ctx.schedule, ctx.scale = schedule, scale

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor, _grad_lse: Tensor | None) -> tuple[Tensor | None, ...]:
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        if torch.is_grad_enabled() or _is_functorch_wrapped(grad_out):
            _refuse_mods(ctx.schedule, "a second derivative (create_graph=True) or torch.func")
            grads = _dense_backward(grad_out, query, key, value, attn_mask, ctx)
        else:
            mask_needs_grad = ctx.needs_input_grad[3]  # False for a bool mask or no mask
            grads = tiled_backward(
                grad_out,
                query,
                key,
                value,
                attn_mask,
                out,
                lse,
                ctx.schedule,
                ctx.scale,
                mask_needs_grad,
            )
        return (*grads, None, None)

    @staticmethod
    def jvp(
        ctx: Any,
        tangent_query: Tensor | None,
        tangent_key: Tensor | None,
        tangent_value: Tensor | None,
        tangent_mask: Tensor | None,
        _schedule: None,
        _scale: None,
    ) -> tuple[Tensor, None]:
        # Forward mode (torch.func.jvp, jacfwd, hessian): always dense, as the backward
        # is under create_graph=True or torch.func (`_dense_backward`).
        _refuse_mods(ctx.schedule, "forward-mode differentiation (torch.func.jvp, jacfwd)")
        query, key, value, attn_mask = ctx.saved_tensors
        return _dense_jvp(
            query,
            key,
            value,
            attn_mask,
            (tangent_query, tangent_key, tangent_value, tangent_mask),
            ctx.schedule,
            ctx.scale,
        ), None

    @staticmethod
    def vmap(
        info: Any,
        in_dims: tuple[int | None, ...],
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None,
        schedule: Schedule,
        scale: float,
    ) -> tuple[tuple[Tensor, Tensor], tuple[int, int]]:
        # The loop takes any leading batch axes: make the vmapped axis the first one of
        # every input (a mask first gets the query's number of axes). Not with a mod,
        # whose indices would then miss an axis.
        _refuse_mods(schedule, "torch.func.vmap")

        def batched(t: Tensor | None, dim: int | None, ndim: int) -> Tensor | None:
            if t is None:
                return None
            if dim is not None:
                t = t.movedim(dim, 0)
                t = t.reshape(t.shape[0], *(1,) * (ndim - t.ndim + 1), *t.shape[1:])
            else:
                t = t.reshape(*(1,) * (ndim - t.ndim), *t.shape).unsqueeze(0)
            return t.expand(info.batch_size, *t.shape[1:])

        ndim = query.ndim - (in_dims[0] is not None)  # logical: without the vmapped axis
        q, k, v = (
            batched(t, d, ndim) for t, d in zip((query, key, value), in_dims[:3], strict=True)
        )
        mask = batched(attn_mask, in_dims[3], ndim)
        output = _TiledAttention.apply(q, k, v, mask, schedule, scale)  # type: ignore[no-untyped-call]
        return output, (0, 0)


def _is_functorch_wrapped(t: Tensor) -> bool:
    """Whether ``t`` is a ``torch.func`` wrapper (a batched tensor under ``vmap``)."""
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(t))


def dense_mask(schedule: Schedule, device: torch.device) -> Tensor:
    """Bool ``(L, S)``: True for the pairs the schedule computes (visited and in band)."""
    keep = torch.zeros(schedule.L, schedule.S, dtype=torch.bool, device=device)
    for (i0, i1), key_blocks in zip(schedule.query_blocks(), schedule.key_blocks, strict=True):
        for j0, j1 in key_blocks:
            inside = (
                None if schedule.band is None else schedule.band.block_mask(i0, i1, j0, j1, device)
            )
            keep[i0:i1, j0:j1] = True if inside is None else inside
    return keep


def _dense_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    ctx: Any,
) -> tuple[Tensor | None, ...]:
    """The backward formulas of the module docstring on the whole ``L x S`` matrix.

    Written with ordinary tensor operations on the saved inputs: under
    ``create_graph=True`` those inputs are still connected to the graph that made them,
    so autograd can differentiate this gradient again, and under ``torch.func`` every
    operation here has a batching rule.
    """
    scale, needs = ctx.scale, ctx.needs_input_grad
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    keep = dense_mask(ctx.schedule, scores.device)
    p = masked_softmax(scores.masked_fill(~keep, float("-inf")))  # (..., L, S)
    grad_p = grad_out @ value.transpose(-2, -1)  # (..., L, S)
    grad_s = p * (grad_p - (grad_p * p).sum(dim=-1, keepdim=True))
    return (
        ((grad_s @ key) * scale).sum_to_size(query.shape) if needs[0] else None,
        ((grad_s.transpose(-2, -1) @ query) * scale).sum_to_size(key.shape) if needs[1] else None,
        (p.transpose(-2, -1) @ grad_out).sum_to_size(value.shape) if needs[2] else None,
        grad_s.sum_to_size(attn_mask.shape) if needs[3] and attn_mask is not None else None,
    )


def _dense_jvp(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    tangents: tuple[Tensor | None, ...],
    schedule: Schedule,
    scale: float,
) -> Tensor:
    r"""The output's tangent, given the inputs' (``None``: zero), on the whole ``L x S`` matrix.

    With $Z = \text{scale}\,QK^\top + M$, $P = \operatorname{softmax}(Z)$ and $O = PV$:
    $\dot Z = \text{scale}\,(\dot Q K^\top + Q \dot K^\top) + \dot M$,
    $\dot P = P \odot (\dot Z - \operatorname{rowsum}(P \odot \dot Z))$ and
    $\dot O = \dot P V + P \dot V$. Ordinary tensor operations, so ``vmap`` batches them.
    """
    d_query, d_key, d_value, d_mask = tangents
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    keep = dense_mask(schedule, scores.device)
    p = masked_softmax(scores.masked_fill(~keep, float("-inf")))  # (..., L, S)
    d_scores = torch.zeros_like(p)
    if d_query is not None:
        d_scores = d_scores + (d_query @ key.transpose(-2, -1)) * scale
    if d_key is not None:
        d_scores = d_scores + (query @ d_key.transpose(-2, -1)) * scale
    if d_mask is not None:
        d_scores = d_scores + d_mask
    d_p = p * (d_scores - (p * d_scores).sum(dim=-1, keepdim=True))  # (..., L, S)
    d_out = d_p @ value  # (..., L, Dv)
    if d_value is not None:
        d_out = d_out + p @ d_value
    return d_out


def _block_scores(
    query_block: Tensor,
    key: Tensor,
    attn_mask: Tensor | None,
    band: Band | None,
    biases: dict[tuple[int, int, int], Tensor],
    i0: int,
    i1: int,
    j0: int,
    j1: int,
    out: Tensor | None = None,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
) -> tuple[Tensor, bool]:
    """Scaled scores ``(..., i1 - i0, j1 - j0)`` of one block, ``-inf`` where masked.

    Also returns whether any mask applied to the block (its ``exp`` then clamps).
    ``biases`` keeps the band's masks built so far in this call (see `Band.block_bias`).
    ``out``, of the block's shape, receives the scores (except with a float mask).
    ``score_mod`` (then ``query_block`` holds no shift column) changes the scores before
    the masks, ``mask_mod`` masks after them.
    """
    key_t = key[..., j0:j1, :].transpose(-2, -1)
    if query_block.ndim == key_t.ndim == 3 and query_block.shape[0] == key_t.shape[0]:
        scores = torch.bmm(query_block, key_t, out=out)  # (B, bq, bk): no matmul dispatch
    else:
        scores = torch.matmul(query_block, key_t, out=out)  # (..., bq, bk)
    if score_mod is not None:
        indices = mod_indices(scores.shape[0], scores.shape[1], i0, i1, j0, j1, scores.device)
        modded = apply_score_mod(score_mod, scores, indices)
        if modded is not scores:
            scores.copy_(modded)  # into memory of our own: the masks below write in place
    return _mask_block(scores, attn_mask, band, biases, i0, i1, j0, j1, mask_mod)


def _mask_block(
    scores: Tensor,
    attn_mask: Tensor | None,
    band: Band | None,
    biases: dict[tuple[int, int, int], Tensor],
    i0: int,
    i1: int,
    j0: int,
    j1: int,
    mask_mod: MaskMod | None,
) -> tuple[Tensor, bool]:
    """A block's scores with its masks applied (in place where it can), and whether any was."""
    if attn_mask is not None:
        block = attn_mask[..., i0:i1, j0:j1]  # mask already expanded to (..., L, S)
        if block.dtype == torch.bool:
            scores.masked_fill_(~block, float("-inf"))
        else:
            scores = scores + block
    masked = attn_mask is not None
    if band is not None:
        bias = band.block_bias(i0, i1, j0, j1, scores, biases)
        if bias is not None:
            scores.add_(bias)  # one vectorised pass, where masked_fill_ branches per pair
            masked = True
    if mask_mod is not None:
        indices = mod_indices(scores.shape[0], scores.shape[1], i0, i1, j0, j1, scores.device)
        scores.masked_fill_(~mask_mod_keep(mask_mod, scores.shape, indices), float("-inf"))
        masked = True
    return scores, masked


def _expand_mask(attn_mask: Tensor | None, L: int, S: int) -> Tensor | None:
    """A view of the mask with its last two axes at full size ``(L, S)``, to slice blocks."""
    if attn_mask is None:
        return None
    shape = (*attn_mask.shape[:-2], L, S) if attn_mask.ndim >= 2 else (L, S)
    return attn_mask.expand(shape)


def merge_partials(
    out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Attention over two disjoint sets of keys, combined: the online softmax's rule.

    ``out_a`` is attention over key set $A$, normalised over $A$ alone, and ``lse_a``
    its log-sum-exp $\log \sum_{j \in A} e^{z_j}$ (``-inf``: no key); likewise for $B$.
    Over $A \cup B$:

    $$
    \text{lse} = \log\bigl(e^{\text{lse}_A} + e^{\text{lse}_B}\bigr), \quad
    O = e^{\text{lse}_A - \text{lse}}\, O_A + e^{\text{lse}_B - \text{lse}}\, O_B.
    $$

    The tiled loop applies the same rule to one key block at a time, with the maximum
    and the sum kept apart ($\text{lse} = m + \log \ell$); here whole partial results
    are merged, as sequence-parallel attention does with each rank's block
    (`attention.distributed`). Shapes ``(..., L, Dv)`` and ``(..., L)``.
    """
    lse = torch.logaddexp(lse_a, lse_b)  # -inf where neither set had a key
    base = lse.masked_fill(torch.isneginf(lse), 0.0)  # e^(-inf - 0) = 0 there, not NaN
    weight_a = torch.exp(lse_a - base).unsqueeze(-1)  # (..., L, 1)
    weight_b = torch.exp(lse_b - base).unsqueeze(-1)
    return weight_a * out_a + weight_b * out_b, lse


def tiled_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    schedule: Schedule,
    scale: float,
) -> tuple[Tensor, Tensor]:
    """The forward loop; returns the output ``(..., L, Dv)`` and log-sum-exp ``(..., L)``."""
    lead = query.shape[:-2]
    same_lead = lead == key.shape[:-2] == value.shape[:-2] and len(lead) != 1
    if attn_mask is None and same_lead and not schedule.has_mods:
        # One batch axis instead of several (a view): every block's products are then
        # plain batched matrix products, and the output is accumulated in place by
        # baddbmm_ with no temporary for P V. About 5 % of the forward time at
        # n = 4096. (Not with a mask tensor: its broadcast axes would be copied whole.)
        q, k, v = (t.reshape(math.prod(lead), *t.shape[-2:]) for t in (query, key, value))
        out, lse = tiled_forward(q, k, v, None, schedule, scale)
        return out.view(*lead, *out.shape[-2:]), lse.view(*lead, lse.shape[-1])
    L, D, Dv = query.shape[-2], query.shape[-1], value.shape[-1]
    batch = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    out = query.new_zeros(*batch, L, Dv)
    lse = query.new_full((*batch, L), float("inf"))  # +inf: "attends to nothing"
    loop = _TileLoop(
        key_1=_with_ones_column(key),
        value=value,
        mask=_expand_mask(attn_mask, L, schedule.S),
        band=schedule.band,
        biases={},
        # One block's scores, written by the product and reused block after block
        # (fresh memory is several times slower to write than memory in use).
        scores=query.new_empty(*batch, *schedule.block_shape()),
        score_mod=schedule.score_mod,
        mask_mod=schedule.mask_mod,
        partial=schedule.partial,
    )
    for (i0, i1), key_blocks in zip(schedule.query_blocks(), schedule.key_blocks, strict=True):
        # Scaled block by block: a scaled copy of all of Q would be L x D more memory.
        q_m = query.new_empty(*batch, i1 - i0, D + 1)  # [Q_i scale, -m]
        torch.mul(query[..., i0:i1, :], scale, out=q_m[..., :D])
        # A held shift is folded into the product, before score_mod could see the score.
        hold_shift = schedule.score_mod is None
        acc, row_sum, row_max = loop.run(q_m, i0, i1, key_blocks, hold_shift=hold_shift)
        # One sum over ℓ and õ is finite when no term of either overflowed. (The sum
        # itself can overflow where no term did: that only costs a redo.)
        if not bool((row_sum.sum() + acc.sum()).isfinite()):
            # A later block's scores rose so far above the held shift that a term
            # overflowed (or the inputs hold inf or NaN): this query block again, with
            # the shift raised to each new maximum.
            acc, row_sum, row_max = loop.run(q_m, i0, i1, key_blocks, hold_shift=False)
        attended = row_sum > 0  # False for a query whose keys were all masked or skipped
        out[..., i0:i1, :] = acc / row_sum.masked_fill(~attended, 1.0)  # acc is 0 there
        lse_i = (row_max + torch.log(row_sum)).masked_fill(~attended, float("inf"))
        lse[..., i0:i1] = lse_i.squeeze(-1)
    return out, lse


def _with_ones_column(key: Tensor) -> Tensor:
    """``[K, 1]``, ``(..., S, D + 1)``: one copy of K, made once per call.

    Its product with ``[Q_i scale, -c]`` is the scores less ``c``: the shift m forward,
    the log-sum-exp backward (module docstring).
    """
    return torch.cat([key, key.new_ones(*key.shape[:-1], 1)], dim=-1)


@dataclass
class _TileLoop:
    """What the loop shares between query blocks.

    `run` is the forward pass of one query block (see `tiled_forward`); the backward
    uses `scores_of` and the reused score buffer.
    """

    key_1: Tensor  # [K, 1]: (..., S, D + 1)
    value: Tensor
    mask: Tensor | None
    band: Band | None
    biases: dict[tuple[int, int, int], Tensor]  # the band's block masks, built once
    scores: Tensor  # (..., block_q, widest key block), reused
    score_mod: ScoreMod | None = None
    mask_mod: MaskMod | None = None
    partial: frozenset[tuple[int, int]] = frozenset()  # blocks (i0, j0) mask_mod masks

    def run(
        self,
        q_m: Tensor,
        i0: int,
        i1: int,
        key_blocks: tuple[tuple[int, int], ...],
        hold_shift: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One query block over its key blocks: õ, ℓ and the shift m, each ``(..., bq, ·)``.

        ``q_m`` is ``[Q_i scale, -m]``; its last column is written here. With
        ``hold_shift``, once every row has met a key, m stays where it is.
        """
        D = q_m.shape[-1] - 1
        q_i, neg_shift = q_m[..., :D], q_m[..., D:]
        batch, bq, Dv = q_m.shape[:-2], i1 - i0, self.value.shape[-1]
        row_max = q_m.new_full((*batch, bq, 1), float("-inf"))  # m
        row_sum = q_m.new_zeros(*batch, bq, 1)  # ℓ
        acc = q_m.new_zeros(*batch, bq, Dv)  # õ, unnormalised output
        held = False  # whether m is held: every row has met a key (ℓ >= 1)
        for j0, j1 in key_blocks:
            v_j = self.value[..., j0:j1, :]
            if held:
                shifted, masked = self.scores_of(q_m, self.key_1, i0, i1, j0, j1)  # z - m
                p = _exp_(shifted, masked)
                row_sum.add_(p.sum(dim=-1, keepdim=True))
                _add_product(acc, p, v_j)
                continue
            scores, masked = self.scores_of(q_i, self.key_1[..., :D], i0, i1, j0, j1, raw=True)
            new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            # A row masked so far has max -inf, and -inf - (-inf) is NaN: shift it by 0
            # instead, which gives exp(-inf) = 0 for every one of its entries.
            shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
            p = _exp_(scores.sub_(shift), masked)  # (..., bq, bk), in place
            rescale = torch.exp(row_max - shift)  # (..., bq, 1): old terms to the new max
            # In place: a new tensor per tile for each would be ~5 % of the forward time.
            row_sum.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))
            _add_product(acc.mul_(rescale), p, v_j)  # (..., bq, Dv)
            row_max = new_max
            if hold_shift and bool((row_sum > 0).all()):  # a row that met a key has ℓ >= 1
                torch.neg(shift, out=neg_shift)
                held = True
        return acc, row_sum, row_max

    def scores_of(
        self,
        query_block: Tensor,
        key: Tensor,
        i0: int,
        i1: int,
        j0: int,
        j1: int,
        raw: bool = False,
    ) -> tuple[Tensor, bool]:
        """`_block_scores`, written into the reused buffer where the block fits it.

        ``raw``: ``query_block`` is the scaled query alone (no shift column), so the
        products are the scores themselves and ``score_mod`` applies.
        """
        fits = (*query_block.shape[:-1], j1 - j0) == self.scores.shape
        return _block_scores(
            query_block,
            key,
            self.mask,
            self.band,
            self.biases,
            i0,
            i1,
            j0,
            j1,
            out=self.scores if fits else None,
            score_mod=self.score_mod if raw else None,
            mask_mod=self.mask_mod if (i0, j0) in self.partial else None,
        )


def _add_product(acc: Tensor, a: Tensor, b: Tensor) -> None:
    """``acc += a @ b``, summed to ``acc``'s shape where it broadcast (shared heads, GQA).

    For 3-D tensors of one batch size, in place in the product: no temporary.
    """
    if acc.ndim == a.ndim == b.ndim == 3 and acc.shape[0] == a.shape[0] == b.shape[0]:
        acc.baddbmm_(a, b)
    else:
        acc.add_((a @ b).sum_to_size(acc.shape))


def tiled_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    out: Tensor,
    lse: Tensor,
    schedule: Schedule,
    scale: float,
    mask_needs_grad: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    lead = query.shape[:-2]
    same_lead = lead == key.shape[:-2] == value.shape[:-2] and len(lead) != 1
    if attn_mask is None and same_lead and not schedule.has_mods:
        # One batch axis, as in the forward: the products then accumulate in place.
        tensors = (grad_out, query, key, value, out)
        g, q, k, v, o = (t.reshape(math.prod(lead), *t.shape[-2:]) for t in tensors)
        grad_q, grad_k, grad_v, _ = tiled_backward(
            g, q, k, v, None, o, lse.reshape(math.prod(lead), lse.shape[-1]), schedule, scale, False
        )
        return grad_q.view(query.shape), grad_k.view(key.shape), grad_v.view(value.shape), None
    L, D = query.shape[-2:]
    mask = _expand_mask(attn_mask, L, schedule.S)
    grad_q, grad_k, grad_v = (torch.zeros_like(t) for t in (query, key, value))
    grad_mask = None
    if mask_needs_grad:
        assert attn_mask is not None
        grad_mask = torch.zeros_like(attn_mask)
        # At least 2-D, so that blocks are sliced the same way for a (S,) mask.
        grad_mask_2d = grad_mask.view((1,) * (2 - attn_mask.ndim) + tuple(attn_mask.shape))
    # Σ_j P_ij dP_ij, the softmax Jacobian's correction term, equals rowsum(dO ∘ O).
    delta = (grad_out * out).sum(dim=-1, keepdim=True)  # (..., L, 1)
    batch = grad_out.shape[:-2]
    # As in the forward: [Q_i scale, -lse] [K, 1]^T is the scores less the log-sum-exp,
    # and two buffers of one block's size, for P and dP, are reused block after block.
    key_1 = _with_ones_column(key)
    loop = _TileLoop(
        key_1,
        value,
        mask,
        schedule.band,
        {},
        query.new_empty(*batch, *schedule.block_shape()),
        schedule.score_mod,
        schedule.mask_mod,
        schedule.partial,
    )
    grad_p_buffer = torch.empty_like(loop.scores)
    for (i0, i1), key_blocks in zip(schedule.query_blocks(), schedule.key_blocks, strict=True):
        q_lse = query.new_empty(*batch, i1 - i0, D + 1)  # [Q_i scale, -lse]
        q_i = torch.mul(query[..., i0:i1, :], scale, out=q_lse[..., :D])  # (..., bq, D)
        torch.neg(lse[..., i0:i1, None], out=q_lse[..., D:])
        do_i = grad_out[..., i0:i1, :]  # (..., bq, Dv)
        delta_i = delta[..., i0:i1, :]  # (..., bq, 1)
        grad_q_i = torch.zeros_like(q_i)
        for j0, j1 in key_blocks:
            v_j, k_j = value[..., j0:j1, :], key[..., j0:j1, :]
            if schedule.score_mod is not None:
                score_vjp, p = _modded_probabilities(loop, q_i, k_j, lse[..., i0:i1, None], i0, j0)
            else:
                shifted, masked = loop.scores_of(q_lse, key_1, i0, i1, j0, j1)  # z - lse
                p = _exp_(shifted, masked)  # the block's probabilities, recomputed
            _add_product(grad_v[..., j0:j1, :], p.transpose(-2, -1), do_i)  # (..., bk, Dv)
            fits = p.shape == grad_p_buffer.shape
            grad_p = torch.matmul(
                do_i, v_j.transpose(-2, -1), out=grad_p_buffer if fits else None
            )  # (..., bq, bk)
            grad_z = grad_p.sub_(delta_i).mul_(p)  # (..., bq, bk); in place, dP is done
            # The gradient of the scaled product QK^T scale: through score_mod, if any.
            grad_s = grad_z if schedule.score_mod is None else score_vjp(grad_z)
            _add_product(grad_q_i, grad_s, k_j)
            _add_product(grad_k[..., j0:j1, :], grad_s.transpose(-2, -1), q_i)  # (..., bk, D)
            if grad_mask is not None:  # an additive mask is added after score_mod
                _accumulate_mask_grad(grad_mask_2d, grad_z, i0, i1, j0, j1)
        grad_q[..., i0:i1, :] = grad_q_i * scale
    return grad_q, grad_k, grad_v, grad_mask


def _modded_probabilities(
    loop: _TileLoop, q_i: Tensor, k_j: Tensor, lse_i: Tensor, i0: int, j0: int
) -> tuple[Callable[[Tensor], Tensor], Tensor]:
    r"""A block's probabilities under ``score_mod``, and the vector-Jacobian product of it.

    $P = e^{z - \text{lse}}$ with $z = \text{score\_mod}(s)$ masked, $s = Q_i K_j^\top
    \cdot \text{scale}$ (``q_i`` is scaled). The returned function maps $dZ$ to $dS$
    by autograd through ``score_mod`` on this block alone: the block's ``s`` is
    recomputed, so nothing of the forward is kept. ``lse_i`` is ``(..., bq, 1)``.
    """
    assert loop.score_mod is not None
    i1, j1 = i0 + q_i.shape[-2], j0 + k_j.shape[-2]
    raw = torch.matmul(q_i, k_j.transpose(-2, -1))  # (B, H, bq, bk)
    indices = mod_indices(raw.shape[0], raw.shape[1], i0, i1, j0, j1, raw.device)
    with torch.enable_grad():
        raw.requires_grad_(True)
        modded = apply_score_mod(loop.score_mod, raw, indices)
    mask_mod = loop.mask_mod if (i0, j0) in loop.partial else None
    z, masked = _mask_block(
        modded.detach().clone(), loop.mask, loop.band, loop.biases, i0, i1, j0, j1, mask_mod
    )
    p = _exp_(z.sub_(lse_i), masked)  # lse = +inf for a query that attends to nothing

    def score_vjp(grad_z: Tensor) -> Tensor:
        if not modded.requires_grad:  # score_mod ignores the score
            return torch.zeros_like(raw)
        (grad_raw,) = torch.autograd.grad(modded, raw, grad_z, allow_unused=True)
        return torch.zeros_like(raw) if grad_raw is None else grad_raw

    return score_vjp, p


def _accumulate_mask_grad(
    grad_mask: Tensor, grad_s: Tensor, i0: int, i1: int, j0: int, j1: int
) -> None:
    """Add a block's score gradient to an additive mask's, summing where it broadcast."""
    rows = slice(i0, i1) if grad_mask.shape[-2] != 1 else slice(0, 1)
    cols = slice(j0, j1) if grad_mask.shape[-1] != 1 else slice(0, 1)
    target = grad_mask[..., rows, cols]
    target += grad_s.sum_to_size(target.shape)

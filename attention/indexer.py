r"""Sparse attention chosen by a learned indexer: DeepSeek Sparse Attention (DSA).

DeepSeek-V3.2 ([DeepSeek-AI 2025](https://arxiv.org/abs/2512.02556)) lets every query
attend to only $k = 2048$ of the keys before it, and learns which ones. A small
*lightning indexer* scores every (query $t$, key $s$) pair,

$$I_{t,s} = \sum_{j=1}^{H_I} w_{t,j} \cdot \operatorname{ReLU}\big(q_{t,j} \cdot k_s
\cdot \text{scale}\big),$$

with $H_I$ indexer heads of size $D_I$: a query $q_{t,j} \in \mathbb{R}^{D_I}$ and a
weight $w_{t,j}$ per head, both computed from token $t$, and one key
$k_s \in \mathbb{R}^{D_I}$ shared by all heads, computed from token $s$. Each query keeps
the $k$ keys of largest $I_{t,s}$ among those the causal mask allows, and the main
attention runs over those keys only:

$$u_t = \operatorname{Attn}\big(q_t,\ \{(k_s, v_s) : I_{t,s} \in
\operatorname{top\text{-}}k_{s'}(I_{t,s'})\}\big).$$

The selection is shared by all heads of the main attention. Three functions, one per
step: `indexer_scores`, `topk_keys`, `topk_sparse_attention`; `topk_mask` gives the
dense mask that the same selection stands for.

**What the indexer costs.** The indexer does not escape the quadratic cost: it scores
all $L \times S$ pairs, at $H_I D_I$ multiply-adds per pair (plus $H_I$ for the weighted
sum), $O(L \cdot S \cdot H_I D_I)$ in all. The main attention drops from
$O(L \cdot S \cdot H (D + D_v))$ to $O(L \cdot k \cdot H (D + D_v))$. The indexer is
cheap per pair because it has few, small heads and, in the paper, runs in FP8, while the
main attention has many large heads. With DeepSeek-V3.2's configuration
(``DeepseekV32Config``'s defaults in Transformers: $H_I = 64$, $D_I = 128$, $k = 2048$;
128 heads of MLA, whose attention DSA runs in MLA's multi-query form, each head scoring
the $512 + 64 = 576$ numbers of a cached latent and summing its $512$):

| per query token | multiply-adds |
|---|---|
| indexer, per key | $64 \cdot 128 + 64 = 8{,}256$ |
| main attention, per key it attends to | $128 \cdot (576 + 512) = 139{,}264$ |
| main attention over the top $k = 2048$ keys | $2.85 \cdot 10^{8}$ |
| indexer over $S = 131{,}072$ keys (128K) | $1.08 \cdot 10^{9}$ |
| dense main attention over $S = 131{,}072$ keys | $1.83 \cdot 10^{10}$ |

So at a context of 128K the indexer does about 3.8 times the multiply-adds of the sparse
attention (in FP8, in the paper), and the two together about a thirteenth of dense
attention's. The indexer overtakes the sparse attention from about $S = 34{,}500$ keys
($8256 \, S = 139264 \cdot 2048$): DSA's cost still grows as $L \cdot S$, with a
constant about 17 times smaller. In MLA's multi-head form (Transformers' layer, and the
paper's short prefills), a key costs the main attention
$128 \cdot (192 + 128) = 40{,}960$ multiply-adds per query, and the indexer overtakes
it from about $S = 10{,}200$ keys.

**Conventions of the model** (Transformers' ``DeepseekV32Indexer``): the scale is
$1/\sqrt{D_I}$, applied inside the ReLU; the weights are the output of a linear layer
times $H_I^{-1/2}$; the scores are computed in float32; ``topk`` takes
$\min(k, S)$ keys, so a query with fewer than $k$ keys allowed gets all of them and then
masked ones, which the causal mask removes again. `topk_keys` marks those with $-1$.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention._checks import (
    broadcast,
    broadcast_shapes,
    check_attn_mask,
    check_mask_or_causal,
    check_query_key_value,
    check_same_dtype_and_device,
    check_scale,
    check_size,
    check_tensor,
    check_topk_indices,
    shape_str,
)
from attention._heads import share_heads
from attention._kernels import default_scale, masked_softmax, working_dtype
from attention.masks import causal_mask

__all__ = ["indexer_scores", "topk_keys", "topk_mask", "topk_sparse_attention"]


def indexer_scores(
    index_query: Tensor,
    index_key: Tensor,
    weights: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    r"""The lightning indexer's scores, one per (query, key) pair.

    $$I_{t,s} = \sum_{j=1}^{H_I} w_{t,j} \operatorname{ReLU}(q_{t,j} \cdot k_s \cdot
    \text{scale}),$$

    how much query $t$ wants key $s$. Masked pairs score $-\infty$ (a bool mask) or get
    the mask added (a float mask), as in Transformers' ``DeepseekV32Indexer``; pass a
    bool mask or ``is_causal`` so that `topk_keys` can tell masked keys from chosen
    ones. Computed in float32 for float16/bfloat16 inputs and returned in float32: the
    scores are only compared, and rounding them to 16 bits would make ties.

    Args:
        index_query: The indexer's queries, ``(..., H_I, L, D_I)``, after RoPE.
        index_key: The indexer's keys, ``(..., S, D_I)``: one head, shared.
        weights: $w_{t,j}$, ``(..., H_I, L)``: one weight per indexer head and query.
            DeepSeek-V3.2's are ``weights_proj(x)`` times $H_I^{-1/2}$, transposed to
            put the heads first.
        attn_mask: Optional mask broadcastable to ``(..., L, S)``: bool (True = may
            attend) or float (added to the scores).
        is_causal: Top-left aligned causal mask (query $t$ sees keys $0..t$). Cannot
            be combined with ``attn_mask``.
        scale: Factor applied to $q \cdot k$ inside the ReLU; defaults to
            $1/\sqrt{D_I}$, as in DeepSeek-V3.2.

    Returns:
        Tensor of shape ``(..., L, S)``, in float32 for float16/bfloat16 inputs.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, or the
            mask has an unsupported dtype.
        ValueError: If the shapes do not fit together (head size, heads and length of
            ``weights``, leading dimensions), the mask does not broadcast, or
            ``is_causal`` is combined with ``attn_mask``.

    Examples:
        >>> import torch
        >>> from attention import indexer_scores
        >>> q = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # (H_I, L, D_I) = (2, 1, 2)
        >>> k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])  # (S, D_I)
        >>> w = torch.tensor([[2.0], [-1.0]])  # (H_I, L): head 1 counts against a key
        >>> indexer_scores(q, k, w, scale=1.0)  # key 2: ReLU cuts both heads to 0
        tensor([[ 2., -1.,  0.]])
    """
    index_query = check_tensor("index_query", index_query, min_ndim=3)
    index_key = check_tensor("index_key", index_key, min_ndim=2)
    weights = check_tensor("weights", weights, min_ndim=2)
    check_same_dtype_and_device(index_query=index_query, index_key=index_key, weights=weights)
    H, L, D = index_query.shape[-3:]
    S = index_key.shape[-2]
    if index_key.shape[-1] != D:
        raise ValueError(
            "index_query (..., H_I, L, D_I) and index_key (..., S, D_I) must have the same "
            f"head size D_I; got index_query {shape_str(index_query)}, index_key "
            f"{shape_str(index_key)}"
        )
    if weights.shape[-2:] != (H, L):
        raise ValueError(
            f"weights must be (..., H_I, L) = (..., {H}, {L}), one weight per indexer head "
            f"and query of index_query {shape_str(index_query)}; got {shape_str(weights)}"
        )
    if not broadcast(index_query.shape[:-3], index_key.shape[:-2], weights.shape[:-2]):
        raise ValueError(
            "index_query, index_key and weights must have leading dimensions that "
            f"broadcast; got index_query {shape_str(index_query)}, index_key "
            f"{shape_str(index_key)}, weights {shape_str(weights)}"
        )
    batch = broadcast_shapes(index_query.shape[:-3], index_key.shape[:-2], weights.shape[:-2])
    mask = None
    if check_mask_or_causal(attn_mask, is_causal):
        mask = causal_mask(L, S, device=index_query.device)
    elif attn_mask is not None:
        mask = check_attn_mask(attn_mask, torch.Size((*batch, L, S)), index_query)
    scale = default_scale(index_query, check_scale(scale))

    dtype = working_dtype(index_query.dtype)
    q, k, w = index_query.to(dtype), index_key.to(dtype), weights.to(dtype)
    logits = q @ k.unsqueeze(-3).transpose(-2, -1) * scale  # (..., H_I, L, S)
    scores = (w.unsqueeze(-1) * torch.relu(logits)).sum(dim=-3)  # sum over heads: (..., L, S)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(dtype)
    return scores


def topk_keys(scores: Tensor, k: int) -> Tensor:
    r"""Each query's ``k`` keys of largest score, as DeepSeek-V3.2's indexer picks them.

    ``scores.topk(min(k, S))``, in order of decreasing score, with one difference from
    the model: a slot whose key scores $-\infty$ (a masked key) holds $-1$ instead of
    that key's index. A query allowed fewer than $k$ keys (the first $k - 1$ queries of
    a causal mask) therefore gets all of its allowed keys, then $-1$s, where the model
    lists masked keys that its attention mask removes again. With ``k`` larger than
    the number of keys $S$ the result has $S$ columns, as the model's
    ``min(index_topk, S)``. Equal scores are ordered as ``torch.topk`` orders them,
    which is not specified.

    Args:
        scores: ``(..., L, S)``, e.g. from `indexer_scores`, with $-\infty$ at keys a
            query may not attend to.
        k: How many keys each query keeps, at least 1.

    Returns:
        int64 tensor of shape ``(..., L, min(k, S))``: key indices in $[0, S)$, or $-1$.

    Raises:
        TypeError: If ``scores`` is not a floating-point tensor or ``k`` is not an int.
        ValueError: If ``k`` is below 1 or a score is NaN (it would rank above all).

    Examples:
        >>> import torch
        >>> from attention import topk_keys
        >>> scores = torch.tensor([[0.5, -float("inf"), -float("inf")],
        ...                        [0.1, 0.9, -float("inf")],
        ...                        [0.3, 0.2, 0.4]])  # causal: query t sees keys 0..t
        >>> topk_keys(scores, 2)
        tensor([[ 0, -1],
                [ 1,  0],
                [ 2,  0]])
    """
    scores = check_tensor("scores", scores, min_ndim=2)
    k = check_size("k", k, minimum=1)
    if torch.isnan(scores).any():
        raise ValueError("scores must not be NaN: topk ranks NaN above every number")
    values, indices = scores.topk(min(k, scores.shape[-1]), dim=-1)  # (..., L, k)
    return indices.masked_fill(torch.isneginf(values), -1)


def topk_mask(indices: Tensor, S: int) -> Tensor:
    r"""The bool mask ``(..., L, S)`` that a selection of keys stands for: True where chosen.

    Attention under this mask equals `topk_sparse_attention` with ``indices``: the
    dense form of the same computation, at the dense cost. Transformers' eager and
    SDPA paths for DeepSeek-V3.2 build it (inverted) and combine it with the causal
    mask. Slots holding $-1$ choose nothing.

    Args:
        indices: Integer tensor ``(..., L, k)`` of key indices in $[0, S)$ or $-1$,
            no key twice in a row; e.g. from `topk_keys`.
        S: The number of keys.

    Returns:
        Bool tensor of shape ``(..., L, S)``, with at most ``k`` True per row.

    Raises:
        TypeError: If ``indices`` is not an integer tensor or ``S`` not an int.
        ValueError: If ``indices`` is not at least 2-D, has more than ``S`` columns, or
            holds an index outside $[-1, S)$ or the same key twice in a row.

    Examples:
        >>> import torch
        >>> from attention import topk_mask
        >>> topk_mask(torch.tensor([[0, -1], [1, 0], [2, 0]]), S=3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True, False,  True]])
    """
    S = check_size("S", S)
    indices = check_topk_indices(indices, S)
    # Slot -1 writes into an extra column S, which is then dropped.
    columns = torch.where(indices < 0, S, indices.long())  # (..., L, k)
    chosen = torch.zeros(*indices.shape[:-1], S + 1, dtype=torch.bool, device=indices.device)
    return chosen.scatter(-1, columns, True)[..., :S]


def topk_sparse_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    indices: Tensor,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    r"""Attention of each query over its chosen keys only, gathered: $O(L k)$, not $O(L S)$.

    For query $t$ with chosen keys $\mathcal{S}_t$ (row $t$ of ``indices``):

    $$o_t = \sum_{s \in \mathcal{S}_t} \frac{e^{z_{ts}}}{\sum_{s' \in \mathcal{S}_t}
    e^{z_{ts'}}}\, v_s, \qquad z_{ts} = q_t \cdot k_s \cdot \text{scale}.$$

    The chosen keys and values are gathered into ``(..., L, k, D)`` blocks, so the
    scores, softmax and weighted sum cost $O(L \cdot k)$ per head and no
    ``(L, S)`` tensor is made. Equal to dense attention under
    ``topk_mask(indices, S)``. The indices are shared by all heads, as in DSA. A slot of
    $-1$ chooses nothing; a query with no key chosen gets zeros, as a fully masked row
    does in [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention].
    No causal mask is applied: the indices are the mask (`topk_keys` gives $-1$, not a
    future key, where the scores were masked). Computed in float32 for float16/bfloat16
    inputs.

    Args:
        query: ``(..., H, L, D)``.
        key: ``(..., H, S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., H, S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        indices: Integer tensor ``(..., L, k)``: for each query, the keys it attends to,
            in $[0, S)$, or $-1$ for none; no key twice in a row. Its leading
            dimensions broadcast with the inputs'. ``k`` is at most ``S``.
        scale: Factor applied to $Q K^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention: each of the ``Hkv`` key/value heads serves
            ``H / Hkv`` consecutive query heads. MLA's multi-query form is ``Hkv = 1``.

    Returns:
        Tensor of shape ``(..., H, L, Dv)``, in the query's dtype.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, or
            ``indices`` is not an integer tensor.
        ValueError: If shapes are inconsistent (a missing head axis, head sizes, key
            and value lengths, head counts, ``indices`` not ``(..., L, k)`` or with more
            than ``S`` columns), or ``indices`` holds an index outside $[-1, S)$ or a key
            twice in a row.

    Examples:
        >>> import torch
        >>> from attention import topk_sparse_attention
        >>> q, k = torch.zeros(1, 2, 4), torch.zeros(1, 3, 4)  # (H, L, D), (H, S, D)
        >>> v = torch.tensor([[[1.0], [2.0], [6.0]]])  # (H, S, Dv): equal scores
        >>> idx = torch.tensor([[0, -1], [0, 2]])  # (L, k): query 1 sees keys 0 and 2
        >>> topk_sparse_attention(q, k, v, idx)  # the mean of the chosen values
        tensor([[[1.0000],
                 [3.5000]]])
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim < 3:
            raise ValueError(
                f"{name} must have a head axis, (..., H, L, D) or (..., Hkv, S, D); "
                f"got {name} {shape_str(t)}"
            )
    H, L, D = query.shape[-3:]
    S, Dv = key.shape[-2], value.shape[-1]
    indices = check_topk_indices(indices, S)
    if indices.shape[-2] != L:
        raise ValueError(
            f"indices must be (..., L, k) with one row per query, L = {L} for query "
            f"{shape_str(query)}; got indices {shape_str(indices)}"
        )
    shapes = (query.shape[:-3], key.shape[:-3], value.shape[:-3], indices.shape[:-2])
    if not broadcast(*shapes):
        raise ValueError(
            "indices (..., L, k) must have leading dimensions that broadcast with the "
            f"inputs'; got query {shape_str(query)}, key {shape_str(key)}, indices "
            f"{shape_str(indices)}"
        )
    batch = broadcast_shapes(*shapes)
    scale = default_scale(query, check_scale(scale))

    if enable_gqa:
        key, value = share_heads(key, value)  # one grouping for both: (..., Hkv, S, ·)
    else:
        H = max(H, key.shape[-3], value.shape[-3])  # the head axes broadcast (checked)
        if (key.shape[-3], value.shape[-3]) != (1, 1):  # one shared head stays one group
            key = key.expand(*key.shape[:-3], H, S, D)
            value = value.expand(*value.shape[:-3], H, S, Dv)
    Hkv = key.shape[-3]
    query = query.expand(*batch, H, L, D)
    key, value = key.expand(*batch, Hkv, S, D), value.expand(*batch, Hkv, S, Dv)
    indices = indices.expand(*batch, L, indices.shape[-1])

    dtype = working_dtype(query.dtype)
    chosen = indices >= 0  # (..., L, k)
    k_sel = _gather_rows(key, indices).to(dtype)  # (..., Hkv, L, k, D)
    v_sel = _gather_rows(value, indices).to(dtype)  # (..., Hkv, L, k, Dv)
    # The query heads in groups of G = H / Hkv, one group per key/value head: (..., Hkv, G, L, D)
    q = query.to(dtype).unflatten(-3, (Hkv, H // Hkv))  # type: ignore[no-untyped-call]
    # One query against its own k keys: a (1, D) @ (D, k) product per query.
    scores = (q.unsqueeze(-2) @ k_sel.unsqueeze(-4).transpose(-2, -1)).squeeze(-2) * scale
    # scores: (..., Hkv, G, L, 1, D) @ (..., Hkv, 1, L, D, k) -> (..., Hkv, G, L, k)
    scores = scores.masked_fill(~chosen.unsqueeze(-3).unsqueeze(-3), float("-inf"))
    weights = masked_softmax(scores)  # a row with no key chosen: zeros
    out = (weights.unsqueeze(-2) @ v_sel.unsqueeze(-4)).squeeze(-2)  # (..., Hkv, G, L, Dv)
    return out.flatten(-4, -3).to(query.dtype)  # (..., H, L, Dv)


def _gather_rows(t: Tensor, indices: Tensor) -> Tensor:
    """Rows ``indices`` of ``t``, per query: ``(..., Hkv, S, ·)`` -> ``(..., Hkv, L, k, ·)``.

    ``indices`` is ``(..., L, k)`` with the same leading dimensions as ``t``; a slot of
    -1 gathers row 0, which the caller masks.
    """
    *batch, Hkv, _, width = t.shape
    L, k = indices.shape[-2:]
    rows = indices.clamp(min=0).long().flatten(-2)[..., None, :, None]  # (..., 1, L * k, 1)
    rows = rows.expand(*batch, Hkv, L * k, width)  # the same rows for every head and feature
    return t.gather(-2, rows).unflatten(-2, (L, k))  # type: ignore[no-untyped-call,no-any-return]

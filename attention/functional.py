r"""Scaled dot-product attention, written to be read.

$$
\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(
    \frac{Q K^\top}{\sqrt{D}} + M\right) V
$$

with $Q \in \mathbb{R}^{L \times D}$, $K \in \mathbb{R}^{S \times D}$,
$V \in \mathbb{R}^{S \times D_v}$ and an optional mask $M$ ($0$ where a query may
attend, $-\infty$ where it may not). Any number of leading batch dimensions is
allowed. The functions here return the same values as
`torch.nn.functional.scaled_dot_product_attention` for every input PyTorch accepts,
and differ on purpose in one place: a query whose keys are all masked gets an output
of zeros, with no NaN in the output or in any gradient.

References:
    - Vaswani et al., "Attention Is All You Need", 2017.
      [arXiv:1706.03762](https://arxiv.org/abs/1706.03762)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attention._checks import (
    check_attn_mask,
    check_flag,
    check_probability,
    check_same_dtype_and_device,
    check_scale,
    check_tensor,
    shape_str,
)
from attention.masks import causal_mask

__all__ = ["attention_weights", "scaled_dot_product_attention"]


def attention_weights(
    query: Tensor,
    key: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    r"""Attention probabilities $P = \operatorname{softmax}(Q K^\top \cdot \text{scale} + M)$.

    Each row $i$ is a probability distribution over the $S$ keys: how much query $i$
    draws from each value. A row whose keys are all masked is all zeros (it sums to
    0, not 1) instead of NaN.

    Args:
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        attn_mask: Optional mask broadcastable to ``(..., L, S)``. Bool: True where the
            query may attend. Float (query's dtype): added to the scores.
        is_causal: Apply a top-left aligned causal mask (query $i$ sees keys
            $0..i$), as PyTorch does. Cannot be combined with ``attn_mask``.
        scale: Factor applied to $Q K^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention: each of the ``Hkv`` key heads serves
            ``H / Hkv`` consecutive query heads.

    Returns:
        Tensor of shape ``(..., L, S)`` with rows summing to 1 (0 when fully masked).

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, the
            mask has an unsupported dtype, or ``is_causal`` / ``enable_gqa`` is not a
            bool.
        ValueError: If shapes are inconsistent, the mask does not broadcast, or
            ``is_causal`` is combined with ``attn_mask``.

    Examples:
        >>> import torch
        >>> from attention import attention_weights
        >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> w = attention_weights(q, k, scale=1.0)
        >>> w.shape
        torch.Size([2, 3])
        >>> w.sum(dim=-1)
        tensor([1., 1.])
        >>> w[0]  # softmax([1, 0, 1])
        tensor([0.4223, 0.1554, 0.4223])
    """
    query, key = _check_query_key(query, key, enable_gqa)
    return _probabilities(query, key, attn_mask, is_causal, scale, enable_gqa).to(query.dtype)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    r"""Scaled dot-product attention: $\operatorname{softmax}(Q K^\top / \sqrt{D} + M)\,V$.

    A readable, drop-in equivalent of
    `torch.nn.functional.scaled_dot_product_attention` (same arguments, same
    defaults, same results), computed in four visible steps: scores, mask, softmax,
    weighted sum of values (see [`attention_weights`][attention.attention_weights]).

    Args:
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        attn_mask: Optional mask broadcastable to ``(..., L, S)``. Bool: True where the
            query may attend. Float (query's dtype): added to the scores.
        dropout_p: Probability of zeroing an attention weight (the survivors are
            scaled by $1/(1-p)$). Applied whenever it is above 0: like PyTorch's
            function, this one has no notion of training mode, so pass 0 at
            evaluation time.
        is_causal: Apply a top-left aligned causal mask (query $i$ sees keys
            $0..i$), as PyTorch does. Cannot be combined with ``attn_mask``.
        scale: Factor applied to $Q K^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention: each of the ``Hkv`` key/value heads
            serves ``H / Hkv`` consecutive query heads.

    Returns:
        Tensor of shape ``(..., L, Dv)``. A query with every key masked gets zeros.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, the
            mask has an unsupported dtype, or ``is_causal`` / ``enable_gqa`` is not a
            bool.
        ValueError: If shapes are inconsistent (head sizes, key/value lengths, head
            counts), the mask does not broadcast, ``dropout_p`` is outside $[0, 1)$,
            or ``is_causal`` is combined with ``attn_mask``.

    Examples:
        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention import scaled_dot_product_attention
        >>> _ = torch.manual_seed(0)
        >>> q = torch.randn(2, 4, 5, 8)   # (B, H, L, D)
        >>> k = torch.randn(2, 4, 7, 8)   # (B, H, S, D)
        >>> v = torch.randn(2, 4, 7, 3)   # (B, H, S, Dv)
        >>> out = scaled_dot_product_attention(q, k, v)
        >>> out.shape
        torch.Size([2, 4, 5, 3])
        >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6)
        True

        With one key and one query the weight is 1, so the output is that value:

        >>> import torch
        >>> from attention import scaled_dot_product_attention
        >>> scaled_dot_product_attention(torch.ones(1, 2), torch.ones(1, 2), torch.tensor([[5.0]]))
        tensor([[5.]])
    """
    # Validate everything before any arithmetic, so errors name the argument at fault.
    query, key = _check_query_key(query, key, enable_gqa)
    value = _check_value(value, key, enable_gqa)
    dropout_p = check_probability("dropout_p", dropout_p)
    weights = _probabilities(query, key, attn_mask, is_causal, scale, enable_gqa)
    if dropout_p > 0.0:
        weights = torch.dropout(weights, dropout_p, train=True)
    value = _repeat_kv_heads(value, query, enable_gqa).to(weights.dtype)
    out = weights @ value  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    return out.to(query.dtype)


def _probabilities(
    query: Tensor,
    key: Tensor,
    attn_mask: Tensor | None,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> Tensor:
    """Scores, mask and softmax for validated query and key, in the compute dtype."""
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    check_flag("is_causal", is_causal)
    scale = check_scale(scale)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if attn_mask is not None and is_causal:
        raise ValueError(
            "pass either attn_mask or is_causal=True, not both "
            "(combine the masks yourself, e.g. attn_mask & causal_mask(L, S))"
        )
    if is_causal:
        attn_mask = causal_mask(L, S, device=query.device)
    if attn_mask is not None:
        attn_mask = check_attn_mask(attn_mask, torch.Size((*query.shape[:-1], S)), query)

    # float16/bfloat16 lose too much in a long sum of products and in exp(), so, like
    # PyTorch's CPU reference path, compute in float32 and round once at the end.
    compute_dtype = _compute_dtype(query.dtype)
    key = _repeat_kv_heads(key, query, enable_gqa).to(compute_dtype)
    query = query.to(compute_dtype)

    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S)

    if attn_mask is None:
        return torch.softmax(scores, dim=-1)

    if attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    else:
        scores = scores + attn_mask.to(compute_dtype)
    # softmax over a row of -inf is 0/0 = NaN, and that NaN flows back into every
    # gradient. Give empty rows a harmless finite row, then zero their weights. Only a
    # mask can empty a row, so unmasked attention skips this (and its L x S copies).
    empty_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., L, 1)
    scores.masked_fill_(empty_row, 0.0)  # in place: scores is ours, and not saved
    return torch.softmax(scores, dim=-1).masked_fill(empty_row, 0.0)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_query_key(query: object, key: object, enable_gqa: bool) -> tuple[Tensor, Tensor]:
    check_flag("enable_gqa", enable_gqa)
    min_ndim = 3 if enable_gqa else 2
    query = check_tensor("query", query, min_ndim=min_ndim)
    key = check_tensor("key", key, min_ndim=min_ndim)
    check_same_dtype_and_device(query=query, key=key)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "query and key must have the same head size D (last dimension); "
            f"got query {shape_str(query)}, key {shape_str(key)}"
        )
    batch_dims = slice(0, -3) if enable_gqa else slice(0, -2)
    if query.ndim != key.ndim or query.shape[batch_dims] != key.shape[batch_dims]:
        if enable_gqa:
            expected = "(..., H, L, D) and (..., Hkv, S, D)"
        else:
            expected = "(..., L, D) and (..., S, D)"
        hint = ""
        if not enable_gqa and query.ndim == key.ndim >= 3 and query.shape[:-3] == key.shape[:-3]:
            hint = " (for fewer key/value heads than query heads pass enable_gqa=True)"
        raise ValueError(
            f"query and key must have the same leading dimensions {expected}; "
            f"got query {shape_str(query)}, key {shape_str(key)}{hint}"
        )
    if enable_gqa:
        H, Hkv = query.shape[-3], key.shape[-3]
        if Hkv == 0 or H % Hkv != 0:
            raise ValueError(
                "with enable_gqa=True the number of query heads H must be a multiple of "
                f"the number of key/value heads Hkv; got H={H}, Hkv={Hkv} "
                f"(query {shape_str(query)}, key {shape_str(key)})"
            )
    return query, key


def _check_value(value: object, key: Tensor, enable_gqa: bool) -> Tensor:
    value = check_tensor("value", value, min_ndim=key.ndim)
    check_same_dtype_and_device(key=key, value=value)
    if value.ndim != key.ndim or value.shape[:-1] != key.shape[:-1]:
        what = "heads Hkv and length S" if enable_gqa else "length S"
        raise ValueError(
            f"key and value must have the same leading dimensions and {what}; "
            f"got key {shape_str(key)}, value {shape_str(value)}"
        )
    return value


def _repeat_kv_heads(kv: Tensor, query: Tensor, enable_gqa: bool) -> Tensor:
    """Repeat each key/value head ``H // Hkv`` times so it lines up with its query heads."""
    if not enable_gqa:
        return kv
    group = query.shape[-3] // kv.shape[-3]
    return kv.repeat_interleave(group, dim=-3)  # (..., Hkv, S, D) -> (..., H, S, D)

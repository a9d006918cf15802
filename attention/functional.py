r"""Scaled dot-product attention, written to be read.

$$
\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(
    \frac{Q K^\top}{\sqrt{D}} + M\right) V
$$

with $Q \in \mathbb{R}^{L \times D}$, $K \in \mathbb{R}^{S \times D}$,
$V \in \mathbb{R}^{S \times D_v}$ and an optional mask $M$ ($0$ where a query may
attend, $-\infty$ where it may not). Any number of leading batch dimensions is
allowed, and they broadcast between query, key and value as in PyTorch. The functions
here return the same values as `torch.nn.functional.scaled_dot_product_attention`
wherever both accept the input, including a query whose keys are all masked (a row of
zeros, with no NaN in the output or in any gradient) and a head size of 0 (the mean of
the values). Where they refuse what PyTorch accepts, they say so: ``attn_mask``
together with ``is_causal=True`` is always an error here (PyTorch's math path refuses
it too, while its fused CPU kernel accepts it for some 4-D inputs), and so are masks of
an integer dtype.

References:
    - Vaswani et al., "Attention Is All You Need", 2017.
      [arXiv:1706.03762](https://arxiv.org/abs/1706.03762)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attention._checks import (
    broadcast_shapes,
    check_attn_mask,
    check_mask_or_causal,
    check_probability,
    check_query_key,
    check_query_key_value,
    check_scale,
)
from attention._heads import repeat_heads
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
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``. The leading
            dimensions of query, key and value broadcast, as in PyTorch.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        attn_mask: Optional mask broadcastable to ``(..., L, S)``. Bool: True where the
            query may attend. Float (the query's dtype, or float32): added to the
            scores. Or PyTorch's ``causal_upper_left(L, S)`` /
            ``causal_lower_right(L, S)`` (``torch.nn.attention.bias``).
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
    query, key = check_query_key(query, key, enable_gqa)
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
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``. The leading
            dimensions of query, key and value broadcast, as in PyTorch.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        attn_mask: Optional mask broadcastable to ``(..., L, S)``. Bool: True where the
            query may attend. Float (the query's dtype, or float32): added to the
            scores. Or PyTorch's ``causal_upper_left(L, S)`` /
            ``causal_lower_right(L, S)`` (``torch.nn.attention.bias``).
        dropout_p: Probability of zeroing an attention weight (the survivors are
            scaled by ``1 / (1 - dropout_p)``). Applied whenever it is above 0: like
            PyTorch's function, this one has no notion of training mode, so pass 0 at
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
            counts), the mask does not broadcast, ``dropout_p`` is outside $[0, 1]$,
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
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    dropout_p = check_probability("dropout_p", dropout_p)
    weights = _probabilities(query, key, attn_mask, is_causal, scale, enable_gqa)
    if dropout_p > 0.0:
        weights = torch.dropout(weights, dropout_p, train=True)
    if enable_gqa:
        value = repeat_heads(value, query.shape[-3])  # (..., Hv, S, Dv) -> (..., H, S, Dv)
    value = value.to(weights.dtype)
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
    L, S = query.shape[-2], key.shape[-2]
    is_causal = check_mask_or_causal(attn_mask, is_causal)
    scale = default_scale(query, check_scale(scale))
    if is_causal:
        attn_mask = causal_mask(L, S, device=query.device)
    if attn_mask is not None:
        attn_mask = check_attn_mask(attn_mask, _scores_shape(query, key, enable_gqa), query)

    # float16/bfloat16 lose too much in a long sum of products and in exp(), so, like
    # PyTorch's CPU reference path, compute in float32 and round once at the end.
    compute_dtype = _working_dtype(query.dtype)
    if enable_gqa:
        key = repeat_heads(key, query.shape[-3])  # (..., Hk, S, D) -> (..., H, S, D)
    key = key.to(compute_dtype)
    query = query.to(compute_dtype)

    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask.to(compute_dtype)
    return _masked_softmax(scores)


def _masked_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last axis, with a row of only ``-inf`` giving zeros, not NaN.

    Such a row comes from a mask that hides every key, or from keys that are ``-inf``
    themselves. softmax would compute 0/0 = NaN there, and that NaN would flow back into
    every gradient; PyTorch returns zeros. Such rows get a harmless finite row before the
    softmax and zero weights after it. ``scores`` is overwritten in those rows: pass a
    tensor of your own that autograd does not need (no branch on the values, so the
    function also runs on meta tensors and under ``torch.compile``).
    """
    if scores.shape[-1] == 0:  # no keys at all: nothing to attend to, zeros
        return torch.softmax(scores, dim=-1)
    empty_row = torch.isneginf(scores.amax(dim=-1, keepdim=True))  # (..., L, 1)
    scores.masked_fill_(empty_row, 0.0)  # any finite row: its weights are zeroed below
    return torch.softmax(scores, dim=-1).masked_fill(empty_row, 0.0)


def default_scale(query: Tensor, scale: float | None) -> float:
    r"""``scale``, or $1/\sqrt{D}$ when it is ``None``.

    With ``D = 0`` every score is an empty sum, 0, whatever the scale: 1 stands in for
    $1/\sqrt{0}$, and the output is the mean of the values, as in PyTorch.
    """
    if scale is not None:
        return scale
    D = query.shape[-1]
    return 1.0 / math.sqrt(D) if D > 0 else 1.0


def _scores_shape(query: Tensor, key: Tensor, enable_gqa: bool) -> torch.Size:
    """``(..., L, S)``: the query's and key's leading dimensions broadcast together."""
    heads = 3 if enable_gqa else 2  # with GQA the head axes differ (H vs Hkv): keep H
    batch = broadcast_shapes(query.shape[:-heads], key.shape[:-heads])
    return torch.Size((*batch, *query.shape[-heads:-1], key.shape[-2]))


def _working_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16 (too coarse for long sums and exp), else ``dtype``."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

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

import torch
from torch import Tensor

from attention._checks import (
    check_attn_mask,
    check_mask_or_causal,
    check_mods,
    check_probability,
    check_query_key,
    check_query_key_value,
    check_scale,
)
from attention._heads import repeat_heads
from attention._kernels import (
    MaskMod,
    ScoreMod,
    apply_score_mod,
    default_scale,
    mask_mod_keep,
    masked_softmax,
    mod_indices,
    scores_shape,
    working_dtype,
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
    *,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
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
        score_mod: Keyword only. ``score_mod(score, b, h, q_idx, kv_idx) -> score``, as
            in PyTorch's FlexAttention: changes each scaled score before any mask
            (``attn_mask``, ``is_causal`` and ``mask_mod`` apply after it; a float
            ``attn_mask`` is added to its result). The indices are int64 tensors shaped
            ``(B, 1, 1, 1)``, ``(1, H, 1, 1)``, ``(1, 1, L, 1)`` and ``(1, 1, 1, S)``,
            which broadcast against the scores ``(B, H, L, S)``: a mod written for
            FlexAttention works unchanged. It must return a floating-point tensor
            broadcastable to the scores. Tensors it captures (a learned bias table)
            get their gradients. Needs 4-D ``(B, H, L, D)`` inputs, as FlexAttention.
        mask_mod: Keyword only. ``mask_mod(b, h, q_idx, kv_idx) -> Tensor`` of bool,
            True where the query may attend, as in FlexAttention; the same indices.
            A pair is kept only if this and ``attn_mask`` / ``is_causal`` keep it.

    Returns:
        Tensor of shape ``(..., L, S)`` with rows summing to 1 (0 when fully masked).

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, the
            mask has an unsupported dtype, ``is_causal`` / ``enable_gqa`` is not a
            bool, a mod is not callable, ``score_mod`` returns no floating-point
            tensor, or ``mask_mod`` no bool tensor.
        ValueError: If shapes are inconsistent, the mask does not broadcast,
            ``is_causal`` is combined with ``attn_mask``, a mod is given with inputs
            that are not 4-D, or a mod's result does not broadcast to the scores.

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
    mask = _checked_mask(attn_mask, is_causal, query, key, enable_gqa)
    scale = default_scale(query, check_scale(scale))
    check_mods(score_mod, mask_mod, query=query, key=key)
    weights = _attention_weights(query, key, mask, scale, enable_gqa, score_mod, mask_mod)
    return weights.to(query.dtype)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
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
        score_mod: Keyword only. ``score_mod(score, b, h, q_idx, kv_idx) -> score``, as
            in PyTorch's FlexAttention: changes each scaled score before any mask
            (``attn_mask``, ``is_causal`` and ``mask_mod`` apply after it; a float
            ``attn_mask`` is added to its result). The indices are int64 tensors shaped
            ``(B, 1, 1, 1)``, ``(1, H, 1, 1)``, ``(1, 1, L, 1)`` and ``(1, 1, 1, S)``,
            which broadcast against the scores ``(B, H, L, S)``: a mod written for
            FlexAttention works unchanged. It must return a floating-point tensor
            broadcastable to the scores. Tensors it captures (a learned bias table)
            get their gradients. Needs 4-D ``(B, H, L, D)`` inputs, as FlexAttention.
        mask_mod: Keyword only. ``mask_mod(b, h, q_idx, kv_idx) -> Tensor`` of bool,
            True where the query may attend, as in FlexAttention; the same indices.
            A pair is kept only if this and ``attn_mask`` / ``is_causal`` keep it.

    Returns:
        Tensor of shape ``(..., L, Dv)``. A query with every key masked gets zeros.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, the
            mask has an unsupported dtype, ``is_causal`` / ``enable_gqa`` is not a
            bool, a mod is not callable, ``score_mod`` returns no floating-point
            tensor, or ``mask_mod`` no bool tensor.
        ValueError: If shapes are inconsistent (head sizes, key/value lengths, head
            counts), the mask does not broadcast, ``dropout_p`` is outside $[0, 1]$,
            ``is_causal`` is combined with ``attn_mask``, a mod is given with inputs
            that are not 4-D, or a mod's result does not broadcast to the scores.

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

        FlexAttention's mods. A causal window of 3 keys as a ``mask_mod`` is the
        same as that window as a bool ``attn_mask``, and soft-capping (Gemma 2) as a
        ``score_mod`` caps the scaled scores:

        >>> import torch
        >>> from attention import scaled_dot_product_attention
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)  # (B, H, L, D), L = S = 5
        >>> def window(b, h, q_idx, kv_idx):
        ...     return (q_idx >= kv_idx) & (q_idx - kv_idx < 3)
        >>> i, j = torch.arange(5).unsqueeze(-1), torch.arange(5)
        >>> band = (i >= j) & (i - j < 3)  # (L, S)
        >>> torch.equal(
        ...     scaled_dot_product_attention(q, k, v, mask_mod=window),
        ...     scaled_dot_product_attention(q, k, v, attn_mask=band),
        ... )
        True
        >>> def softcap(score, b, h, q_idx, kv_idx):
        ...     return 2.0 * torch.tanh(score / 2.0)
        >>> capped = softcap(q @ k.transpose(-2, -1) / 8**0.5, None, None, None, None)
        >>> out = scaled_dot_product_attention(q, k, v, score_mod=softcap)
        >>> torch.allclose(out, capped.softmax(dim=-1) @ v, atol=1e-6)
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
    mask = _checked_mask(attn_mask, is_causal, query, key, enable_gqa)
    scale = default_scale(query, check_scale(scale))
    check_mods(score_mod, mask_mod, query=query, key=key, value=value)

    weights = _attention_weights(
        query, key, mask, scale, enable_gqa, score_mod, mask_mod
    )  # (..., L, S)
    if dropout_p > 0.0:
        weights = torch.dropout(weights, dropout_p, train=True)
    if enable_gqa:
        value = repeat_heads(value, query.shape[-3])  # (..., Hv, S, Dv) -> (..., H, S, Dv)
    value = value.to(weights.dtype)
    out = weights @ value  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    return out.to(query.dtype)


def _attention_weights(
    query: Tensor,
    key: Tensor,
    mask: Tensor | None,
    scale: float,
    enable_gqa: bool,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
) -> Tensor:
    """Scores, mods, mask and softmax: the attention weights ``(..., L, S)``, in the working dtype.

    The unchecked core of both functions above and of `MultiHeadAttention`: each
    validates its own arguments once, then calls this. ``mask`` is validated already
    (bool, True = may attend, or float, added to the scores), and ``scale`` is a number.
    """
    return masked_softmax(_masked_scores(query, key, mask, scale, enable_gqa, score_mod, mask_mod))


def _masked_scores(
    query: Tensor,
    key: Tensor,
    mask: Tensor | None,
    scale: float,
    enable_gqa: bool,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
) -> Tensor:
    """The scaled, modded and masked scores ``(..., L, S)``, in the working dtype.

    The logits of `_attention_weights`' softmax (and of `attention.sinks`, which adds a
    column to them); a tensor of its own, which the softmax may overwrite. With a mod,
    query and key are 4-D (`check_mods`); the mods' results are checked here, where they
    are computed. Order, as in FlexAttention: scaled scores, ``score_mod``, then the
    masks (``mask``, then ``mask_mod``).
    """
    # float16/bfloat16 lose too much in a long sum of products and in exp(), so, like
    # PyTorch's CPU reference path, compute in float32 and round once at the end.
    compute_dtype = working_dtype(query.dtype)
    if enable_gqa:
        key = repeat_heads(key, query.shape[-3])  # (..., Hk, S, D) -> (..., H, S, D)
    key = key.to(compute_dtype)
    query = query.to(compute_dtype)

    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S)
    if score_mod is not None or mask_mod is not None:
        B, H, L, S = scores.shape  # 4-D: check_mods
        indices = mod_indices(B, H, 0, L, 0, S, scores.device)  # broadcast to (B, H, L, S)
    if score_mod is not None:
        scores = apply_score_mod(score_mod, scores, indices)
        if mask is None and mask_mod is None:
            # masked_softmax writes into its argument: not into the mod's result (a
            # broadcast view, or an output its own backward needs, as exp's does).
            scores = scores.clone()
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(compute_dtype)
    if mask_mod is not None:
        keep = mask_mod_keep(mask_mod, scores.shape, indices)  # (B, H, L, S)
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores


def _checked_mask(
    attn_mask: object, is_causal: object, query: Tensor, key: Tensor, enable_gqa: bool
) -> Tensor | None:
    """The mask $M$ as a validated tensor: ``attn_mask``, the causal mask, or ``None``.

    A ``CausalBias`` becomes the bool mask it stands for.
    """
    is_causal = check_mask_or_causal(attn_mask, is_causal)
    if is_causal:
        return causal_mask(query.shape[-2], key.shape[-2], device=query.device)
    if attn_mask is None:
        return None
    return check_attn_mask(attn_mask, scores_shape(query, key, enable_gqa), query)

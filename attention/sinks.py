r"""Attention sinks: somewhere for a query's weight to go when no key deserves it.

The weights of a softmax row sum to 1, so a head that should do nothing at some
position must still put its weight somewhere. Trained language models learn to put it
on the first token, whose value is then close to zero: the first token becomes an
*attention sink* ([Xiao et al. 2024](https://arxiv.org/abs/2309.17453)). Evict that
token from a sliding window and the weight it absorbed is spread over the remaining
keys, whose values are not zero: the output changes, and the model breaks.

Two fixes are in use:

- **Sink tokens** (StreamingLLM): keep the first few tokens in the window forever.
  That is a mask, [`sliding_window_mask(..., sinks=n)`][attention.masks.sliding_window_mask].
- **A learned sink logit** per head (gpt-oss, [OpenAI 2025](https://arxiv.org/abs/2508.10925)):
  one more logit $s_h$ in every softmax row, with no value behind it,

  $$p_{ij} = \frac{e^{z_{ij}}}{e^{s_h} + \sum_{j'} e^{z_{ij'}}}, \qquad
  \sum_j p_{ij} = \sigma\big(\operatorname{lse}_j(z_{ij}) - s_h\big) < 1,$$

  where $z = Q K^\top \cdot \text{scale} + M$ and $\sigma$ is the logistic function. The
  weight the sink takes is simply missing from the output: no token has to carry it,
  and no window can evict it. That is `sink_attention`.

The second equation is also what a tiled kernel uses: the output with a sink is the
output without one, times $\sigma(\operatorname{lse} - s_h)$ per row, and a
FlashAttention kernel keeps the row's $\operatorname{lse}$ anyway.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention._checks import check_query_key_value, check_scale, check_sinks
from attention._heads import repeat_heads
from attention._kernels import default_scale
from attention.functional import _checked_mask, _masked_scores

__all__ = ["sink_attention"]


def sink_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    sinks: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    r"""Attention with a learned sink logit per head, as in gpt-oss.

    $\operatorname{softmax}([\,Q K^\top \cdot \text{scale} + M,\ s_h\,])$ over the $S$
    keys and one sink, with the sink's column dropped before the weighted sum of the
    values: each row's weights sum to $\sigma(\operatorname{lse}_j z_{ij} - s_h) < 1$.
    A row whose keys are all masked gives its whole weight to the sink, and an output of
    zeros. Computed in the order of Transformers' gpt-oss eager attention (concatenate,
    softmax, drop the sink), in float32 for float16/bfloat16 inputs.

    Args:
        query: ``(..., H, L, D)``.
        key: ``(..., H, S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., H, S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        sinks: One finite logit per query head, shape ``(H,)``.
        attn_mask: Optional bool (True = may attend) or float mask broadcastable to
            ``(..., H, L, S)``, as for
            [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention].
        is_causal: Top-left aligned causal mask. Cannot be combined with ``attn_mask``.
        scale: Factor applied to $Q K^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in ``scaled_dot_product_attention``.

    Returns:
        Tensor of shape ``(..., H, L, Dv)``, in the query's dtype.

    Raises:
        TypeError: If an input is not a floating-point tensor, or dtypes differ.
        ValueError: If shapes are inconsistent, ``sinks`` is not ``(H,)`` or holds a
            value that is not finite, or the mask does not broadcast.

    Examples:
        >>> import torch
        >>> from attention import scaled_dot_product_attention, sink_attention
        >>> q, k = torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 3, 4)  # equal scores
        >>> v = torch.ones(1, 2, 3, 1)
        >>> # Head 0: a sink of logit -100 takes nothing. Head 1: a sink of logit 0
        >>> # against three keys of score 0 takes 1/4 of the weight.
        >>> sink_attention(q, k, v, sinks=torch.tensor([-100.0, 0.0])).flatten()
        tensor([1.0000, 0.7500])
        >>> no_keys = torch.zeros(1, 3, dtype=torch.bool)  # every key masked
        >>> sink_attention(q, k, v, torch.zeros(2), attn_mask=no_keys).flatten()
        tensor([0., 0.])
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    sinks = check_sinks(sinks, query)
    mask = _checked_mask(attn_mask, is_causal, query, key, enable_gqa)
    scale = default_scale(query, check_scale(scale))

    scores = _masked_scores(query, key, mask, scale, enable_gqa)  # (..., H, L, S)
    dtype = scores.dtype  # the working dtype
    if enable_gqa:
        value = repeat_heads(value, query.shape[-3])  # (..., Hkv, S, Dv) -> (..., H, S, Dv)

    H = query.shape[-3]
    sink_column = sinks.to(dtype).view(H, 1, 1).expand(*scores.shape[:-1], 1)  # (..., H, L, 1)
    logits = torch.cat([scores, sink_column], dim=-1)  # (..., H, L, S + 1)
    # The sink is finite, so no row is all -inf: the softmax needs no guard here.
    weights = torch.softmax(logits, dim=-1)[..., :-1]  # drop the sink: rows sum below 1
    return (weights @ value.to(dtype)).to(query.dtype)

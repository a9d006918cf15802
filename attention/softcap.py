r"""Logit soft-capping: squash every score into $(-c, c)$ with $c \tanh(z / c)$.

Gemma 2 ([Gemma Team 2024](https://arxiv.org/abs/2408.00118)) caps its attention
scores at $c = 50$ and its output logits at $c = 30$. The map

$$\operatorname{cap}_c(z) = c \tanh(z / c)$$

is the identity near zero (its slope at 0 is 1, and $|\operatorname{cap}_c(z) - z|
\le |z|^3 / (3c^2)$), is odd and increasing, so it keeps the order of the scores,
and stays within $(-c, c)$. In floating point a capped score rounds to $\pm c$
itself beyond about $19c$ in float64, $9c$ in float32, $4.5c$ in float16 and $3.5c$
in bfloat16. Two capped scores differ by at most $2c$, so no weight of a row can fall
below $e^{-2c}$ times the largest, and no single score can grow without
bound and saturate the softmax: the failure that large logits cause in training.

In the kernel it is one more elementwise function between the scores and the softmax,
so it fits the ``score_mod`` hook: `softcap_score_mod` returns one for
[`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention] and
[`flash_attention`][attention.efficient.flash_attention]. It costs one $\tanh$ per
score on the way forward and $1 - \tanh^2$ on the way back, per score again.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention._checks import check_cap, check_tensor
from attention._kernels import ScoreMod

__all__ = ["soft_cap", "softcap_score_mod"]


def soft_cap(scores: Tensor, cap: float) -> Tensor:
    r"""$c \tanh(z / c)$, elementwise: scores squashed into $(-c, c)$.

    Computed as Transformers' Gemma 2 computes it (divide, $\tanh$, multiply), so the
    two agree to the last bit.

    Args:
        scores: Any floating-point tensor, usually the scaled scores
            $Q K^\top \cdot \text{scale}$ before the mask.
        cap: The cap $c > 0$.

    Returns:
        Tensor of the shape and dtype of ``scores``.

    Raises:
        TypeError: If ``scores`` is not a floating-point tensor.
        ValueError: If ``cap`` is not a finite number above 0.

    Examples:
        >>> import torch
        >>> from attention import soft_cap
        >>> soft_cap(torch.tensor([0.5, 5.0, 50.0, 500.0]), cap=50.0)
        tensor([ 0.5000,  4.9834, 38.0797, 50.0000])
    """
    scores = check_tensor("scores", scores, min_ndim=0)
    cap = check_cap(cap)
    return torch.tanh(scores / cap) * cap


def softcap_score_mod(cap: float) -> ScoreMod:
    r"""A ``score_mod`` that soft-caps every score at ``cap``, for the package's kernels.

    Pass it as ``score_mod=`` to
    [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention],
    [`attention_weights`][attention.functional.attention_weights] or
    [`flash_attention`][attention.efficient.flash_attention] (or PyTorch's
    ``flex_attention``): it caps the scaled scores before any mask, where Gemma 2 caps
    them.

    Args:
        cap: The cap $c > 0$.

    Returns:
        ``score_mod(score, b, h, q_idx, kv_idx) -> c * tanh(score / c)``.

    Raises:
        ValueError: If ``cap`` is not a finite number above 0.

    Examples:
        >>> import torch
        >>> from attention import scaled_dot_product_attention, softcap_score_mod
        >>> q = torch.full((1, 1, 1, 4), 10.0)  # scaled score 10 * 10 * 4 / 2 = 200
        >>> k = torch.ones(1, 1, 2, 4) * torch.tensor([[10.0], [0.0]])
        >>> v = torch.tensor([[[[1.0], [0.0]]]])
        >>> scaled_dot_product_attention(q, k, v)  # all weight on the first key
        tensor([[[[1.]]]])
        >>> # Capped at 2, the scores (200, 0) become (2, 0): weights softmax([2, 0]).
        >>> scaled_dot_product_attention(q, k, v, score_mod=softcap_score_mod(2.0))
        tensor([[[[0.8808]]]])
    """
    cap = check_cap(cap)

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return torch.tanh(score / cap) * cap

    return score_mod

r"""Two ways to let a head put its weight nowhere: differential attention and an output gate.

A softmax row sums to 1, so every head must put its weight somewhere, even where no key
deserves it (the attention sinks of [`attention.sinks`][attention.sinks]), and some of
it lands on irrelevant keys as noise. Two recent fixes act on the output:

**Differential attention** (DIFF Transformer,
[Ye et al. 2024](https://arxiv.org/abs/2410.05258)) subtracts a second softmax map
from the first, as a differential amplifier cancels the noise common to two inputs:

$$\operatorname{DiffAttn}(X) = \big(\operatorname{softmax}(Q_1 K_1^\top \cdot
\text{scale}) - \lambda\, \operatorname{softmax}(Q_2 K_2^\top \cdot \text{scale})\big)\, V,$$

with two queries and two keys per head and one value of twice the head size. The
weights of a row now sum to $1 - \lambda$ and may be negative. $\lambda$ is learned
through four vectors, one scalar per layer,

$$\lambda = e^{\lambda_{q_1} \cdot \lambda_{k_1}} - e^{\lambda_{q_2} \cdot \lambda_{k_2}}
+ \lambda_{\text{init}}, \qquad \lambda_{\text{init}} = 0.8 - 0.6\, e^{-0.3 (l - 1)}$$

for layer $l = 1, 2, \dots$ (`differential_lambda`, `differential_lambda_init`). Each
head's output is then normalised on its own (RMSNorm over its $2D$ features, the
paper's "GroupNorm") and multiplied by $1 - \lambda_{\text{init}}$, which keeps the
gradient's scale that of ordinary attention.

**An output gate** (Gated Attention, [Qiu et al. 2025](https://arxiv.org/abs/2505.06708),
used by Qwen3-Next's softmax layers) multiplies each head's output by a sigmoid gate
computed from the same token, $o \odot \sigma(g)$: a head can switch itself off for a
query without dumping weight on a sink (`gated_attention_output`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attention._checks import (
    broadcasts_to,
    check_lambda,
    check_query_key,
    check_query_key_value,
    check_real,
    check_same_dtype_and_device,
    check_scale,
    check_size,
    check_tensor,
    shape_str,
)
from attention._heads import repeat_heads
from attention._kernels import default_scale, working_dtype
from attention.functional import _attention_weights, _checked_mask
from attention.normalization import rms_norm

__all__ = [
    "differential_attention",
    "differential_lambda",
    "differential_lambda_init",
    "gated_attention_output",
]


def differential_lambda_init(layer_idx: int) -> float:
    r"""The DIFF Transformer's $\lambda_{\text{init}}$ for a layer: $0.8 - 0.6\, e^{-0.3 \cdot i}$.

    With $i$ = ``layer_idx``. The paper writes $0.8 - 0.6\, e^{-0.3 (l - 1)}$ for layer
    $l = 1, 2, \dots$; ``layer_idx`` counts from 0, as Transformers' ``DiffLlama`` and
    the paper's code (``depth``) do, so ``layer_idx = l - 1``. It rises from 0.2 in the
    first layer towards 0.8: deeper layers subtract more.

    Args:
        layer_idx: The layer's index, counting from 0.

    Returns:
        $\lambda_{\text{init}}$, a float in $[0.2, 0.8)$.

    Raises:
        TypeError: If ``layer_idx`` is not an int.
        ValueError: If ``layer_idx`` is negative.

    Examples:
        >>> from attention import differential_lambda_init
        >>> [round(differential_lambda_init(i), 4) for i in (0, 1, 5, 60)]
        [0.2, 0.3555, 0.6661, 0.8]
    """
    layer_idx = check_size("layer_idx", layer_idx)
    return 0.8 - 0.6 * math.exp(-0.3 * layer_idx)


def differential_lambda(
    lambda_q1: Tensor, lambda_k1: Tensor, lambda_q2: Tensor, lambda_k2: Tensor, lambda_init: float
) -> Tensor:
    r"""The DIFF Transformer's $\lambda$, from four learned vectors and $\lambda_{\text{init}}$.

    $$\lambda = e^{\lambda_{q_1} \cdot \lambda_{k_1}} - e^{\lambda_{q_2} \cdot \lambda_{k_2}}
    + \lambda_{\text{init}}.$$

    The reparameterisation keeps $\lambda$'s learning dynamics those of the other
    weights: four learned vectors of the head size $D$, initialised near 0 (normal,
    standard deviation 0.1), give $\lambda \approx \lambda_{\text{init}}$ at the start.
    Computed in float32 for float16/bfloat16 vectors.

    Args:
        lambda_q1: ``(..., D)``; one vector per layer in the paper and DiffLlama.
        lambda_k1: ``(..., D)``, the shape of ``lambda_q1``.
        lambda_q2: ``(..., D)``, the shape of ``lambda_q1``.
        lambda_k2: ``(..., D)``, the shape of ``lambda_q1``.
        lambda_init: $\lambda_{\text{init}}$, e.g. from `differential_lambda_init`.

    Returns:
        Tensor of shape ``(...)`` (a scalar for ``(D,)`` vectors), in their dtype.

    Raises:
        TypeError: If a vector is not a floating-point tensor, dtypes differ, or
            ``lambda_init`` is not a real number.
        ValueError: If the vectors' shapes differ or ``lambda_init`` is not finite.

    Examples:
        >>> import torch
        >>> from attention import differential_lambda
        >>> zero = torch.zeros(4)
        >>> differential_lambda(zero, zero, zero, zero, 0.2)  # e^0 - e^0 + 0.2
        tensor(0.2000)
    """
    names = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
    vectors = dict(zip(names, (lambda_q1, lambda_k1, lambda_q2, lambda_k2), strict=True))
    for name, t in vectors.items():
        check_tensor(name, t, min_ndim=1)
    check_same_dtype_and_device(**vectors)
    if len({t.shape for t in vectors.values()}) != 1:
        shapes = ", ".join(f"{name} {shape_str(t)}" for name, t in vectors.items())
        raise ValueError(f"the four lambda vectors must have the same shape (..., D); got {shapes}")
    lambda_init = check_real("lambda_init", lambda_init)

    dtype = working_dtype(lambda_q1.dtype)
    q1, k1, q2, k2 = (t.to(dtype) for t in vectors.values())
    lam = torch.exp((q1 * k1).sum(-1)) - torch.exp((q2 * k2).sum(-1)) + lambda_init
    return lam.to(lambda_q1.dtype)


def differential_attention(
    query1: Tensor,
    key1: Tensor,
    query2: Tensor,
    key2: Tensor,
    value: Tensor,
    lambda_full: Tensor | float,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    lambda_init: float | None = None,
    eps: float = 1e-5,
) -> Tensor:
    r"""Differential attention: one softmax map minus $\lambda$ times another, times $V$.

    $$\operatorname{DiffAttn} = \big(\operatorname{softmax}(Q_1 K_1^\top \cdot \text{scale})
    - \lambda\, \operatorname{softmax}(Q_2 K_2^\top \cdot \text{scale})\big)\, V.$$

    Two attention maps over the same keys' positions, the second subtracted with weight
    $\lambda$ (``lambda_full``), applied to one value. Each map is the softmax of
    [`attention_weights`][attention.functional.attention_weights], under the same mask.
    With ``lambda_init`` the result is also what a DIFF Transformer head outputs:
    RMSNorm over each head's features, without a gain, times
    $1 - \lambda_{\text{init}}$:

    $$\operatorname{head} = (1 - \lambda_{\text{init}}) \cdot
    \operatorname{RMSNorm}(\operatorname{DiffAttn}).$$

    Each of the ``H`` heads here is a pair of softmax heads, one per map; how a model
    lays the pairs out in its projections is its own convention. The paper's code
    pairs adjacent heads $(2i, 2i + 1)$ of a ``2H``-head projection. Transformers'
    ``DiffLlama`` pairs query heads $i$ and $i + H$ of its ``2H`` (key heads likewise),
    and gives key/value head $j$ the value heads $j$ and $j + H_{kv}$ side by side:
    ``query1, query2 = q.chunk(2, dim=-3)``, the same for the key, and
    ``value = torch.cat(v.chunk(2, dim=-3), dim=-1)``.

    Args:
        query1: ``(..., H, L, D)``, the queries of the first map.
        key1: ``(..., H, S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        query2: The queries of the second map, the shape of ``query1``.
        key2: The keys of the second map, the shape of ``key1``.
        value: ``(..., H, S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``; ``Dv =
            2 D`` in the paper.
        lambda_full: $\lambda$: a number, or a tensor of shape ``()`` or ``(H,)`` (one
            per head), e.g. from `differential_lambda`.
        attn_mask: Optional mask broadcastable to ``(..., H, L, S)``, for both maps:
            bool (True = may attend) or float (added to the scores).
        is_causal: Top-left aligned causal mask. Cannot be combined with ``attn_mask``.
        scale: Factor applied to $Q K^\top$ in both maps; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in
            [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention].
        lambda_init: Keyword only. ``None`` (the default): the bare difference
            $\operatorname{DiffAttn}$. A number: the normalised head output above.
        eps: Keyword only. The RMSNorm's $\epsilon$, used with ``lambda_init``; 1e-5
            in the paper, ``rms_norm_eps`` in DiffLlama.

    Returns:
        Tensor of shape ``(..., H, L, Dv)``, in the query's dtype.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, the mask
            has an unsupported dtype, or ``lambda_full`` / ``lambda_init`` is neither a
            number nor (``lambda_full``) a tensor.
        ValueError: If shapes are inconsistent (``query2`` or ``key2`` unlike
            ``query1`` or ``key1``, head sizes, lengths, head counts, ``lambda_full``
            not ``()`` or ``(H,)``), a value is not finite, the mask does not
            broadcast, or ``is_causal`` is combined with ``attn_mask``.

    Examples:
        >>> import torch
        >>> from attention import differential_attention
        >>> q1 = torch.tensor([[[4.0, 0.0]]])  # (H, L, D): map 1 prefers key 0
        >>> q2 = torch.zeros(1, 1, 2)  # map 2 is uniform: the common noise
        >>> k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (H, S, D)
        >>> v = torch.tensor([[[1.0], [-1.0]]])  # (H, S, Dv)
        >>> diff = differential_attention(q1, k, q2, k, v, 0.5, scale=1.0)
        >>> diff  # (0.982 - 0.5 * 0.5) * 1 + (0.018 - 0.5 * 0.5) * -1
        tensor([[[0.9640]]])
        >>> differential_attention(q1, k, q2, k, v, 0.0, scale=1.0, lambda_init=0.2)
        tensor([[[0.8000]]])
    """
    query1, key1, value = check_query_key_value(query1, key1, value, enable_gqa)
    query2, key2 = check_query_key(query2, key2, enable_gqa)
    check_same_dtype_and_device(query1=query1, query2=query2)
    for name, t, like_name, like in (
        ("query2", query2, "query1", query1),
        ("key2", key2, "key1", key1),
    ):
        if t.shape != like.shape:
            raise ValueError(
                f"{name} must have the shape of {like_name}; "
                f"got {like_name} {shape_str(like)}, {name} {shape_str(t)}"
            )
    mask = _checked_mask(attn_mask, is_causal, query1, key1, enable_gqa)
    scale = default_scale(query1, check_scale(scale))
    lam = check_lambda(lambda_full, query1)
    if lambda_init is not None:
        lambda_init = check_real("lambda_init", lambda_init)

    p1 = _attention_weights(query1, key1, mask, scale, enable_gqa)  # (..., H, L, S)
    p2 = _attention_weights(query2, key2, mask, scale, enable_gqa)  # (..., H, L, S)
    if enable_gqa:
        value = repeat_heads(value, query1.shape[-3])  # (..., Hkv, S, Dv) -> (..., H, S, Dv)
    out = (p1 - lam.to(p1.dtype) * p2) @ value.to(p1.dtype)  # (..., H, L, Dv)
    if lambda_init is not None:
        out = (1 - lambda_init) * rms_norm(out, eps=eps)
    return out.to(query1.dtype)


def gated_attention_output(attn_output: Tensor, gate: Tensor) -> Tensor:
    r"""The output gate of Gated Attention and Qwen3-Next: $o \odot \sigma(g)$.

    Each feature of each head's attention output is multiplied by the logistic
    function of a gate logit computed from the same token (elementwise and
    query-dependent: position G1 of Qiu et al. 2025), before the heads are joined by
    the output projection. A gate near 0 switches a head off for that query; that is
    what lets gated models do without an attention sink.

    Qwen3-Next's ``q_proj`` gives each head ``2 D`` outputs, the query's ``D`` then
    the gate's ``D``: ``query, gate = q_proj(x).view(B, L, H, 2 * D).chunk(2, dim=-1)``.
    A gate of shape ``(..., H, L, 1)``, one logit per head and query, is the paper's
    headwise variant.

    Args:
        attn_output: The attention output, e.g. ``(..., H, L, Dv)``, or ``(B, L, H * Dv)``
            after the heads are joined, as Qwen3-Next applies it.
        gate: Gate logits broadcastable to ``attn_output``'s shape, in its dtype.

    Returns:
        Tensor of ``attn_output``'s shape and dtype.

    Raises:
        TypeError: If an input is not a floating-point tensor, or the dtypes differ.
        ValueError: If ``gate`` does not broadcast to ``attn_output``'s shape.

    Examples:
        >>> import torch
        >>> from attention import gated_attention_output
        >>> out = torch.ones(2, 1, 3)  # (H, L, Dv)
        >>> gate = torch.tensor([[[0.0]], [[-100.0]]])  # (H, L, 1): head 1 switched off
        >>> gated_attention_output(out, gate)
        tensor([[[0.5000, 0.5000, 0.5000]],
        <BLANKLINE>
                [[0.0000, 0.0000, 0.0000]]])
    """
    attn_output = check_tensor("attn_output", attn_output, min_ndim=1)
    gate = check_tensor("gate", gate, min_ndim=0)
    check_same_dtype_and_device(attn_output=attn_output, gate=gate)
    if not broadcasts_to(tuple(gate.shape), tuple(attn_output.shape)):
        raise ValueError(
            f"gate must broadcast to attn_output's shape {shape_str(attn_output)}; "
            f"got gate {shape_str(gate)}"
        )
    return attn_output * torch.sigmoid(gate)

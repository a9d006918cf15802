r"""RMSNorm, and QK-norm: RMSNorm on each head's queries and keys before the scores.

RMSNorm ([Zhang and Sennrich 2019](https://arxiv.org/abs/1910.07467)) divides a vector
by its root mean square and multiplies by a learned gain:

$$\operatorname{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac{1}{D}\sum_d x_d^2 + \epsilon}} \odot g.$$

**QK-norm** applies it to every head's query and key, over the head dimension, before
RoPE and before the dot product (Qwen 3, Gemma 3, OLMo 2 over the whole projection). A
query of norm $\lVert q \rVert$ and a key of norm $\lVert k \rVert$ can score at most
$\lVert q \rVert \lVert k \rVert / \sqrt{D}$; after RMSNorm both norms are about
$\sqrt{D}$ times the gains, so no growth in the projections' weights can push the
scores, and the softmax, to saturation: the divergence of attention logits that
[Dehghani et al. 2023](https://arxiv.org/abs/2302.05442) stopped with it (with a
LayerNorm; [Henry et al. 2020](https://arxiv.org/abs/2010.04245) first normalised
queries and keys, with their L2 norms).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention._checks import check_choice, check_tensor, shape_str
from attention._kernels import working_dtype

__all__ = ["rms_norm"]

# The two orders of the last steps (see rms_norm).
CAST_THEN_MULTIPLY = "cast_then_multiply"
MULTIPLY_THEN_CAST = "multiply_then_cast"


def rms_norm(
    x: Tensor,
    weight: Tensor | None = None,
    *,
    eps: float = 1e-6,
    offset: float = 0.0,
    order: str | None = None,
) -> Tensor:
    r"""RMSNorm over the last dimension, with a gain of ``offset + weight``.

    $$\operatorname{rms\_norm}(x) = \frac{x}{\sqrt{\operatorname{mean}(x^2) + \epsilon}}
    \cdot (\text{offset} + w)$$

    Computed in float32 for float16/bfloat16 inputs (their squares lose too much), in
    the input's dtype otherwise, and returned in the input's dtype.

    Two conventions for the gain are in use, and ``offset`` chooses between them:

    - ``offset=0.0``: the gain is ``weight`` itself, initialised to ones (Llama, Qwen 3,
      OLMo 2, DeepSeek).
    - ``offset=1.0``: the gain is ``1 + weight``, with ``weight`` initialised to zeros
      (Gemma).

    And two orders of the last steps, which ``order`` chooses between. They give the
    same bits in float32 and float64, but not in float16 or bfloat16, where the cast
    rounds either the normalised vector or the product:

    - ``"cast_then_multiply"``: the normalised vector is cast back to the input's
      dtype, then multiplied by ``weight``, as Transformers' ``LlamaRMSNorm`` and
      ``Qwen3RMSNorm`` do. The default for ``offset=0.0``.
    - ``"multiply_then_cast"``: the product with the gain is taken in the working
      dtype, then cast back, as Transformers' ``Gemma3RMSNorm`` (the default for
      ``offset=1.0``) and ``Olmo2RMSNorm`` do: pass it for OLMo 2.

    For QK-norm, pass a query or key of shape ``(..., H, L, D)`` or ``(..., L, H, D)``
    and a ``weight`` of shape ``(D,)``: one gain shared by all heads.

    Args:
        x: Tensor of shape ``(..., D)``, floating point.
        weight: The gain, shape ``(D,)``; ``None`` for no gain (a gain of ones).
        eps: Added to the mean square before the square root; at least 0.
        offset: Added to ``weight`` to form the gain: 0.0 or 1.0 in current models.
        order: ``"cast_then_multiply"`` or ``"multiply_then_cast"``; ``None`` for the
            order of ``offset``'s convention (the first for 0.0, the second
            otherwise).

    Returns:
        Tensor of the shape and dtype of ``x``, each last-dimension vector with
            root mean square 1 before the gain (up to ``eps``).

    Raises:
        TypeError: If ``x`` or ``weight`` is not a floating-point tensor.
        ValueError: If ``weight`` is not of shape ``(D,)``, ``eps`` is negative, or
            ``order`` is not one of the two orders.

    Examples:
        >>> import torch
        >>> from attention import rms_norm
        >>> x = torch.tensor([[3.0, 4.0], [1.0, -1.0]])
        >>> rms_norm(x, eps=0.0)  # root mean squares 3.5355 and 1
        tensor([[ 0.8485,  1.1314],
                [ 1.0000, -1.0000]])
        >>> rms_norm(x, torch.tensor([2.0, 0.5]), eps=0.0)
        tensor([[ 1.6971,  0.5657],
                [ 2.0000, -0.5000]])
        >>> rms_norm(x, torch.zeros(2), eps=0.0, offset=1.0)  # Gemma: gain 1 + 0
        tensor([[ 0.8485,  1.1314],
                [ 1.0000, -1.0000]])
        >>> # In bfloat16 the order shows: OLMo 2 rounds once, Llama twice.
        >>> xb = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
        >>> wb = torch.full((2,), 0.9, dtype=torch.bfloat16)
        >>> rms_norm(xb, wb, eps=0.0, order="multiply_then_cast")  # OLMo 2
        tensor([[0.5664, 1.1328]], dtype=torch.bfloat16)
        >>> rms_norm(xb, wb, eps=0.0)  # cast_then_multiply: Llama, Qwen 3
        tensor([[0.5703, 1.1406]], dtype=torch.bfloat16)
    """
    x = check_tensor("x", x, min_ndim=1)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0; got {eps!r}")
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"offset must be a float; got {type(offset).__name__}")
    if order is None:
        order = MULTIPLY_THEN_CAST if offset else CAST_THEN_MULTIPLY
    check_choice("order", order, (CAST_THEN_MULTIPLY, MULTIPLY_THEN_CAST))
    if weight is not None:
        weight = check_tensor("weight", weight, min_ndim=1)
        if weight.shape != x.shape[-1:]:
            raise ValueError(
                f"weight must have shape ({x.shape[-1]},), the last dimension of x "
                f"{shape_str(x)}; got {shape_str(weight)}"
            )
    dtype = working_dtype(x.dtype)
    xw = x.to(dtype)
    normed = xw * torch.rsqrt(xw.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return normed.to(x.dtype)
    if order == MULTIPLY_THEN_CAST:
        return (normed * (offset + weight.to(dtype))).to(x.dtype)
    gain = offset + weight if offset else weight  # 0 + weight would turn -0.0 into 0.0
    return gain * normed.to(x.dtype)

r"""Attention in plain NumPy, forward and backward, written to be read like a textbook.

This module is a second, independent implementation of the package's mathematics: no
PyTorch, no autograd, nothing fused. Each function is a few lines of NumPy that follow
their equation, and the tests check every one of them against PyTorch in float64. Its
main use is the one thing autograd hides: the gradient of attention, derived by hand in
[`scaled_dot_product_attention_backward`][attention.numpy_reference.scaled_dot_product_attention_backward].

The forward pass, with queries $Q \in \mathbb{R}^{L \times D}$, keys
$K \in \mathbb{R}^{S \times D}$, values $V \in \mathbb{R}^{S \times D_v}$ and a mask $M$
($0$ where a query may attend, $-\infty$ where it may not):

$$
P = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{D}} + M\right), \qquad
O = P V,
$$

with the softmax taken over each row, so row $i$ of $P$ says how much query $i$ draws
from each of the $S$ values. Multi-head attention runs this $H$ times on slices of
learned projections and mixes the results with an output projection.

Conventions, shared with the rest of the package:

- Shapes ``(..., L, D)``, ``(..., S, D)``, ``(..., S, Dv)``; any leading dimensions
  (batch, heads) ride along and must be equal for query, key and value.
- A boolean ``attn_mask`` is True where a query **may** attend.
- A query whose keys are all masked gets zero weights and a zero output, never NaN.
- Vectors are rows and a projection is ``x @ w``, as in the paper.
- Arguments must be ``numpy.ndarray`` with a floating dtype, all of the same dtype;
  lists and integer arrays are refused rather than silently converted (call
  ``np.asarray(x, dtype=np.float64)`` first). Results keep that dtype, and the
  arithmetic runs in it: use float64 for a reference.

The names repeat those of [`attention.functional`][attention.functional] on purpose, so
import the module rather than its functions when you use both:

>>> import numpy as np
>>> from attention import numpy_reference as npr
>>> npr.softmax(np.array([0.0, 0.0, 0.0, 0.0]))
array([0.25, 0.25, 0.25, 0.25])

References:
    - Vaswani et al., "Attention Is All You Need", 2017.
      [arXiv:1706.03762](https://arxiv.org/abs/1706.03762)
    - Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
      IO-Awareness", 2022 (the backward pass, appendix B).
      [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "cosine_similarity",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "softmax",
]

FloatArray: TypeAlias = NDArray[np.floating[Any]]
BoolArray: TypeAlias = NDArray[np.bool_]


def softmax(x: FloatArray, axis: int = -1) -> FloatArray:
    r"""Softmax along one axis, $\operatorname{softmax}(x)_j = e^{x_j} / \sum_k e^{x_k}$.

    Computed as $e^{x_j - m} / \sum_k e^{x_k - m}$ with $m = \max_k x_k$: the same
    value (the factor $e^{-m}$ cancels), but every exponent is at most 0, so nothing
    overflows. Entries of $-\infty$ get probability 0. A slice that is entirely
    $-\infty$ (a query with every key masked) gives zeros instead of $0/0 =$ NaN, the
    same policy as the rest of the package.

    Args:
        x: Floating-point array of any shape with at least one dimension. Entries may
            be $-\infty$; $+\infty$ and NaN give NaN, as in PyTorch.
        axis: The axis to normalise over.

    Returns:
        Array of the shape and dtype of ``x``, non-negative, summing to 1 along
            ``axis`` (to 0 where the slice is entirely $-\infty$).

    Raises:
        TypeError: If ``x`` is not a floating-point NumPy array or ``axis`` is not an int.
        ValueError: If ``x`` is 0-d or ``axis`` is out of range.

    Examples:
        >>> import numpy as np
        >>> from attention.numpy_reference import softmax
        >>> softmax(np.array([1000.0, 1001.0]))  # np.exp(1000.0) alone would be inf
        array([0.26894142, 0.73105858])
        >>> softmax(np.array([[0.0, np.log(3.0)], [-np.inf, -np.inf]]))
        array([[0.25, 0.75],
               [0.  , 0.  ]])
    """
    x = _check_array("x", x, min_ndim=1)
    axis = _check_axis(axis, x)
    # initial=-inf also covers an empty axis, which then counts as fully masked.
    row_max = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    # A slice of all -inf has maximum -inf, and -inf - (-inf) is NaN: shift it by 0
    # instead. Its exponentials are then all 0 and the division below returns zeros.
    row_max = np.where(np.isneginf(row_max), 0.0, row_max)
    exps = np.exp(x - row_max)
    total = np.sum(exps, axis=axis, keepdims=True)  # >= 1 unless the slice is all -inf
    return exps / np.where(total == 0.0, 1.0, total)


def cosine_similarity(a: FloatArray, b: FloatArray) -> FloatArray:
    r"""Cosine of the angle between vectors along the last axis.

    $$
    \cos\theta = \frac{a \cdot b}{\lVert a \rVert \, \lVert b \rVert} \in [-1, 1]
    $$

    1 for vectors pointing the same way, 0 for orthogonal ones, $-1$ for opposite
    ones, whatever their lengths. An attention score is the same dot product without
    the division, $q \cdot k = \lVert q \rVert \lVert k \rVert \cos\theta$: a key scores
    high by pointing the query's way *and* by being long.

    Since the cosine ignores length, each vector is first divided by its largest
    absolute entry. That changes nothing mathematically, but keeps $a \cdot a$ from
    overflowing to infinity (entries near $10^{200}$) or underflowing to 0 (entries
    near $10^{-200}$). The result is clipped to $[-1, 1]$ so that rounding can never
    make ``np.arccos`` return NaN.

    Args:
        a: ``(..., n)``, finite entries.
        b: ``(..., n)``, finite entries, of ``a``'s dtype; the leading dimensions of
            ``a`` and ``b`` broadcast against each other.

    Returns:
        Array of the broadcast leading shape ``(...)``; 0-d for two plain vectors.

    Raises:
        TypeError: If an input is not a floating-point NumPy array, or the dtypes differ.
        ValueError: If an input is 0-d, the vector lengths $n$ differ, the leading
            dimensions do not broadcast, or a vector is zero (it has no direction, so
            the cosine is undefined).

    Examples:
        >>> import numpy as np
        >>> from attention.numpy_reference import cosine_similarity
        >>> x = np.array([1.0, 2.0, 3.0, 4.0])
        >>> y = np.array([1.2, 2.1, 2.9, 3.7])
        >>> cos = cosine_similarity(x, y)
        >>> print(f"cosine {cos:.4f}, angle {np.degrees(np.arccos(cos)):.2f} degrees")
        cosine 0.9980, angle 3.59 degrees

        Three vectors against one, by broadcasting: orthogonal, parallel, opposite.

        >>> import numpy as np
        >>> from attention.numpy_reference import cosine_similarity
        >>> cosine_similarity(np.array([[5.0, 0.0], [0.0, 3.0], [0.0, -1.0]]), np.array([0.0, 2.0]))
        array([ 0.,  1., -1.])
    """
    a = _check_array("a", a, min_ndim=1)
    b = _check_array("b", b, min_ndim=1)
    _check_same_dtype(a=a, b=b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            "a and b must have the same vector length n (last dimension); "
            f"got a {_shape_str(a)}, b {_shape_str(b)}"
        )
    if not _broadcastable(a.shape[:-1], b.shape[:-1]):
        raise ValueError(
            "a and b must have leading dimensions that broadcast against each other; "
            f"got a {_shape_str(a)}, b {_shape_str(b)}"
        )
    a_unit = _unit_vectors("a", a)  # (..., n)
    b_unit = _unit_vectors("b", b)  # (..., n)
    cos = np.sum(a_unit * b_unit, axis=-1)  # (...)
    return np.asarray(np.clip(cos, -1.0, 1.0))


def scaled_dot_product_attention(
    query: FloatArray,
    key: FloatArray,
    value: FloatArray,
    attn_mask: BoolArray | None = None,
    scale: float | None = None,
) -> tuple[FloatArray, FloatArray]:
    r"""Scaled dot-product attention, returning the output and the attention weights.

    $$
    P = \operatorname{softmax}\!\left(\text{scale} \cdot Q K^\top + M\right), \qquad
    O = P V,
    $$

    with $\text{scale} = 1/\sqrt{D}$ unless given, and $M_{ij} = 0$ where query $i$ may
    attend to key $j$, $-\infty$ where it may not. Row $i$ of $P$ is a probability
    distribution over the $S$ keys, and output row $i$ is the matching average of the
    value rows. A query with every key masked gets a row of zero weights and a zero
    output, as in
    [`attention.scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention]
    (which returns the same numbers from PyTorch).

    Args:
        query: ``(..., L, D)``.
        key: ``(..., S, D)``, with the leading dimensions of ``query``.
        value: ``(..., S, Dv)``, with the leading dimensions of ``key``.
        attn_mask: Optional bool array broadcastable to ``(..., L, S)``, True where
            the query may attend. Float (additive) masks are not accepted here.
        scale: Factor applied to $Q K^\top$; defaults to $1/\sqrt{D}$.

    Returns:
        ``(output, weights)``: ``output`` of shape ``(..., L, Dv)`` and ``weights``
            $P$ of shape ``(..., L, S)``, rows summing to 1 (0 when fully masked).

    Raises:
        TypeError: If an input is not a floating-point NumPy array, the dtypes differ,
            ``attn_mask`` is not a bool array, or ``scale`` is not a real number.
        ValueError: If an input has fewer than 2 dimensions, the head sizes $D$, the
            lengths $S$ or the leading dimensions differ, ``attn_mask`` does not
            broadcast, or ``scale`` is not finite.

    Examples:
        The worked example of the concepts page, $D = 4$ so the scale is $1/2$:

        >>> import numpy as np
        >>> from attention.numpy_reference import scaled_dot_product_attention
        >>> Q = np.array([[1.0, 1, 0, 0], [0, 0, 2, 2]])  # (L, D) = (2, 4)
        >>> K = np.array([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]])  # (S, D) = (3, 4)
        >>> V = np.array([[1.0, 0], [0, 1], [1, 1]])  # (S, Dv) = (3, 2)
        >>> O, P = scaled_dot_product_attention(Q, K, V)
        >>> P.round(4)  # row 0 is softmax([1, 0, 1])
        array([[0.4223, 0.1554, 0.4223],
               [0.0634, 0.4683, 0.4683]])
        >>> P.sum(axis=-1)
        array([1., 1.])
        >>> O.round(4)
        array([[0.8446, 0.5777],
               [0.5317, 0.9366]])

        Query 0 may see key 0 only, query 1 nothing at all:

        >>> import numpy as np
        >>> from attention.numpy_reference import scaled_dot_product_attention
        >>> Q, K = np.ones((2, 4)), np.ones((3, 4))  # (L, D), (S, D)
        >>> V = np.array([[1.0, 0], [0, 1], [1, 1]])  # (S, Dv)
        >>> mask = np.array([[True, False, False], [False, False, False]])  # (L, S)
        >>> O, P = scaled_dot_product_attention(Q, K, V, mask)
        >>> P
        array([[1., 0., 0.],
               [0., 0., 0.]])
        >>> O
        array([[1., 0.],
               [0., 0.]])
    """
    # Validate everything before any arithmetic, so errors name the argument at fault.
    query, key, value = _check_query_key_value(query, key, value)
    scale = _check_scale(scale, query)
    scores_shape = (*query.shape[:-1], key.shape[-2])  # (..., L, S)
    if attn_mask is not None:
        attn_mask = _check_attn_mask(attn_mask, scores_shape, "the scores shape (..., L, S)")
    return _attend(query, key, value, attn_mask, scale)


def scaled_dot_product_attention_backward(
    grad_output: FloatArray,
    query: FloatArray,
    key: FloatArray,
    value: FloatArray,
    weights: FloatArray,
    scale: float | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    r"""Gradients of a loss with respect to $Q$, $K$ and $V$, derived by hand.

    The forward pass, one step per line, with $\text{scale}$ the factor on the scores:

    $$
    Z = Q K^\top \cdot \text{scale} + M, \qquad P = \operatorname{softmax}_{\text{rows}}(Z), \qquad
    O = P V.
    $$

    Given $dO = \partial \mathcal{L} / \partial O$ (the gradient of the loss
    $\mathcal{L}$ arriving from the rest of the network, shape of $O$), walk the steps
    backwards. Write $dX$ for $\partial \mathcal{L} / \partial X$.

    **Values.** $O = PV$ is linear in $V$, and $O_{ic} = \sum_j p_{ij} V_{jc}$ gives
    $\partial \mathcal{L} / \partial V_{jc} = \sum_i p_{ij}\, dO_{ic}$:

    $$dV = P^\top dO \qquad (S \times D_v).$$

    **Weights.** Likewise, as a function of $P$,

    $$dP = dO\, V^\top \qquad (L \times S).$$

    **Softmax.** Each row $p = \operatorname{softmax}(z)$ depends only on its own row
    $z$. Differentiating $p_j = e^{z_j} / \sum_k e^{z_k}$ gives
    $\partial p_j / \partial z_k = p_j (\delta_{jk} - p_k)$, that is, the Jacobian

    $$J = \operatorname{diag}(p) - p\, p^\top,$$

    which is symmetric. The chain rule gives $dz = J^\top dp = J\, dp
    = p \odot dp - p\,(p \cdot dp)$, and for all rows at once

    $$dZ = P \odot \left(dP - \operatorname{rowsum}(dP \odot P)\right),$$

    where $\operatorname{rowsum}$ is an $L \times 1$ column broadcast over the $S$
    columns. No $L \times S \times S$ Jacobian is ever built. (FlashAttention uses
    $\operatorname{rowsum}(dP \odot P) = \operatorname{rowsum}(dO \odot O)$, which
    needs no $P$.)

    **Scores.** $M$ is a constant, and $Q K^\top \cdot \text{scale}$ is bilinear:

    $$dQ = \text{scale} \cdot dZ\, K \quad (L \times D), \qquad
    dK = \text{scale} \cdot dZ^\top Q \quad (S \times D).$$

    **Masks need no special case.** A masked pair has $p_{ij} = 0$, so
    $dZ_{ij} = 0$ and it adds nothing to $dQ$ or $dK$, and nothing to $dV$ through
    $P^\top$. A fully masked row has $p_{i\cdot} = 0$, so that query's $dQ$ row is 0 and
    it contributes nothing to $dK$ or $dV$: zero gradients, no NaN. That is also why
    there is no ``attn_mask`` argument: the mask is already in ``weights``.

    Args:
        grad_output: $dO$, ``(..., L, Dv)``.
        query: ``(..., L, D)``, as passed to the forward pass.
        key: ``(..., S, D)``, as passed to the forward pass.
        value: ``(..., S, Dv)``, as passed to the forward pass.
        weights: $P$, ``(..., L, S)``, as returned by the forward pass (with the mask
            already applied).
        scale: The forward pass's scale; defaults to $1/\sqrt{D}$.

    Returns:
        ``(grad_query, grad_key, grad_value)`` of the shapes of ``query``, ``key`` and
            ``value``.

    Raises:
        TypeError: If an input is not a floating-point NumPy array, the dtypes differ,
            or ``scale`` is not a real number.
        ValueError: If ``query``, ``key`` and ``value`` are inconsistent (as in the
            forward pass), ``weights`` is not ``(..., L, S)``, ``grad_output`` is not
            ``(..., L, Dv)``, or ``scale`` is not finite.

    Examples:
        With a single key every weight is 1, whatever the query and key, so the output
        does not depend on them: $dQ = dK = 0$, and $dV$ is the sum of the rows of $dO$.

        >>> import numpy as np
        >>> from attention.numpy_reference import (
        ...     scaled_dot_product_attention,
        ...     scaled_dot_product_attention_backward,
        ... )
        >>> q = np.array([[1.0, 2.0], [3.0, 4.0]])  # (L, D) = (2, 2)
        >>> k = np.array([[0.5, 1.0]])  # (S, D) = (1, 2)
        >>> v = np.array([[7.0]])  # (S, Dv) = (1, 1)
        >>> out, w = scaled_dot_product_attention(q, k, v)
        >>> grad_out = np.array([[1.0], [10.0]])  # (L, Dv)
        >>> dq, dk, dv = scaled_dot_product_attention_backward(grad_out, q, k, v, w)
        >>> dq
        array([[0., 0.],
               [0., 0.]])
        >>> dk
        array([[0., 0.]])
        >>> dv
        array([[11.]])
    """
    query, key, value = _check_query_key_value(query, key, value)
    scale = _check_scale(scale, query)
    L, S, Dv = query.shape[-2], key.shape[-2], value.shape[-1]
    lead = query.shape[:-2]
    weights = _check_array("weights", weights, min_ndim=2)
    _check_same_dtype(query=query, weights=weights)
    if weights.shape != (*lead, L, S):
        raise ValueError(
            "weights must have the shape (..., L, S) = "
            f"{_dims_str((*lead, L, S))} of the forward pass; got {_shape_str(weights)}"
        )
    grad_output = _check_array("grad_output", grad_output, min_ndim=2)
    _check_same_dtype(query=query, grad_output=grad_output)
    if grad_output.shape != (*lead, L, Dv):
        raise ValueError(
            "grad_output must have the output's shape (..., L, Dv) = "
            f"{_dims_str((*lead, L, Dv))}; got {_shape_str(grad_output)}"
        )

    P, dO = weights, grad_output
    dV = _transpose(P) @ dO  # (..., S, L) @ (..., L, Dv) -> (..., S, Dv)
    dP = dO @ _transpose(value)  # (..., L, Dv) @ (..., Dv, S) -> (..., L, S)
    row_dot = np.sum(dP * P, axis=-1, keepdims=True)  # (..., L, 1)
    dZ = P * (dP - row_dot)  # (..., L, S); the softmax Jacobian, row by row
    dQ = scale * (dZ @ key)  # (..., L, S) @ (..., S, D) -> (..., L, D)
    dK = scale * (_transpose(dZ) @ query)  # (..., S, L) @ (..., L, D) -> (..., S, D)
    return dQ, dK, dV


def multi_head_attention(
    x_query: FloatArray,
    x_key: FloatArray,
    x_value: FloatArray,
    w_q: FloatArray,
    w_k: FloatArray,
    w_v: FloatArray,
    w_o: FloatArray,
    num_heads: int,
    attn_mask: BoolArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    r"""Multi-head attention (forward), without biases.

    $$
    \operatorname{MultiHead}(X_q, X_k, X_v)
        = \operatorname{Concat}(\text{head}_1, \dots, \text{head}_H)\, W_O,
    \qquad
    \text{head}_h = \operatorname{Attention}\!\left(X_q W_Q^{(h)},\, X_k W_K^{(h)},\,
        X_v W_V^{(h)}\right),
    $$

    where $W_Q^{(h)}$ is the block of $D = E / H$ columns $hD, \dots, (h+1)D - 1$ of
    $W_Q$ (likewise $W_K$, $W_V$), and $\operatorname{Attention}$ is
    [`scaled_dot_product_attention`][attention.numpy_reference.scaled_dot_product_attention]
    with scale $1/\sqrt{D}$, the *per-head* size. Projecting once with the full
    $E \times E$ matrix and then splitting the result into $H$ slices of width $D$
    computes all $H$ heads' projections at once; that is what the code does.

    **Weight convention.** Vectors are rows and every projection is ``x @ w`` with
    ``w`` of shape ``(E_in, E_out)``, as in the paper
    ($W_i^Q \in \mathbb{R}^{d_\text{model} \times d_k}$). ``torch.nn.Linear`` stores the
    transpose, ``(E_out, E_in)``, and computes ``x @ weight.T``. So for
    ``torch.nn.MultiheadAttention(E, H, bias=False)``: ``in_proj_weight`` stacks
    ``w_q.T``, ``w_k.T``, ``w_v.T`` (rows ``0:E``, ``E:2E``, ``2E:3E``), and
    ``out_proj.weight`` is ``w_o.T``. All four matrices are square, so a forgotten
    transpose passes every shape check and silently gives other numbers.

    Args:
        x_query: ``(..., L, E)``, the sequence the queries come from.
        x_key: ``(..., S, E)``, with the leading dimensions of ``x_query``.
        x_value: ``(..., S, E)``, of the shape of ``x_key`` (often the same array).
        w_q: ``(E, E)`` query projection.
        w_k: ``(E, E)`` key projection.
        w_v: ``(E, E)`` value projection.
        w_o: ``(E, E)`` output projection, applied to the concatenated heads.
        num_heads: Number of heads $H$; must divide $E$.
        attn_mask: Optional bool array broadcastable to ``(..., L, S)``, True where the
            query may attend; the same mask applies to every head. Note the polarity
            is the opposite of ``torch.nn.MultiheadAttention``'s ``attn_mask``.

    Returns:
        ``(output, weights)``: ``output`` of shape ``(..., L, E)`` and the per-head
            attention weights of shape ``(..., H, L, S)`` (PyTorch's module averages them
            over the heads unless ``average_attn_weights=False``).

    Raises:
        TypeError: If an input is not a floating-point NumPy array, the dtypes differ,
            ``num_heads`` is not an int, or ``attn_mask`` is not a bool array.
        ValueError: If an input has fewer than 2 dimensions, the widths $E$, the
            lengths $S$ or the leading dimensions differ, a weight is not ``(E, E)``,
            ``num_heads`` is not positive or does not divide $E$, or ``attn_mask``
            does not broadcast.

    Examples:
        >>> import numpy as np
        >>> from attention.numpy_reference import multi_head_attention
        >>> rng = np.random.default_rng(0)
        >>> E, H = 12, 3  # so each head has D = 4
        >>> x = rng.standard_normal((2, 5, E))  # (B, L, E)
        >>> w_q, w_k, w_v, w_o = rng.standard_normal((4, E, E))
        >>> out, weights = multi_head_attention(x, x, x, w_q, w_k, w_v, w_o, num_heads=H)
        >>> out.shape, weights.shape  # (B, L, E), (B, H, L, S)
        ((2, 5, 12), (2, 3, 5, 5))
        >>> np.allclose(weights.sum(axis=-1), 1.0)
        True

        One head with identity projections is plain attention on ``x``:

        >>> import numpy as np
        >>> from attention.numpy_reference import (
        ...     multi_head_attention,
        ...     scaled_dot_product_attention,
        ... )
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 12))  # (B, L, E)
        >>> eye = np.eye(12)  # (E, E)
        >>> out, _ = multi_head_attention(x, x, x, eye, eye, eye, eye, num_heads=1)
        >>> np.allclose(out, scaled_dot_product_attention(x, x, x)[0])
        True
    """
    x_query = _check_array("x_query", x_query, min_ndim=2)
    x_key = _check_array("x_key", x_key, min_ndim=2)
    x_value = _check_array("x_value", x_value, min_ndim=2)
    _check_same_dtype(x_query=x_query, x_key=x_key, x_value=x_value)
    E = x_query.shape[-1]
    if x_key.shape[-1] != E or x_value.shape[-1] != E:
        raise ValueError(
            "x_query, x_key and x_value must have the same model width E (last dimension); "
            f"got x_query {_shape_str(x_query)}, x_key {_shape_str(x_key)}, "
            f"x_value {_shape_str(x_value)}"
        )
    if x_key.ndim != x_query.ndim or x_key.shape[:-2] != x_query.shape[:-2]:
        raise ValueError(
            "x_query and x_key must have the same leading dimensions (..., L, E) and "
            f"(..., S, E); got x_query {_shape_str(x_query)}, x_key {_shape_str(x_key)}"
        )
    if x_value.shape != x_key.shape:
        raise ValueError(
            "x_key and x_value must have the same shape (..., S, E); "
            f"got x_key {_shape_str(x_key)}, x_value {_shape_str(x_value)}"
        )
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        _check_same_dtype(x_query=x_query, **{name: _check_array(name, w, min_ndim=2)})
        if w.shape != (E, E):
            raise ValueError(
                f"{name} must have shape (E, E) = ({E}, {E}), applied as x @ {name}; "
                f"got {_shape_str(w)}"
            )
    H = _check_num_heads(num_heads, E)
    D = E // H
    *lead, L, _ = x_query.shape
    S = x_key.shape[-2]
    if attn_mask is not None:
        attn_mask = _check_attn_mask(
            attn_mask, (*lead, L, S), "(..., L, S) (one mask for every head)"
        )
        attn_mask = np.broadcast_to(attn_mask, (*lead, L, S))[..., np.newaxis, :, :]
        # (..., 1, L, S): the new axis broadcasts over the heads

    q = _split_heads(x_query @ w_q, H)  # (..., L, E) -> (..., H, L, D)
    k = _split_heads(x_key @ w_k, H)  # (..., S, E) -> (..., H, S, D)
    v = _split_heads(x_value @ w_v, H)  # (..., S, E) -> (..., H, S, D)
    heads, weights = _attend(q, k, v, attn_mask, 1.0 / math.sqrt(D))
    # heads: (..., H, L, D), weights: (..., H, L, S)
    concat = _merge_heads(heads)  # (..., H, L, D) -> (..., L, E)
    return concat @ w_o, weights  # (..., L, E) @ (E, E) -> (..., L, E)


# --- the computation ------------------------------------------------------------------


def _attend(
    query: FloatArray,
    key: FloatArray,
    value: FloatArray,
    attn_mask: BoolArray | None,
    scale: float,
) -> tuple[FloatArray, FloatArray]:
    """Scores, mask, softmax and weighted sum, for validated inputs."""
    scores = (query @ _transpose(key)) * scale  # (..., L, D) @ (..., D, S) -> (..., L, S)
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf)  # (..., L, S)
    weights = softmax(scores, axis=-1)  # (..., L, S); a fully masked row is all zeros
    output = weights @ value  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    return output, weights


def _transpose(x: FloatArray) -> FloatArray:
    """Swap the last two axes. Not ``x.T``, which in NumPy reverses *all* the axes."""
    return np.swapaxes(x, -1, -2)


def _split_heads(x: FloatArray, num_heads: int) -> FloatArray:
    """``(..., L, E)`` to ``(..., H, L, D)``: head ``h`` gets columns ``h*D`` to ``(h+1)*D``."""
    *lead, L, E = x.shape
    x = x.reshape(*lead, L, num_heads, E // num_heads)  # (..., L, H, D)
    return np.swapaxes(x, -3, -2)  # (..., H, L, D)


def _merge_heads(x: FloatArray) -> FloatArray:
    """``(..., H, L, D)`` to ``(..., L, E)``, the inverse of `_split_heads`."""
    *lead, H, L, D = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., L, H, D)
    return x.reshape(*lead, L, H * D)  # (..., L, E): head h in columns h*D to (h+1)*D


def _unit_vectors(name: str, x: FloatArray) -> FloatArray:
    """``x`` divided by its length along the last axis; a zero vector is an error."""
    largest = np.max(np.abs(x), axis=-1, keepdims=True, initial=0.0)  # (..., 1)
    zero = largest[..., 0] == 0.0
    if np.any(zero):
        index = tuple(int(i) for i in np.argwhere(zero)[0])
        where = name if not index else f"{name}[{', '.join(str(i) for i in index)}]"
        raise ValueError(
            f"{where} is a zero vector, which has no direction, so the cosine is "
            f"undefined; got {name} of shape {_shape_str(x)}"
        )
    x = x / largest  # entries in [-1, 1], at least one of them +-1
    unit: FloatArray = x / np.linalg.norm(x, axis=-1, keepdims=True)
    return unit


# --- validation -----------------------------------------------------------------------


def _shape_str(a: NDArray[Any]) -> str:
    """Format a shape as ``(2, 4, 7, 16)`` for error messages."""
    return _dims_str(a.shape)


def _dims_str(dims: tuple[int, ...]) -> str:
    return str(tuple(dims))


def _check_array(name: str, value: object, *, min_ndim: int) -> FloatArray:
    """Require a floating-point NumPy array with at least ``min_ndim`` dimensions."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray; got {type(value).__name__}")
    if not np.issubdtype(value.dtype, np.floating):
        raise TypeError(
            f"{name} must have a floating-point dtype (float16, float32, float64); "
            f"got {value.dtype}"
        )
    if value.ndim < min_ndim:
        dimensions = "dimension" if min_ndim == 1 else "dimensions"
        raise ValueError(
            f"{name} must have at least {min_ndim} {dimensions}; got shape {_shape_str(value)}"
        )
    return value


def _check_same_dtype(**arrays: FloatArray) -> None:
    """Require every array to share the first one's dtype (no silent up-casting)."""
    (first_name, first), *rest = arrays.items()
    for name, a in rest:
        if a.dtype != first.dtype:
            raise TypeError(
                f"{first_name} and {name} must have the same dtype; "
                f"got {first_name} {first.dtype}, {name} {a.dtype}"
            )


def _check_query_key_value(
    query: object, key: object, value: object
) -> tuple[FloatArray, FloatArray, FloatArray]:
    query = _check_array("query", query, min_ndim=2)
    key = _check_array("key", key, min_ndim=2)
    value = _check_array("value", value, min_ndim=2)
    _check_same_dtype(query=query, key=key)
    _check_same_dtype(key=key, value=value)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "query and key must have the same head size D (last dimension); "
            f"got query {_shape_str(query)}, key {_shape_str(key)}"
        )
    if query.ndim != key.ndim or query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            "query and key must have the same leading dimensions (..., L, D) and "
            f"(..., S, D); got query {_shape_str(query)}, key {_shape_str(key)}"
        )
    if value.ndim != key.ndim or value.shape[:-1] != key.shape[:-1]:
        raise ValueError(
            "key and value must have the same leading dimensions and length S; "
            f"got key {_shape_str(key)}, value {_shape_str(value)}"
        )
    return query, key, value


def _check_scale(scale: object, query: FloatArray) -> float:
    """Require ``None`` (meaning 1/sqrt(D)) or a finite real number."""
    if scale is None:
        D = query.shape[-1]
        # D = 0: every score is an empty sum, 0, at any scale (PyTorch gives the mean
        # of the values); 1 stands in for 1/sqrt(0).
        return 1.0 / math.sqrt(D) if D > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise TypeError(f"scale must be a real number or None; got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite; got {scale}")
    return float(scale)


def _check_attn_mask(attn_mask: object, target: tuple[int, ...], what: str) -> BoolArray:
    """Require a bool array that broadcasts to ``target`` without changing it."""
    if not isinstance(attn_mask, np.ndarray):
        raise TypeError(
            f"attn_mask must be a numpy.ndarray or None; got {type(attn_mask).__name__}"
        )
    if attn_mask.dtype != np.bool_:
        raise TypeError(
            f"attn_mask must have dtype bool (True = may attend); got {attn_mask.dtype}"
        )
    if not _broadcasts_to(attn_mask.shape, target):
        raise ValueError(
            f"attn_mask must broadcast to {what} = {_dims_str(target)}; got {_shape_str(attn_mask)}"
        )
    return attn_mask


def _check_axis(axis: object, x: FloatArray) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int; got {type(axis).__name__}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(
            f"axis must be in [{-x.ndim}, {x.ndim}) for x of shape {_shape_str(x)}; got {axis}"
        )
    return int(axis)


def _check_num_heads(num_heads: object, E: int) -> int:
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)):
        raise TypeError(f"num_heads must be an int; got {type(num_heads).__name__}")
    if num_heads < 1:
        raise ValueError(f"num_heads must be at least 1; got {num_heads}")
    if E % num_heads != 0:
        raise ValueError(
            "the model width E must be divisible by num_heads (each head gets D = E / H "
            f"columns); got E={E}, num_heads={num_heads}"
        )
    return int(num_heads)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without changing ``target``."""
    if len(shape) > len(target):
        return False
    return all(n == 1 or n == t for n, t in zip(reversed(shape), reversed(target), strict=False))


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether shapes ``a`` and ``b`` broadcast against each other."""
    return all(m == n or 1 in (m, n) for m, n in zip(reversed(a), reversed(b), strict=False))

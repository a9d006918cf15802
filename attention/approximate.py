r"""Approximate softmax attention: less work, at a measured price in accuracy.

The functions in [`attention.efficient`][attention.efficient] are exact (tiled) or a
different function (linear attention). The ones here aim at *softmax attention itself*
and miss it by an amount set by a budget: the rank $r$ of a projection, the number
$D_\phi$ of random features, the number $m$ of landmarks. Two become exact when the
whole budget is spent (Linformer with the identity as projection, Nyström with one
landmark per position); FAVOR+ is unbiased and converges as features are added. The
concept page [Approximate attention](../concepts/approximate-attention.md) measures
each one's error against its budget.

- [`linformer_attention`][attention.approximate.linformer_attention] (Wang et al.,
  2020): project the $S$ keys and values down to $r$ rows, $U_K K$ and $U_V V$, and
  attend to those: $O(L\,r\,D)$ work. In a trained Linformer $U_K$ and $U_V$ are learned.
- [`performer_attention`][attention.approximate.performer_attention] (Choromanski et
  al., 2021, FAVOR+): positive random features $\phi$ with
  $\mathbb{E}[\phi(q)^\top\phi(k)] = \exp(q^\top k)$, so the softmax's numerator and
  denominator are *unbiased* estimates computed as linear attention: $O(n\,D_\phi\,D)$.
- [`nystrom_attention`][attention.approximate.nystrom_attention] (Xiong et al., 2021):
  the $L \times S$ softmax matrix rebuilt from $m$ landmark rows and columns,
  $\tilde{P} = F\,A^{+}B$: $O(n\,m\,D + m^3)$.

Reformer's LSH attention (Kitaev et al., 2020) is not implemented: it hashes queries
and keys into buckets and attends within a bucket, which is a sparsity pattern chosen
from the data; its point is speed on very long sequences, through sorting and
chunking that a readable CPU version would spend more time on than it saves. The
approximate-attention page measures what its bucketing keeps, with dense masks.

References:
    - Wang, Li, Khabsa, Fang and Ma, "Linformer: Self-Attention with Linear
      Complexity", 2020. [arXiv:2006.04768](https://arxiv.org/abs/2006.04768)
    - Choromanski, Likhosherstov, Dohan, Song, Gane, Sarlos, Hawkins, Davis, Mohiuddin,
      Kaiser, Belanger, Colwell and Weller, "Rethinking Attention with Performers",
      2021. [arXiv:2009.14794](https://arxiv.org/abs/2009.14794)
    - Xiong, Zeng, Chakraborty, Tan, Fung, Li and Singh, "Nyströmformer: A
      Nyström-Based Algorithm for Approximating Self-Attention", 2021.
      [arXiv:2102.03902](https://arxiv.org/abs/2102.03902)
    - Kitaev, Kaiser and Levskaya, "Reformer: The Efficient Transformer", 2020.
      [arXiv:2001.04451](https://arxiv.org/abs/2001.04451)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attention._checks import (
    broadcast,
    check_features_projection,
    check_flag,
    check_projection,
    check_query_key_value,
    check_scale,
    check_size,
    check_tensor,
    shape_str,
)
from attention._kernels import default_scale, working_dtype
from attention.efficient import linear_attention

__all__ = [
    "favor_features",
    "linformer_attention",
    "nystrom_attention",
    "performer_attention",
    "random_features",
]


def linformer_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    projection: Tensor,
    value_projection: Tensor | None = None,
    *,
    scale: float | None = None,
) -> Tensor:
    r"""Linformer attention: attend to $r$ projected keys and values instead of $S$.

    $$
    \operatorname{softmax}\!\big(\mathrm{scale}\cdot Q\,(U_K K)^\top\big)\,(U_V V),
    \qquad U_K, U_V \in \mathbb{R}^{r \times S}
    $$

    The $L \times S$ score matrix becomes $L \times r$: $O(L\,r\,D)$ time and memory.
    Wang et al. argue that trained attention matrices are close to low rank, and learn
    $U_K$ and $U_V$ with the model. With $U_K = U_V = I$ ($r = S$) this is softmax attention
    exactly; with other projections it is a different function, close to softmax
    attention only as far as the projections keep what the queries look for.

    Args:
        query: ``(..., L, D)``.
        key: ``(..., S, D)``.
        value: ``(..., S, Dv)``.
        projection: $U_K$, ``(r, S)`` or with leading dimensions that broadcast
            (e.g. one per head, ``(H, r, S)``), applied to the keys.
        value_projection: $U_V$, the same shape; ``None`` uses $U_K$ (Linformer's
            "key-value sharing").
        scale: Factor on the scores; ``None`` means $1/\sqrt{D}$.

    Returns:
        Tensor of shape ``(..., L, Dv)``.

    Raises:
        TypeError: If an input is not a floating-point tensor or the dtypes differ.
        ValueError: If shapes are inconsistent: a projection must have ``S`` columns
            and at least one row, both projections the same number of rows, and the
            leading dimensions of the inputs and projections must broadcast.

    Examples:
        With the identity as projection it is softmax attention; halving the keys by
        averaging neighbouring pairs is an approximation:

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention.approximate import linformer_attention
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 2, 16, 8).unbind(0)  # (B, n, D) each
        >>> exact = F.scaled_dot_product_attention(q, k, v)
        >>> torch.allclose(linformer_attention(q, k, v, torch.eye(16)), exact, atol=1e-6)
        True
        >>> pairs = torch.eye(8).repeat_interleave(2, dim=1) / 2  # (8, 16): mean of two
        >>> linformer_attention(q, k, v, pairs).shape
        torch.Size([2, 16, 8])
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa=False)
    S = key.shape[-2]
    e = check_projection("projection", projection, query, S)
    f = e
    if value_projection is not None:
        f = check_projection("value_projection", value_projection, query, S)
        if f.shape[-2] != e.shape[-2]:
            raise ValueError(
                "projection and value_projection must have the same number of rows r (one "
                f"projected value per projected key); got projection {shape_str(e)}, "
                f"value_projection {shape_str(f)}"
            )
    inputs = {"query": query, "key": key, "value": value, "projection": e}
    if value_projection is not None:
        inputs["value_projection"] = f
    if not broadcast(*(t.shape[:-2] for t in inputs.values())):
        shapes = ", ".join(f"{name} {shape_str(t)}" for name, t in inputs.items())
        raise ValueError(
            "query, key, value and the projections must have leading dimensions that "
            f"broadcast ((..., L, D), (..., S, D), (..., S, Dv), (..., r, S)); got {shapes}"
        )
    scale = default_scale(query, check_scale(scale))
    dtype = working_dtype(query.dtype)
    q, k, v = query.to(dtype), key.to(dtype), value.to(dtype)
    k_r, v_r = e.to(dtype) @ k, f.to(dtype) @ v  # (..., r, D), (..., r, Dv)
    weights = torch.softmax(scale * (q @ k_r.transpose(-2, -1)), dim=-1)  # (..., L, r)
    return (weights @ v_r).to(query.dtype)


def random_features(
    num_features: int,
    head_size: int,
    *,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    r"""Draw the projection $W$ of FAVOR+'s random features, ``(D_phi, D)``.

    Each row is distributed as $\mathcal{N}(0, I_D)$, which is all that
    [`performer_attention`][attention.approximate.performer_attention]'s unbiasedness
    needs. With ``orthogonal`` (Choromanski et al.'s default) the rows come in blocks of
    $D$ mutually orthogonal directions, each given the length of an independent
    Gaussian vector: still $\mathcal{N}(0, I_D)$ one by one, with less variance for
    the estimate together.

    Args:
        num_features: $D_\phi \ge 1$ rows.
        head_size: $D \ge 1$ columns, the query/key size.
        orthogonal: Orthogonal blocks rather than independent rows.
        generator: Random number generator, for reproducible draws.
        dtype: Floating-point dtype of the result.

    Returns:
        Tensor of shape ``(D_phi, D)``.

    Raises:
        TypeError: If a size is not an int, ``orthogonal`` is not a bool, or ``dtype``
            is not a floating-point ``torch.dtype``.
        ValueError: If a size is below 1.

    Examples:
        >>> import torch
        >>> from attention.approximate import random_features
        >>> w = random_features(8, 4, generator=torch.Generator().manual_seed(0))
        >>> w.shape
        torch.Size([8, 4])
        >>> directions = w[:4] / w[:4].norm(dim=1, keepdim=True)  # one block of D rows
        >>> torch.allclose(directions @ directions.T, torch.eye(4), atol=1e-5)
        True
    """
    M = check_size("num_features", num_features, minimum=1)
    D = check_size("head_size", head_size, minimum=1)
    check_flag("orthogonal", orthogonal)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        # An integer dtype would truncate the Gaussian draws, bool make them all True.
        raise TypeError(
            "dtype must be a floating-point torch.dtype (torch.float16, torch.bfloat16, "
            f"torch.float32, torch.float64); got {dtype!r}"
        )
    gaussian = torch.randn(M, D, generator=generator, dtype=torch.float64)
    if orthogonal:
        blocks = -(-M // D)  # ceil(M / D) blocks of D directions
        squares = torch.randn(blocks, D, D, generator=generator, dtype=torch.float64)
        basis, r = torch.linalg.qr(squares)  # columns: orthonormal directions
        # Signs fixed by R's diagonal make the directions uniform (Haar), as each
        # row's Gaussian marginal requires; LAPACK leaves them arbitrary.
        basis = basis * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
        directions = basis.transpose(-2, -1).reshape(blocks * D, D)[:M]
        lengths = gaussian.norm(dim=1, keepdim=True)  # chi(D): a Gaussian vector's length
        gaussian = directions * lengths
    return gaussian.to(dtype)


def performer_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    projection: Tensor,
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> Tensor:
    r"""Performer attention (FAVOR+): softmax attention estimated with random features.

    With $x = \sqrt{\mathrm{scale}}\;q$ and $y = \sqrt{\mathrm{scale}}\;k$ (for a
    negative scale, as PyTorch allows, $x = -\sqrt{|\mathrm{scale}|}\;q$ and
    $y = \sqrt{|\mathrm{scale}|}\;k$: still $x^\top y = \mathrm{scale}\;q^\top k$), and the
    rows $w_1, \dots, w_{D_\phi}$ of ``projection`` drawn from $\mathcal{N}(0, I_D)$,

    $$
    \phi(x) = \tfrac{1}{\sqrt{D_\phi}}\big(e^{w_1^\top x - \|x\|^2/2}, \dots,
    e^{w_{D_\phi}^\top x - \|x\|^2/2}\big),
    \qquad \mathbb{E}\big[\phi(x)^\top\phi(y)\big] = e^{x^\top y}
    = e^{\mathrm{scale}\; q^\top k},
    $$

    so $\phi(Q)\,(\phi(K)^\top V)$ and $\phi(Q)\,(\phi(K)^\top \mathbf{1})$ are unbiased
    estimates of softmax attention's numerator and denominator, computed as
    [`linear_attention`][attention.efficient.linear_attention] does: $O(n\,D_\phi\,D)$
    time, no $L \times S$ matrix. Every feature is positive, so the denominator never
    comes near zero (the trigonometric features of earlier random-feature methods
    could). The ratio of two unbiased estimates is not itself unbiased: the error
    falls as $1/\sqrt{D_\phi}$.

    For stability each query's features are divided by their largest exponential and
    all keys' by one shared largest: both factors cancel in the ratio.

    Args:
        query: ``(..., L, D)``.
        key: ``(..., S, D)``.
        value: ``(..., S, Dv)``.
        projection: $W$, ``(num_features, D)``, from
            [`random_features`][attention.approximate.random_features].
        is_causal: Query $i$ attends only to keys $0..i$ (prefix sums).
        scale: Factor on the scores; ``None`` means $1/\sqrt{D}$.

    Returns:
        Tensor of shape ``(..., L, Dv)``.

    Raises:
        TypeError: If an input is not a floating-point tensor, the dtypes differ, or
            ``is_causal`` is not a bool.
        ValueError: If shapes are inconsistent: ``projection`` must be ``(num_features, D)``.

    Examples:
        The estimate approaches softmax attention as the number of features grows:

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention.approximate import performer_attention, random_features
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = (0.5 * torch.randn(3, 64, 16, dtype=torch.float64)).unbind(0)
        >>> exact = F.scaled_dot_product_attention(q, k, v)
        >>> def error(m):
        ...     w = random_features(m, 16, generator=torch.Generator().manual_seed(1),
        ...                         dtype=torch.float64)
        ...     return (performer_attention(q, k, v, w) - exact).abs().max().item()
        >>> error(4096) < error(64) / 4
        True
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa=False)
    check_flag("is_causal", is_causal)
    projection = check_features_projection(projection, query)
    scale = default_scale(query, check_scale(scale))
    dtype = working_dtype(query.dtype)
    # scale q.k = (sign * root * q).(root * k): a negative scale negates the query side.
    root = math.sqrt(abs(scale))
    sign = -1.0 if scale < 0 else 1.0
    w = projection.to(dtype)
    log_q = _log_features(sign * root * query.to(dtype), w)  # (..., L, num_features)
    log_k = _log_features(root * key.to(dtype), w)  # (..., S, num_features)
    phi_q = torch.exp(log_q - log_q.amax(dim=-1, keepdim=True))  # one factor per query
    key_max = log_k.amax(dim=(-2, -1), keepdim=True) if key.shape[-2] else 0.0
    phi_k = torch.exp(log_k - key_max)  # one factor for all keys
    out = linear_attention(phi_q, phi_k, value.to(dtype), is_causal, feature_map=_as_is, eps=0.0)
    return out.to(query.dtype)


def _as_is(features: Tensor) -> Tensor:
    return features


def _log_features(x: Tensor, w: Tensor) -> Tensor:
    """The log of φ(x) but for its constant -log √num_features (it cancels): wᵀx - ‖x‖²/2."""
    return x @ w.T - 0.5 * (x * x).sum(dim=-1, keepdim=True)


def favor_features(x: Tensor, projection: Tensor) -> Tensor:
    r"""FAVOR+'s positive random features $\phi(x)$, for checking what they estimate.

    $\phi(x)_i = e^{w_i^\top x - \|x\|^2/2} / \sqrt{D_\phi}$ for the rows $w_i$ of
    ``projection``. For $w \sim \mathcal{N}(0, I_D)$,
    $\mathbb{E}[e^{w^\top (x + y)}] = e^{\|x + y\|^2/2}$, so
    $\mathbb{E}[\phi(x)^\top\phi(y)] = e^{x^\top y}$: the softmax kernel, unbiased.
    [`performer_attention`][attention.approximate.performer_attention] uses these
    features with the scale folded into $x$ and $y$, and rescaled against overflow.

    Args:
        x: ``(..., D)``, floating point.
        projection: $W$, ``(num_features, D)``, from
            [`random_features`][attention.approximate.random_features].

    Returns:
        Tensor of shape ``(..., num_features)``, every entry positive (or 0 after underflow).

    Raises:
        TypeError: If an input is not a floating-point tensor or the dtypes differ.
        ValueError: If ``projection`` is not ``(num_features, D)``.

    Examples:
        Averaged over many draws of $W$, $\phi(x)^\top\phi(y)$ approaches
        $e^{x^\top y}$:

        >>> import torch
        >>> from attention.approximate import favor_features, random_features
        >>> x = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
        >>> y = torch.tensor([0.1, 0.4, 0.2], dtype=torch.float64)
        >>> w = random_features(100_000, 3, generator=torch.Generator().manual_seed(0),
        ...                     dtype=torch.float64)
        >>> estimate = favor_features(x, w) @ favor_features(y, w)
        >>> exact = torch.exp(x @ y)
        >>> round(exact.item(), 4), bool(abs(estimate / exact - 1) < 0.02)
        (1.0513, True)
    """
    x = check_tensor("x", x, min_ndim=1)
    w = check_features_projection(projection, x)
    return torch.exp(_log_features(x, w)) / math.sqrt(w.shape[0])


def nystrom_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    num_landmarks: int,
    *,
    scale: float | None = None,
) -> Tensor:
    r"""Nyström attention: the softmax matrix rebuilt from $m$ landmarks.

    The landmarks $\tilde{Q}$ and $\tilde{K}$ are the means of $m$ consecutive segments
    of the queries and of the keys. With $\sigma$ the row softmax of scaled scores,

    $$
    P \approx \tilde{P} = \underbrace{\sigma(Q \tilde{K}^\top)}_{F:\ L \times m}\;
    \underbrace{\sigma(\tilde{Q} \tilde{K}^\top)^{+}}_{A^{+}:\ m \times m}\;
    \underbrace{\sigma(\tilde{Q} K^\top)}_{B:\ m \times S},
    \qquad \text{output } F\,\big(A^{+}(B\,V)\big),
    $$

    the Nyström method's reconstruction of a matrix from some of its rows and columns:
    $O(n\,m\,D + m^3)$ time. With $m = L = S$ every segment is one position, $F = A =
    B = P$ and $P P^{+} P = P$: softmax attention exactly. The pseudo-inverse is
    ``torch.linalg.pinv``, computed exactly; Xiong et al. use an iterative
    approximation of it, cheaper on a GPU.

    Args:
        query: ``(..., L, D)``.
        key: ``(..., S, D)``.
        value: ``(..., S, Dv)``.
        num_landmarks: $m$, with $1 \le m \le \min(L, S)$; segments differ in size by
            at most one position when $m$ does not divide the length.
        scale: Factor on the scores; ``None`` means $1/\sqrt{D}$.

    Returns:
        Tensor of shape ``(..., L, Dv)``.

    Raises:
        TypeError: If an input is not a floating-point tensor, the dtypes differ, or
            ``num_landmarks`` is not an int.
        ValueError: If shapes are inconsistent or ``num_landmarks`` is out of range.

    Examples:
        One landmark per position is softmax attention; fewer approximate it:

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention.approximate import nystrom_attention
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 32, 8, dtype=torch.float64).unbind(0)
        >>> exact = F.scaled_dot_product_attention(q, k, v)
        >>> torch.allclose(nystrom_attention(q, k, v, 32), exact, atol=1e-8)
        True
        >>> nystrom_attention(q, k, v, 8).shape
        torch.Size([32, 8])
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa=False)
    L, S = query.shape[-2], key.shape[-2]
    m = check_size("num_landmarks", num_landmarks, minimum=1)
    if m > min(L, S):
        raise ValueError(
            f"num_landmarks must be <= min(L, S) = {min(L, S)}; got {m} "
            f"(query {shape_str(query)}, key {shape_str(key)})"
        )
    scale = default_scale(query, check_scale(scale))
    dtype = working_dtype(query.dtype)
    q, k, v = query.to(dtype), key.to(dtype), value.to(dtype)
    q_land, k_land = _segment_means(q, m), _segment_means(k, m)  # (..., m, D)

    def softmax_scores(a: Tensor, b: Tensor) -> Tensor:
        return torch.softmax(scale * (a @ b.transpose(-2, -1)), dim=-1)

    f = softmax_scores(q, k_land)  # (..., L, m)
    a = softmax_scores(q_land, k_land)  # (..., m, m)
    b = softmax_scores(q_land, k)  # (..., m, S)
    a_pinv: Tensor = torch.linalg.pinv(a)
    return (f @ (a_pinv @ (b @ v))).to(query.dtype)


def _segment_means(x: Tensor, m: int) -> Tensor:
    """Means of ``m`` consecutive segments along the sequence axis, ``(..., m, D)``."""
    parts = torch.tensor_split(x, m, dim=-2)
    return torch.stack([part.mean(dim=-2) for part in parts], dim=-2)

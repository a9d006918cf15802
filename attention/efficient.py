r"""Efficient attention: the same result with less memory, or less work.

Dense attention builds the $L \times S$ score matrix: $O(LS)$ memory and $O(LSD)$
time. The functions here avoid that in two different ways.

**Exact, in tiles.** [`flash_attention`][attention.efficient.flash_attention] cuts
$Q$, $K$ and $V$ into blocks and keeps, for each query, a running maximum and a running
sum of exponentials (the *online softmax*), so the full matrix never exists: memory is
linear in the sequence length and the result equals
$\operatorname{softmax}(QK^\top/\sqrt{D} + M)\,V$ up to rounding. Its backward pass
recomputes each block's probabilities from one saved number per query (the
log-sum-exp) instead of storing them. The same loop, told to *skip* blocks, gives
[`sliding_window_attention`][attention.efficient.sliding_window_attention] (only
blocks near the diagonal: $O(L \cdot w)$ work for a window of $w$) and
[`block_sparse_attention`][attention.efficient.block_sparse_attention] (only the blocks
a layout marks). Each equals dense attention with the matching mask from
[`attention.masks`][attention.masks], which is how the tests check them.

**A different function.** [`linear_attention`][attention.efficient.linear_attention]
drops the softmax for a kernel $\phi(q)^\top\phi(k)$, which lets the sum over keys be
taken once, $\phi(K)^\top V$, for $O(n\,D\,D_v)$ work. It is *not* softmax attention;
it is exact only with respect to its own quadratic form.

References:
    - Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018.
      [arXiv:1805.02867](https://arxiv.org/abs/1805.02867)
    - Rabe and Staats, "Self-attention Does Not Need $O(n^2)$ Memory", 2021.
      [arXiv:2112.05682](https://arxiv.org/abs/2112.05682)
    - Dao, Fu, Ermon, Rudra and Ré, "FlashAttention: Fast and Memory-Efficient Exact
      Attention with IO-Awareness", 2022. [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)
    - Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
      Partitioning", 2023. [arXiv:2307.08691](https://arxiv.org/abs/2307.08691)
    - Beltagy, Peters and Cohan, "Longformer: The Long-Document Transformer", 2020.
      [arXiv:2004.05150](https://arxiv.org/abs/2004.05150)
    - Child, Gray, Radford and Sutskever, "Generating Long Sequences with Sparse
      Transformers", 2019. [arXiv:1904.10509](https://arxiv.org/abs/1904.10509)
    - Katharopoulos, Vyas, Pappas and Fleuret, "Transformers are RNNs: Fast
      Autoregressive Transformers with Linear Attention", 2020.
      [arXiv:2006.16236](https://arxiv.org/abs/2006.16236)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real

import torch
import torch.nn.functional as F
from torch import Tensor

from attention._checks import (
    broadcast_shapes,
    check_attn_mask,
    check_causal_bias,
    check_flag,
    check_layout,
    check_mask_or_causal,
    check_mods,
    check_query_key_value,
    check_scale,
    check_size,
    is_causal_bias,
    shape_str,
)
from attention._heads import repeat_heads
from attention._kernels import MaskMod, ScoreMod, default_scale, scores_shape, working_dtype
from attention._tiled import Band, make_schedule, tiled_attention
from attention.masks import CausalAlignment

__all__ = [
    "block_sparse_attention",
    "flash_attention",
    "linear_attention",
    "sliding_window_attention",
]


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    block_q: int = 256,
    block_k: int = 256,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
) -> Tensor:
    r"""Exact attention $\operatorname{softmax}(QK^\top \cdot \text{scale} + M)\,V$, in tiles.

    FlashAttention (Dao et al., 2022) in plain PyTorch, with the loop order of
    FlashAttention-2: for each block of ``block_q`` queries, visit the key/value blocks
    of ``block_k`` keys one by one, keeping a running row maximum $m$ and sum
    $\ell = \sum_j e^{z_j - m}$ of the scores $z_j$ (the online softmax). Memory grows linearly with
    $L$ and $S$: no ``(L, S)`` tensor is built, forward or backward. The backward
    pass is a custom `torch.autograd.Function` that recomputes each block's
    probabilities from the saved log-sum-exp $m + \log \ell$. With ``is_causal`` the
    key blocks wholly above the diagonal are skipped, not computed and masked. Once
    every query of a block has met a key, $m$ is held instead of updated (any shift
    gives the same result; a query block in which a term then overflows is redone),
    which saves two of the four passes over each tile (the row maximum and the
    subtraction) and the rescaling of the running sums.
    A second derivative (``create_graph=True``, ``torch.autograd.functional.hessian``),
    the ``torch.func`` transforms (``vmap``, ``grad``, ``jacrev``) and forward-mode
    differentiation (``torch.func.jvp``, ``jacfwd``, ``hessian``) are exact too: they
    run on the dense ``(L, S)`` matrix, with its memory (not with ``score_mod`` or
    ``mask_mod``, FlexAttention's functions, which only the tiled backward supports).

    Same arguments and results as
    [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention]
    (without dropout); a query whose keys are all masked gets zeros, with finite
    gradients.

    Args:
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``. The leading
            dimensions of query, key and value broadcast, as in PyTorch.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        attn_mask: Optional mask broadcastable to ``(..., L, S)``. Bool: True where the
            query may attend. Float (the query's dtype, or float32): added to the
            scores, and differentiable. Or PyTorch's ``causal_upper_left(L, S)`` /
            ``causal_lower_right(L, S)``, whose blocks above the diagonal are skipped.
        is_causal: Top-left aligned causal mask (query $i$ sees keys $0..i$), as in
            PyTorch. Cannot be combined with ``attn_mask``.
        scale: Factor applied to $QK^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention: each of the ``Hkv`` key/value heads
            serves ``H / Hkv`` consecutive query heads. As in PyTorch, key and value
            may have different head counts, each dividing ``H``.
        block_q: Queries per block. The default, 256 (for both), was among the
            fastest sizes tried on a 2-core CPU at $L = S = 1024$ and $2048$.
        block_k: Keys per block.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx) -> score``, FlexAttention's
            score function, as in
            [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention]:
            applied inside each tile to its scaled scores, with the tile's absolute
            indices, before the masks. The backward recomputes each tile's scores and
            differentiates the mod with respect to them (autograd on that tile alone).
            A tensor it captures that requires grad (a learned bias) is refused:
            `NotImplementedError` (the dense function supports it). Needs 4-D inputs.
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool``, FlexAttention's mask
            function (True = may attend). Evaluated once per block before the loop, as
            FlexAttention's ``create_block_mask`` does: a block where it keeps no pair
            is skipped (no product, no ``exp``), one where it keeps every pair is not
            masked, and only the rest are masked, with the mod evaluated again on the
            tile. Combined with ``attn_mask`` / ``is_causal``: both must keep a pair.

    Returns:
        Tensor of shape ``(..., L, Dv)``.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, the mask
            has an unsupported dtype (a bool passed as the fourth positional argument
            is read as ``attn_mask``), a flag is not a bool, a block size is not an
            int, a mod is not callable, ``score_mod`` returns no floating-point
            tensor, or ``mask_mod`` no bool tensor.
        ValueError: If shapes are inconsistent, the mask does not broadcast,
            ``is_causal`` is combined with ``attn_mask``, a block size is below 1, a mod
            is given with inputs that are not 4-D, or a mod's result does not broadcast
            to the scores.
        NotImplementedError: With a mod, if ``score_mod`` captures a tensor that
            requires grad (while grad is enabled), or for a second derivative
            (``create_graph=True``), forward mode or the ``torch.func`` transforms.

    Examples:
        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention import flash_attention
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 2, 300, 16).unbind(0)  # (B, L, D) each
        >>> out = flash_attention(q, k, v, is_causal=True, block_q=64, block_k=128)
        >>> out.shape
        torch.Size([2, 300, 16])
        >>> expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, expected, atol=1e-6)
        True
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    scale = default_scale(query, check_scale(scale))
    block_q = check_size("block_q", block_q, minimum=1)
    block_k = check_size("block_k", block_k, minimum=1)
    is_causal = check_mask_or_causal(attn_mask, is_causal)
    check_mods(score_mod, mask_mod, query=query, key=key, value=value)
    L, S = query.shape[-2], key.shape[-2]
    band = Band(low=0, high=None) if is_causal else None  # causal: distance i - j >= 0
    if is_causal_bias(attn_mask):  # a causal mask: skip blocks, don't mask them
        offset = check_causal_bias(attn_mask, L, S)
        band, attn_mask = Band(low=0, high=None, offset=offset), None
    if attn_mask is not None:
        attn_mask = check_attn_mask(attn_mask, scores_shape(query, key, enable_gqa), query)
    batch = (1, 1)  # (B, H) of the scores, for mask_mod: the inputs are 4-D with a mod
    if score_mod is not None or mask_mod is not None:
        if enable_gqa:
            # The mods index query heads, and a tile of grouped heads has a group axis
            # instead: repeat the key/value heads (H / Hkv times their memory, not L x S).
            H = query.shape[-3]
            key, value, enable_gqa = repeat_heads(key, H), repeat_heads(value, H), False
        B, H = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        batch = (B, H)
    schedule = make_schedule(
        L,
        S,
        block_q,
        block_k,
        band=band,
        score_mod=score_mod,
        mask_mod=mask_mod,
        batch=batch,
        device=query.device,
    )
    return tiled_attention(query, key, value, attn_mask, schedule, scale, enable_gqa)


def sliding_window_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    window: int,
    *,
    causal: bool = True,
    alignment: CausalAlignment = "top_left",
    scale: float | None = None,
    enable_gqa: bool = False,
    block_size: int = 128,
) -> Tensor:
    r"""Attention within a window of ``window`` positions, computing only that band.

    Equal to dense attention with the mask
    [`sliding_window_mask`][attention.masks.sliding_window_mask] of the same
    ``window``, ``causal`` and ``alignment``:
    with $d = p_i - j$ the distance from query $i$ (at position $p_i$) back to key $j$,
    causal windows keep $0 \le d < w$ and two-sided ones $|d| < w$. But instead of
    computing all $L \times S$ scores and masking most of them, each block of
    ``block_size`` queries visits only the keys its window can reach, so the work is
    $O(L\,(w + \text{block\_size})\,D)$ instead of $O(L\,S\,D)$, and memory is linear.
    The tiled loop and custom backward are those of
    [`flash_attention`][attention.efficient.flash_attention].

    Args:
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``. The leading
            dimensions of query, key and value broadcast, as in PyTorch.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        window: Window size $w \ge 1$: the number of most recent keys (causal), or
            $w - 1$ keys on each side plus the query's own position (two-sided).
        causal: Keep only keys at or before the query's position (Mistral-style); if
            False, keys on both sides (Longformer-style).
        alignment: ``"top_left"`` ($p_i = i$) or ``"bottom_right"``
            ($p_i = i + S - L$, for new queries over a KV cache).
        scale: Factor applied to $QK^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in
            [`flash_attention`][attention.efficient.flash_attention].
        block_size: Queries and keys per block. Smaller blocks waste less work at the
            band's edges, larger ones run faster per score; the default suits windows
            of about 100 to 1000 positions.

    Returns:
        Tensor of shape ``(..., L, Dv)``; zeros for a query with no key in its window.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ,
            ``window`` or ``block_size`` is not an int, or a flag is not a bool.
        ValueError: If shapes are inconsistent, ``window < 1``, ``block_size < 1`` or
            ``alignment`` is unknown.

    Examples:
        >>> import torch
        >>> from attention import (
        ...     scaled_dot_product_attention, sliding_window_attention, sliding_window_mask)
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 4, 100, 8).unbind(0)  # (H, L, D) each
        >>> out = sliding_window_attention(q, k, v, window=10, block_size=32)
        >>> dense = scaled_dot_product_attention(
        ...     q, k, v, attn_mask=sliding_window_mask(100, window=10))
        >>> torch.allclose(out, dense, atol=1e-6)
        True
        >>> # a window of one key: each query sees only its own position
        >>> torch.allclose(sliding_window_attention(q, k, v, window=1), v)
        True
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    scale = default_scale(query, check_scale(scale))
    window = check_size("window", window, minimum=1)
    block_size = check_size("block_size", block_size, minimum=1)
    check_flag("causal", causal)
    L, S = query.shape[-2], key.shape[-2]
    if alignment not in ("top_left", "bottom_right"):
        raise ValueError(f"alignment must be 'top_left' or 'bottom_right'; got {alignment!r}")
    offset = S - L if alignment == "bottom_right" else 0
    low = 0 if causal else -(window - 1)
    band = Band(low=low, high=window - 1, offset=offset)  # low <= p_i - j <= window - 1
    schedule = make_schedule(L, S, block_size, block_size, band=band)
    return tiled_attention(query, key, value, None, schedule, scale, enable_gqa)


def block_sparse_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    layout: Tensor,
    block_size: int,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    r"""Attention restricted to the blocks a layout marks, computing only those blocks.

    Queries and keys are cut into blocks of ``block_size`` positions (the last one may
    be shorter). Query block $a$ attends to key block $b$ only where ``layout[a, b]``
    is True, as in the Sparse Transformer (Child et al., 2019); the other blocks are
    never computed, so the work is proportional to the number of True blocks. Equal to
    dense attention with
    [`block_sparse_mask(layout, block_size, L, S)`][attention.masks.block_sparse_mask]
    (``& causal_mask(L, S)`` with ``is_causal``). The tiled loop and custom backward are
    those of [`flash_attention`][attention.efficient.flash_attention]. For the
    Sparse Transformer's strided pattern pass
    [`strided_layout`][attention.masks.strided_layout] and ``is_causal=True``.

    Args:
        query: ``(..., L, D)``, or ``(..., H, L, D)`` with ``enable_gqa``. The leading
            dimensions of query, key and value broadcast, as in PyTorch.
        key: ``(..., S, D)``, or ``(..., Hkv, S, D)`` with ``enable_gqa``.
        value: ``(..., S, Dv)``, or ``(..., Hkv, S, Dv)`` with ``enable_gqa``.
        layout: Bool ``(ceil(L / block_size), ceil(S / block_size))``, True where a block
            of queries may attend to a block of keys. Shared by every batch entry and
            head.
        block_size: Positions per block, $\ge 1$.
        is_causal: Also apply the top-left causal mask inside the visited blocks (and
            skip blocks wholly above the diagonal).
        scale: Factor applied to $QK^\top$; defaults to $1/\sqrt{D}$.
        enable_gqa: Grouped-query attention, as in
            [`flash_attention`][attention.efficient.flash_attention].

    Returns:
        Tensor of shape ``(..., L, Dv)``; zeros for a query whose row of blocks is empty.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ, ``layout``
            is not a bool tensor, ``block_size`` is not an int, or a flag is not a
            bool.
        ValueError: If shapes are inconsistent, ``block_size < 1``, or ``layout``'s shape
            does not match the lengths.

    Examples:
        >>> import torch
        >>> from attention import (
        ...     block_sparse_attention, block_sparse_mask, causal_mask,
        ...     scaled_dot_product_attention, strided_layout)
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 2, 200, 8).unbind(0)  # (B, L, D) each
        >>> layout = strided_layout(7, stride=3)  # 7 blocks of 32 cover 200 positions
        >>> out = block_sparse_attention(q, k, v, layout, 32, is_causal=True)
        >>> mask = block_sparse_mask(layout, 32, 200, 200) & causal_mask(200)
        >>> dense = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        >>> torch.allclose(out, dense, atol=1e-6)
        True
        >>> f"{layout.float().mean():.2f} of the blocks computed"
        '0.47 of the blocks computed'
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    scale = default_scale(query, check_scale(scale))
    L, S = query.shape[-2], key.shape[-2]
    check_layout(layout, block_size, L, S)
    check_flag("is_causal", is_causal)
    band = Band(low=0, high=None) if is_causal else None
    schedule = make_schedule(L, S, block_size, block_size, band=band, layout=layout)
    return tiled_attention(query, key, value, None, schedule, scale, enable_gqa)


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool = False,
    *,
    feature_map: Callable[[Tensor], Tensor] | None = None,
    eps: float = 1e-6,
    chunk_size: int = 64,
) -> Tensor:
    r"""Kernelised (linear) attention: softmax replaced by a feature map $\phi$.

    $$
    o_i = \frac{\sum_j \phi(q_i)^\top \phi(k_j)\, v_j}
               {\sum_j \phi(q_i)^\top \phi(k_j) + \varepsilon}
        = \frac{\phi(q_i)^\top \left(\sum_j \phi(k_j) v_j^\top\right)}
               {\phi(q_i)^\top \sum_j \phi(k_j) + \varepsilon}
    $$

    (Katharopoulos et al., 2020), with $\phi(x) = \operatorname{elu}(x) + 1 > 0$ by
    default. The right-hand form computes $\phi(K)^\top V$, a $D_\phi \times D_v$
    matrix for $D_\phi$ features, once: $O(n\,D_\phi\,D_v)$ time and no $L \times S$
    matrix. This is a different function from softmax attention, not an approximation
    of it.

    With ``is_causal`` (top-left, like PyTorch: query $i$ sums over $j \le i$) the sums
    become prefix sums. Keeping the prefix sum $\sum_{j \le i} \phi(k_j) v_j^\top$ for
    every $i$ would store $n$ matrices of $D_\phi \times D_v$, $O(n\,D_\phi\,D_v)$
    memory for autograd. Instead the sequence is cut into chunks of ``chunk_size`` $= C$
    positions: within a chunk the quadratic form with a causal mask ($C \times C$),
    across chunks one running state. Autograd then keeps
    $O(n\,C + (n / C)\,D_\phi\,D_v)$ numbers, smallest near $C = \sqrt{D_\phi D_v}$: 64
    for $D_\phi = D_v = 64$.

    Args:
        query: ``(..., L, D)``.
        key: ``(..., S, D)``.
        value: ``(..., S, Dv)``.
        is_causal: Query $i$ attends only to keys $0..i$.
        feature_map: $\phi$, applied to the last dimension of queries and keys; it may
            change their size ``D`` to ``M``. Defaults to $\operatorname{elu}(x) + 1$.
        eps: $\varepsilon \ge 0$ added to the denominator.
        chunk_size: Positions per chunk in the causal case, $\ge 1$.

    Returns:
        Tensor of shape ``(..., L, Dv)``; zeros for a query whose denominator is 0 (no
            key, with ``eps=0``).

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ,
            ``feature_map`` does not return a tensor, ``eps`` / ``chunk_size`` has the
            wrong type, or ``is_causal`` is not a bool.
        ValueError: If shapes are inconsistent, ``feature_map`` gives queries and keys
            different feature sizes, ``eps`` is negative or not finite, or
            ``chunk_size < 1``.

    Examples:
        The first query sees only the first key, so its output is that value. The whole
        output equals the quadratic form, with weights $\phi(q_i)^\top \phi(k_j)$ for
        $j \le i$:

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention import linear_attention
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 2, 50, 8).unbind(0)  # (B, L, D) each
        >>> out = linear_attention(q, k, v, is_causal=True)
        >>> out.shape
        torch.Size([2, 50, 8])
        >>> torch.allclose(out[:, 0], v[:, 0], atol=1e-5)
        True
        >>> weights = ((F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)).tril()
        >>> quadratic = weights @ v / (weights.sum(-1, keepdim=True) + 1e-6)
        >>> torch.allclose(out, quadratic, atol=1e-5)
        True
    """
    query, key, value = check_query_key_value(query, key, value, enable_gqa=False)
    if isinstance(eps, bool) or not isinstance(eps, Real):
        raise TypeError(f"eps must be a real number; got {type(eps).__name__}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0; got {eps}")
    chunk_size = check_size("chunk_size", chunk_size, minimum=1)
    check_flag("is_causal", is_causal)
    compute_dtype = working_dtype(query.dtype)  # float16/bfloat16 compute in float32
    phi = _elu_plus_one if feature_map is None else feature_map
    q, k = _apply_feature_map(phi, query.to(compute_dtype), key.to(compute_dtype))
    v = value.to(compute_dtype)
    if is_causal:
        numerator, denominator = _causal_linear_sums(q, k, v, chunk_size)
    else:
        kv = k.transpose(-2, -1) @ v  # Σ_j φ(k_j) v_jᵀ: (..., M, Dv)
        k_sum = k.sum(dim=-2).unsqueeze(-1)  # Σ_j φ(k_j): (..., M, 1)
        numerator, denominator = q @ kv, q @ k_sum  # (..., L, Dv), (..., L, 1)
    denominator = denominator + eps
    out = numerator / denominator.masked_fill(denominator == 0, 1.0)  # numerator is 0 there
    return out.to(query.dtype)


def _causal_linear_sums(q: Tensor, k: Tensor, v: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """Numerator and denominator of causal linear attention, chunk by chunk."""
    *batch, L, M = q.shape
    S, Dv = k.shape[-2], v.shape[-1]
    kv_state = q.new_zeros(*batch, M, Dv)  # Σ φ(k_j) v_jᵀ over the earlier chunks
    k_state = q.new_zeros(*batch, M, 1)  # Σ φ(k_j) over the earlier chunks
    numerators, denominators = [], []
    # Keys at positions >= L are seen by no query (top-left: query i sees j <= i).
    for c0 in range(0, L, chunk):
        c1 = min(c0 + chunk, L)
        q_c = q[..., c0:c1, :]  # (..., C, M)
        k_c, v_c = k[..., c0 : min(c1, S), :], v[..., c0 : min(c1, S), :]  # (..., C', ·)
        # Inside the chunk, query c0 + r sees keys c0 .. c0 + r: the lower triangle.
        within = (q_c @ k_c.transpose(-2, -1)).tril()  # (..., C, C')
        numerators.append(q_c @ kv_state + within @ v_c)  # (..., C, Dv)
        denominators.append(q_c @ k_state + within.sum(dim=-1, keepdim=True))  # (..., C, 1)
        kv_state = kv_state + k_c.transpose(-2, -1) @ v_c
        k_state = k_state + k_c.sum(dim=-2).unsqueeze(-1)
    if not numerators:  # L == 0
        return q.new_zeros(*batch, 0, Dv), q.new_zeros(*batch, 0, 1)
    return torch.cat(numerators, dim=-2), torch.cat(denominators, dim=-2)


def _elu_plus_one(x: Tensor) -> Tensor:
    return F.elu(x) + 1.0


def _apply_feature_map(
    phi: Callable[[Tensor], Tensor], query: Tensor, key: Tensor
) -> tuple[Tensor, Tensor]:
    q, k = phi(query), phi(key)
    for name, before, after in (("query", query, q), ("key", key, k)):
        if not isinstance(after, Tensor):
            raise TypeError(f"feature_map must return a tensor; got {type(after).__name__}")
        if after.shape[:-1] != before.shape[:-1]:
            raise ValueError(
                "feature_map may change only the last dimension; "
                f"got {name} {shape_str(before)} -> {shape_str(after)}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "feature_map must give queries and keys the same feature size M; "
            f"got φ(query) {shape_str(q)}, φ(key) {shape_str(k)}"
        )
    return q, k

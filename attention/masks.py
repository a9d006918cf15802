r"""Attention masks: which query may attend to which key.

Convention used by the whole package (and by
`torch.nn.functional.scaled_dot_product_attention`): a boolean mask is **True where a
query may attend** to a key. Shapes are ``(L, S)``: one row per query position, one
column per key position; they broadcast against scores of shape ``(..., L, S)``. A
float mask is *added* to the scores: $0$ keeps a pair, $-\infty$ removes it.

!!! warning "PyTorch uses the opposite polarity in `nn.MultiheadAttention`"
    There, ``attn_mask`` and ``key_padding_mask`` are True where a position is
    *masked out*. Pass ``~mask`` when you hand one of these masks to that module.
    This package keeps that meaning for ``key_padding_mask`` only (True marks
    padding), so code ported from PyTorch keeps working:
    ``key_padding_mask = ~padding_mask(lengths)``.

References:
    - Beltagy, Peters and Cohan, "Longformer: The Long-Document Transformer", 2020
      (sliding-window attention). [arXiv:2004.05150](https://arxiv.org/abs/2004.05150)
    - Child, Gray, Radford and Sutskever, "Generating Long Sequences with Sparse
      Transformers", 2019 (strided block-sparse attention).
      [arXiv:1904.10509](https://arxiv.org/abs/1904.10509)
"""

from __future__ import annotations

from numbers import Integral
from typing import Literal

import torch
from torch import Tensor

from attention._checks import (
    broadcast_shapes,
    causal_keep_mask,
    check_flag,
    check_layout,
    check_size,
)

__all__ = [
    "block_sparse_mask",
    "causal_mask",
    "combine_masks",
    "mask_to_bias",
    "padding_mask",
    "sliding_window_mask",
    "strided_layout",
]

CausalAlignment = Literal["top_left", "bottom_right"]


def causal_mask(
    L: int,
    S: int | None = None,
    *,
    alignment: CausalAlignment = "top_left",
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Mask that lets each query attend only to keys at or before its own position.

    With ``alignment="top_left"`` query $i$ may attend to key $j$ when $j \le i$:
    the diagonal starts at the top-left corner, which is what
    ``is_causal=True`` means in PyTorch. With ``alignment="bottom_right"`` it may
    attend when $j \le i + (S - L)$: the diagonal ends at the bottom-right corner,
    so the *last* query sees every key. That is the right mask when the $L$ queries
    are the newest $L$ positions of a sequence whose $S$ keys include $S - L$
    earlier, cached ones (incremental decoding with a KV cache). Both alignments
    agree when ``L == S``.

    Args:
        L: Number of queries (rows).
        S: Number of keys (columns); defaults to ``L``.
        alignment: ``"top_left"`` or ``"bottom_right"``, see above.
        device: Device of the returned tensor.

    Returns:
        Bool tensor of shape ``(L, S)``, True where attention is allowed.

    Raises:
        TypeError: If ``L`` or ``S`` is not an int.
        ValueError: If ``L`` or ``S`` is negative or ``alignment`` is unknown.

    Examples:
        >>> from attention import causal_mask
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)

        Two new queries over five keys, three of them cached:

        >>> from attention import causal_mask
        >>> causal_mask(2, 5, alignment="bottom_right").int()
        tensor([[1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, 5).int()  # top-left: what is_causal=True does
        tensor([[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0]], dtype=torch.int32)
    """
    L, S, offset = _alignment_offset(L, S, alignment)
    return causal_keep_mask(L, S, offset, device)  # (L, S): p_i - j >= 0


def sliding_window_mask(
    L: int,
    S: int | None = None,
    *,
    window: int,
    causal: bool = True,
    sinks: int = 0,
    alignment: CausalAlignment = "top_left",
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Mask that lets each query attend only to keys within ``window`` positions.

    With $d = p_i - j$ the distance from query $i$ (at position $p_i$) back to key $j$:
    causal windows keep $0 \le d < w$, the $w$ most recent keys including the query's
    own position (Mistral-style); non-causal windows keep $|d| < w$, up to $w - 1$
    keys on each side (Longformer-style). ``alignment`` places the queries as in
    [`causal_mask`][attention.masks.causal_mask]. Each query then needs $O(w)$
    keys instead of $O(S)$, which is what efficient sliding-window kernels exploit.

    ``sinks=n`` also keeps the first $n$ keys for every query that may see them
    (for a causal window, those at or before it): StreamingLLM's attention sinks
    ([Xiao et al. 2024](https://arxiv.org/abs/2309.17453)), the tokens a trained model
    parks unneeded weight on, which a plain window would evict (see
    [`sink_attention`][attention.sinks.sink_attention]).

    Args:
        L: Number of queries.
        S: Number of keys; defaults to ``L``.
        window: Window size $w \ge 1$.
        causal: Keep only keys at or before the query's position.
        sinks: Number of leading keys kept in every window, $\ge 0$.
        alignment: ``"top_left"`` ($p_i = i$) or ``"bottom_right"``
            ($p_i = i + S - L$).
        device: Device of the returned tensor.

    Returns:
        Bool tensor of shape ``(L, S)``, True where attention is allowed.

    Raises:
        TypeError: If ``L``, ``S``, ``window`` or ``sinks`` is not an int, or
            ``causal`` is not a bool.
        ValueError: If a size is negative, ``window < 1``, or ``alignment`` is unknown.

    Examples:
        >>> from attention import sliding_window_mask
        >>> sliding_window_mask(5, window=2).int()
        tensor([[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [0, 1, 1, 0, 0],
                [0, 0, 1, 1, 0],
                [0, 0, 0, 1, 1]], dtype=torch.int32)
        >>> sliding_window_mask(4, window=2, causal=False).int()
        tensor([[1, 1, 0, 0],
                [1, 1, 1, 0],
                [0, 1, 1, 1],
                [0, 0, 1, 1]], dtype=torch.int32)
        >>> sliding_window_mask(6, window=2, sinks=1).int()  # StreamingLLM
        tensor([[1, 0, 0, 0, 0, 0],
                [1, 1, 0, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [1, 0, 1, 1, 0, 0],
                [1, 0, 0, 1, 1, 0],
                [1, 0, 0, 0, 1, 1]], dtype=torch.int32)
    """
    window = check_size("window", window, minimum=1)
    sinks = check_size("sinks", sinks)
    check_flag("causal", causal)
    query_positions, key_positions = query_key_positions(L, S, alignment, device)
    # p_i - w < j: the key is fewer than w positions back (L, S); or one of the sinks
    recent = (key_positions > query_positions - window) | (key_positions < sinks)
    if causal:
        return recent & (key_positions <= query_positions)  # 0 <= p_i - j < w
    return recent & (key_positions < query_positions + window)  # |p_i - j| < w


def block_sparse_mask(
    layout: Tensor,
    block_size: int,
    L: int | None = None,
    S: int | None = None,
) -> Tensor:
    r"""Expand a block layout into a mask: every pair in a True block may attend.

    Queries and keys are cut into blocks of ``block_size`` positions (the last block of
    each may be shorter); query $i$ may attend to key $j$ when
    ``layout[i // block_size, j // block_size]`` is True. This is the dense equivalent
    of [`block_sparse_attention`][attention.efficient.block_sparse_attention], which
    computes only the True blocks.

    Args:
        layout: Bool ``(ceil(L / block_size), ceil(S / block_size))``, True where a block
            of queries may attend to a block of keys.
        block_size: Positions per block, $\ge 1$.
        L: Number of queries; defaults to ``layout.shape[0] * block_size``.
        S: Number of keys; defaults to ``layout.shape[1] * block_size``.

    Returns:
        Bool tensor of shape ``(L, S)`` on ``layout``'s device.

    Raises:
        TypeError: If ``layout`` is not a bool tensor or a size is not an int.
        ValueError: If ``layout`` is not 2-D, ``block_size < 1``, or ``layout``'s shape
            does not match ``(ceil(L / block_size), ceil(S / block_size))``.

    Examples:
        >>> import torch
        >>> from attention import block_sparse_mask
        >>> layout = torch.tensor([[True, False], [True, True]])
        >>> block_sparse_mask(layout, 2, L=3, S=4).int()
        tensor([[1, 1, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    L, S = check_layout(layout, block_size, L, S)
    rows = layout.repeat_interleave(block_size, dim=0)[:L]  # (L, S_blocks)
    return rows.repeat_interleave(block_size, dim=1)[:, :S]  # (L, S)


def strided_layout(
    num_blocks: int, *, stride: int, device: torch.device | str | None = None
) -> Tensor:
    r"""The *strided* causal block layout of the Sparse Transformer (Child et al., 2019).

    Block $i$ may attend to block $j \le i$ when it is one of the ``stride`` most
    recent blocks ($i - j <$ ``stride``, the "row" head) or a multiple of ``stride``
    blocks back ($(i - j) \bmod$ ``stride`` $= 0$, the "column" head). With
    ``stride`` $\approx \sqrt{n}$ each block sees $O(\sqrt{n})$ others, yet any block
    reaches any earlier one in two steps. The paper applies the pattern to positions;
    kernels apply it to blocks, as here. Use it with ``is_causal=True`` in
    [`block_sparse_attention`][attention.efficient.block_sparse_attention] so that
    the diagonal blocks are causal too.

    Args:
        num_blocks: Number of blocks $n$ along the sequence.
        stride: Period $\ge 1$, in blocks.
        device: Device of the returned tensor.

    Returns:
        Bool tensor of shape ``(num_blocks, num_blocks)``, lower triangular.

    Raises:
        TypeError: If ``num_blocks`` or ``stride`` is not an int.
        ValueError: If ``num_blocks < 0`` or ``stride < 1``.

    Examples:
        >>> from attention import strided_layout
        >>> strided_layout(6, stride=2).int()
        tensor([[1, 0, 0, 0, 0, 0],
                [1, 1, 0, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [0, 1, 1, 1, 0, 0],
                [1, 0, 1, 1, 1, 0],
                [0, 1, 0, 1, 1, 1]], dtype=torch.int32)
    """
    num_blocks = check_size("num_blocks", num_blocks)
    stride = check_size("stride", stride, minimum=1)
    distance = query_key_distance(num_blocks, num_blocks, "top_left", device)  # (n, n)
    return (distance >= 0) & ((distance < stride) | (distance % stride == 0))


def padding_mask(
    lengths: Tensor | list[int],
    max_length: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Mask of the real (non-padding) positions of a batch of padded sequences.

    Sequence $b$ has ``lengths[b]`` real tokens followed by padding. The result is
    True at real positions, so it follows the package convention (True = may be
    attended to). To use it as an ``attn_mask`` for scores of shape
    ``(B, H, L, S)``, add the head and query axes:
    ``padding_mask(lengths)[:, None, None, :]``. For a ``key_padding_mask``
    (PyTorch's meaning, True = padding) negate it.

    Args:
        lengths: ``(B,)`` integer lengths, each in ``[0, max_length]``.
        max_length: Padded length $S$; defaults to ``max(lengths)``.
        device: Device of the result; defaults to that of ``lengths``.

    Returns:
        Bool tensor of shape ``(B, S)``, True at real positions.

    Raises:
        TypeError: If ``lengths`` is not a 1-D integer tensor or a list of ints.
        ValueError: If a length is negative or exceeds ``max_length``.

    Examples:
        >>> from attention import padding_mask
        >>> padding_mask([3, 1, 4]).int()
        tensor([[1, 1, 1, 0],
                [1, 0, 0, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
        >>> (~padding_mask([2, 3], max_length=5)).int()  # as a key_padding_mask
        tensor([[0, 0, 1, 1, 1],
                [0, 0, 0, 1, 1]], dtype=torch.int32)
    """
    if isinstance(lengths, list):
        if not all(isinstance(n, Integral) and not isinstance(n, bool) for n in lengths):
            raise TypeError(f"lengths must be integers; got {lengths!r}")
        lengths = torch.tensor([int(n) for n in lengths], dtype=torch.long, device=device)
    if not isinstance(lengths, Tensor):
        raise TypeError(
            f"lengths must be a 1-D integer tensor or a list of ints; got {type(lengths).__name__}"
        )
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must have an integer dtype; got {lengths.dtype}")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D (B,); got shape {tuple(lengths.shape)}")
    if device is not None:
        lengths = lengths.to(device)
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_length is None:
        max_length = longest
    max_length = check_size("max_length", max_length)
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0; got {lengths.tolist()}")
    if longest > max_length:
        raise ValueError(f"lengths must be <= max_length={max_length}; got {lengths.tolist()}")
    positions = torch.arange(max_length, device=lengths.device)  # (S,)
    return positions < lengths.unsqueeze(-1)  # (B, S)


def combine_masks(*masks: Tensor | None) -> Tensor:
    r"""Combine masks so that a pair is kept only if every mask keeps it.

    Boolean masks are combined with a logical *and*. If any mask is a float
    (additive) mask, the boolean ones are turned into additive masks with
    [`mask_to_bias`][attention.masks.mask_to_bias] and all of them are summed, which
    is the same rule in additive form. Shapes broadcast; ``None`` entries are
    skipped, so optional masks can be passed as they are.

    Args:
        *masks: Bool or float tensors broadcastable to a common shape, or ``None``.

    Returns:
        The combined mask, of the broadcast shape: bool if every mask is bool, else
            float.

    Raises:
        TypeError: If an entry is not a tensor, or float masks have different dtypes.
        ValueError: If no mask is given or the shapes do not broadcast together.

    Examples:
        >>> from attention import causal_mask, combine_masks, padding_mask
        >>> keys = padding_mask([3], max_length=4)[:, None, :]  # (B, 1, S)
        >>> combine_masks(causal_mask(4), keys, None).int()  # (B, L, S)
        tensor([[[1, 0, 0, 0],
                 [1, 1, 0, 0],
                 [1, 1, 1, 0],
                 [1, 1, 1, 0]]], dtype=torch.int32)
    """
    given = [m for m in masks if m is not None]
    if not given:
        raise ValueError("combine_masks needs at least one mask; got none")
    for i, m in enumerate(given):
        if not isinstance(m, Tensor):
            raise TypeError(f"masks[{i}] must be a torch.Tensor or None; got {type(m).__name__}")
        if m.dtype != torch.bool and not m.is_floating_point():
            # A uint8/int mask is ambiguous (0/1 flags or an additive bias?): summing
            # two "keep" flags would give 2. Ask for bool instead.
            raise TypeError(
                f"masks[{i}] must be bool (True = may attend) or floating (added to the "
                f"scores); got {m.dtype}: convert 0/1 flags with mask.bool()"
            )
    shapes = [tuple(m.shape) for m in given]
    try:
        shape = broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"masks must broadcast to a common shape; got shapes {shapes}") from None
    float_dtypes = {m.dtype for m in given if m.dtype != torch.bool}
    if not float_dtypes:
        combined = given[0]
        for m in given[1:]:
            combined = combined & m
        return combined.expand(shape)
    if len(float_dtypes) > 1:
        raise TypeError(f"float masks must share one dtype; got {sorted(map(str, float_dtypes))}")
    (dtype,) = float_dtypes
    total = torch.zeros(shape, dtype=dtype, device=given[0].device)
    for m in given:
        total = total + (mask_to_bias(m, dtype=dtype) if m.dtype == torch.bool else m)
    return total


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""Turn a boolean mask into an additive one: $0$ where True, $-\infty$ where False.

    $-\infty$ is the exact value: its weight after the softmax is exactly 0, and
    [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention]
    turns a row that is $-\infty$ everywhere into zeros instead of NaN. The common
    stand-ins are both wrong: ``-1e9`` does not fit in float16 (``masked_fill``
    raises) and, like ``torch.finfo(dtype).min``, it is finite, so a fully masked
    row becomes a softmax of equal numbers and the query silently receives the
    *mean* of all values instead of nothing.

    Args:
        mask: Bool tensor, True where attention is allowed.
        dtype: Floating dtype of the result (use the query's dtype).

    Returns:
        Float tensor of ``mask``'s shape with values $0$ and $-\infty$.

    Raises:
        TypeError: If ``mask`` is not a bool tensor or ``dtype`` is not floating.

    Examples:
        >>> from attention import causal_mask, mask_to_bias
        >>> mask_to_bias(causal_mask(3))
        tensor([[0., -inf, -inf],
                [0., 0., -inf],
                [0., 0., 0.]])
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor; got {got}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype; got {dtype}")
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, float("-inf"))


def _alignment_offset(L: int, S: int | None, alignment: str) -> tuple[int, int, int]:
    """``L`` and ``S`` checked (``S`` defaults to ``L``), and the offset of query 0's position."""
    S = L if S is None else S
    L = check_size("L", L)
    S = check_size("S", S)
    if alignment == "top_left":
        return L, S, 0
    if alignment == "bottom_right":
        return L, S, S - L
    raise ValueError(f"alignment must be 'top_left' or 'bottom_right'; got {alignment!r}")


def query_key_positions(
    L: int, S: int | None, alignment: str, device: torch.device | str | None
) -> tuple[Tensor, Tensor]:
    """Positions $p_i$ of the queries, shape ``(L, 1)``, and $j$ of the keys, ``(S,)``.

    Package-internal (not in ``__all__``): shared by the masks and ALiBi so that both
    place queries the same way for each ``alignment``. The masks compare the two
    directly, so that only boolean ``(L, S)`` tensors are ever made (one byte a pair,
    not the eight of an integer distance matrix).
    """
    L, S, offset = _alignment_offset(L, S, alignment)
    query_positions = torch.arange(L, device=device).unsqueeze(-1) + offset  # (L, 1)
    key_positions = torch.arange(S, device=device)  # (S,)
    return query_positions, key_positions


def query_key_distance(
    L: int, S: int | None, alignment: str, device: torch.device | str | None
) -> Tensor:
    """``(L, S)`` integer distances $p_i - j$ from each query's position back to each key.

    Package-internal, for ALiBi's bias and the block layouts, which need the distances
    themselves.
    """
    query_positions, key_positions = query_key_positions(L, S, alignment, device)
    return query_positions - key_positions  # (L, S)

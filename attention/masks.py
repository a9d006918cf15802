r"""Boolean attention masks.

Convention used by the whole package (and by
`torch.nn.functional.scaled_dot_product_attention`): a boolean mask is **True where a
query may attend** to a key. Shapes are ``(L, S)``: one row per query position, one
column per key position; they broadcast against scores of shape ``(..., L, S)``.

!!! warning "PyTorch uses the opposite polarity in `nn.MultiheadAttention`"
    There, ``attn_mask`` and ``key_padding_mask`` are True where a position is
    *masked out*. Pass ``~mask`` when you hand one of these masks to that module.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["causal_mask"]

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

        >>> causal_mask(2, 5, alignment="bottom_right").int()
        tensor([[1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, 5).int()  # top-left: what is_causal=True does
        tensor([[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0]], dtype=torch.int32)
    """
    S = L if S is None else S
    for name, n in (("L", L), ("S", S)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int; got {type(n).__name__}")
        if n < 0:
            raise ValueError(f"{name} must be >= 0; got {n}")
    if alignment == "top_left":
        offset = 0
    elif alignment == "bottom_right":
        offset = S - L
    else:
        raise ValueError(f"alignment must be 'top_left' or 'bottom_right'; got {alignment!r}")
    rows = torch.arange(L, device=device).unsqueeze(-1)  # (L, 1)
    cols = torch.arange(S, device=device)  # (S,)
    return cols <= rows + offset  # (L, S)

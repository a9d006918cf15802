"""Grouped-query attention's head bookkeeping, written once for every kernel.

With ``enable_gqa`` (as in ``F.scaled_dot_product_attention``) the query has ``H``
heads, the key ``Hk`` and the value ``Hv``, each dividing ``H``: query head ``h`` reads
key head ``h // (H / Hk)`` and value head ``h // (H / Hv)``. Two ways to line them up:

- `repeat_heads` copies each key/value head over its group (simple, a copy);
- `group_heads` views the query heads as ``(Hkv, G)`` and each key/value head as
  ``(Hkv, 1)``, so a shared head broadcasts over its group instead of being copied.
"""

from __future__ import annotations

import math

from torch import Tensor


def repeat_heads(t: Tensor, heads: int, dim: int = -3) -> Tensor:
    """Repeat each head of ``t`` (axis ``dim``) ``heads / t.shape[dim]`` times.

    ``(..., Hkv, S, ·) -> (..., heads, S, ·)``: head ``h`` of the result is head
    ``h // (heads / Hkv)`` of ``t``. ``t`` itself, not a copy, when the counts match.
    """
    have = t.shape[dim]
    if have == heads:
        return t
    return t.repeat_interleave(heads // have, dim=dim)


def share_heads(key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """Key and value heads ``(..., Hk, S, ·)``, ``(..., Hv, S, ·)`` on one grouping.

    PyTorch lets ``Hk`` and ``Hv`` differ (each dividing ``H``). One grouping serves
    both with ``lcm(Hk, Hv)`` heads (it divides ``H``), each key head repeated
    ``lcm / Hk`` times and each value head ``lcm / Hv`` times: a copy, made only where
    the counts differ. (``h // (H / lcm) // (lcm / Hk) == h // (H / Hk)``.)
    """
    heads = math.lcm(key.shape[-3], value.shape[-3])
    return repeat_heads(key, heads), repeat_heads(value, heads)


def group_heads(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, enable_gqa: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Grouped-query heads as views that broadcast; unchanged without ``enable_gqa``.

    Query ``(..., H, L, D)`` is viewed ``(..., Hkv, G, L, D)``, key and value
    ``(..., Hkv, 1, S, ·)`` and a mask over ``(..., H, L, S)`` ``(..., Hkv, G, L, S)``
    (one without a head axis, or with one of size 1, broadcasts over both). Undo on
    the output with `ungroup_heads`.
    """
    if not enable_gqa:
        return query, key, value, mask
    key, value = share_heads(key, value)
    Hkv = key.shape[-3]
    group = query.shape[-3] // Hkv
    query = query.unflatten(-3, (Hkv, group))  # type: ignore[no-untyped-call]  # (..., Hkv, G, L, D)
    key, value = key.unsqueeze(-3), value.unsqueeze(-3)  # (..., Hkv, 1, S, ·)
    return query, key, value, _group_mask(mask, Hkv, group)


def _group_mask(mask: Tensor | None, Hkv: int, group: int) -> Tensor | None:
    """A mask over ``(..., H, L, S)`` viewed over ``(..., Hkv, G, L, S)``."""
    if mask is None or mask.ndim < 3:
        return mask  # no head axis: it broadcasts over both
    if mask.shape[-3] == 1:
        return mask.unsqueeze(-3)
    return mask.unflatten(-3, (Hkv, group))  # type: ignore[no-untyped-call,no-any-return]


def ungroup_heads(out: Tensor, enable_gqa: bool) -> Tensor:
    """``(..., Hkv, G, L, Dv) -> (..., H, L, Dv)``: the inverse of `group_heads`."""
    return out.flatten(-4, -3) if enable_gqa else out

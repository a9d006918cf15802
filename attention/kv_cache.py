r"""A key/value cache for incremental (token-by-token) decoding.

A causal decoder generating token $t$ needs the keys and values of tokens
$0, \dots, t$. They do not change once computed, so instead of re-projecting the whole
prefix at every step, each step projects only its new tokens, appends their keys and
values to a cache, and attends over everything cached. Step $t$ then costs $O(t)$
instead of $O(t^2)$ for re-running attention over the prefix.

The new queries are the *last* positions of the cached sequence, so the causal mask
for $L$ new queries over $S$ cached keys is **bottom-right aligned**
([`causal_mask(L, S, alignment="bottom_right")`][attention.masks.causal_mask]), not
top-left as PyTorch's ``is_causal=True``. With one new token per step ($L = 1$) the
mask is all True: the newest token may see everything before it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention._checks import check_same_dtype_and_device, check_tensor, shape_str

__all__ = ["KVCache"]


class KVCache:
    """Keys and values of every position decoded so far, for one attention layer.

    Stores tensors of shape ``(B, Hkv, S, D)`` and ``(B, Hkv, S, Dv)`` and grows along
    ``S``. Pass one instance per layer to
    [`MultiHeadAttention.forward`][attention.multi_head.MultiHeadAttention.forward]
    (``kv_cache=``), which appends the new keys and values and attends over all of
    them.

    Appending concatenates, which copies the cache each step; that keeps the
    code obvious and is cheap next to the attention itself at teaching sizes. A
    production cache preallocates ``max_length`` slots instead.

    Examples:
        >>> import torch
        >>> from attention import KVCache
        >>> cache = KVCache()
        >>> k, v = cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
        >>> k, v = cache.append(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 5))
        >>> len(cache), tuple(k.shape), tuple(v.shape)
        (4, (1, 2, 4, 4), (1, 2, 4, 5))
    """

    def __init__(self) -> None:
        self.key: Tensor | None = None
        self.value: Tensor | None = None

    def __len__(self) -> int:
        """Number of cached positions ``S``."""
        return 0 if self.key is None else self.key.shape[-2]

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Append new keys and values along the sequence axis and return all of them.

        [`extended`][attention.kv_cache.KVCache.extended], then storing its result.

        Args:
            key: The new positions' keys, as for ``extended``.
            value: The new positions' values, as for ``extended``.

        Returns:
            ``(key, value)`` of every position now cached.

        Raises:
            TypeError: On a dtype mismatch, as ``extended`` raises it.
            ValueError: On a shape mismatch, as ``extended`` raises it.
        """
        self.key, self.value = self.extended(key, value)
        return self.key, self.value

    def extended(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """The cached keys and values with the new ones appended, without storing them.

        A layer that may still fail after reading the cache (a bad mask, say) calls this
        first and stores the result only once it has succeeded, so that a failed call
        leaves the cache unchanged.

        Args:
            key: ``(B, Hkv, L_new, D)`` keys of the new positions.
            value: ``(B, Hkv, L_new, Dv)`` values of the new positions.

        Returns:
            ``(key, value)`` of every cached position: ``(B, Hkv, S, D)`` and
                ``(B, Hkv, S, Dv)`` with ``S`` the total length so far.

        Raises:
            TypeError: If the inputs are not floating tensors of one dtype, or do not
                match the dtype of what is cached.
            ValueError: If shapes disagree with each other or with the cache.
        """
        key = check_tensor("key", key, min_ndim=4)
        value = check_tensor("value", value, min_ndim=4)
        check_same_dtype_and_device(key=key, value=value)
        if key.ndim != 4 or value.ndim != 4 or key.shape[:-1] != value.shape[:-1]:
            raise ValueError(
                "key and value must be (B, Hkv, L_new, D) and (B, Hkv, L_new, Dv); "
                f"got key {shape_str(key)}, value {shape_str(value)}"
            )
        return (
            extend_sequence("key", "(B, Hkv, S, D)", self.key, key),
            extend_sequence("value", "(B, Hkv, S, Dv)", self.value, value),
        )

    def reset(self) -> None:
        """Forget every cached position (start a new sequence)."""
        self.key = None
        self.value = None


def extend_sequence(name: str, layout: str, cached: Tensor | None, new: Tensor) -> Tensor:
    """``new`` appended to ``cached`` along the sequence axis (-2), or ``new`` alone.

    Package-internal: the one rule of every cache here (this module's and
    `attention.latent.LatentCache`): the new positions must match what is cached in
    every size but the sequence length, and in dtype and device.
    """
    if cached is None:
        return new
    check_same_dtype_and_device(**{f"cached_{name}": cached, name: new})
    if new.shape[:-2] != cached.shape[:-2] or new.shape[-1] != cached.shape[-1]:
        raise ValueError(
            f"new {name} must match the cached {name} {layout} in every size but S; "
            f"got {name} {shape_str(new)}, cached {shape_str(cached)}"
        )
    return torch.cat([cached, new], dim=-2)  # (..., S + L_new, ·)

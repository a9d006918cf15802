"""Argument validation shared by the public functions.

Every check raises a ``TypeError`` or ``ValueError`` that names the argument and shows
what was expected next to what was received, so a user never has to decode a
``RuntimeError`` from deep inside a matrix multiplication.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING, TypeGuard

import torch
from torch import Tensor

if TYPE_CHECKING:
    from torch.nn.attention.bias import CausalBias


def shape_str(t: Tensor) -> str:
    """Format a shape as ``(2, 4, 7, 16)`` (or ``(3,)``) for error messages."""
    return str(tuple(t.shape))


def check_tensor(name: str, value: object, *, min_ndim: int = 2) -> Tensor:
    """Require a floating-point tensor with at least ``min_ndim`` dimensions."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype (float16, bfloat16, float32, "
            f"float64); got {value.dtype}"
        )
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension{'s' if min_ndim != 1 else ''}; "
            f"got shape {shape_str(value)}"
        )
    return value


def check_same_dtype_and_device(**tensors: Tensor) -> None:
    """Require every tensor to share the first one's dtype and device."""
    (first_name, first), *rest = tensors.items()
    for name, t in rest:
        if t.dtype != first.dtype:
            raise TypeError(
                f"{first_name} and {name} must have the same dtype; "
                f"got {first_name} {first.dtype}, {name} {t.dtype}"
            )
        if t.device != first.device:
            raise ValueError(
                f"{first_name} and {name} must be on the same device; "
                f"got {first_name} on {first.device}, {name} on {t.device}"
            )


def check_scale(scale: object) -> float | None:
    """Require ``None`` or a finite real number."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise TypeError(f"scale must be a real number or None; got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite; got {scale}")
    return float(scale)


def check_size(name: str, n: object, minimum: int = 0) -> int:
    """Require an integer ``>= minimum`` and return it as an ``int``.

    Any ``numbers.Integral`` but a bool: sizes often come from NumPy or ``tensor.shape``.
    """
    if isinstance(n, bool) or not isinstance(n, Integral):
        raise TypeError(f"{name} must be an int; got {type(n).__name__} {n!r}")
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {n}")
    return int(n)


def check_flag(name: str, value: object) -> bool:
    """Require a real ``bool``: a truthy string or tensor would silently flip a mode."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__} {value!r}")
    return value


def check_probability(name: str, p: object) -> float:
    """Require a dropout probability in ``[0, 1]`` (1 drops everything, as in PyTorch)."""
    if isinstance(p, bool) or not isinstance(p, Real):
        raise TypeError(f"{name} must be a float in [0, 1]; got {type(p).__name__}")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"{name} must be in [0, 1]; got {p}")
    return float(p)


def is_causal_bias(value: object) -> TypeGuard[CausalBias]:
    """Whether ``value`` is a ``torch.nn.attention.bias.CausalBias``.

    Without importing that module: it imports ``torch._dynamo``, which took 1.1 s of
    the 3.3 s that ``import attention`` cost (every kernel, script and test process
    paid it). A caller holding a ``CausalBias`` has imported it already.
    """
    module = sys.modules.get("torch.nn.attention.bias")
    return module is not None and isinstance(value, module.CausalBias)


def check_attn_mask(attn_mask: object, scores_shape: torch.Size, query: Tensor) -> Tensor:
    """Require a mask that broadcasts to the scores ``(..., L, S)``.

    Bool (True = may attend), or float32 or the query's dtype (added to the scores), as
    PyTorch accepts. A ``torch.nn.attention.bias.CausalBias`` becomes the bool mask it
    stands for.
    """
    L, S = scores_shape[-2], scores_shape[-1]
    if is_causal_bias(attn_mask):
        return causal_bias_mask(attn_mask, L, S, query.device)
    if not isinstance(attn_mask, Tensor):
        # f(q, k, v, True) reads True as the mask: the signature follows PyTorch's, where
        # attn_mask comes before is_causal.
        hint = (
            " (the fourth positional argument is attn_mask, as in "
            "F.scaled_dot_product_attention: pass is_causal=True by keyword)"
            if isinstance(attn_mask, bool)
            else ""
        )
        raise TypeError(
            "attn_mask must be a torch.Tensor, a torch.nn.attention.bias.CausalBias or "
            f"None; got {type(attn_mask).__name__}{hint}"
        )
    if attn_mask.dtype not in (torch.bool, query.dtype, torch.float32):
        raise TypeError(
            "attn_mask must be bool (True = may attend), or float32 or the query's dtype "
            f"{query.dtype} (added to the scores); got {attn_mask.dtype}"
        )
    if attn_mask.device != query.device:
        raise ValueError(
            f"attn_mask must be on the query's device {query.device}; got {attn_mask.device}"
        )
    if not broadcasts_to(attn_mask.shape, scores_shape):
        target = str(tuple(scores_shape))
        raise ValueError(
            f"attn_mask must broadcast to the scores shape (..., L, S) = {target}; "
            f"got {shape_str(attn_mask)}"
        )
    return attn_mask


def check_causal_bias(bias: CausalBias, L: int, S: int) -> int:
    """Check a PyTorch ``CausalBias`` was made for ``L`` and ``S``; return its offset.

    The diagonal's offset: 0 for ``causal_upper_left``, ``S - L`` for
    ``causal_lower_right``.
    """
    if (bias.seq_len_q, bias.seq_len_kv) != (L, S):
        raise ValueError(
            "attn_mask (a CausalBias) must be made for the query and key lengths "
            f"(L, S) = ({L}, {S}); got ({bias.seq_len_q}, {bias.seq_len_kv})"
        )
    from torch.nn.attention.bias import CausalVariant  # imported by whoever made the bias

    return S - L if bias.variant == CausalVariant.LOWER_RIGHT else 0


def causal_bias_mask(bias: CausalBias, L: int, S: int, device: torch.device) -> Tensor:
    """The bool ``(L, S)`` mask that a PyTorch ``CausalBias`` stands for.

    ``causal_upper_left`` is top-left aligned, ``causal_lower_right`` bottom-right; the
    bias must have been made for these ``L`` and ``S``.
    """
    offset = check_causal_bias(bias, L, S)
    # The same rule as attention.masks.causal_mask (not imported: masks imports this module).
    rows = torch.arange(L, device=device).unsqueeze(-1) + offset
    return torch.arange(S, device=device) <= rows


def check_mask_or_causal(attn_mask: object, is_causal: object) -> bool:
    """``attn_mask`` and ``is_causal=True`` exclude each other, as in PyTorch."""
    is_causal = check_flag("is_causal", is_causal)
    if attn_mask is not None and is_causal:
        raise ValueError(
            "pass either attn_mask or is_causal=True, not both (combine the masks into "
            "one, e.g. attention.combine_masks(attn_mask, attention.causal_mask(L, S)))"
        )
    return is_causal


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without changing ``target``."""
    if len(shape) > len(target):
        return False
    return all(n == 1 or n == t for n, t in zip(reversed(shape), reversed(target), strict=False))


def check_query_key(query: object, key: object, enable_gqa: bool) -> tuple[Tensor, Tensor]:
    """Require query and key ``(..., [H,] L, D)``, ``(..., [Hkv,] S, D)`` that fit together."""
    check_flag("enable_gqa", enable_gqa)
    min_ndim = 3 if enable_gqa else 2
    query = check_tensor("query", query, min_ndim=min_ndim)
    key = check_tensor("key", key, min_ndim=min_ndim)
    check_same_dtype_and_device(query=query, key=key)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "query and key must have the same head size D (last dimension); "
            f"got query {shape_str(query)}, key {shape_str(key)}"
        )
    if (
        not enable_gqa
        and query.ndim >= 3
        and key.ndim >= 3
        and 1 not in (query.shape[-3], key.shape[-3])
        and query.shape[-3] != key.shape[-3]
    ):
        # Broadcasting would refuse it too; say what the user most likely meant.
        raise ValueError(
            "query and key must have the same number of heads, or pass enable_gqa=True "
            f"for fewer key/value heads; got query {shape_str(query)}, key {shape_str(key)}"
        )
    heads = 3 if enable_gqa else 2  # the axes that are not batch axes
    if not broadcast(query.shape[:-heads], key.shape[:-heads]):
        expected = (
            "(..., H, L, D) and (..., Hkv, S, D)" if enable_gqa else "(..., L, D) and (..., S, D)"
        )
        raise ValueError(
            f"query and key must have leading dimensions that broadcast, {expected}; "
            f"got query {shape_str(query)}, key {shape_str(key)}"
        )
    if enable_gqa:
        H, Hkv = query.shape[-3], key.shape[-3]
        if Hkv == 0 or H % Hkv != 0:
            raise ValueError(
                "with enable_gqa=True the number of query heads H must be a multiple of "
                f"the number of key/value heads Hkv; got H={H}, Hkv={Hkv} "
                f"(query {shape_str(query)}, key {shape_str(key)})"
            )
    return query, key


def check_value(value: object, key: Tensor, enable_gqa: bool, query_heads: int = 0) -> Tensor:
    """Require a value ``(..., [Hkv,] S, Dv)`` that fits the key."""
    value = check_tensor("value", value, min_ndim=3 if enable_gqa else 2)
    check_same_dtype_and_device(key=key, value=value)
    heads = 3 if enable_gqa else 2
    if enable_gqa and (value.shape[-3] == 0 or query_heads % value.shape[-3] != 0):
        raise ValueError(
            "with enable_gqa=True the number of query heads H must be a multiple of "
            f"the number of value heads; got H={query_heads}, value {shape_str(value)}"
        )
    if value.shape[-2] != key.shape[-2] or not broadcast(value.shape[:-heads], key.shape[:-heads]):
        what = "length S"
        raise ValueError(
            f"key and value must have the same {what}, and leading dimensions that "
            f"broadcast; got key {shape_str(key)}, value {shape_str(value)}"
        )
    return value


def broadcast_shapes(*shapes: Sequence[int]) -> torch.Size:
    """The shape that ``shapes`` broadcast to, as ``torch.broadcast_shapes`` gives it.

    Raises ``ValueError`` where they do not broadcast. Written out because the first
    call of ``torch.broadcast_shapes`` imports sympy (through torch's symbolic shapes),
    about half a second: every fresh process would pay it on its first attention call.
    """
    result = [1] * max((len(shape) for shape in shapes), default=0)
    for shape in shapes:
        for axis, size in enumerate(shape, len(result) - len(shape)):
            if size != 1 and size != result[axis]:
                if result[axis] != 1:
                    raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
                result[axis] = size
    return torch.Size(result)


def broadcast(*shapes: Sequence[int]) -> bool:
    """Whether the shapes broadcast together."""
    try:
        broadcast_shapes(*shapes)
    except ValueError:
        return False
    return True

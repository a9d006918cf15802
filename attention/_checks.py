"""Argument validation shared by the public functions.

Every check raises a ``TypeError`` or ``ValueError`` that names the argument and shows
what was expected next to what was received, so a user never has to decode a
``RuntimeError`` from deep inside a matrix multiplication.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor


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


def check_flag(name: str, value: object) -> bool:
    """Require a real ``bool``: a truthy string or tensor would silently flip a mode."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__} {value!r}")
    return value


def check_probability(name: str, p: object) -> float:
    """Require a dropout probability in ``[0, 1)``."""
    if isinstance(p, bool) or not isinstance(p, Real):
        raise TypeError(f"{name} must be a float in [0, 1); got {type(p).__name__}")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"{name} must be in [0, 1); got {p}")
    return float(p)


def check_attn_mask(attn_mask: object, scores_shape: torch.Size, query: Tensor) -> Tensor:
    """Require a bool mask, or a float mask of ``query``'s dtype, that broadcasts to the scores."""
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
            f"attn_mask must be a torch.Tensor or None; got {type(attn_mask).__name__}{hint}"
        )
    if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
        raise TypeError(
            "attn_mask must be bool (True = may attend) or have the query's dtype "
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


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without changing ``target``."""
    if len(shape) > len(target):
        return False
    return all(n == 1 or n == t for n, t in zip(reversed(shape), reversed(target), strict=False))

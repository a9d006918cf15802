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
    return causal_keep_mask(L, S, check_causal_bias(bias, L, S), device)


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


def check_query_key_value(
    query: object, key: object, value: object, enable_gqa: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """`check_query_key` and `check_value` together, as every kernel calls them."""
    query, key = check_query_key(query, key, enable_gqa)
    value = check_value(value, key, enable_gqa, query.shape[-3] if enable_gqa else 0)
    return query, key, value


def check_choice(name: str, value: object, choices: Sequence[object]) -> None:
    """Require one of a few allowed values (a layout, a mode)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}")


def check_key_padding_mask(
    key_padding_mask: object,
    B: int,
    S: int,
    dtype: torch.dtype,
    *,
    shape: str = "(B, S)",
    allow_float: bool = True,
) -> Tensor:
    """Require a ``(B, S)`` key padding mask as ``torch.nn.MultiheadAttention`` takes it.

    Bool (True marks a padding key, PyTorch's meaning) or, unless ``allow_float`` is
    False, ``dtype``, the query's (added to the scores). Returned in this package's
    convention, ``(B, 1, 1, S)`` to broadcast over heads and queries: a bool keep-mask
    (True = may attend) or the float bias.
    """
    if not isinstance(key_padding_mask, Tensor):
        raise TypeError(
            "key_padding_mask must be a torch.Tensor or None; "
            f"got {type(key_padding_mask).__name__}"
        )
    if tuple(key_padding_mask.shape) != (B, S):
        raise ValueError(
            f"key_padding_mask must have shape {shape} = ({B}, {S}); "
            f"got {shape_str(key_padding_mask)}"
        )
    if key_padding_mask.dtype == torch.bool:
        keep = ~key_padding_mask  # True = may attend, the package convention
    elif not allow_float:
        raise TypeError(
            "key_padding_mask must be bool (True marks padding): only a bool mask is "
            f"accepted here, not a float bias; got {key_padding_mask.dtype}"
        )
    elif key_padding_mask.dtype == dtype:
        keep = key_padding_mask
    else:
        raise TypeError(
            f"key_padding_mask must be bool (True = padding) or {dtype}; "
            f"got {key_padding_mask.dtype}"
        )
    return keep[:, None, None, :]  # (B, 1, 1, S)


def check_multi_head_inputs(
    query: object,
    key: object,
    value: object,
    *,
    dtype: torch.dtype,
    embed_dim: int,
    kdim: int,
    vdim: int,
    batch_first: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Require query, key and value as ``MultiHeadAttention`` takes them.

    All 3-D, ``(B, L, E)``, ``(B, S, kdim)``, ``(B, S, vdim)`` (the first two axes
    swapped unless ``batch_first``), or all 2-D without the batch axis; floating
    tensors of the module's ``dtype`` on one device. Shapes in the errors are the
    ones received.
    """
    query = check_tensor("query", query)
    key = check_tensor("key", key)
    value = check_tensor("value", value)
    check_same_dtype_and_device(query=query, key=key, value=value)
    if query.dtype != dtype:
        raise TypeError(f"inputs must have the module's dtype {dtype}; got {query.dtype}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim not in (2, 3) or t.ndim != query.ndim:
            layout = "(B, L, E)" if batch_first else "(L, B, E)"
            raise ValueError(
                f"query, key and value must all be 3-D {layout} or all 2-D (L, E); "
                f"got {name} {shape_str(t)}"
            )
    for name, t, width, attr in (
        ("query", query, embed_dim, "embed_dim"),
        ("key", key, kdim, "kdim"),
        ("value", value, vdim, "vdim"),
    ):
        if t.shape[-1] != width:
            raise ValueError(
                f"{name} must have {attr}={width} features (last dimension); "
                f"got {name} {shape_str(t)}"
            )
    batch = 0 if batch_first else 1  # the axis of B in 3-D inputs
    if query.ndim == 3 and not (query.shape[batch] == key.shape[batch] == value.shape[batch]):
        raise ValueError(
            "query, key and value must have the same batch size B; got query "
            f"{shape_str(query)}, key {shape_str(key)}, value {shape_str(value)}"
        )
    length = 0 if query.ndim == 3 and not batch_first else -2  # the axis of L and S
    if key.shape[length] != value.shape[length]:
        raise ValueError(
            "key and value must have the same length S; "
            f"got key {shape_str(key)}, value {shape_str(value)}"
        )
    return query, key, value


def check_layout(
    layout: object, block_size: object, L: int | None, S: int | None
) -> tuple[int, int]:
    """Require a bool block layout ``(ceil(L / block_size), ceil(S / block_size))``.

    Returns ``L`` and ``S``, each defaulting to the layout's blocks times ``block_size``.
    Shared by `attention.masks.block_sparse_mask` and
    `attention.efficient.block_sparse_attention`.
    """
    if not isinstance(layout, Tensor) or layout.dtype != torch.bool:
        got = layout.dtype if isinstance(layout, Tensor) else type(layout).__name__
        raise TypeError(f"layout must be a bool tensor; got {got}")
    if layout.ndim != 2:
        raise ValueError(
            f"layout must be 2-D (query blocks, key blocks); got shape {tuple(layout.shape)}"
        )
    size = check_size("block_size", block_size, minimum=1)
    L = layout.shape[0] * size if L is None else check_size("L", L)
    S = layout.shape[1] * size if S is None else check_size("S", S)
    expected = (-(-L // size), -(-S // size))  # ceiling division
    if tuple(layout.shape) != expected:
        raise ValueError(
            "layout must have shape (ceil(L / block_size), ceil(S / block_size)) = "
            f"{expected} for L={L}, S={S}, block_size={size}; got {tuple(layout.shape)}"
        )
    return L, S


def causal_keep_mask(L: int, S: int, offset: int, device: torch.device | str | None) -> Tensor:
    """The bool ``(L, S)`` causal mask: key ``j`` visible to query ``i`` when ``j <= i + offset``.

    The one construction behind `attention.masks.causal_mask` (``offset`` 0 or
    ``S - L``) and the mask a ``CausalBias`` stands for.
    """
    rows = torch.arange(L, device=device).unsqueeze(-1) + offset  # (L, 1)
    return torch.arange(S, device=device) <= rows  # (L, S)


def check_buckets(
    num_buckets: object, max_distance: object, bidirectional: object
) -> tuple[int, int, int, int]:
    """T5 bucket settings, checked: ``(num_buckets, max_distance, per side, exact)``."""
    num_buckets = check_size("num_buckets", num_buckets, minimum=1)
    max_distance = check_size("max_distance", max_distance, minimum=1)
    if not isinstance(bidirectional, bool):
        raise TypeError(f"bidirectional must be a bool; got {type(bidirectional).__name__}")
    side = num_buckets // 2 if bidirectional else num_buckets  # buckets per side
    if num_buckets % 2 or side < 2:
        raise ValueError(
            f"num_buckets must be even and give at least 2 buckets per side; got {num_buckets}"
            + (" (bidirectional: half for each side)" if bidirectional else "")
        )
    exact = side // 2  # distances 0 .. exact - 1 get a bucket each
    if max_distance <= exact:
        raise ValueError(
            f"max_distance must exceed the {exact} distances that get a bucket each "
            f"(num_buckets={num_buckets}); got {max_distance}"
        )
    return num_buckets, max_distance, side, exact


def check_base(base: object) -> float:
    if isinstance(base, bool) or not isinstance(base, Real):
        raise TypeError(f"base must be a real number; got {type(base).__name__}")
    if not (math.isfinite(float(base)) and float(base) > 0):
        raise ValueError(f"base must be finite and > 0; got {base}")
    return float(base)


def check_dtype(dtype: object) -> torch.dtype:
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype or None; got {dtype}")
    return dtype


def check_positions(positions: object, x: Tensor) -> Tensor:
    if not isinstance(positions, Tensor):
        raise TypeError(
            f"positions must be an integer tensor or None; got {type(positions).__name__}"
        )
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must have an integer dtype; got {positions.dtype}")
    if positions.device != x.device:
        raise ValueError(f"positions must be on x's device {x.device}; got {positions.device}")
    target = tuple(x.shape[:-1])
    if positions.ndim == 0 or not broadcasts_to(tuple(positions.shape), target):
        raise ValueError(
            f"positions must broadcast to x's leading dimensions (..., L) = {target}; "
            f"got shape {shape_str(positions)} for x {shape_str(x)}"
        )
    return positions


def check_rotary_dim(dim: object) -> int:
    """Require an even head size ``dim >= 2``: RoPE rotates pairs of features."""
    dim = check_size("dim", dim, minimum=2)
    if dim % 2 != 0:
        raise ValueError(f"dim must be even (RoPE rotates pairs of features); got {dim}")
    return dim


# Each RoPE scaling rule: (required keys, optional keys), named as in Hugging Face configs.
ROPE_SCALING_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
    ),
    "llama3": (
        ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        (),
    ),
    "longrope": (
        ("factor", "short_factor", "long_factor", "original_max_position_embeddings"),
        ("attention_factor",),
    ),
}
_ROPE_POSITIVE = ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow")


def check_rope_scaling(scaling: object, dim: int) -> tuple[str, dict[str, float]]:
    """Validate a RoPE ``scaling`` dict; return its rule and its parameters (``None``s dropped)."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict or None; got {type(scaling).__name__}")
    known = tuple(ROPE_SCALING_RULES)
    rule = scaling.get("rope_type")
    if rule not in ROPE_SCALING_RULES:
        raise ValueError(
            f"scaling['rope_type'] must be one of {known}; got {rule!r}"
            if "rope_type" in scaling
            else f"scaling must have a 'rope_type' key, one of {known}; got keys {sorted(scaling)}"
        )
    required, optional = ROPE_SCALING_RULES[rule]
    params = {k: v for k, v in scaling.items() if k != "rope_type" and v is not None}
    if "rope_theta" in params:
        raise ValueError("scaling must not hold 'rope_theta'; pass it as base=")
    unknown = sorted(set(params) - set(required) - set(optional))
    if unknown:
        raise ValueError(
            f"scaling has unknown keys {unknown} for rope_type {rule!r}; "
            f"expected {list(required)}, optionally {list(optional)}"
        )
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"scaling for rope_type {rule!r} is missing {missing}")
    for key, value in params.items():
        if key == "truncate":
            if not isinstance(value, bool):
                raise TypeError(f"scaling['truncate'] must be a bool; got {value!r}")
        elif key == "original_max_position_embeddings":
            params[key] = check_size(f"scaling[{key!r}]", value, minimum=1)
        elif key in ("short_factor", "long_factor"):
            values = list(value) if isinstance(value, (list, tuple)) else None
            if (
                values is None
                or len(values) != dim // 2
                or not all(isinstance(v, Real) and not isinstance(v, bool) for v in values)
                or not all(math.isfinite(v) and v > 0 for v in values)
            ):
                raise ValueError(
                    f"scaling[{key!r}] must be a list of dim / 2 = {dim // 2} finite numbers "
                    f"> 0; got {value!r}"
                )
        elif isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"scaling[{key!r}] must be a real number; got {value!r}")
        elif not math.isfinite(value) or (
            value <= 0 and (key in _ROPE_POSITIVE or key == "attention_factor")
        ):
            raise ValueError(f"scaling[{key!r}] must be finite and > 0; got {value}")
    if rule == "llama3" and params["high_freq_factor"] <= params["low_freq_factor"]:
        raise ValueError(
            "scaling['high_freq_factor'] must be greater than scaling['low_freq_factor']; "
            f"got {params['high_freq_factor']} and {params['low_freq_factor']}"
        )
    if rule == "dynamic" and dim < 4:
        raise ValueError(
            f"rope_type 'dynamic' needs dim >= 4 (exponent dim / (dim - 2)); got {dim}"
        )
    return rule, params


def check_labels(name: str, labels: Sequence[str] | None, n: int, what: str) -> list[str] | None:
    """Require ``None`` or exactly ``n`` labels; return them as strings."""
    if labels is None:
        return None
    if isinstance(labels, str):
        raise TypeError(f"{name} must be a sequence of strings, one per {what}; got a single str")
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have one label per {what}: expected {n}; got {len(labels)}")
    return labels


def check_non_negative(minimum: float) -> None:
    if minimum < 0:
        raise ValueError(
            "weights must be non-negative (probabilities, not scores); "
            f"got a minimum of {minimum:.4g}"
        )


def check_projection(name: str, projection: object, query: Tensor, S: int) -> Tensor:
    projection = check_tensor(name, projection, min_ndim=2)
    check_same_dtype_and_device(query=query, **{name: projection})
    if projection.shape[-1] != S or projection.shape[-2] < 1:
        raise ValueError(
            f"{name} must be (..., r, S) with S = {S} keys and r >= 1 rows; "
            f"got {name} {shape_str(projection)}"
        )
    return projection


def check_features_projection(projection: object, x: Tensor) -> Tensor:
    projection = check_tensor("projection", projection, min_ndim=2)
    check_same_dtype_and_device(x=x, projection=projection)
    D = x.shape[-1]
    if projection.ndim != 2 or projection.shape[1] != D or projection.shape[0] < 1:
        raise ValueError(
            f"projection must be (num_features, D) with D = {D} and num_features >= 1; "
            f"got projection {shape_str(projection)}"
        )
    return projection


# Sequence-parallel attention (attention.distributed): what one rank can check of its
# own call. That all ranks make the same call needs the process group, and is checked
# in attention/distributed/_calls.py.


def check_sequence_parallel_call(
    strategy: str,
    world: int,
    query: object,
    key: object,
    value: object,
    *,
    is_causal: object,
    key_padding_mask: object,
    scale: object,
    enable_gqa: bool,
    layout: str,
    chunks_per_rank: dict[str, int],
) -> float | None:
    """Require shards ``(B, H, n / W, D)`` that one rank of ``world`` can attend.

    ``chunks_per_rank`` maps each layout to the number of chunks a rank holds in it
    (`attention.distributed.sharding.chunk_ids`): the local length must split into
    them. The key padding mask must be bool: the strategies gather it as a keep-mask
    and take no float bias. ``ulysses_attention`` also needs every head count to be
    divisible by ``world``. Returns the checked ``scale`` (``None``: the default).
    """
    check_flag("is_causal", is_causal)
    check_choice("layout", layout, tuple(chunks_per_rank))
    query, key, value = check_query_key_value(query, key, value, enable_gqa)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != 4:
            raise ValueError(
                f"{name} must be (B, H, n / W, D), this rank's positions; got {shape_str(t)}"
            )
    if query.shape[-2] != key.shape[-2]:
        raise ValueError(
            "sequence-parallel attention is self-attention over one split sequence: query "
            f"and key must have the same length on this rank; got query {shape_str(query)}, "
            f"key {shape_str(key)}"
        )
    B, n = query.shape[0], query.shape[-2]
    if key_padding_mask is not None:
        check_key_padding_mask(
            key_padding_mask, B, n, query.dtype, shape="(B, n / W)", allow_float=False
        )
    parts = chunks_per_rank[layout]
    if n % parts:
        raise ValueError(
            f"with layout {layout!r} each rank holds {parts} chunks: the length on each rank "
            f"must be divisible by {parts}; got query {shape_str(query)}"
        )
    if strategy == "ulysses_attention":
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.shape[1] % world:
                raise ValueError(
                    f"ulysses_attention splits the heads across ranks: the number of {name} "
                    f"heads must be divisible by the number of ranks ({world}); got {name} "
                    f"{shape_str(t)} with {t.shape[1]} heads. Use ring_attention or "
                    "all_gather_attention for this model"
                )
    return check_scale(scale)


def check_mods(score_mod: object, mask_mod: object, **tensors: Tensor) -> None:
    """Require ``score_mod`` / ``mask_mod`` to be callable or ``None``, and 4-D inputs with one.

    The mods take one index per axis of the ``(B, H, L, S)`` scores, as FlexAttention's
    do: with fewer axes there is no ``b`` or ``h`` to give them, and with more no single
    one.
    """
    for name, mod in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if mod is not None and not callable(mod):
            raise TypeError(f"{name} must be callable or None; got {type(mod).__name__}")
    if score_mod is None and mask_mod is None:
        return
    for name, t in tensors.items():
        if t.ndim != 4:
            raise ValueError(
                f"score_mod and mask_mod need 4-D inputs (B, H, L, D), as FlexAttention's "
                f"do; got {name} {shape_str(t)}"
            )


def check_score_mod_output(result: object, shape: torch.Size) -> Tensor:
    """Require ``score_mod``'s result to be a floating-point tensor broadcastable to ``shape``.

    Returns it expanded to ``shape`` (a view).
    """
    result = _check_mod_output("score_mod", "a torch.Tensor", result, shape)
    if not result.is_floating_point():
        raise TypeError(
            f"score_mod must return a floating-point tensor (the new scores); got {result.dtype}"
        )
    return result.expand(shape)


def check_mask_mod_output(result: object, shape: torch.Size) -> Tensor:
    """Require ``mask_mod``'s result to be a bool tensor broadcastable to ``shape``."""
    result = _check_mod_output("mask_mod", "a bool torch.Tensor", result, shape)
    if result.dtype != torch.bool:
        raise TypeError(
            f"mask_mod must return a bool tensor (True = may attend); got {result.dtype}"
        )
    return result.expand(shape)


def _check_mod_output(name: str, expected: str, result: object, shape: torch.Size) -> Tensor:
    """What both mods must return: a tensor that broadcasts to the scores' ``shape``."""
    if not isinstance(result, Tensor):
        raise TypeError(f"{name} must return {expected}; got {type(result).__name__}")
    if not broadcasts_to(tuple(result.shape), tuple(shape)):
        raise ValueError(
            f"{name} must return a tensor broadcastable to the scores {tuple(shape)}; "
            f"got {shape_str(result)}"
        )
    return result


def check_cap(cap: object) -> float:
    """Require a soft-capping cap: a finite number above 0 (a bool is not one)."""
    if isinstance(cap, bool) or not isinstance(cap, Real):
        raise TypeError(f"cap must be a positive number; got {type(cap).__name__}")
    if not 0 < float(cap) < math.inf:
        raise ValueError(f"cap must be a finite number above 0; got {cap!r}")
    return float(cap)


def check_sinks(sinks: object, query: Tensor) -> Tensor:
    """Require one finite sink logit per query head, ``(H,)``, for a ``(..., H, L, D)`` query."""
    sinks = check_tensor("sinks", sinks, min_ndim=1)
    if query.ndim < 3:
        raise ValueError(
            f"query must be (..., H, L, D) with a head axis for sink_attention; got "
            f"{shape_str(query)}"
        )
    H = query.shape[-3]
    if sinks.shape != (H,):
        raise ValueError(
            f"sinks must have shape ({H},), one logit per query head of query "
            f"{shape_str(query)}; got {shape_str(sinks)}"
        )
    if not torch.isfinite(sinks).all():
        raise ValueError("sinks must be finite: a sink of -inf is no sink, +inf takes all")
    return sinks


def check_decay(name: str, decay: object, shapes: dict[str, tuple[int, ...]]) -> Tensor:
    """Require a decay (a forget gate) of values in (0, 1], of one of ``shapes``.

    ``shapes`` maps what each accepted shape means to the shape, for example
    ``{"per head": (H,), "per step": (B, H, L), "per step and channel": (B, H, L, D)}``:
    the error lists them all. A decay of 0 erases the state outright, which its
    logarithm (every form but the recurrent one works in log space) cannot represent;
    a decay above 1 makes the state grow without bound.
    """
    decay = check_tensor(name, decay, min_ndim=1)
    if tuple(decay.shape) not in shapes.values():
        accepted = ", ".join(f"{what} {shape}" for what, shape in shapes.items())
        raise ValueError(f"{name} must have one of the shapes {accepted}; got {shape_str(decay)}")
    outside = ~((decay > 0) & (decay <= 1))  # NaN is outside too
    if outside.any():
        worst = decay[outside].flatten()[0].item()
        raise ValueError(
            f"{name} must lie in (0, 1] (the share of the state kept per step); "
            f"got {int(outside.sum())} values outside, e.g. {worst}"
        )
    return decay


def check_real(name: str, value: object) -> float:
    """Require a finite real number (not a bool); any ``numbers.Real``, NumPy's included."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite; got {value}")
    return float(value)


def check_shape(name: str, t: object, shape: tuple[int, ...], letters: str) -> Tensor:
    """Require a floating-point tensor of exactly ``shape``, which ``letters`` names.

    ``letters`` spells the shape out for the message, e.g. ``"(B, H, L)"``.
    """
    t = check_tensor(name, t, min_ndim=1)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {letters} = {shape}; got {shape_str(t)}")
    return t


def check_companion(name: str, t: Tensor, like_name: str, like: Tensor) -> None:
    """Require a companion of the input ``like`` on its device, in its dtype or float32.

    A gate, a parameter or a state: models often keep them in float32 beside
    half-precision inputs, and the computation runs in float32 for those. ``like_name``
    names the input in the messages, e.g. ``"the query"`` or ``"x"``.
    """
    if t.dtype not in (like.dtype, torch.float32):
        also = "" if like.dtype == torch.float32 else " or torch.float32"
        raise TypeError(f"{name} must have {like_name}'s dtype {like.dtype}{also}; got {t.dtype}")
    if t.device != like.device:
        raise ValueError(f"{name} must be on {like_name}'s device {like.device}; got {t.device}")


def check_linear_recurrence_call(
    query: object,
    key: object,
    value: object,
    decay: object,
    *,
    forms: Sequence[str],
    form: object,
    chunk_size: object,
    scale: object,
    enable_gqa: object,
    initial_state: object,
    return_state: object,
) -> tuple[int, float | None]:
    """Require a call of `attention.linear_decay.decayed_linear_attention`.

    Query, key and value exactly ``(B, H, L, D)``, ``(B, Hkv, L, D)``, ``(B, Hkv, L,
    Dv)``: one sequence, nothing broadcast (``check_query_key_value`` allows both); a
    decay of one of its three shapes and a state ``(B, H, D, Dv)``, both companions of
    the query. Returns the checked ``chunk_size`` and ``scale`` (``None``: the default).
    """
    check_choice("form", form, forms)
    chunk_size = check_size("chunk_size", chunk_size, minimum=1)
    enable_gqa = check_flag("enable_gqa", enable_gqa)
    check_flag("return_state", return_state)
    query = check_tensor("query", query, min_ndim=4)
    key = check_tensor("key", key, min_ndim=4)
    value = check_tensor("value", value, min_ndim=4)
    check_same_dtype_and_device(query=query, key=key, value=value)
    got = f"got query {shape_str(query)}, key {shape_str(key)}, value {shape_str(value)}"
    if not query.ndim == key.ndim == value.ndim == 4:
        raise ValueError(
            f"query, key and value must be 4-D, (B, H, L, D), (B, H, L, D) and (B, H, L, Dv); {got}"
        )
    B, H, L, D = query.shape
    Hk, Hv = key.shape[1], value.shape[1]
    if key.shape[0] != B or value.shape[0] != B or key.shape[2] != L or value.shape[2] != L:
        raise ValueError(f"query, key and value must share the batch size B and length L; {got}")
    if key.shape[3] != D:
        raise ValueError(f"query and key must have the same head size D; {got}")
    if not enable_gqa and not H == Hk == Hv:
        raise ValueError(
            "query, key and value must have the same number of heads H, or pass "
            f"enable_gqa=True for fewer key/value heads; {got}"
        )
    if enable_gqa and (0 in (Hk, Hv) or H % Hk or H % Hv):
        raise ValueError(
            "with enable_gqa=True the key and value head counts must divide the query's "
            f"H = {H}; {got}"
        )
    if decay is not None:
        shapes = {"per head": (H,), "per step": (B, H, L), "per step and channel": (B, H, L, D)}
        check_companion("decay", check_decay("decay", decay, shapes), "the query", query)
    if initial_state is not None:
        Dv = value.shape[-1]
        state = check_shape("initial_state", initial_state, (B, H, D, Dv), "(B, H, D, Dv)")
        check_companion("initial_state", state, "the query", query)
    return chunk_size, check_scale(scale)


def check_topk_indices(indices: object, S: int) -> Tensor:
    """Require an integer ``(..., L, k)`` tensor of key indices in ``[-1, S)``, ``k <= S``.

    No key twice in a row: gathered twice, it would count twice in the softmax, where a
    mask can choose it only once.
    """
    if not isinstance(indices, Tensor):
        raise TypeError(f"indices must be a torch.Tensor; got {type(indices).__name__}")
    if indices.dtype == torch.bool or indices.is_floating_point() or indices.is_complex():
        raise TypeError(f"indices must be an integer tensor (int32 or int64); got {indices.dtype}")
    if indices.ndim < 2:
        raise ValueError(f"indices must be (..., L, k), at least 2-D; got {shape_str(indices)}")
    if indices.shape[-1] > S:
        raise ValueError(
            f"indices choose k = {indices.shape[-1]} keys per query from only S = {S} keys: "
            f"k must be at most S; got indices {shape_str(indices)}"
        )
    if indices.numel() == 0:
        return indices
    low, high = int(indices.min()), int(indices.max())
    if low < -1 or high >= S:
        bad = low if low < -1 else high
        raise ValueError(f"indices must lie in [0, S) = [0, {S}), or be -1 for no key; got {bad}")
    ordered = indices.sort(dim=-1).values
    repeated = (ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)
    if repeated.any():
        row = repeated.any(dim=-1).nonzero()[0].tolist()
        raise ValueError(
            f"indices must not choose a key twice for one query; row {tuple(row)} does: "
            f"{indices[tuple(row)].tolist()}"
        )
    return indices


def check_lambda(lambda_full: object, query: Tensor) -> Tensor:
    """``lambda_full`` as a tensor ``()`` or ``(H, 1, 1)``: broadcasts over ``(..., H, L, Dv)``.

    A number becomes a float64 tensor: a Python float is a double, and float32 would
    round it.
    """
    if not isinstance(lambda_full, Tensor):
        value = check_real("lambda_full", lambda_full)
        return torch.tensor(value, dtype=torch.float64, device=query.device)
    lam = check_tensor("lambda_full", lambda_full, min_ndim=0)
    H = query.shape[-3] if query.ndim >= 3 else None
    if lam.ndim == 1 and H is not None and lam.shape == (H,):
        lam = lam.view(H, 1, 1)
    elif lam.ndim != 0:
        expected = f"() or ({H},), one per head" if H is not None else "()"
        raise ValueError(f"lambda_full must have shape {expected}; got {shape_str(lam)}")
    if lam.device != query.device:
        raise ValueError(
            f"lambda_full must be on the query's device {query.device}; got {lam.device}"
        )
    if not torch.isfinite(lam).all():
        raise ValueError("lambda_full must be finite")
    return lam

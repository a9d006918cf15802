r"""Rules every attention kernel follows: scale, working dtype, scores shape, softmax.

The kernels of `attention.functional`, `attention.efficient` (through
`attention._tiled`), `attention.approximate` and `attention.distributed`, and the rotary
embedding of `attention.positional`, agree with one another because they take these
rules from one place: the default scale $1/\sqrt{D}$, float32 arithmetic for
float16/bfloat16 inputs, the ``(..., L, S)`` shape of the scores, and a softmax that
gives a fully masked row zeros instead of NaN. Inputs are assumed validated
(`attention._checks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attention._checks import broadcast_shapes, check_mask_mod_output, check_score_mod_output

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
"""``score_mod(score, b, h, q_idx, kv_idx) -> score``, as FlexAttention's."""
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``mask_mod(b, h, q_idx, kv_idx) -> bool``, True where the query may attend."""


def default_scale(query: Tensor, scale: float | None) -> float:
    r"""``scale``, or $1/\sqrt{D}$ when it is ``None``.

    With ``D = 0`` every score is an empty sum, 0, whatever the scale: 1 stands in for
    $1/\sqrt{0}$, and the output is the mean of the values, as in PyTorch.
    """
    if scale is not None:
        return scale
    D = query.shape[-1]
    return 1.0 / math.sqrt(D) if D > 0 else 1.0


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16 (too coarse for long sums and exp), else ``dtype``."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def scores_shape(query: Tensor, key: Tensor, enable_gqa: bool) -> torch.Size:
    """``(..., L, S)``: the query's and key's leading dimensions broadcast together."""
    heads = 3 if enable_gqa else 2  # with GQA the head axes differ (H vs Hkv): keep H
    batch = broadcast_shapes(query.shape[:-heads], key.shape[:-heads])
    return torch.Size((*batch, *query.shape[-heads:-1], key.shape[-2]))


def mod_indices(
    B: int, H: int, i0: int, i1: int, j0: int, j1: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``b, h, q_idx, kv_idx`` for the scores ``[:, :, i0:i1, j0:j1]`` of ``(B, H, L, S)``.

    int64 ``arange`` tensors shaped ``(B, 1, 1, 1)``, ``(1, H, 1, 1)``,
    ``(1, 1, i1 - i0, 1)`` and ``(1, 1, 1, j1 - j0)``: they broadcast against the scores,
    so a mod written for FlexAttention (one element at a time, under ``vmap``) runs on a
    whole block at once.
    """
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1, 1)
    q_idx = torch.arange(i0, i1, device=device).view(1, 1, i1 - i0, 1)
    kv_idx = torch.arange(j0, j1, device=device).view(1, 1, 1, j1 - j0)
    return b, h, q_idx, kv_idx


def apply_score_mod(
    score_mod: ScoreMod, scores: Tensor, indices: tuple[Tensor, Tensor, Tensor, Tensor]
) -> Tensor:
    """``score_mod`` on ``(B, H, l, s)`` scores, checked, expanded and in their dtype."""
    result = check_score_mod_output(score_mod(scores, *indices), scores.shape)
    return result.to(scores.dtype)


def mask_mod_keep(
    mask_mod: MaskMod, shape: torch.Size, indices: tuple[Tensor, Tensor, Tensor, Tensor]
) -> Tensor:
    """``mask_mod``'s bool ``(B, H, l, s)`` (a broadcast view), checked: True = may attend."""
    return check_mask_mod_output(mask_mod(*indices), shape)


def masked_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last axis, with a row of only ``-inf`` giving zeros, not NaN.

    Such a row comes from a mask that hides every key, or from keys that are ``-inf``
    themselves. softmax would compute 0/0 = NaN there, and that NaN would flow back into
    every gradient; PyTorch returns zeros. Such rows get a harmless finite row before the
    softmax and zero weights after it. ``scores`` is overwritten in those rows: pass a
    tensor of your own that autograd does not need (no branch on the values, so the
    function also runs on meta tensors and under ``torch.compile``).
    """
    if scores.shape[-1] == 0:  # no keys at all: nothing to attend to, zeros
        return torch.softmax(scores, dim=-1)
    empty_row = torch.isneginf(scores.amax(dim=-1, keepdim=True))  # (..., L, 1)
    scores.masked_fill_(empty_row, 0.0)  # any finite row: its weights are zeroed below
    return torch.softmax(scores, dim=-1).masked_fill(empty_row, 0.0)

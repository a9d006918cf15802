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

import torch
from torch import Tensor

from attention._checks import broadcast_shapes


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

"""Transformers' masks as this package's attention reads them.

One home for the rules that the registered attention (`huggingface.py`) and the patched
layers (`huggingface_layers.py`) both follow.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def causality(
    module: Any, attention_mask: Tensor | None, is_causal: bool | None, L: int, S: int
) -> tuple[bool, int]:
    """Whether a layer's attention is causal without a mask, and how many keys it reads.

    Transformers' SDPA rule: causality from the call (``is_causal``), else from the
    layer, and only when there is no mask and more than one query (one query may see
    every cached key). The registered mask function (``_mask_for_the_model`` in
    `huggingface.py`) leaves the mask out only for models that declare SDPA support,
    which promise that their layers' ``is_causal`` is right.

    The keys read are ``S``, or ``L`` where an empty static cache gives ``S > L``
    without a mask: the keys past ``L`` are the cache's unused slots, as Transformers'
    SDPA path assumes.
    """
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = bool(is_causal) and attention_mask is None and L > 1
    return causal, L if causal and S > L else S


def additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True = attend) as eager's float mask: 0 or the dtype's minimum."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, torch.finfo(dtype).min
    )


def eager_mask(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """The mask a layer was given, as eager adds it: a boolean one made additive.

    A query that sees no key then attends to all keys equally (every score gets the
    same most negative number) instead of returning zero, as in eager.
    """
    if mask is not None and mask.dtype == torch.bool:
        return additive(mask, dtype)
    return mask

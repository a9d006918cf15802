"""The shared validators of attention/_checks.py, where a public function does not reach them."""

from __future__ import annotations

import pytest
import torch

from attention._checks import check_key_padding_mask

B, S = 2, 7


def test_key_padding_mask_becomes_a_keep_mask_over_heads_and_queries():
    padding = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])  # True marks padding
    keep = check_key_padding_mask(padding, B, S, torch.float32)
    assert keep.shape == (B, 1, 1, S)
    assert torch.equal(keep[:, 0, 0], ~padding)
    bias = torch.randn(B, S)
    assert torch.equal(check_key_padding_mask(bias, B, S, torch.float32)[:, 0, 0], bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_key_padding_mask_without_allow_float_takes_bool_only(dtype):
    # Sequence-parallel attention calls it so: its kernels read the padding as a
    # keep-mask, so a float bias (even of the query's dtype) is refused, not misread.
    message = (
        rf"key_padding_mask must be bool \(True marks padding\): only a bool mask .*; got {dtype}$"
    )
    with pytest.raises(TypeError, match=message):
        check_key_padding_mask(
            torch.zeros(B, S, dtype=dtype), B, S, torch.float32, allow_float=False
        )
    padding = torch.zeros(B, S, dtype=torch.bool)
    keep = check_key_padding_mask(padding, B, S, torch.float32, allow_float=False)
    assert keep.shape == (B, 1, 1, S) and keep.dtype == torch.bool and bool(keep.all())
    with pytest.raises(ValueError, match=r"must have shape \(B, S\) = \(2, 7\); got \(7, 2\)"):
        check_key_padding_mask(torch.zeros(S, B), B, S, torch.float32, allow_float=False)

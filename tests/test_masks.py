import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attention import causal_mask, scaled_dot_product_attention


def assert_same_attention(mask, make_bias):
    """PyTorch's CausalBias is a tensor subclass without a public dense form, so compare
    what SDPA computes with it and with our mask."""
    L, S = mask.shape
    g = torch.Generator().manual_seed(L * 100 + S)
    q, k, v = (
        torch.randn(2, L, 5, generator=g),
        torch.randn(2, S, 5, generator=g),
        torch.randn(2, S, 3, generator=g),
    )
    with warnings.catch_warnings():
        # PyTorch warns that L > S leaves the first L - S rows empty; that is the point.
        warnings.simplefilter("ignore", UserWarning)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=make_bias(L, S))
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), expected)


@pytest.mark.parametrize(("L", "S"), [(1, 1), (4, 4), (3, 7), (7, 3), (0, 2), (2, 0)])
def test_top_left_alignment_is_what_is_causal_means(L, S):
    expected = torch.ones(L, S, dtype=torch.bool).tril()
    assert torch.equal(causal_mask(L, S), expected)
    assert torch.equal(causal_mask(L, S, alignment="top_left"), expected)
    if L and S:
        assert_same_attention(causal_mask(L, S), causal_upper_left)


@pytest.mark.parametrize(("L", "S"), [(1, 1), (4, 4), (3, 7), (7, 3), (1, 9)])
def test_bottom_right_alignment_matches_torch_causal_lower_right(L, S):
    mask = causal_mask(L, S, alignment="bottom_right")
    assert torch.equal(mask, torch.ones(L, S, dtype=torch.bool).tril(S - L))
    assert_same_attention(mask, causal_lower_right)


def test_bottom_right_lets_the_last_query_see_every_key():
    mask = causal_mask(3, 8, alignment="bottom_right")
    assert mask[-1].all()
    assert mask.sum(-1).tolist() == [6, 7, 8]


def test_alignments_agree_when_lengths_are_equal():
    assert torch.equal(causal_mask(6), causal_mask(6, 6, alignment="bottom_right"))


def test_causal_mask_equals_is_causal_in_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 5, 4, generator=g),
        torch.randn(2, 8, 4, generator=g),
        torch.randn(2, 8, 3, generator=g),
    )
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5, 8)),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_device_argument_is_honoured():
    assert causal_mask(2, device="cpu").device.type == "cpu"
    assert causal_mask(2, device="meta").device.type == "meta"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((2.0,), {}, TypeError, r"L must be an int; got float"),
        ((2, True), {}, TypeError, r"S must be an int; got bool"),
        ((-1,), {}, ValueError, r"L must be >= 0; got -1"),
        (
            (2, 3),
            {"alignment": "bottom-right"},
            ValueError,
            r"alignment must be 'top_left' or 'bottom_right'",
        ),
    ],
)
def test_bad_arguments_raise_clear_errors(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        causal_mask(*args, **kwargs)

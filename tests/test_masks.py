import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attention import (
    block_sparse_mask,
    causal_mask,
    combine_masks,
    mask_to_bias,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
    strided_layout,
)


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
        ((np.float64(2.0),), {}, TypeError, r"L must be an int; got float64"),
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


def test_sizes_may_be_numpy_integers():
    # Lengths often come from NumPy arrays; np.int64 is an integer, not a bad argument.
    mask = causal_mask(np.int64(3), np.int32(4))
    assert mask.shape == (3, 4)
    assert torch.equal(mask, causal_mask(3, 4))


# --- sliding window --------------------------------------------------------------------


def brute_force_window(L, S, window, causal, alignment):
    offset = S - L if alignment == "bottom_right" else 0
    mask = torch.zeros(L, S, dtype=torch.bool)
    for i in range(L):
        for j in range(S):
            d = i + offset - j
            mask[i, j] = (0 <= d < window) if causal else (abs(d) < window)
    return mask


@pytest.mark.parametrize(("L", "S"), [(6, 6), (3, 8), (8, 3)])
@pytest.mark.parametrize("window", [1, 2, 5, 20])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_sliding_window_matches_its_definition(L, S, window, causal, alignment):
    expected = brute_force_window(L, S, window, causal, alignment)
    mask = sliding_window_mask(L, S, window=window, causal=causal, alignment=alignment)
    assert torch.equal(mask, expected)


def test_a_window_as_long_as_the_sequence_is_the_causal_mask():
    assert torch.equal(sliding_window_mask(7, window=7), causal_mask(7))
    assert sliding_window_mask(7, window=7, causal=False).all()


def test_each_query_sees_at_most_window_keys():
    assert sliding_window_mask(50, window=4).sum(-1).max() == 4


# --- padding ---------------------------------------------------------------------------


def test_padding_mask_marks_real_positions():
    mask = padding_mask(torch.tensor([2, 0, 3]), max_length=4)
    assert mask.tolist() == [
        [True, True, False, False],
        [False, False, False, False],
        [True, True, True, False],
    ]


def test_padding_mask_as_attn_mask_equals_dropping_the_padding():
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, 4, 5, generator=g),
        torch.randn(2, 3, 6, 5, generator=g),
        torch.randn(2, 3, 6, 2, generator=g),
    )
    lengths = [6, 4]
    out = scaled_dot_product_attention(q, k, v, attn_mask=padding_mask(lengths)[:, None, None, :])
    for b, n in enumerate(lengths):
        torch.testing.assert_close(
            out[b], scaled_dot_product_attention(q[b], k[b, :, :n], v[b, :, :n])
        )


@pytest.mark.parametrize(
    ("lengths", "kwargs", "error", "message"),
    [
        ([1.5, 2], {}, TypeError, r"lengths must be integers"),
        ("12", {}, TypeError, r"lengths must be a 1-D integer tensor or a list of ints; got str"),
        (torch.tensor([1.0, 2.0]), {}, TypeError, r"integer dtype; got torch.float32"),
        (torch.tensor([[1, 2]]), {}, ValueError, r"lengths must be 1-D \(B,\); got shape \(1, 2\)"),
        ([3, -1], {}, ValueError, r"lengths must be >= 0; got \[3, -1\]"),
        ([3, 5], {"max_length": 4}, ValueError, r"lengths must be <= max_length=4; got \[3, 5\]"),
    ],
)
def test_padding_mask_bad_input(lengths, kwargs, error, message):
    with pytest.raises(error, match=message):
        padding_mask(lengths, **kwargs)


# --- combining and additive masks --------------------------------------------------------


def test_combine_bool_masks_is_logical_and_with_broadcasting():
    keys = padding_mask([3, 4])[:, None, :]  # (B, 1, S)
    combined = combine_masks(causal_mask(4), keys)
    assert combined.shape == (2, 4, 4)
    assert torch.equal(combined, causal_mask(4) & keys)
    assert torch.equal(combine_masks(None, causal_mask(3)), causal_mask(3))


def test_combine_with_a_float_mask_adds_biases():
    bias = torch.randn(3, 3)
    combined = combine_masks(causal_mask(3), bias)
    assert combined.dtype == torch.float32
    assert torch.isneginf(combined[~causal_mask(3)]).all()
    torch.testing.assert_close(combined[causal_mask(3)], bias[causal_mask(3)])


def test_combine_masks_errors():
    with pytest.raises(ValueError, match="at least one mask"):
        combine_masks(None, None)
    with pytest.raises(ValueError, match=r"common shape; got shapes \[\(3, 3\), \(4,\)\]"):
        combine_masks(causal_mask(3), torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"masks\[1\] must be a torch.Tensor"):
        combine_masks(causal_mask(3), [[True]])
    with pytest.raises(TypeError, match="float masks must share one dtype"):
        combine_masks(torch.zeros(3), torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_mask_to_bias_gives_the_same_attention_as_the_bool_mask(dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=g).to(dtype) for _ in range(3))
    mask = causal_mask(5)
    mask[0, 0] = False  # a fully masked row too
    bias = mask_to_bias(mask, dtype=dtype)
    assert bias.dtype == dtype
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=bias),
        scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )
    assert torch.all(scaled_dot_product_attention(q, k, v, attn_mask=bias)[:, 0] == 0)


def test_finite_stand_ins_for_minus_infinity_are_wrong():
    # The reasons mask_to_bias uses -inf, demonstrated.
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(3, 4, generator=g),
        torch.randn(5, 4, generator=g),
        torch.randn(5, 2, generator=g),
    )
    nothing = torch.zeros(3, 5, dtype=torch.bool)
    finite = torch.zeros(3, 5).masked_fill(~nothing, torch.finfo(torch.float32).min)
    # a finite "minus infinity" turns "attend to nothing" into "average everything"
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=finite), v.mean(0).expand(3, 2)
    )
    with pytest.raises(RuntimeError):
        torch.zeros(2, dtype=torch.float16).masked_fill(torch.tensor([True, False]), -1e9)


def test_mask_to_bias_errors():
    with pytest.raises(TypeError, match=r"mask must be a bool tensor; got torch\.float32"):
        mask_to_bias(torch.zeros(2))
    with pytest.raises(TypeError, match="dtype must be a floating-point"):
        mask_to_bias(causal_mask(2), dtype=torch.int64)


def test_sliding_window_errors():
    with pytest.raises(ValueError, match=r"window must be >= 1; got 0"):
        sliding_window_mask(3, window=0)
    with pytest.raises(TypeError, match=r"window must be an int; got float"):
        sliding_window_mask(3, window=2.0)


# --- block-sparse layouts ----------------------------------------------------------------


@pytest.mark.parametrize(("L", "S", "block_size"), [(6, 6, 2), (7, 5, 3), (5, 9, 4), (3, 3, 5)])
def test_block_sparse_mask_matches_its_definition(L, S, block_size):
    shape = (-(-L // block_size), -(-S // block_size))
    layout = torch.rand(shape, generator=torch.Generator().manual_seed(L * S)) > 0.5
    mask = block_sparse_mask(layout, block_size, L, S)
    expected = torch.zeros(L, S, dtype=torch.bool)
    for i in range(L):
        for j in range(S):
            expected[i, j] = layout[i // block_size, j // block_size]
    assert torch.equal(mask, expected)


def test_block_sparse_mask_defaults_to_whole_blocks():
    layout = torch.tensor([[True, False, True], [False, True, False]])
    mask = block_sparse_mask(layout, 2)
    assert mask.shape == (4, 6)
    assert torch.equal(mask[::2, ::2], layout)


@pytest.mark.parametrize("n", [1, 5, 12])
@pytest.mark.parametrize("stride", [1, 2, 3, 4])
def test_strided_layout_matches_child_et_al(n, stride):
    layout = strided_layout(n, stride=stride)
    for i in range(n):
        for j in range(n):
            row, column = 0 <= i - j < stride, j <= i and (i - j) % stride == 0
            assert layout[i, j] == (row or column)


def test_strided_layout_with_stride_one_is_causal():
    assert torch.equal(strided_layout(6, stride=1), causal_mask(6))


def test_strided_layout_keeps_a_few_blocks_per_row():
    # stride ~ sqrt(n): each block row keeps about 2 sqrt(n) blocks, not n
    layout = strided_layout(64, stride=8)
    assert layout.sum(-1).max() <= 2 * 8


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((torch.ones(2, 2), 2), {}, TypeError, r"layout must be a bool tensor; got torch.float32"),
        (([[True]], 2), {}, TypeError, r"layout must be a bool tensor; got list"),
        (
            (torch.ones(2, dtype=torch.bool), 2),
            {},
            ValueError,
            r"layout must be 2-D \(query blocks, key blocks\); got shape \(2,\)",
        ),
        ((torch.ones(2, 2, dtype=torch.bool), 0), {}, ValueError, r"block_size must be >= 1"),
        ((torch.ones(2, 2, dtype=torch.bool), 1.5), {}, TypeError, r"block_size must be an int"),
        (
            (torch.ones(2, 3, dtype=torch.bool), 4),
            {"L": 9, "S": 12},
            ValueError,
            r"layout must have shape \(ceil\(L / block_size\), ceil\(S / block_size\)\) = "
            r"\(3, 3\) for L=9, S=12, block_size=4; got \(2, 3\)",
        ),
        ((torch.ones(2, 2, dtype=torch.bool), 2), {"L": -1}, ValueError, r"L must be >= 0"),
    ],
)
def test_block_sparse_mask_errors(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        block_sparse_mask(*args, **kwargs)


def test_strided_layout_errors():
    with pytest.raises(ValueError, match=r"stride must be >= 1; got 0"):
        strided_layout(4, stride=0)
    with pytest.raises(TypeError, match=r"num_blocks must be an int; got float"):
        strided_layout(4.0, stride=2)

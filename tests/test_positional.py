"""Position information: each scheme against an independent float64 reference and its laws.

Sizes are pairwise distinct (B=2, H=3, L=5, S=7, D=12, E=11) so that a transposed axis
cannot pass by accident.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention import causal_mask, combine_masks, scaled_dot_product_attention
from attention.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    relative_position_buckets,
    sinusoidal_encoding,
)

B, H, L, S, D, E = 2, 3, 5, 7, 12, 11


def randn(*shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


# --- sinusoidal encoding ----------------------------------------------------------------


def numpy_sinusoidal(length, dim, base=10000.0):
    """The paper's formula, column by column, in float64 NumPy."""
    p = np.arange(length, dtype=np.float64)[:, None]
    k = np.arange(dim)
    angle = p / base ** (2 * (k // 2) / dim)  # column k belongs to the pair i = k // 2
    return np.where(k % 2 == 0, np.sin(angle), np.cos(angle))


@pytest.mark.parametrize(("length", "dim"), [(7, 16), (5, 11), (267, 6), (1, 1), (3, 2)])
@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_sinusoidal_matches_the_formula_in_float64(length, dim, base):
    pe = sinusoidal_encoding(length, dim, base=base, dtype=torch.float64)
    assert pe.shape == (length, dim)
    np.testing.assert_allclose(pe.numpy(), numpy_sinusoidal(length, dim, base), atol=1e-12)


def test_sinusoidal_float32_is_accurate_for_long_positions():
    length, dim = 30_000, 8
    reference = torch.from_numpy(numpy_sinusoidal(length, dim))
    pe = sinusoidal_encoding(length, dim)
    assert pe.dtype == torch.float32
    torch.testing.assert_close(pe.double(), reference, atol=1e-6, rtol=0)
    # The float64 angles matter: the same formula evaluated in float32 is far off.
    p = torch.arange(length, dtype=torch.float32)[:, None]
    naive = torch.sin(p / 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    assert (naive.double() - reference[:, 0::2]).abs().max() > 5e-5


@pytest.mark.parametrize("dim", [1, 2, 7, 16])
def test_sinusoidal_position_zero_is_sin_0_cos_0(dim):
    expected = torch.tensor([0.0, 1.0] * dim)[:dim]
    assert torch.equal(sinusoidal_encoding(4, dim)[0], expected)


def test_sinusoidal_values_are_in_minus_one_one():
    pe = sinusoidal_encoding(1000, 64, dtype=torch.float64)
    assert pe.abs().max() <= 1.0
    assert pe.min() < -0.99 and pe.max() > 0.99  # and they do use the range


@pytest.mark.parametrize("dim", [16, 11])
@pytest.mark.parametrize("k", [1, 3, 40])
def test_sinusoidal_shift_by_k_is_a_rotation_that_depends_only_on_k(dim, k):
    pe = sinusoidal_encoding(100, dim, dtype=torch.float64)
    for i in range(dim // 2):
        pair = pe[:, 2 * i : 2 * i + 2]  # (L, 2): (sin, cos) of p * w_i
        # The map is read off the table itself: PE[0] = (0, 1), so PE[k] = (sin kw, cos kw).
        s, c = pair[k]
        rotation = torch.stack([torch.stack([c, s]), torch.stack([-s, c])])  # (2, 2)
        torch.testing.assert_close(pair[k:], pair[:-k] @ rotation.T, atol=1e-12, rtol=0)


def test_sinusoidal_odd_dim_ends_with_a_lone_sine():
    base, dim = 10000.0, 7
    pe = sinusoidal_encoding(20, dim, dtype=torch.float64)
    p = torch.arange(20, dtype=torch.float64)
    # Last column is pair i = 3 with the exponent 2i / dim = 6 / 7 (dim, not dim + 1).
    torch.testing.assert_close(pe[:, -1], torch.sin(p / base ** (6 / 7)), atol=1e-12, rtol=0)
    # The other columns are the usual pairs with the same exponents.
    torch.testing.assert_close(pe[:, 4], torch.sin(p / base ** (4 / 7)), atol=1e-12, rtol=0)
    torch.testing.assert_close(pe[:, 5], torch.cos(p / base ** (4 / 7)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_sinusoidal_dtype_and_device(dtype):
    pe = sinusoidal_encoding(L, E, dtype=dtype, device="cpu")
    assert pe.dtype == dtype and pe.device.type == "cpu"
    reference = torch.from_numpy(numpy_sinusoidal(L, E)).to(dtype)
    torch.testing.assert_close(pe, reference)


def test_sinusoidal_default_dtype_and_empty_length():
    assert sinusoidal_encoding(3, 4).dtype == torch.get_default_dtype()
    assert sinusoidal_encoding(0, 4).shape == (0, 4)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((2.0, 4), {}, TypeError, r"length must be an int; got float"),
        ((True, 4), {}, TypeError, r"length must be an int; got bool"),
        ((-1, 4), {}, ValueError, r"length must be >= 0; got -1"),
        ((3, 0), {}, ValueError, r"dim must be >= 1; got 0"),
        ((3, "4"), {}, TypeError, r"dim must be an int; got str"),
        ((3, 4), {"base": 0.0}, ValueError, r"base must be finite and > 0; got 0.0"),
        ((3, 4), {"base": math.inf}, ValueError, r"base must be finite and > 0; got inf"),
        ((3, 4), {"base": "1e4"}, TypeError, r"base must be a real number; got str"),
        ((3, 4), {"dtype": torch.int64}, TypeError, r"dtype must be a floating-point"),
    ],
)
def test_sinusoidal_bad_input_raises_a_clear_error(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        sinusoidal_encoding(*args, **kwargs)


# --- learned embedding ------------------------------------------------------------------


def test_learned_adds_the_first_rows_of_the_table():
    torch.manual_seed(0)
    embed = LearnedPositionalEmbedding(max_length=S, embed_dim=E)
    x = randn(B, L, E, dtype=torch.float32)
    out = embed(x)
    assert out.shape == (B, L, E)
    torch.testing.assert_close(out, x + embed.weight[:L].detach().unsqueeze(0))
    # different positions get different vectors, the same position the same one
    torch.testing.assert_close(out[0] - x[0], out[1] - x[1])
    assert not torch.allclose(out[0, 0] - x[0, 0], out[0, 1] - x[0, 1])


def test_learned_offset_continues_the_positions():
    torch.manual_seed(0)
    embed = LearnedPositionalEmbedding(max_length=S, embed_dim=E)
    x = randn(B, L, E, dtype=torch.float32)
    full = embed(x)
    # the last 2 rows, decoded after 3 cached tokens, get the same embeddings
    torch.testing.assert_close(embed(x[:, 3:], offset=3), full[:, 3:])
    assert embed(x, offset=S - L).shape == (B, L, E)  # ends exactly at max_length


def test_learned_accepts_any_leading_dims():
    torch.manual_seed(0)
    embed = LearnedPositionalEmbedding(S, E)
    x = randn(B, H, L, E, dtype=torch.float32)
    torch.testing.assert_close(embed(x), x + embed.weight[:L].detach())
    torch.testing.assert_close(embed(x[0, 0]), x[0, 0] + embed.weight[:L].detach())


def test_learned_gradient_reaches_exactly_the_used_rows():
    torch.manual_seed(0)
    embed = LearnedPositionalEmbedding(S, E)
    x = randn(B, L, E, dtype=torch.float32, seed=1).requires_grad_()
    embed(x).sum().backward()
    assert embed.weight.grad is not None
    # d/dW_p of sum over the batch: each used row receives B, the unused rows nothing
    assert torch.equal(embed.weight.grad[:L], torch.full((L, E), float(B)))
    assert torch.equal(embed.weight.grad[L:], torch.zeros(S - L, E))
    assert torch.equal(x.grad, torch.ones(B, L, E))


def test_learned_is_initialised_like_nn_embedding():
    torch.manual_seed(0)
    weight = LearnedPositionalEmbedding(1000, 64).weight.detach()
    assert abs(weight.mean().item()) < 0.01
    assert abs(weight.std().item() - 1.0) < 0.01  # standard normal, like nn.Embedding
    assert list(LearnedPositionalEmbedding(3, 4).state_dict()) == ["weight"]


def test_learned_device_and_dtype():
    embed = LearnedPositionalEmbedding(S, E, device="cpu", dtype=torch.float64)
    assert embed.weight.dtype == torch.float64 and embed.weight.device.type == "cpu"
    x = randn(B, L, E)
    assert embed(x).dtype == torch.float64
    assert "max_length=7, embed_dim=11" in repr(embed)


def test_learned_bad_input_raises_a_clear_error():
    embed = LearnedPositionalEmbedding(S, E)
    with pytest.raises(ValueError, match=r"x must fit in the table of max_length=7 positions"):
        embed(torch.zeros(B, S + 1, E))
    with pytest.raises(ValueError, match=r"got offset=3 and L=5 \(x \(2, 5, 11\)\)"):
        embed(torch.zeros(B, L, E), offset=3)
    with pytest.raises(ValueError, match=r"embed_dim=11 .*; got shape \(2, 5, 4\)"):
        embed(torch.zeros(B, L, 4))
    with pytest.raises(TypeError, match=r"x and weight must have the same dtype"):
        embed(torch.zeros(B, L, E, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor; got list"):
        embed([[0.0] * E])
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions; got shape \(11,\)"):
        embed(torch.zeros(E))
    with pytest.raises(ValueError, match=r"offset must be >= 0; got -1"):
        embed(torch.zeros(B, L, E), offset=-1)
    with pytest.raises(ValueError, match=r"max_length must be >= 1; got 0"):
        LearnedPositionalEmbedding(0, E)
    with pytest.raises(TypeError, match=r"embed_dim must be an int; got float"):
        LearnedPositionalEmbedding(S, 4.0)


# --- rotary embedding -------------------------------------------------------------------


def complex_rotary(x, positions, base=10000.0):
    """RoPE as the paper writes it: pairs are complex numbers multiplied by e^{i p theta}."""
    D = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / D) for i in range(D // 2)], dtype=torch.float64)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
    angles = positions.double()[..., None] * theta  # (..., L, D/2)
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def rotate_half_rotary(x, positions, base=10000.0):
    """The GPT-NeoX / Hugging Face LLaMA convention: feature i pairs with i + D/2."""
    D = x.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = positions.double()[..., None] * theta
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    first, second = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-second, first], -1) * sin


@pytest.mark.parametrize("lead", [(), (B,), (B, H)], ids=["2d", "3d", "4d"])
def test_rotary_matches_the_complex_number_form(lead):
    x = randn(*lead, L, D)
    torch.testing.assert_close(apply_rotary(x), complex_rotary(x, torch.arange(L)))
    positions = torch.tensor([4, 0, 9, 1000, 2])
    torch.testing.assert_close(
        apply_rotary(x, positions, base=500.0), complex_rotary(x, positions, base=500.0)
    )


def test_rotary_is_rotate_half_after_a_permutation_of_the_features():
    x = randn(B, H, L, D)
    # interleaved feature 2i <-> half-split feature i, 2i + 1 <-> i + D/2
    interleave = torch.stack([torch.arange(D // 2), torch.arange(D // 2) + D // 2], -1).flatten()
    ours = apply_rotary(x[..., interleave])
    theirs = rotate_half_rotary(x, torch.arange(L))[..., interleave]
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(apply_rotary(x), rotate_half_rotary(x, torch.arange(L)))


@pytest.mark.parametrize("lead", [(), (B,), (B, H)], ids=["2d", "3d", "4d"])
def test_rotary_half_pairing_is_rotate_half(lead):
    x = randn(*lead, L, D)
    positions = torch.tensor([4, 0, 9, 1000, 2])
    torch.testing.assert_close(
        apply_rotary(x, positions, base=500.0, pairing="half"),
        rotate_half_rotary(x, positions, base=500.0),
    )


def test_rotary_preserves_the_norm_of_every_pair():
    x = randn(B, H, L, D)
    y = apply_rotary(x, torch.arange(100, 100 + L))

    def pair_norms(t):
        return t.reshape(B, H, L, D // 2, 2).norm(dim=-1)  # (B, H, L, D/2)

    torch.testing.assert_close(pair_norms(y), pair_norms(x))
    assert not torch.allclose(y, x)


def test_rotary_position_zero_is_the_identity():
    x = randn(B, H, L, D)
    assert torch.equal(apply_rotary(x, torch.zeros(L, dtype=torch.long)), x)
    assert torch.equal(apply_rotary(x)[..., 0, :], x[..., 0, :])


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(0, 2000),
    n=st.integers(0, 2000),
    t=st.integers(-2000, 2000),
    seed=st.integers(0, 2**16),
)
def test_rotary_scores_depend_only_on_the_relative_position(m, n, t, seed):
    q, k = randn(1, D, seed=seed), randn(1, D, seed=seed + 1)

    def score(m, n):
        return (apply_rotary(q, torch.tensor([m])) @ apply_rotary(k, torch.tensor([n])).T).item()

    assert math.isclose(score(m, n), score(m + t, n + t), rel_tol=1e-9, abs_tol=1e-9)


def test_rotary_scores_change_with_the_relative_position():
    q, k = randn(L, D), randn(S, D, seed=1)
    scores = apply_rotary(q) @ apply_rotary(k).T  # (L, S)
    shifted = apply_rotary(q, torch.arange(L) + 17) @ apply_rotary(k, torch.arange(S) + 17).T
    torch.testing.assert_close(shifted, scores)
    assert not torch.allclose(scores, q @ k.T)
    # score(m, n) = <q_m, R_{n-m} k_n>
    m, n = 3, 6
    rotated_k = apply_rotary(k[n : n + 1], torch.tensor([n - m]))
    torch.testing.assert_close(scores[m, n], (q[m] @ rotated_k[0]))


def test_rotary_offset_positions_match_the_tail_of_the_full_sequence():
    x = randn(B, H, S, D)
    full = apply_rotary(x)
    # the last 2 rows of a KV-cached sequence, at positions S-2 and S-1
    tail = apply_rotary(x[..., S - 2 :, :], torch.arange(S - 2, S))
    torch.testing.assert_close(tail, full[..., S - 2 :, :])


def test_rotary_accepts_per_sequence_positions():
    x = randn(B, H, L, D)
    positions = torch.stack([torch.arange(L), torch.arange(L) + 3])[:, None, :]  # (B, 1, L)
    y = apply_rotary(x, positions)
    torch.testing.assert_close(y[0], apply_rotary(x[0]))
    torch.testing.assert_close(y[1], apply_rotary(x[1], torch.arange(3, 3 + L)))


@pytest.mark.parametrize(
    ("dtype", "tol"),
    [(torch.float32, 1e-5), (torch.bfloat16, 5e-2), (torch.float16, 1e-2)],
    ids=["fp32", "bf16", "fp16"],
)
def test_rotary_low_precision_stays_close_to_float64(dtype, tol):
    x = randn(B, H, L, D, dtype=dtype)
    positions = torch.arange(40_000, 40_000 + L)
    y = apply_rotary(x, positions)
    assert y.dtype == dtype
    reference = complex_rotary(x, positions)
    torch.testing.assert_close(y.double(), reference, atol=tol, rtol=tol)


@pytest.mark.parametrize(
    ("x", "kwargs", "error", "message"),
    [
        (torch.zeros(L, 5), {}, ValueError, r"x must have an even last dimension D .*\(5, 5\)"),
        (torch.zeros(D), {}, ValueError, r"x must have at least 2 dimensions"),
        (torch.zeros(L, D, dtype=torch.long), {}, TypeError, r"x must have a floating-point"),
        (
            torch.zeros(B, L, D),
            {"positions": torch.arange(L + 1)},
            ValueError,
            r"positions must broadcast to x's leading dimensions \(\.\.\., L\) = \(2, 5\); "
            r"got shape \(6,\) for x \(2, 5, 12\)",
        ),
        (
            torch.zeros(L, D),
            {"positions": torch.tensor(0)},
            ValueError,
            r"positions must broadcast",
        ),
        (
            torch.zeros(L, D),
            {"positions": torch.arange(L, dtype=torch.float32)},
            TypeError,
            r"positions must have an integer dtype; got torch.float32",
        ),
        (
            torch.zeros(L, D),
            {"positions": list(range(L))},
            TypeError,
            r"positions must be an integer tensor or None; got list",
        ),
        (
            torch.zeros(L, D),
            {"positions": torch.arange(L, device="meta")},
            ValueError,
            r"positions must be on x's device cpu; got meta",
        ),
        (torch.zeros(L, D), {"base": -1.0}, ValueError, r"base must be finite and > 0"),
    ],
    ids=[
        "odd D",
        "1-D x",
        "int x",
        "long positions",
        "0-d positions",
        "float positions",
        "list positions",
        "positions on another device",
        "negative base",
    ],
)
def test_rotary_bad_input_raises_a_clear_error(x, kwargs, error, message):
    with pytest.raises(error, match=message):
        apply_rotary(x, **kwargs)


# --- ALiBi --------------------------------------------------------------------------------


def reference_slopes(n):
    """The rule of the paper's reference code, written recursively as it is there."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start**h for h in range(1, n + 1)]
    closest = 2 ** math.floor(math.log2(n))
    return reference_slopes(closest) + reference_slopes(2 * closest)[0::2][: n - closest]


def test_alibi_slopes_for_8_heads_are_powers_of_one_half():
    expected = torch.tensor([1 / 2**h for h in range(1, 9)])
    assert torch.equal(alibi_slopes(8), expected)


def test_alibi_slopes_for_heads_that_are_not_a_power_of_two():
    # 6 heads: the 4 slopes 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 from the 8-head sequence
    assert torch.equal(alibi_slopes(6), torch.tensor([2.0**-e for e in (2, 4, 6, 8, 1, 3)]))
    # 12 heads: 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16-head sequence
    exponents = [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]
    expected = torch.tensor([2.0**-e for e in exponents], dtype=torch.float64)
    torch.testing.assert_close(alibi_slopes(12, dtype=torch.float64), expected, atol=0, rtol=1e-14)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 16, 20, 24, 40, 64])
def test_alibi_slopes_follow_the_reference_rule(n):
    expected = torch.tensor(reference_slopes(n), dtype=torch.float64)
    torch.testing.assert_close(alibi_slopes(n, dtype=torch.float64), expected, atol=0, rtol=1e-14)
    assert len(set(reference_slopes(n))) == n  # every head gets its own slope


def test_alibi_bias_values():
    bias = alibi_bias(H, L, S, alignment="bottom_right", dtype=torch.float64)
    assert bias.shape == (H, L, S)
    slopes = reference_slopes(H)
    for h in range(H):
        for i in range(L):
            for j in range(S):
                query_position = i + S - L  # bottom-right: the queries are the last L
                assert bias[h, i, j] == -slopes[h] * abs(query_position - j)
    # top-left: query i at position i
    top_left = alibi_bias(H, L, S, dtype=torch.float64)  # the default, like causal_mask
    assert top_left[2, 1, 4] == -slopes[2] * 3
    # a square bias is symmetric with a zero diagonal, and both alignments agree
    square = alibi_bias(H, L)
    assert torch.equal(square, square.transpose(-2, -1))
    assert torch.equal(square.diagonal(dim1=-2, dim2=-1), torch.zeros(H, L))
    assert not torch.signbit(square).diagonal(dim1=-2, dim2=-1).any()  # +0, not -0
    assert torch.equal(square, alibi_bias(H, L, alignment="top_left"))


def test_alibi_bias_dtype_device_and_empty():
    assert alibi_bias(H, L).dtype == torch.get_default_dtype()
    assert alibi_bias(H, L, dtype=torch.bfloat16, device="cpu").dtype == torch.bfloat16
    assert alibi_bias(H, 0, S).shape == (H, 0, S)


@pytest.mark.parametrize(("Lq", "Sk"), [(L, L), (L, S), (1, S)])
def test_alibi_bias_as_attn_mask_adds_it_to_the_scores(Lq, Sk):
    q, k, v = randn(B, H, Lq, D), randn(B, H, Sk, D, seed=1), randn(B, H, Sk, 4, seed=2)
    bias = alibi_bias(H, Lq, Sk, dtype=torch.float64)  # (H, L, S) broadcasts over B
    scores = q @ k.transpose(-2, -1) / math.sqrt(D) + bias
    expected = torch.softmax(scores, dim=-1) @ v
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, attn_mask=bias), expected)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=bias), expected)


def test_alibi_with_a_causal_mask_is_the_papers_one_sided_bias():
    q, k, v = randn(B, H, L, D), randn(B, H, S, D, seed=1), randn(B, H, S, 4, seed=2)
    mask = combine_masks(
        alibi_bias(H, L, S, alignment="bottom_right", dtype=torch.float64),
        causal_mask(L, S, alignment="bottom_right"),
    )
    # the paper: -m_h (p_i - j) for keys at or before the query, nothing after it
    slopes = torch.tensor(reference_slopes(H), dtype=torch.float64)
    distance = (torch.arange(L)[:, None] + S - L) - torch.arange(S)  # (L, S)
    paper = (-slopes[:, None, None] * distance).masked_fill(distance < 0, -math.inf)
    assert torch.equal(mask, paper)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D) + paper
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=mask), torch.softmax(scores, -1) @ v
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: alibi_slopes(0), ValueError, r"num_heads must be >= 1; got 0"),
        (lambda: alibi_slopes(4.0), TypeError, r"num_heads must be an int; got float"),
        (lambda: alibi_slopes(4, dtype=torch.int32), TypeError, r"dtype must be a floating"),
        (lambda: alibi_bias(0, L), ValueError, r"num_heads must be >= 1; got 0"),
        (lambda: alibi_bias(H, -1), ValueError, r"L must be >= 0; got -1"),
        (lambda: alibi_bias(H, L, "7"), TypeError, r"S must be an int; got str"),
        (
            lambda: alibi_bias(H, L, alignment="left"),
            ValueError,
            r"alignment must be 'top_left' or 'bottom_right'; got 'left'",
        ),
    ],
)
def test_alibi_bad_input_raises_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


# --- T5 relative position buckets and bias --------------------------------------------


def t5_bucket(relative_position, num_buckets, max_distance, bidirectional):
    """T5's rule for one pair, written out in plain Python from the paper's code.

    ``relative_position`` is key position minus query position."""
    bucket, n = 0, -relative_position
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            bucket += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    far = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(far, num_buckets - 1)


@pytest.mark.parametrize(
    ("num_buckets", "max_distance", "bidirectional"),
    [(32, 128, True), (32, 128, False), (16, 64, True), (8, 20, False), (4, 5, True)],
)
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_relative_position_buckets_follow_t5s_rule(
    num_buckets, max_distance, bidirectional, alignment
):
    L, S = 37, 300
    buckets = relative_position_buckets(
        L,
        S,
        num_buckets=num_buckets,
        max_distance=max_distance,
        bidirectional=bidirectional,
        alignment=alignment,
    )
    assert buckets.dtype == torch.int64 and buckets.shape == (L, S)
    shift = S - L if alignment == "bottom_right" else 0
    expected = [
        [t5_bucket(j - (i + shift), num_buckets, max_distance, bidirectional) for j in range(S)]
        for i in range(L)
    ]
    assert buckets.tolist() == expected
    assert buckets.min() >= 0 and buckets.max() < num_buckets


def test_relative_position_buckets_are_exact_near_and_shared_far():
    buckets = relative_position_buckets(1, 1000, num_buckets=32, alignment="bottom_right")[0]
    by_distance = buckets.flip(0)  # distance 0, 1, 2, ... back from the query
    assert by_distance[:8].tolist() == list(range(8))  # one distance per bucket
    assert torch.all(by_distance.diff() >= 0)  # never a nearer bucket farther away
    assert torch.all(by_distance[128:] == 15)  # beyond max_distance: the last one
    assert by_distance[90] < 15  # (the last bucket also takes the last stretch before)
    widths = torch.bincount(by_distance[:128])
    assert torch.all(widths[8:].diff() >= 0)  # logarithmic: ranges widen


def test_relative_position_bias_looks_up_the_table_and_learns_only_used_buckets():
    torch.manual_seed(0)
    bias = RelativePositionBias(num_heads=3, num_buckets=8, max_distance=16, bidirectional=False)
    values = bias(5, 7)  # (H, L, S)
    buckets = relative_position_buckets(5, 7, num_buckets=8, max_distance=16, bidirectional=False)
    assert values.shape == (3, 5, 7)
    torch.testing.assert_close(values, bias.table.weight[buckets].permute(2, 0, 1))
    values.sum().backward()
    used = torch.zeros(8, dtype=torch.bool)
    used[buckets.unique()] = True
    assert torch.all(bias.table.weight.grad[~used] == 0)
    assert torch.all(bias.table.weight.grad[used] != 0)
    assert "num_buckets=8" in repr(bias)


def test_relative_position_bias_as_attn_mask_adds_it_to_the_scores():
    torch.manual_seed(1)
    bias = RelativePositionBias(num_heads=2, dtype=torch.float64)
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    with torch.no_grad():
        ours = scaled_dot_product_attention(q, k, v, attn_mask=bias(6))
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias(6))
        by_hand = torch.softmax(q @ k.transpose(-2, -1) / 2 + bias(6), dim=-1) @ v
    torch.testing.assert_close(ours, by_hand)
    torch.testing.assert_close(theirs, by_hand)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: relative_position_buckets(4, num_buckets=7),
            ValueError,
            "num_buckets must be even",
        ),
        (
            lambda: relative_position_buckets(4, num_buckets=2),
            ValueError,
            "at least 2 buckets per side",
        ),
        (
            lambda: relative_position_buckets(4, num_buckets=32, max_distance=8),
            ValueError,
            "max_distance must exceed the 8 distances",
        ),
        (
            lambda: relative_position_buckets(4, bidirectional=1),
            TypeError,
            "bidirectional must be a bool",
        ),
        (lambda: relative_position_buckets(4.0), TypeError, "L"),
        (lambda: relative_position_buckets(4, alignment="left"), ValueError, "alignment"),
        (lambda: RelativePositionBias(0), ValueError, "num_heads"),
        (lambda: RelativePositionBias(2, num_buckets=5), ValueError, "num_buckets must be even"),
    ],
)
def test_relative_position_bad_input_raises_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()

"""Approximate attention: exact where the budget is spent, unbiased where promised."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention.approximate import (
    favor_features,
    linformer_attention,
    nystrom_attention,
    performer_attention,
    random_features,
)


def qkv(*shape: int, L: int = 12, S: int = 12, D: int = 8, Dv: int = 5, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=generator, dtype=torch.float64)

    return draw(*shape, L, D), draw(*shape, S, D), draw(*shape, S, Dv)


# --- Linformer -------------------------------------------------------------------


def test_linformer_with_the_identity_is_softmax_attention():
    q, k, v = qkv(2, 3, L=7, S=9)
    out = linformer_attention(q, k, v, torch.eye(9, dtype=torch.float64), scale=0.3)
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_linformer_is_attention_over_the_projected_keys_and_values():
    q, k, v = qkv(2, 3, S=10)
    e = torch.randn(3, 4, 10, dtype=torch.float64)  # one projection per head
    f = torch.randn(4, 10, dtype=torch.float64)
    out = linformer_attention(q, k, v, e, f)
    expected = F.scaled_dot_product_attention(q, e @ k, f @ v)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    # Without value_projection, E projects the values too.
    shared = linformer_attention(q, k, v, f)
    torch.testing.assert_close(shared, F.scaled_dot_product_attention(q, f @ k, f @ v))


def test_linformer_gradients_match_autograd_numerics():
    q, k, v = (t.requires_grad_() for t in qkv(L=4, S=5, D=3, Dv=2))
    e = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(linformer_attention, (q, k, v, e))


@pytest.mark.parametrize(
    ("projection", "message"),
    [
        (
            torch.randn(4, 7, dtype=torch.float64),
            r"projection must be \(\.\.\., r, S\) with S = 12",
        ),
        (torch.randn(0, 12, dtype=torch.float64), r"r >= 1"),
    ],
)
def test_linformer_refuses_a_projection_that_does_not_fit(projection, message):
    with pytest.raises(ValueError, match=message):
        linformer_attention(*qkv(), projection)


def test_linformer_refuses_a_projection_of_another_dtype():
    with pytest.raises(TypeError, match="projection"):
        linformer_attention(*qkv(), torch.eye(12))


@pytest.mark.parametrize(
    ("projection", "value_projection", "message"),
    [
        (  # E keeps 4 rows of keys, F 3 rows of values: no weight for one of them
            torch.randn(4, 12, dtype=torch.float64),
            torch.randn(3, 12, dtype=torch.float64),
            r"same number of rows r .*; got projection \(4, 12\), value_projection \(3, 12\)",
        ),
        (  # one projection per head for 5 heads, on inputs with 3 heads
            torch.randn(5, 4, 12, dtype=torch.float64),
            None,
            r"leading dimensions that broadcast.*query \(2, 3, 12, 8\).*projection \(5, 4, 12\)",
        ),
        (
            torch.randn(4, 12, dtype=torch.float64),
            torch.randn(2, 1, 4, 12, dtype=torch.float64).expand(2, 2, 4, 12),
            r"leading dimensions that broadcast.*value_projection \(2, 2, 4, 12\)",
        ),
    ],
    ids=["rows differ", "heads differ", "value projection's heads differ"],
)
def test_linformer_refuses_projections_that_do_not_fit_together(
    projection, value_projection, message
):
    with pytest.raises(ValueError, match=message):
        linformer_attention(*qkv(2, 3), projection, value_projection)


# --- FAVOR+ (Performer) ----------------------------------------------------------


def test_random_feature_rows_are_standard_gaussian_and_orthogonal_in_blocks():
    w = random_features(6000, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert w.shape == (6000, 4)
    # Each row ~ N(0, I): mean 0, covariance I (to sampling error, 6000 rows).
    torch.testing.assert_close(w.mean(0), torch.zeros(4, dtype=torch.float64), atol=0.06, rtol=0)
    torch.testing.assert_close(w.T @ w / 6000, torch.eye(4, dtype=torch.float64), atol=0.08, rtol=0)
    block = w[:4] / w[:4].norm(dim=1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(4, dtype=torch.float64))
    # A count that is not a multiple of D ends with a partial block.
    assert random_features(10, 4).shape == (10, 4)


@pytest.mark.parametrize("orthogonal", [True, False])
def test_favor_features_estimate_the_softmax_kernel_without_bias(orthogonal):
    """E[φ(x)ᵀφ(y)] = exp(xᵀy): the mean over 20 independent draws of 20,000 features
    lies within 4 standard errors of the exact kernel, for pairs with kernels from
    e^-1 to e^1 (an orthogonal draw once had a +1 % bias: LAPACK's QR signs)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=generator, dtype=torch.float64) * 0.5
    y = torch.randn(6, 4, generator=generator, dtype=torch.float64) * 0.5
    exact = torch.exp((x * y).sum(-1))
    draws = torch.stack(
        [
            (favor_features(x, w) * favor_features(y, w)).sum(-1)
            for w in (
                random_features(
                    20_000, 4, orthogonal=orthogonal, generator=generator, dtype=torch.float64
                )
                for _ in range(20)
            )
        ]
    )
    standard_error = draws.std(0) / math.sqrt(len(draws))
    assert ((draws.mean(0) - exact).abs() < 4 * standard_error).all()


def test_performer_is_the_ratio_of_its_feature_sums_causal_or_not():
    q, k, v = qkv(2, L=9, S=9)
    w = random_features(32, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    root = 8**-0.25  # sqrt of the default scale 1/sqrt(D)
    weights = favor_features(root * q, w) @ favor_features(root * k, w).transpose(-2, -1)
    for causal, kept in ((False, weights), (True, weights.tril())):
        expected = kept @ v / kept.sum(-1, keepdim=True)
        out = performer_attention(q, k, v, w, is_causal=causal)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_performer_error_falls_like_one_over_root_m():
    q, k, v = (0.5 * t for t in qkv(L=64, S=64, D=16, Dv=16))
    exact = F.scaled_dot_product_attention(q, k, v)
    features = [64, 256, 1024, 4096]
    errors = []
    for m in features:
        runs = [
            (
                performer_attention(
                    q, k, v, random_features(m, 16, generator=g, dtype=torch.float64)
                )
                - exact
            )
            .square()
            .mean()
            .sqrt()
            for g in (torch.Generator().manual_seed(s) for s in range(4))
        ]
        errors.append(float(torch.stack(runs).mean()))
    slope = np.polyfit(np.log(features), np.log(errors), 1)[0]
    assert -0.65 < slope < -0.35, (errors, slope)


def test_performer_stays_finite_where_the_plain_features_underflow():
    q, k, v = qkv(L=6, S=6, D=4, Dv=3)
    w = random_features(64, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    big = 40.0  # -‖x‖²/2 ~ -1e3: every plain feature is exp(-hundreds) = 0
    assert (favor_features(big * q, w) == 0).all()  # their ratio would be 0/0
    out = performer_attention(big * q, big * k, v, w)
    assert torch.isfinite(out).all()
    # Each output is a weighted mean of the values: inside their range.
    assert (out <= v.max(0).values + 1e-12).all() and (out >= v.min(0).values - 1e-12).all()


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, "float32", None])
def test_random_features_refuses_a_dtype_that_is_not_floating_point(dtype):
    expected = rf"dtype must be a floating-point torch.dtype .*; got {re.escape(repr(dtype))}$"
    with pytest.raises(TypeError, match=expected):
        random_features(8, 4, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_random_features_takes_every_floating_dtype(dtype):
    w = random_features(8, 4, generator=torch.Generator().manual_seed(0), dtype=dtype)
    expected = random_features(
        8, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    assert w.dtype == dtype
    torch.testing.assert_close(w, expected.to(dtype))


@pytest.mark.parametrize("scale", [-0.5, -0.05, 0.0])
def test_performer_takes_a_negative_or_zero_scale_as_torch_does(scale):
    """exp(s q.k) with s < 0 is exp(|s| (-q).k): the query's side is negated, the same
    positive features estimate it. Exactly that, and close to softmax attention."""
    q, k, v = (0.5 * t for t in qkv(L=16, S=16, D=4, Dv=3))
    w = random_features(100_000, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = performer_attention(q, k, v, w, scale=scale)
    torch.testing.assert_close(
        out, performer_attention(-q, k, v, w, scale=-scale), atol=1e-12, rtol=0
    )
    exact = F.scaled_dot_product_attention(q, k, v, scale=scale)
    assert (out - exact).abs().max() < 0.01
    # Not the positive scale's answer: the sign matters.
    if scale:
        flipped = F.scaled_dot_product_attention(q, k, v, scale=-scale)
        assert (out - flipped).abs().max() > 10 * (out - exact).abs().max()


def test_performer_refuses_a_projection_of_the_wrong_size():
    with pytest.raises(ValueError, match=r"projection must be \(num_features, D\) with D = 8"):
        performer_attention(*qkv(), torch.randn(16, 7, dtype=torch.float64))


# --- Nyström ---------------------------------------------------------------------


def test_nystrom_with_one_landmark_per_position_is_softmax_attention():
    q, k, v = qkv(2, L=16, S=16)
    out = nystrom_attention(q, k, v, 16)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-8, rtol=0)


def test_nystrom_is_its_formula_with_segment_means_as_landmarks():
    q, k, v = qkv(L=10, S=13)  # segments of unequal size on both sides
    m = 4
    q_land = torch.stack([s.mean(0) for s in torch.tensor_split(q, m)])
    k_land = torch.stack([s.mean(0) for s in torch.tensor_split(k, m)])

    def sigma(a, b):
        return torch.softmax(a @ b.T / math.sqrt(8), -1)

    expected = sigma(q, k_land) @ torch.linalg.pinv(sigma(q_land, k_land)) @ sigma(q_land, k) @ v
    torch.testing.assert_close(
        nystrom_attention(q, k, v, np.int64(m)), expected, atol=1e-12, rtol=0
    )


def test_nystrom_error_falls_as_landmarks_are_added():
    # Smooth sequences (neighbours alike), where segment means are good landmarks.
    t = torch.linspace(0, 1, 64, dtype=torch.float64).unsqueeze(-1)
    freqs = torch.arange(1, 9, dtype=torch.float64)
    q = torch.sin(3 * t * freqs)
    k = torch.cos(2 * t * freqs)
    v = torch.sin(5 * t * freqs[:4])
    exact = F.scaled_dot_product_attention(q, k, v)
    errors = [float((nystrom_attention(q, k, v, m) - exact).abs().max()) for m in (2, 8, 32, 64)]
    # (Exact at m = 64 only up to the conditioning of P, which smooth inputs make
    # poor: the exactness test above uses random ones.)
    assert errors[0] > errors[1] > errors[2] > errors[3]


@pytest.mark.parametrize(("m", "error"), [(0, ValueError), (13, ValueError), (2.0, TypeError)])
def test_nystrom_refuses_a_landmark_count_out_of_range(m, error):
    with pytest.raises(error, match="num_landmarks"):
        nystrom_attention(*qkv(L=12, S=14), m)

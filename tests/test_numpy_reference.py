"""The NumPy reference against PyTorch: forward, hand-derived backward, multi-head.

Sizes are pairwise distinct (B=2, H=3, L=5, S=7, D=11, Dv=13, E=12 with 3 heads of 4)
so that a transposed or swapped axis cannot pass by accident. Everything is compared in
float64, where the two implementations agree to about 1e-15.
"""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attention
from attention import numpy_reference as npr

B, H, L, S, D, Dv = 2, 3, 5, 7, 11, 13
E = 12  # model width for multi-head attention: H = 3 heads of size 4

TIGHT = {"rtol": 0.0, "atol": 1e-12}


def make_qkv(*lead, L=L, S=S, D=D, Dv=Dv, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*lead, L, D)).astype(dtype)
    k = rng.standard_normal((*lead, S, D)).astype(dtype)
    v = rng.standard_normal((*lead, S, Dv)).astype(dtype)
    return q, k, v


def random_mask(shape, seed=1, p_keep=0.7):
    return np.random.default_rng(seed).random(shape) < p_keep


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def test_the_module_uses_numpy_only():
    tree = ast.parse(inspect.getsource(npr))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "torch" not in imported
    assert "attention" not in imported
    assert "numpy" in imported


# --- softmax ------------------------------------------------------------------------------


def test_softmax_is_stable_where_the_naive_formula_overflows():
    x = np.array([1000.0, 1001.0])
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(x) / np.exp(x).sum()
    assert np.isnan(naive).all()  # inf / inf
    expected = np.array([1.0, np.e]) / (1.0 + np.e)
    np.testing.assert_allclose(npr.softmax(x), expected, rtol=1e-15)
    # and for hugely negative inputs, where the naive exps underflow to 0 / 0
    np.testing.assert_allclose(npr.softmax(x - 3000.0), expected, rtol=1e-15)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_softmax_equals_torch_softmax_along_any_axis(axis):
    x = np.random.default_rng(0).standard_normal((3, 4, 6)) * 10
    np.testing.assert_allclose(
        npr.softmax(x, axis=axis), torch.softmax(t(x), dim=axis).numpy(), **TIGHT
    )


def test_softmax_gives_zero_for_minus_infinity_and_zeros_for_an_all_minus_infinity_row():
    x = np.array([[0.0, -np.inf, np.log(3.0)], [-np.inf, -np.inf, -np.inf]])
    p = npr.softmax(x)
    np.testing.assert_allclose(p, [[0.25, 0.0, 0.75], [0.0, 0.0, 0.0]], rtol=1e-15)
    assert not np.isnan(p).any()
    # torch gives NaN for the second row; the package policy is zeros
    assert torch.softmax(t(x), dim=-1)[1].isnan().all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_softmax_keeps_the_dtype_and_sums_to_one(dtype):
    x = np.random.default_rng(3).standard_normal((5, 7)).astype(dtype)
    p = npr.softmax(x)
    assert p.dtype == dtype
    np.testing.assert_allclose(p.sum(-1), np.ones(5), rtol=1e-2 if dtype == np.float16 else 1e-6)


def test_softmax_over_an_empty_axis_is_empty():
    assert npr.softmax(np.zeros((3, 0))).shape == (3, 0)


# --- cosine similarity ----------------------------------------------------------------------

X = np.array([1.0, 2.0, 3.0, 4.0])
Y = np.array([1.2, 2.1, 2.9, 3.7])


def test_cosine_of_the_four_dimensional_example():
    cos = npr.cosine_similarity(X, Y)
    assert cos.shape == ()
    # dot = 28.9, |X|^2 = 30, |Y|^2 = 27.95
    np.testing.assert_allclose(cos, 28.9 / np.sqrt(30.0 * 27.95), rtol=1e-15)
    assert f"{cos:.4f}" == "0.9980"
    assert f"{np.degrees(np.arccos(cos)):.2f}" == "3.59"


@pytest.mark.parametrize(("alpha", "beta"), [(3.0, 0.5), (1e200, 1e-200), (1e-300, 7.0)])
def test_cosine_ignores_lengths_even_at_extreme_scales(alpha, beta):
    # The naive formula overflows (1e200**2 = inf) or underflows (1e-200**2 = 0) here.
    expected = npr.cosine_similarity(X, Y)
    np.testing.assert_allclose(npr.cosine_similarity(alpha * X, beta * Y), expected, rtol=1e-14)
    np.testing.assert_allclose(npr.cosine_similarity(-alpha * X, beta * Y), -expected, rtol=1e-14)


def test_cosine_broadcasts_like_torch():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((B, 1, D)), rng.standard_normal((L, D))
    cos = npr.cosine_similarity(a, b)
    assert cos.shape == (B, L)
    np.testing.assert_allclose(cos, F.cosine_similarity(t(a), t(b), dim=-1).numpy(), **TIGHT)


def test_cosine_of_a_vector_with_itself_is_one_and_never_above():
    vectors = np.random.default_rng(5).standard_normal((1000, 3))
    cos = npr.cosine_similarity(vectors, vectors)
    assert np.all(cos <= 1.0)
    np.testing.assert_allclose(cos, 1.0, rtol=1e-15)
    assert not np.isnan(np.arccos(cos)).any()


def test_cosine_of_perpendicular_and_opposite_vectors():
    cos = npr.cosine_similarity(np.array([[5.0, 0.0], [0.0, 3.0], [0.0, -1.0]]), np.array([0, 2.0]))
    np.testing.assert_array_equal(cos, [0.0, 1.0, -1.0])


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (np.zeros(4), Y, r"a is a zero vector.*cosine is undefined; got a of shape \(4,\)"),
        (X, np.zeros(4), r"b is a zero vector"),
        (np.ones((2, 3, 4)), np.eye(4)[[0, 1, 2]] * 0, r"b\[0\] is a zero vector"),
    ],
)
def test_cosine_of_a_zero_vector_raises(a, b, message):
    with pytest.raises(ValueError, match=message):
        npr.cosine_similarity(a, b)


def test_cosine_names_the_first_zero_vector_in_a_batch():
    a = np.ones((2, 3, 4))
    a[1, 2] = 0.0
    with pytest.raises(ValueError, match=r"a\[1, 2\] is a zero vector"):
        npr.cosine_similarity(a, np.ones(4))


# --- forward attention ----------------------------------------------------------------------


@pytest.mark.parametrize("lead", [(), (B,), (B, H), (B, H, 2)], ids=["2d", "3d", "4d", "5d"])
@pytest.mark.parametrize(("Lq", "Sk"), [(5, 7), (7, 5), (1, 267), (6, 6)])
def test_forward_equals_the_torch_package(lead, Lq, Sk):
    q, k, v = make_qkv(*lead, L=Lq, S=Sk)
    out, weights = npr.scaled_dot_product_attention(q, k, v)
    assert out.shape == (*lead, Lq, Dv)
    assert weights.shape == (*lead, Lq, Sk)
    expected = attention.scaled_dot_product_attention(t(q), t(k), t(v))
    np.testing.assert_allclose(out, expected.numpy(), **TIGHT)
    np.testing.assert_allclose(weights, attention.attention_weights(t(q), t(k)).numpy(), **TIGHT)


@pytest.mark.parametrize("lead", [(), (B,), (B, H)], ids=["2d", "3d", "4d"])
def test_forward_equals_torch_sdpa(lead):
    q, k, v = make_qkv(*lead)
    out, _ = npr.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out, F.scaled_dot_product_attention(t(q), t(k), t(v)), **TIGHT)


@pytest.mark.parametrize(
    "mask_shape", [(L, S), (1, S), (S,), (H, L, S), (B, 1, L, S), (B, H, L, S)]
)
@pytest.mark.parametrize("scale", [None, 0.3])
def test_forward_with_masks_equals_torch(mask_shape, scale):
    q, k, v = make_qkv(B, H)
    mask = random_mask(mask_shape)
    out, weights = npr.scaled_dot_product_attention(q, k, v, mask, scale=scale)
    tq, tk, tv, tm = t(q), t(k), t(v), t(mask)
    expected = attention.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, scale=scale)
    np.testing.assert_allclose(out, expected.numpy(), **TIGHT)
    np.testing.assert_allclose(
        weights, attention.attention_weights(tq, tk, attn_mask=tm, scale=scale).numpy(), **TIGHT
    )
    # PyTorch's own function rejects a 1-D mask, so hand it the (L, S) expansion
    torch_mask = tm.expand(L, S) if mask.ndim == 1 else tm
    np.testing.assert_allclose(
        out, F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch_mask, scale=scale), **TIGHT
    )
    assert np.all(weights[..., ~np.broadcast_to(mask, weights.shape)] == 0.0)


def test_weights_are_probability_rows():
    q, k, v = make_qkv(B, H)
    _, weights = npr.scaled_dot_product_attention(q, k, v)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(-1), np.ones((B, H, L)), rtol=1e-14)


def fully_masked_example():
    q, k, v = make_qkv(B, H)
    mask = random_mask((L, S), seed=2)
    mask[1] = False  # query 1 may attend to nothing
    mask[:, 4] = False  # and nobody may attend to key 4
    return q, k, v, mask


def test_fully_masked_row_gives_zero_weights_and_output_like_the_torch_package():
    q, k, v, mask = fully_masked_example()
    out, weights = npr.scaled_dot_product_attention(q, k, v, mask)
    assert not np.isnan(out).any() and not np.isnan(weights).any()
    assert np.all(weights[:, :, 1] == 0.0) and np.all(out[:, :, 1] == 0.0)
    np.testing.assert_allclose(np.delete(weights.sum(-1), 1, axis=-1), 1.0, rtol=1e-14)
    expected = attention.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask))
    np.testing.assert_allclose(out, expected.numpy(), **TIGHT)


def test_masked_keys_and_values_do_not_affect_the_output():
    q, k, v, mask = fully_masked_example()
    k2, v2 = k.copy(), v.copy()
    k2[..., 4, :], v2[..., 4, :] = 1e3, -1e3
    out, _ = npr.scaled_dot_product_attention(q, k, v, mask)
    out2, _ = npr.scaled_dot_product_attention(q, k2, v2, mask)
    np.testing.assert_array_equal(out, out2)


def test_no_keys_gives_zeros_and_no_queries_gives_empty():
    q, k, v = make_qkv(B, L=4, S=0)
    out, weights = npr.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(out, np.zeros((B, 4, Dv)))
    assert weights.shape == (B, 4, 0)
    q, k, v = make_qkv(B, L=0, S=3)
    assert npr.scaled_dot_product_attention(q, k, v)[0].shape == (B, 0, Dv)


def test_float32_keeps_its_dtype_and_is_close_to_float64():
    q, k, v = make_qkv(B, H)
    mask = random_mask((L, S))
    out64, w64 = npr.scaled_dot_product_attention(q, k, v, mask)
    out32, w32 = npr.scaled_dot_product_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), mask
    )
    assert out32.dtype == w32.dtype == np.float32
    np.testing.assert_allclose(out32, out64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w32, w64, rtol=1e-5, atol=1e-5)


sizes = st.integers(min_value=1, max_value=9)


@settings(max_examples=40, deadline=None)
@given(L=sizes, S=sizes, D=sizes, seed=st.integers(0, 2**16))
def test_forward_equals_torch_for_any_sizes(L, S, D, seed):
    q, k, v = make_qkv(L=L, S=S, D=D, Dv=3, seed=seed)
    mask = random_mask((L, S), seed=seed)
    out, weights = npr.scaled_dot_product_attention(q, k, v, mask)
    expected = attention.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask))
    np.testing.assert_allclose(out, expected.numpy(), **TIGHT)
    np.testing.assert_allclose(weights.sum(-1), mask.any(-1).astype(float), rtol=1e-14)


# --- backward --------------------------------------------------------------------------------


def torch_grads(q, k, v, grad_out, **kwargs):
    leaves = [t(a).clone().requires_grad_() for a in (q, k, v)]
    attention.scaled_dot_product_attention(*leaves, **kwargs).backward(t(grad_out))
    return [leaf.grad.numpy() for leaf in leaves]


def numpy_grads(q, k, v, grad_out, attn_mask=None, scale=None):
    _, weights = npr.scaled_dot_product_attention(q, k, v, attn_mask, scale)
    return npr.scaled_dot_product_attention_backward(grad_out, q, k, v, weights, scale)


@pytest.mark.parametrize(
    ("lead", "Lq", "Sk", "masked", "scale"),
    [
        ((), 5, 7, False, None),
        ((B,), 7, 5, False, None),
        ((B, H), 5, 7, False, None),
        ((B, H), 5, 7, True, None),
        ((B, H), 5, 7, False, 0.7),
        ((B, H), 5, 7, True, -0.3),
        ((B, H, 2), 1, 9, True, None),
    ],
    ids=["2d", "3d-L>S", "4d", "mask", "scale", "mask-negative-scale", "5d-one-query"],
)
def test_backward_equals_torch_autograd(lead, Lq, Sk, masked, scale):
    q, k, v = make_qkv(*lead, L=Lq, S=Sk)
    grad_out = np.random.default_rng(7).standard_normal((*lead, Lq, Dv))
    mask = random_mask((Lq, Sk), seed=5) if masked else None
    ours = numpy_grads(q, k, v, grad_out, mask, scale)
    kwargs = {"scale": scale} if mask is None else {"attn_mask": t(mask), "scale": scale}
    theirs = torch_grads(q, k, v, grad_out, **kwargs)
    for name, g, expected in zip("qkv", ours, theirs, strict=True):
        assert g.shape == expected.shape, name
        np.testing.assert_allclose(g, expected, rtol=1e-10, atol=1e-12, err_msg=f"d{name}")


def test_backward_with_a_fully_masked_row_gives_zero_gradients_like_torch():
    q, k, v, mask = fully_masked_example()
    grad_out = np.random.default_rng(8).standard_normal((B, H, L, Dv))
    dq, dk, dv = numpy_grads(q, k, v, grad_out, mask)
    for g in (dq, dk, dv):
        assert np.isfinite(g).all()
    assert np.all(dq[:, :, 1] == 0.0)  # the query that sees nothing
    assert np.all(dk[:, :, 4] == 0.0) and np.all(dv[:, :, 4] == 0.0)  # the key nobody sees
    expected = torch_grads(q, k, v, grad_out, attn_mask=t(mask))
    for g, e in zip((dq, dk, dv), expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_backward_keeps_float32():
    q, k, v = make_qkv(B, dtype=np.float32)
    grad_out = np.ones((B, L, Dv), dtype=np.float32)
    assert all(g.dtype == np.float32 for g in numpy_grads(q, k, v, grad_out))


@pytest.mark.parametrize("masked", [False, True])
def test_backward_matches_central_finite_differences(masked):
    # Tiny, distinct sizes: L=2, S=3, D=4, Dv=5; with a mask, query 1 sees nothing.
    q, k, v = make_qkv(L=2, S=3, D=4, Dv=5, seed=9)
    mask = np.array([[True, False, True], [False, False, False]]) if masked else None
    grad_out = np.random.default_rng(10).standard_normal((2, 5))

    def loss(q, k, v):  # <O, dO>, whose gradient with respect to O is dO
        return float(np.sum(npr.scaled_dot_product_attention(q, k, v, mask)[0] * grad_out))

    analytic = numpy_grads(q, k, v, grad_out, mask)
    h = 1e-6
    for i, (array, grad) in enumerate(zip((q, k, v), analytic, strict=True)):
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            args = [q, k, v]
            plus, minus = array.copy(), array.copy()
            plus[index] += h
            minus[index] -= h
            args[i] = plus
            f_plus = loss(*args)
            args[i] = minus
            numeric[index] = (f_plus - loss(*args)) / (2 * h)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8, err_msg="qkv"[i])


# --- multi-head attention ------------------------------------------------------------------


def make_mha(seed=0, num_heads=H):
    rng = np.random.default_rng(seed)
    w_q, w_k, w_v, w_o = rng.standard_normal((4, E, E)) / np.sqrt(E)
    module = torch.nn.MultiheadAttention(
        E, num_heads, bias=False, batch_first=True, dtype=torch.float64
    )
    with torch.no_grad():
        # nn.Linear computes x @ weight.T, so torch's weights are our matrices transposed.
        module.in_proj_weight.copy_(t(np.concatenate([w_q.T, w_k.T, w_v.T], axis=0)))
        module.out_proj.weight.copy_(t(w_o.T))
    return (w_q, w_k, w_v, w_o), module


def make_x(*lead, length, seed):
    return np.random.default_rng(seed).standard_normal((*lead, length, E))


@pytest.mark.parametrize("lead", [(), (B,)], ids=["unbatched", "batched"])
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_multi_head_equals_torch_multihead_attention(lead, cross):
    weights, module = make_mha()
    xq = make_x(*lead, length=L, seed=1)
    xk = make_x(*lead, length=S, seed=2) if cross else xq
    xv = make_x(*lead, length=S, seed=3) if cross else xq
    out, attn = npr.multi_head_attention(xq, xk, xv, *weights, num_heads=H)
    Sk = xk.shape[-2]
    assert out.shape == (*lead, L, E) and attn.shape == (*lead, H, L, Sk)
    expected, expected_attn = module(t(xq), t(xk), t(xv), average_attn_weights=False)
    np.testing.assert_allclose(out, expected.detach().numpy(), **TIGHT)
    np.testing.assert_allclose(attn, expected_attn.detach().numpy(), **TIGHT)
    # torch's default output is the mean over the heads
    _, mean_attn = module(t(xq), t(xk), t(xv))
    np.testing.assert_allclose(attn.mean(axis=-3), mean_attn.detach().numpy(), **TIGHT)


def test_multi_head_mask_equals_torch_with_the_opposite_polarity():
    weights, module = make_mha()
    xq, xkv = make_x(B, length=L, seed=1), make_x(B, length=S, seed=2)
    mask = random_mask((L, S), seed=3)
    out, attn = npr.multi_head_attention(xq, xkv, xkv, *weights, num_heads=H, attn_mask=mask)
    # nn.MultiheadAttention's bool attn_mask is True where attention is NOT allowed
    expected, expected_attn = module(
        t(xq), t(xkv), t(xkv), attn_mask=t(~mask), average_attn_weights=False
    )
    np.testing.assert_allclose(out, expected.detach().numpy(), **TIGHT)
    np.testing.assert_allclose(attn, expected_attn.detach().numpy(), **TIGHT)
    assert np.all(attn[..., ~mask] == 0.0)


def test_multi_head_per_batch_mask_applies_to_every_head_of_its_own_batch_element():
    weights, module = make_mha()
    xq, xkv = make_x(B, length=L, seed=1), make_x(B, length=S, seed=2)
    mask = random_mask((B, L, S), seed=4)
    out, attn = npr.multi_head_attention(xq, xkv, xkv, *weights, num_heads=H, attn_mask=mask)
    # torch takes a 3-D mask as (B * H, L, S), batch-major
    torch_mask = t(~np.repeat(mask, H, axis=0))
    expected, expected_attn = module(
        t(xq), t(xkv), t(xkv), attn_mask=torch_mask, average_attn_weights=False
    )
    np.testing.assert_allclose(out, expected.detach().numpy(), **TIGHT)
    np.testing.assert_allclose(attn, expected_attn.detach().numpy(), **TIGHT)


def test_multi_head_is_attention_on_column_blocks_of_the_projections():
    (w_q, w_k, w_v, w_o), _ = make_mha()
    xq, xkv = make_x(B, length=L, seed=1), make_x(B, length=S, seed=2)
    mask = random_mask((L, S), seed=5)
    mask[2] = False
    out, attn = npr.multi_head_attention(xq, xkv, xkv, w_q, w_k, w_v, w_o, H, attn_mask=mask)
    D_head = E // H
    heads = []
    for h in range(H):
        cols = slice(h * D_head, (h + 1) * D_head)
        head, head_attn = npr.scaled_dot_product_attention(
            xq @ w_q[:, cols], xkv @ w_k[:, cols], xkv @ w_v[:, cols], mask
        )
        np.testing.assert_allclose(attn[:, h], head_attn, **TIGHT)
        heads.append(head)
    np.testing.assert_allclose(out, np.concatenate(heads, axis=-1) @ w_o, **TIGHT)
    assert np.all(out[:, 2] == 0.0) and not np.isnan(out).any()  # fully masked query


# --- bad input -------------------------------------------------------------------------------


def sdpa_bad_input_cases():
    q, k, v = make_qkv(B, H)
    return [
        ("list", (q.tolist(), k, v), {}, TypeError, r"query must be a numpy.ndarray; got list"),
        ("tensor", (q, t(k), v), {}, TypeError, r"key must be a numpy.ndarray; got Tensor"),
        (
            "integer dtype",
            (q.astype(np.int64), k, v),
            {},
            TypeError,
            r"query must have a floating-point dtype .* got int64",
        ),
        ("complex", (q, k, v.astype(complex)), {}, TypeError, r"value must have a floating"),
        (
            "mixed dtypes",
            (q, k.astype(np.float32), v),
            {},
            TypeError,
            r"query and key must have the same dtype; got query float64, key float32",
        ),
        (
            "value dtype",
            (q, k, v.astype(np.float32)),
            {},
            TypeError,
            r"key and value must have the same dtype",
        ),
        ("1-d", (q[0, 0, 0], k, v), {}, ValueError, r"query must have at least 2 dimensions"),
        (
            "head size",
            (q, k[..., :4], v),
            {},
            ValueError,
            r"query and key must have the same head size D \(last dimension\); "
            r"got query \(2, 3, 5, 11\), key \(2, 3, 7, 4\)",
        ),
        (
            "key/value length",
            (q, k, v[..., :6, :]),
            {},
            ValueError,
            r"key and value must have the same leading dimensions and length S; "
            r"got key \(2, 3, 7, 11\), value \(2, 3, 6, 13\)",
        ),
        (
            "batch dims",
            (q, k[:1], v[:1]),
            {},
            ValueError,
            r"query and key must have the same leading dimensions .* "
            r"got query \(2, 3, 5, 11\), key \(1, 3, 7, 11\)",
        ),
        (
            "mask shape",
            (q, k, v),
            {"attn_mask": np.ones((S, L), dtype=bool)},
            ValueError,
            r"attn_mask must broadcast to the scores shape "
            r"\(\.\.\., L, S\) = \(2, 3, 5, 7\); got \(7, 5\)",
        ),
        (
            "mask too many dims",
            (q, k, v),
            {"attn_mask": np.ones((4, B, H, L, S), dtype=bool)},
            ValueError,
            r"attn_mask must broadcast",
        ),
        (
            "mask float",
            (q, k, v),
            {"attn_mask": np.zeros((L, S))},
            TypeError,
            r"attn_mask must have dtype bool \(True = may attend\); got float64",
        ),
        (
            "mask list",
            (q, k, v),
            {"attn_mask": [[True]]},
            TypeError,
            r"attn_mask must be a numpy.ndarray or None; got list",
        ),
        ("scale nan", (q, k, v), {"scale": float("nan")}, ValueError, r"scale must be finite"),
        ("scale str", (q, k, v), {"scale": "1"}, TypeError, r"scale must be a real number"),
        ("scale bool", (q, k, v), {"scale": True}, TypeError, r"scale must be a real number"),
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [case[1:] for case in sdpa_bad_input_cases()],
    ids=[case[0] for case in sdpa_bad_input_cases()],
)
def test_forward_bad_input_raises_a_clear_error(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        npr.scaled_dot_product_attention(*args, **kwargs)


def test_backward_bad_input_raises_a_clear_error():
    q, k, v = make_qkv(B, H)
    _, w = npr.scaled_dot_product_attention(q, k, v)
    g = np.ones((B, H, L, Dv))
    backward = npr.scaled_dot_product_attention_backward
    with pytest.raises(
        ValueError,
        match=r"weights must have the shape \(\.\.\., L, S\) = \(2, 3, 5, 7\) of the forward "
        r"pass; got \(2, 3, 7, 5\)",
    ):
        backward(g, q, k, v, np.swapaxes(w, -1, -2))
    with pytest.raises(
        ValueError,
        match=r"grad_output must have the output's shape \(\.\.\., L, Dv\) = \(2, 3, 5, 13\); "
        r"got \(2, 3, 5, 11\)",
    ):
        backward(g[..., :D], q, k, v, w)
    with pytest.raises(TypeError, match=r"query and weights must have the same dtype"):
        backward(g, q, k, v, w.astype(np.float32))
    with pytest.raises(TypeError, match=r"grad_output must be a numpy.ndarray; got list"):
        backward(g.tolist(), q, k, v, w)
    with pytest.raises(ValueError, match=r"same head size D"):
        backward(g, q, k[..., :4], v, w)
    with pytest.raises(TypeError, match=r"scale must be a real number"):
        backward(g, q, k, v, w, scale="0.5")


def mha_good_kwargs():
    (w_q, w_k, w_v, w_o), _ = make_mha()
    xq, xkv = make_x(B, length=L, seed=1), make_x(B, length=S, seed=2)
    return {
        "x_query": xq,
        "x_key": xkv,
        "x_value": xkv,
        "w_q": w_q,
        "w_k": w_k,
        "w_v": w_v,
        "w_o": w_o,
        "num_heads": H,
    }


def mha_bad_input_cases():
    good = mha_good_kwargs()
    xq, xkv = good["x_query"], good["x_key"]
    w_k, w_v, w_o = good["w_k"], good["w_v"], good["w_o"]
    return [
        ("heads do not divide", {"num_heads": 5}, ValueError, r"divisible by num_heads.*E=12"),
        ("zero heads", {"num_heads": 0}, ValueError, r"num_heads must be at least 1; got 0"),
        ("float heads", {"num_heads": 3.0}, TypeError, r"num_heads must be an int; got float"),
        (
            "w_k shape",
            {"w_k": w_k[:, :8]},
            ValueError,
            r"w_k must have shape \(E, E\) = \(12, 12\), applied as x @ w_k; got \(12, 8\)",
        ),
        ("w_o list", {"w_o": w_o.tolist()}, TypeError, r"w_o must be a numpy.ndarray; got list"),
        (
            "w_v dtype",
            {"w_v": w_v.astype(np.float32)},
            TypeError,
            r"x_query and w_v must have the same dtype",
        ),
        (
            "width",
            {"x_key": xkv[..., :8], "x_value": xkv[..., :8]},
            ValueError,
            r"same model width E .* got x_query \(2, 5, 12\), x_key \(2, 7, 8\)",
        ),
        (
            "batch",
            {"x_key": xkv[:1], "x_value": xkv[:1]},
            ValueError,
            r"x_query and x_key must have the same leading dimensions",
        ),
        (
            "key/value length",
            {"x_value": xkv[:, :6]},
            ValueError,
            r"x_key and x_value must have the same shape \(\.\.\., S, E\); "
            r"got x_key \(2, 7, 12\), x_value \(2, 6, 12\)",
        ),
        (
            "integer input",
            {"x_query": xq.astype(np.int32)},
            TypeError,
            r"x_query must have a floating-point dtype",
        ),
        (
            "mask shape",
            {"attn_mask": np.ones((H, L, S), dtype=bool)},
            ValueError,
            r"attn_mask must broadcast to \(\.\.\., L, S\) \(one mask for every head\) = "
            r"\(2, 5, 7\); got \(3, 5, 7\)",
        ),
        (
            "mask dtype",
            {"attn_mask": np.ones((L, S))},
            TypeError,
            r"attn_mask must have dtype bool",
        ),
    ]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [case[1:] for case in mha_bad_input_cases()],
    ids=[case[0] for case in mha_bad_input_cases()],
)
def test_multi_head_bad_input_raises_a_clear_error(change, error, message):
    kwargs = {**mha_good_kwargs(), **change}
    with pytest.raises(error, match=message):
        npr.multi_head_attention(**kwargs)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (([1.0, 2.0],), TypeError, r"x must be a numpy.ndarray; got list"),
        ((np.arange(3),), TypeError, r"x must have a floating-point dtype .* got int64"),
        ((np.float64(1.0),), TypeError, r"x must be a numpy.ndarray; got float64"),
        ((np.array(1.0),), ValueError, r"x must have at least 1 dimension; got shape \(\)"),
        ((np.ones((2, 3)), 2), ValueError, r"axis must be in \[-2, 2\) for x of shape \(2, 3\)"),
        ((np.ones(3), 0.0), TypeError, r"axis must be an int; got float"),
    ],
)
def test_softmax_bad_input_raises_a_clear_error(args, error, message):
    with pytest.raises(error, match=message):
        npr.softmax(*args)


@pytest.mark.parametrize(
    ("a", "b", "error", "message"),
    [
        ([1.0, 0.0], np.ones(2), TypeError, r"a must be a numpy.ndarray; got list"),
        (np.ones(2), np.ones(2, dtype=int), TypeError, r"b must have a floating-point dtype"),
        (np.ones(2), np.ones(2, np.float32), TypeError, r"a and b must have the same dtype"),
        (
            np.ones(3),
            np.ones(4),
            ValueError,
            r"a and b must have the same vector length n \(last dimension\); "
            r"got a \(3,\), b \(4,\)",
        ),
        (
            np.ones((2, 3)),
            np.ones((4, 3)),
            ValueError,
            r"leading dimensions that broadcast .* got a \(2, 3\), b \(4, 3\)",
        ),
    ],
)
def test_cosine_bad_input_raises_a_clear_error(a, b, error, message):
    with pytest.raises(error, match=message):
        npr.cosine_similarity(a, b)

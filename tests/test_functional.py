"""Parity of attention.functional with torch.nn.functional.scaled_dot_product_attention.

Sizes are pairwise distinct (B=2, H=3, L=5, S=7, D=11, Dv=13) so that a transposed or
swapped axis cannot pass by accident; 267 is a length no block size divides.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention import attention_weights, causal_mask, scaled_dot_product_attention
from tests import helpers

B, H, L, S, D, Dv = 2, 3, 5, 7, 11, 13


# Every keyword can still be overridden by a call.
make_qkv = functools.partial(helpers.make_qkv, L=L, S=S, D=D, Dv=Dv, dtype=torch.float32)


# --- forward parity ---------------------------------------------------------------------


@pytest.mark.parametrize("lead", [(), (B,), (B, H), (B, H, 2)], ids=["2d", "3d", "4d", "5d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torch_for_any_leading_dims(lead, dtype):
    q, k, v = make_qkv(*lead, dtype=dtype)
    out = scaled_dot_product_attention(q, k, v)
    assert out.shape == (*lead, L, Dv)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize(("Lq", "Sk"), [(5, 7), (7, 5), (1, 267), (267, 3), (6, 6)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_torch_for_lengths_and_causal(Lq, Sk, is_causal):
    q, k, v = make_qkv(B, H, L=Lq, S=Sk)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, is_causal=is_causal),
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
    )


@pytest.mark.parametrize(
    "mask_shape", [(L, S), (1, S), (S,), (H, L, S), (B, 1, L, S), (B, H, L, S)]
)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_matches_torch_with_broadcast_masks(mask_shape, kind):
    q, k, v = make_qkv(B, H)
    g = torch.Generator().manual_seed(1)
    if kind == "bool":
        mask = torch.rand(mask_shape, generator=g) > 0.3
    else:
        mask = torch.randn(mask_shape, generator=g)
    # PyTorch raises IndexError for a 1-D (S,) mask although it broadcasts; we accept it
    # and compare against PyTorch given the same mask expanded to (L, S).
    torch_mask = mask.expand(L, S) if mask.ndim == 1 else mask
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask),
    )


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0, -0.5])
def test_matches_torch_with_custom_scale(scale):
    q, k, v = make_qkv(B, H)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, scale=scale),
        F.scaled_dot_product_attention(q, k, v, scale=scale),
    )


@pytest.mark.parametrize(("Hq", "Hkv"), [(6, 2), (6, 1), (4, 4)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_attention_matches_torch(Hq, Hkv, is_causal):
    q, k, v = make_qkv(B, Hq, Hkv=Hkv)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True),
    )


def test_grouped_query_attention_shares_each_kv_head_with_consecutive_query_heads():
    q, k, v = make_qkv(B, 6, Hkv=2)
    out = scaled_dot_product_attention(q, k, v, enable_gqa=True)
    # query head 4 belongs to group 4 // 3 = 1
    torch.testing.assert_close(out[:, 4], scaled_dot_product_attention(q[:, 4], k[:, 1], v[:, 1]))


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)], ids=["bf16", "fp16"]
)
def test_low_precision_error_is_within_pytorch_tolerances(dtype, tol):
    q, k, v = make_qkv(B, H, dtype=dtype)
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    out = scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), reference, atol=tol, rtol=tol)
    # Computed in float32 internally like PyTorch's CPU path, so not worse than it.
    ours = (out.double() - reference).abs().max()
    theirs = (F.scaled_dot_product_attention(q, k, v).double() - reference).abs().max()
    assert ours <= theirs * 1.01


def test_dropout_matches_torch_for_the_same_seed():
    q, k, v = make_qkv(B, H)
    torch.manual_seed(123)
    expected = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(123)
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.testing.assert_close(out, expected)
    # and it really drops: a different seed gives a different result
    assert not torch.allclose(out, scaled_dot_product_attention(q, k, v, dropout_p=0.3))


def test_no_dropout_is_deterministic_and_consumes_no_randomness():
    q, k, v = make_qkv(B, H)
    state = torch.get_rng_state()
    scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    assert torch.equal(state, torch.get_rng_state())


def test_float64_reference_agreement_is_near_machine_precision():
    q, k, v = make_qkv(B, H, L=267, S=514, dtype=torch.float64)
    diff = scaled_dot_product_attention(q, k, v) - F.scaled_dot_product_attention(q, k, v)
    assert diff.abs().max() < 1e-13


# --- fully masked rows and empty inputs ------------------------------------------------


def fully_masked_example(dtype=torch.float64):
    q, k, v = make_qkv(B, H, dtype=dtype)
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(2)) > 0.4
    mask[1] = False  # query 1 may attend to nothing
    return q, k, v, mask


@pytest.mark.parametrize("kind", ["bool", "float -inf"])
def test_fully_masked_row_gives_zeros_like_torch(kind):
    q, k, v, mask = fully_masked_example()
    if kind == "float -inf":
        mask = torch.zeros(L, S, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(out[:, :, 1] == 0)
    assert not out.isnan().any()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    w = attention_weights(q, k, attn_mask=mask)
    torch.testing.assert_close(w.sum(-1)[..., 1], torch.zeros(B, H, dtype=q.dtype))


def test_fully_masked_row_has_finite_gradients_equal_to_torch():
    q, k, v, mask = fully_masked_example()

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*leaves, attn_mask=mask).square().sum().backward()
        return [t.grad for t in leaves]

    ours = grads(scaled_dot_product_attention)
    for g_ours, g_torch in zip(ours, grads(F.scaled_dot_product_attention), strict=True):
        assert torch.isfinite(g_ours).all()
        torch.testing.assert_close(g_ours, g_torch)
    assert torch.all(ours[0][:, :, 1] == 0)  # dQ of the empty row


def test_textbook_masking_would_have_produced_nan():
    # The reason for the special case: softmax of an all -inf row is NaN.
    q, k, _, mask = fully_masked_example()
    scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))
    assert torch.softmax(scores, dim=-1)[:, :, 1].isnan().all()


def test_zero_keys_give_zeros_and_zero_queries_give_empty():
    q, k, v = make_qkv(B, L=4, S=0)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v), torch.zeros(B, 4, Dv))
    q, k, v = make_qkv(B, L=0, S=3)
    assert scaled_dot_product_attention(q, k, v).shape == (B, 0, Dv)


def test_causal_mask_with_more_queries_than_keys_empties_the_last_rows_not_the_first():
    # top-left alignment: query i sees keys 0..i, so with S=3 every row has a key
    q, k, _ = make_qkv(L=5, S=3)
    w = attention_weights(q, k, is_causal=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(5))
    torch.testing.assert_close(w, attention_weights(q, k, attn_mask=causal_mask(5, 3)))


# --- gradients ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"scale": 0.7}, {"attn_mask": "bool"}, {"enable_gqa": True}],
    ids=["plain", "causal", "scale", "mask", "gqa"],
)
def test_gradients_equal_torch_in_float64(kwargs):
    q, k, v = make_qkv(B, 4, Hkv=2 if kwargs.get("enable_gqa") else None, dtype=torch.float64)
    if kwargs.get("attn_mask") == "bool":
        kwargs = {"attn_mask": torch.rand(L, S, generator=torch.Generator().manual_seed(5)) > 0.3}

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves, **kwargs)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
        return [t.grad for t in leaves]

    for ours, theirs in zip(
        grads(scaled_dot_product_attention), grads(F.scaled_dot_product_attention), strict=True
    ):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_gradcheck_with_a_fully_masked_row():
    q, k, v, mask = fully_masked_example()
    q, k, v = (t[:1, :1].clone().requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v)
    )


# --- laws (property tests) ---------------------------------------------------------------

sizes = st.integers(min_value=1, max_value=9)


@settings(max_examples=40, deadline=None)
@given(L=sizes, S=sizes, D=sizes, seed=st.integers(0, 2**16), is_causal=st.booleans())
def test_rows_are_probability_distributions(L, S, D, seed, is_causal):
    q, k, _ = make_qkv(L=L, S=S, D=D, seed=seed, dtype=torch.float64)
    w = attention_weights(q, k, is_causal=is_causal)
    assert torch.all(w >= 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(L, dtype=torch.float64))


@settings(max_examples=40, deadline=None)
@given(L=sizes, S=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_masked_keys_and_values_do_not_affect_the_output(L, S, seed):
    q, k, v = make_qkv(L=L, S=S, seed=seed, dtype=torch.float64)
    mask = torch.ones(L, S, dtype=torch.bool)
    mask[:, -1] = False  # nobody may attend to the last key
    k2, v2 = k.clone(), v.clone()
    k2[-1], v2[-1] = 1e3, -1e3
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=mask),
        scaled_dot_product_attention(q, k2, v2, attn_mask=mask),
    )


@settings(max_examples=30, deadline=None)
@given(L=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_self_attention_is_permutation_equivariant(L, seed):
    q, k, v = make_qkv(L=L, S=L, seed=seed, dtype=torch.float64)
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(
        scaled_dot_product_attention(q[perm], k[perm], v[perm]),
        scaled_dot_product_attention(q, k, v)[perm],
    )


@settings(max_examples=30, deadline=None)
@given(L=st.integers(2, 9), t=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_causal_attention_does_not_leak_the_future(L, t, seed):
    t = t % L
    q, k, v = make_qkv(L=L, S=L, seed=seed, dtype=torch.float64)
    k2, v2 = k.clone(), v.clone()
    k2[t + 1 :], v2[t + 1 :] = 7.0, -7.0  # change every position after t
    out, out2 = (
        scaled_dot_product_attention(q, kk, vv, is_causal=True) for kk, vv in ((k, v), (k2, v2))
    )
    torch.testing.assert_close(out[: t + 1], out2[: t + 1])


# --- bad input ----------------------------------------------------------------------------


def bad_input_cases():
    q, k, v = make_qkv(B, H)
    return [
        (
            "not a tensor",
            (q.tolist(), k, v),
            {},
            TypeError,
            r"query must be a torch.Tensor; got list",
        ),
        (
            "integer dtype",
            (q.long(), k, v),
            {},
            TypeError,
            r"query must have a floating-point dtype",
        ),
        (
            "mixed dtypes",
            (q, k.double(), v),
            {},
            TypeError,
            r"query and key must have the same dtype",
        ),
        (
            "value dtype",
            (q, k, v.double()),
            {},
            TypeError,
            r"key and value must have the same dtype",
        ),
        ("1-d query", (q[0, 0, 0], k, v), {}, ValueError, r"query must have at least 2 dimensions"),
        (
            "head size",
            (q, k[..., :4], v),
            {},
            ValueError,
            r"same head size D.*query \(2, 3, 5, 11\), key \(2, 3, 7, 4\)",
        ),
        (
            "key/value length",
            (q, k, v[..., :6, :]),
            {},
            ValueError,
            r"key and value must have the same.*length S.*"
            r"key \(2, 3, 7, 11\), value \(2, 3, 6, 13\)",
        ),
        (
            "batch dims",
            (q, torch.cat([k, k[:1]]), torch.cat([v, v[:1]])),  # batch 3 against 2
            {},
            ValueError,
            r"query and key must have leading dimensions that broadcast",
        ),
        ("heads without gqa", (q, k[:, :2], v[:, :2]), {}, ValueError, r"enable_gqa=True"),
        (
            "heads do not divide",
            (q, k[:, :2], v[:, :2]),
            {"enable_gqa": True},
            ValueError,
            r"multiple of the number of key/value heads Hkv; got H=3, Hkv=2",
        ),
        (
            "causal and mask",
            (q, k, v),
            {"is_causal": True, "attn_mask": torch.ones(L, S, dtype=torch.bool)},
            ValueError,
            r"either attn_mask or is_causal",
        ),
        (
            "mask shape",
            (q, k, v),
            {"attn_mask": torch.ones(S, L, dtype=torch.bool)},
            ValueError,
            r"attn_mask must broadcast to the scores shape "
            r"\(\.\.\., L, S\) = \(2, 3, 5, 7\); got \(7, 5\)",
        ),
        (
            "mask too many dims",
            (q, k, v),
            {"attn_mask": torch.ones(4, B, H, L, S, dtype=torch.bool)},
            ValueError,
            r"attn_mask must broadcast",
        ),
        (
            "mask int dtype",
            (q, k, v),
            {"attn_mask": torch.ones(L, S, dtype=torch.int64)},
            TypeError,
            r"attn_mask must be bool .* got torch.int64",
        ),
        (
            "mask float64 for float32",
            (q, k, v),
            {"attn_mask": torch.zeros(L, S, dtype=torch.float64)},
            TypeError,
            r"attn_mask must be bool",
        ),
        (
            "mask list",
            (q, k, v),
            {"attn_mask": [[True]]},
            TypeError,
            r"attn_mask must be a torch.Tensor",
        ),
        (
            "dropout above 1",
            (q, k, v),
            {"dropout_p": 1.5},
            ValueError,
            r"dropout_p must be in \[0, 1\]; got 1.5",
        ),
        ("dropout negative", (q, k, v), {"dropout_p": -0.1}, ValueError, r"dropout_p must be in"),
        ("dropout str", (q, k, v), {"dropout_p": "0.1"}, TypeError, r"dropout_p must be a float"),
        ("scale nan", (q, k, v), {"scale": float("nan")}, ValueError, r"scale must be finite"),
        ("scale str", (q, k, v), {"scale": "1"}, TypeError, r"scale must be a real number"),
        ("is_causal str", (q, k, v), {"is_causal": "False"}, TypeError, r"is_causal must be True"),
        ("enable_gqa int", (q, k, v), {"enable_gqa": 1}, TypeError, r"enable_gqa must be True"),
        (
            "is_causal positional",
            (q, k, v, True),
            {},
            TypeError,
            r"attn_mask must be a torch.Tensor, a torch.nn.attention.bias.CausalBias or None; "
            r"got bool \(the fourth positional",
        ),
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [case[1:] for case in bad_input_cases()],
    ids=[case[0] for case in bad_input_cases()],
)
def test_bad_input_raises_a_clear_error(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        scaled_dot_product_attention(*args, **kwargs)


def test_attention_weights_validates_like_the_full_function():
    q, k, _ = make_qkv(B, H)
    with pytest.raises(ValueError, match="same head size D"):
        attention_weights(q, k[..., :3])
    with pytest.raises(TypeError, match=r"key must be a torch\.Tensor"):
        attention_weights(q, None)

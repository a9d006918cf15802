"""A drop-in that nothing breaks: inputs PyTorch accepts, state a failed call must not
touch, second derivatives, ``torch.func`` transforms and one rule for sizes and flags.

Each test compares with PyTorch on the same input where PyTorch has an answer.
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import gradcheck, gradgradcheck
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import attention
from attention import (
    CausalSelfAttention,
    KVCache,
    MultiHeadAttention,
    attention_entropy,
    attention_weights,
    block_sparse_attention,
    combine_masks,
    flash_attention,
    plot_attention,
    plot_attention_heads,
    scaled_dot_product_attention,
    sliding_window_attention,
    strided_layout,
)
from attention import numpy_reference as npr

matplotlib.use("Agg")

F64 = torch.float64


def tiny_flash(q, k, v, **kwargs):
    """flash_attention with blocks small enough that every test crosses several tiles."""
    return flash_attention(q, k, v, block_q=3, block_k=2, **kwargs)


ATTENTIONS = [scaled_dot_product_attention, tiny_flash]


def randn(*shape, dtype=F64, grad=False):
    return torch.randn(*shape, dtype=dtype, requires_grad=grad)


# --- inputs PyTorch accepts -------------------------------------------------------


BROADCASTS = {
    "kv shared by heads": ((2, 3, 5, 4), (2, 1, 7, 4), (2, 1, 7, 6)),
    "batch 1 against batch B": ((2, 3, 5, 4), (1, 3, 7, 4), (1, 3, 7, 6)),
    "fewer dimensions": ((2, 3, 5, 4), (3, 7, 4), (7, 6)),
    "query broadcast": ((1, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)),
}


@pytest.mark.parametrize("fn", ATTENTIONS)
@pytest.mark.parametrize("shapes", BROADCASTS.values(), ids=BROADCASTS.keys())
def test_leading_dimensions_broadcast_as_in_pytorch(fn, shapes):
    torch.manual_seed(0)
    q, k, v = (randn(*s, grad=True) for s in shapes)
    expected = F.scaled_dot_product_attention(q, k, v)
    out = fn(q, k, v)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for g, e in zip(grads, expected_grads, strict=True):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, atol=1e-12, rtol=0)


# PyTorch warns that rows with no key "will produce NaNs"; on 2.13 they are zeros, as here.
@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")
@pytest.mark.parametrize("fn", ATTENTIONS)
@pytest.mark.parametrize("bias", [causal_upper_left, causal_lower_right])
@pytest.mark.parametrize(("L", "S"), [(5, 5), (3, 7), (7, 3)])
def test_causal_bias_objects_as_attn_mask(fn, bias, L, S):
    torch.manual_seed(0)
    q, k, v = randn(2, 2, L, 4, grad=True), randn(2, 2, S, 4), randn(2, 2, S, 3)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias(L, S))
    out = fn(q, k, v, attn_mask=bias(L, S))
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    (grad,) = torch.autograd.grad(out.sum(), q)
    (expected_grad,) = torch.autograd.grad(expected.sum(), q)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)


def test_causal_bias_for_other_lengths_is_refused():
    q, k, v = randn(5, 4), randn(7, 4), randn(7, 4)
    for fn in (*ATTENTIONS, attention_weights):
        args = (q, k) if fn is attention_weights else (q, k, v)
        with pytest.raises(ValueError, match=r"made for the query and key lengths .* \(5, 7\)"):
            fn(*args, attn_mask=causal_lower_right(5, 6))
    with pytest.raises(ValueError, match="not both"):
        scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(5, 7), is_causal=True)


@pytest.mark.parametrize("fn", ATTENTIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_float32_mask_with_a_half_precision_query(fn, dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8).to(dtype) for _ in range(3))
    mask = torch.randn(5, 5)  # float32, as PyTorch allows for any query dtype
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = fn(q, k, v, attn_mask=mask)
    assert out.dtype == dtype
    # Both compute in float32 and round once to 11 (float16) or 8 (bfloat16) bits; that
    # last rounding can fall on either side: one unit in the last place apart, at most.
    ulp = {torch.float16: 2**-10, torch.bfloat16: 2**-7}[dtype]
    torch.testing.assert_close(out, expected, atol=ulp, rtol=ulp)


@pytest.mark.parametrize("fn", [*ATTENTIONS, attention_weights])
def test_integer_masks_are_refused(fn):
    q, k, v = randn(5, 4), randn(5, 4), randn(5, 4)
    args = (q, k) if fn is attention_weights else (q, k, v)
    with pytest.raises(
        TypeError, match=r"bool .* or float32 or the query's dtype .*; got torch.uint8"
    ):
        fn(*args, attn_mask=torch.ones(5, 5, dtype=torch.uint8))


def test_combine_masks_refuses_integer_flags_instead_of_adding_them():
    flags = torch.ones(3, 3, dtype=torch.uint8)
    with pytest.raises(TypeError, match=r"masks\[1\] must be bool .*torch.uint8: convert"):
        combine_masks(torch.ones(3, 3, dtype=torch.bool), flags)


@pytest.mark.parametrize("fn", ATTENTIONS)
def test_head_size_zero_gives_the_mean_of_the_values(fn):
    torch.manual_seed(0)
    q, k, v = randn(2, 3, 0), randn(2, 5, 0), randn(2, 5, 4)
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(fn(q, k, v), expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(expected, v.mean(dim=-2, keepdim=True).expand(2, 3, 4))
    out, _ = npr.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy())
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-12)


@pytest.mark.parametrize("fn", ATTENTIONS)
def test_keys_of_minus_infinity_give_zeros_like_pytorch(fn):
    # No mask: the scores of every key are -inf because the keys themselves are.
    q = randn(2, 3, 4)
    k = torch.full((2, 5, 4), -math.inf, dtype=F64)
    v = randn(2, 5, 2)
    q.abs_()  # positive queries against -inf keys: every score is -inf
    expected = F.scaled_dot_product_attention(q, k, v)
    out = fn(q, k, v)
    torch.testing.assert_close(out, expected)
    assert not out.any()  # zeros, not NaN (the gradient through -inf keys is NaN in both)


# --- modules ----------------------------------------------------------------------


def test_unbatched_input_with_an_unbatched_key_padding_mask():
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(8, 2, dtype=F64)
    module = MultiHeadAttention.from_torch(reference)
    x = randn(4, 8)  # (L, E): no batch axis
    padding = torch.tensor([False, False, True, False])  # (S,)
    expected, expected_weights = reference(x, x, x, key_padding_mask=padding)
    out, weights = module(x, x, x, key_padding_mask=padding, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    ("add_bias_kv", "add_zero_attn"), [(True, False), (False, True), (True, True)]
)
@pytest.mark.parametrize("batch_first", [True, False])
def test_add_bias_kv_and_add_zero_attn_match_pytorch(add_bias_kv, add_zero_attn, batch_first):
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(
        8, 2, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, batch_first=batch_first,
        dtype=F64,
    )  # fmt: skip
    module = MultiHeadAttention.from_torch(reference)
    x = randn(3, 5, 8) if batch_first else randn(5, 3, 8)
    padded = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    # Float, like the attn_mask: PyTorch deprecates mixing a bool and a float mask.
    padding = torch.zeros(3, 5, dtype=F64).masked_fill(padded, -math.inf)
    bias = randn(5, 5)
    expected, expected_weights = reference(x, x, x, key_padding_mask=padding, attn_mask=bias)
    out, weights = module(x, x, x, key_padding_mask=padding, attn_mask=bias, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=0)
    # ...and back: to_torch carries the extra key and value.
    back = module.to_torch()
    torch.testing.assert_close(back(x, x, x)[0], reference(x, x, x)[0], atol=1e-12, rtol=0)
    assert (back.bias_k is not None) == add_bias_kv and back.add_zero_attn == add_zero_attn


def test_extra_keys_refuse_a_kv_cache():
    layer = MultiHeadAttention(8, 2, add_zero_attn=True)
    x = torch.randn(1, 3, 8)
    cache = KVCache()
    with pytest.raises(ValueError, match="kv_cache cannot be combined with add_bias_kv"):
        layer(x, x, x, kv_cache=cache)
    assert len(cache) == 0


def test_a_failed_call_leaves_the_kv_cache_unchanged():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2, num_kv_heads=1).eval()
    x = torch.randn(1, 6, 8)
    cache = KVCache()
    layer(x[:, :4], x[:, :4], x[:, :4], is_causal=True, kv_cache=cache)
    keys, values = cache.key, cache.value
    step = x[:, 4:5]
    bad_padding = torch.zeros(1, 2, dtype=torch.bool)  # (B, 2): the cache holds 5 keys
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, S\) = \(1, 5\)"):
        layer(step, step, step, key_padding_mask=bad_padding, kv_cache=cache)
    assert cache.key is keys and cache.value is values and len(cache) == 4
    # The corrected retry equals attention over the whole prefix, computed afresh.
    out, _ = layer(step, step, step, is_causal=True, kv_cache=cache)
    full, _ = layer(x[:, :5], x[:, :5], x[:, :5], is_causal=True)
    torch.testing.assert_close(out, full[:, 4:5])
    assert len(cache) == 5


def test_a_failed_decoder_step_leaves_the_kv_cache_unchanged():
    layer = CausalSelfAttention(8, 2).eval()
    cache = KVCache()
    layer(torch.randn(1, 3, 8), kv_cache=cache)
    with pytest.raises(ValueError, match="embed_dim=8"):
        layer(torch.randn(1, 1, 7), kv_cache=cache)  # wrong width
    assert len(cache) == 3


# --- derivatives and torch.func ---------------------------------------------------

TILED = {
    "flash": lambda q, k, v: tiny_flash(q, k, v),
    "flash causal": lambda q, k, v: tiny_flash(q, k, v, is_causal=True),
    "sliding window": lambda q, k, v: sliding_window_attention(q, k, v, window=3, block_size=2),
    "block sparse": lambda q, k, v: block_sparse_attention(
        q, k, v, strided_layout(4, stride=2), 2, is_causal=True
    ),
}


@pytest.mark.parametrize("fn", TILED.values(), ids=TILED.keys())
def test_second_derivatives_of_the_tiled_loop(fn):
    torch.manual_seed(0)
    q, k, v = (randn(1, 2, 7, 3, grad=True) for _ in range(3))
    assert gradcheck(fn, (q, k, v))
    assert gradgradcheck(fn, (q, k, v))


def test_a_float_mask_has_second_derivatives_too():
    torch.manual_seed(0)
    q, k, v = (randn(2, 5, 3, grad=True) for _ in range(3))
    mask = randn(5, 5, grad=True)
    assert gradgradcheck(lambda *t: tiny_flash(*t[:3], attn_mask=t[3]), (q, k, v, mask))


def test_hessian_through_flash_attention_is_not_zeros():
    """It once was: the tiled backward was invisible to autograd's second pass."""
    torch.manual_seed(0)
    x = randn(5, 4)
    tiled = torch.autograd.functional.hessian(
        lambda x: tiny_flash(x, x, x, is_causal=True).square().sum(), x
    )
    dense = torch.autograd.functional.hessian(
        lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True).square().sum(), x
    )
    assert tiled.abs().max() > 0.1
    torch.testing.assert_close(tiled, dense, atol=1e-10, rtol=0)


def test_a_gradient_taken_with_create_graph_has_a_graph():
    q, k, v = (randn(4, 3, grad=True) for _ in range(3))
    (grad,) = torch.autograd.grad(tiny_flash(q, k, v).square().sum(), q, create_graph=True)
    assert grad.requires_grad and grad.grad_fn is not None


def test_torch_func_vmap_grad_and_jacrev():
    torch.manual_seed(0)
    q, k, v = randn(3, 2, 7, 4), randn(2, 7, 4), randn(2, 7, 4)
    batched = torch.func.vmap(lambda q: tiny_flash(q, k, v, is_causal=True))(q)
    looped = torch.stack([F.scaled_dot_product_attention(x, k, v, is_causal=True) for x in q])
    torch.testing.assert_close(batched, looped, atol=1e-12, rtol=0)

    def loss(q):
        return tiny_flash(q, k, v).square().sum()

    grad = torch.func.grad(loss)(q[0])
    q0 = q[0].clone().requires_grad_()
    (expected,) = torch.autograd.grad(F.scaled_dot_product_attention(q0, k, v).square().sum(), q0)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)

    jacobian = torch.func.jacrev(lambda q: tiny_flash(q, k[0], v[0]))(q[0, 0])
    dense = torch.func.jacrev(lambda q: F.scaled_dot_product_attention(q, k[0], v[0]))(q[0, 0])
    torch.testing.assert_close(jacobian, dense, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fn", TILED.values(), ids=TILED.keys())
def test_forward_mode_jacobian_equals_the_reverse_mode_one(fn):
    """torch.func.jacfwd (forward mode, the Function's jvp) against jacrev (its backward)."""
    torch.manual_seed(0)
    q, k, v = randn(2, 7, 3), randn(2, 7, 3), randn(2, 7, 3)
    forward = torch.func.jacfwd(fn, argnums=(0, 1, 2))(q, k, v)
    reverse = torch.func.jacrev(fn, argnums=(0, 1, 2))(q, k, v)
    assert max(float(j.abs().max()) for j in forward) > 0.1
    for ours, theirs in zip(forward, reverse, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


FORWARD_MODE = {  # flash_attention's arguments, and the same for PyTorch's kernel
    "plain": ({}, {}),
    "causal": ({"is_causal": True}, {"is_causal": True}),
    "scale": ({"scale": -0.7}, {"scale": -0.7}),
    "bool mask": (
        {"attn_mask": torch.rand(5, 7, generator=torch.Generator().manual_seed(0)) > 0.3},
        None,
    ),
}


@pytest.mark.parametrize("name", FORWARD_MODE)
def test_jvp_through_flash_attention_matches_torch(name):
    torch.manual_seed(1)
    kwargs, torch_kwargs = FORWARD_MODE[name]
    torch_kwargs = kwargs if torch_kwargs is None else torch_kwargs
    primals = (randn(2, 3, 5, 4), randn(2, 3, 7, 4), randn(2, 3, 7, 6))
    tangents = tuple(torch.randn_like(t) for t in primals)
    out, tangent = torch.func.jvp(lambda *t: tiny_flash(*t, **kwargs), primals, tangents)
    expected = torch.func.jvp(
        lambda *t: F.scaled_dot_product_attention(*t, **torch_kwargs), primals, tangents
    )
    torch.testing.assert_close(out, expected[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(tangent, expected[1], atol=1e-12, rtol=0)


def test_jvp_with_grouped_heads_and_a_float_mask_matches_torch():
    """Tangents of all four inputs, the float mask's included, with H = 6, Hk = 2, Hv = 3."""
    torch.manual_seed(2)
    primals = (randn(1, 6, 5, 4), randn(1, 2, 7, 4), randn(1, 3, 7, 3), randn(6, 5, 7))
    tangents = tuple(torch.randn_like(t) for t in primals)

    def ours(q, k, v, mask):
        return tiny_flash(q, k, v, attn_mask=mask, enable_gqa=True)

    def theirs(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    got, expected = (torch.func.jvp(f, primals, tangents) for f in (ours, theirs))
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_torch_func_hessian_through_flash_attention_matches_torch():
    """torch.func.hessian is jacfwd over jacrev: forward mode through the backward."""
    torch.manual_seed(0)
    x = randn(5, 4)
    tiled = torch.func.hessian(lambda x: tiny_flash(x, x, x, is_causal=True).square().sum())(x)
    dense = torch.func.hessian(
        lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True).square().sum()
    )(x)
    assert tiled.abs().max() > 0.1
    torch.testing.assert_close(tiled, dense, atol=1e-10, rtol=0)


# --- one rule for sizes and flags ---------------------------------------------------

# Every public callable that takes a size: called with NumPy integers it works as with
# ints (sizes come from NumPy and from tensor.shape).
SIZED = {
    "causal_mask": lambda n: attention.causal_mask(n(4), n(6)),
    "sliding_window_mask": lambda n: attention.sliding_window_mask(n(5), window=n(2)),
    "padding_mask": lambda n: attention.padding_mask([n(2), n(3)], max_length=n(4)),
    "strided_layout": lambda n: attention.strided_layout(n(4), stride=n(2)),
    "block_sparse_mask": lambda n: attention.block_sparse_mask(
        attention.strided_layout(2, stride=1), n(2), n(4), n(4)
    ),
    "sinusoidal_encoding": lambda n: attention.sinusoidal_encoding(n(5), n(8)),
    "alibi_slopes": lambda n: attention.alibi_slopes(n(4)),
    "alibi_bias": lambda n: attention.alibi_bias(n(2), n(3)),
    "LearnedPositionalEmbedding": lambda n: attention.LearnedPositionalEmbedding(n(5), n(8)),
    "MultiHeadAttention": lambda n: MultiHeadAttention(n(8), n(2), num_kv_heads=n(1)),
    "SelfAttention": lambda n: attention.SelfAttention(n(8), n(2)),
    "CrossAttention": lambda n: attention.CrossAttention(n(8), n(2)),
    "CausalSelfAttention": lambda n: CausalSelfAttention(n(8), n(2)),
    "flash_attention": lambda n: flash_attention(*torch.randn(3, 5, 4), block_q=n(2), block_k=n(3)),
    "sliding_window_attention": lambda n: sliding_window_attention(
        *torch.randn(3, 5, 4), window=n(2), block_size=n(2)
    ),
    "block_sparse_attention": lambda n: block_sparse_attention(
        *torch.randn(3, 4, 4), attention.strided_layout(2, stride=1), n(2)
    ),
    "linear_attention": lambda n: attention.linear_attention(
        *torch.randn(3, 5, 4), is_causal=True, chunk_size=n(2)
    ),
    "random_features": lambda n: attention.random_features(n(6), n(4)),
    "nystrom_attention": lambda n: attention.nystrom_attention(*torch.randn(3, 6, 4), n(3)),
    "plot_attention_heads": lambda n: plot_attention_heads(
        torch.softmax(torch.randn(2, 3, 3), -1), ncols=n(2)
    ),
}


@pytest.mark.parametrize("call", SIZED.values(), ids=SIZED.keys())
def test_sizes_accept_numpy_integers(call):
    torch.manual_seed(0)
    expected = call(int)
    torch.manual_seed(0)
    got = call(np.int64)
    if isinstance(expected, Tensor):
        torch.testing.assert_close(got, expected)


# Every public bool flag, given something truthy that is not a bool, is refused by name.
FLAGS = {
    "is_causal (sdpa)": lambda x: scaled_dot_product_attention(*torch.randn(3, 4, 2), is_causal=x),
    "enable_gqa": lambda x: scaled_dot_product_attention(*torch.randn(3, 2, 4, 2), enable_gqa=x),
    "is_causal (flash)": lambda x: flash_attention(*torch.randn(3, 4, 2), is_causal=x),
    "causal": lambda x: sliding_window_attention(*torch.randn(3, 4, 2), window=2, causal=x),
    "is_causal (linear)": lambda x: attention.linear_attention(*torch.randn(3, 4, 2), is_causal=x),
    "is_causal (performer)": lambda x: attention.performer_attention(
        *torch.randn(3, 4, 2), torch.randn(8, 2), is_causal=x
    ),
    "orthogonal": lambda x: attention.random_features(8, 2, orthogonal=x),
    "batch_first": lambda x: MultiHeadAttention(8, 2, batch_first=x),
    "bias": lambda x: MultiHeadAttention(8, 2, bias=x),
    "add_bias_kv": lambda x: MultiHeadAttention(8, 2, add_bias_kv=x),
    "add_zero_attn": lambda x: MultiHeadAttention(8, 2, add_zero_attn=x),
    "need_weights": lambda x: MultiHeadAttention(8, 2)(*torch.randn(3, 1, 4, 8), need_weights=x),
}


@pytest.mark.parametrize(("name", "call"), FLAGS.items(), ids=FLAGS.keys())
def test_flags_must_be_bools(name, call):
    flag = name.split(" ")[0]
    for value in ("no", 1, None):
        with pytest.raises(TypeError, match=rf"{flag} must be True or False"):
            call(value)


# --- small things that once went wrong ----------------------------------------------


def test_entropy_gradient_is_finite_at_a_zero_weight():
    weights = torch.tensor([[0.5, 0.5, 0.0]], requires_grad=True)
    attention_entropy(weights).sum().backward()
    assert torch.isfinite(weights.grad).all()
    # d(-p log p)/dp = -(log p + 1) where p > 0
    torch.testing.assert_close(weights.grad[0, :2], -(torch.log(torch.tensor([0.5, 0.5])) + 1))


def test_label_generators_are_read_once():
    weights = torch.softmax(torch.randn(2, 3, 3), dim=-1)
    ax = plot_attention(weights[0], key_labels=(f"k{i}" for i in range(3)))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["k0", "k1", "k2"]
    fig = plot_attention_heads(weights, query_labels=(f"q{i}" for i in range(3)))
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["q0", "q1", "q2"]


@pytest.mark.parametrize("mask_shape", [None, (5, 7), (6, 5, 7), (2, 1, 5, 7)])
def test_grouped_query_heads_are_shared_not_copied_and_exact(mask_shape):
    """flash_attention views H query heads as (Hkv, H / Hkv) against (Hkv, 1) key heads;
    values and every gradient (a float mask's included) equal PyTorch's."""
    torch.manual_seed(0)
    q = randn(2, 6, 5, 4, grad=True)
    k, v = randn(2, 2, 7, 4, grad=True), randn(2, 2, 7, 3, grad=True)
    mask = None if mask_shape is None else randn(*mask_shape, grad=True)
    inputs = (q, k, v) if mask is None else (q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    out = tiny_flash(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    grads = torch.autograd.grad(out.square().sum(), inputs)
    expected_grads = torch.autograd.grad(expected.square().sum(), inputs)
    for g, e in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=0)

"""MultiHeadAttention and its thin wrappers against torch.nn.MultiheadAttention."""

from __future__ import annotations

import re
import sys
from collections import Counter

import pytest
import torch
from torch import nn
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attention import (
    CausalSelfAttention,
    CrossAttention,
    MultiHeadAttention,
    SelfAttention,
    _checks,
    causal_mask,
    padding_mask,
)

B, L, S, E, H = 2, 5, 7, 12, 3


def pair(dtype=torch.float64, seed=0, **kwargs):
    """A torch module and ours with identical weights."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(E, H, batch_first=True, dtype=dtype, **kwargs)
    with torch.no_grad():  # non-zero biases, so a dropped bias cannot pass
        for p in theirs.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return MultiHeadAttention.from_torch(theirs), theirs


def inputs(Lq=L, Sk=S, kdim=E, vdim=E, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Lq, E, generator=g, dtype=dtype)
    k = torch.randn(B, Sk, kdim, generator=g, dtype=dtype)
    v = torch.randn(B, Sk, vdim, generator=g, dtype=dtype)
    return q, k, v


def assert_same(ours, theirs, *args, **kwargs):
    out, w = ours(*args, **kwargs)
    out_t, w_t = theirs(*args, **kwargs)
    torch.testing.assert_close(out, out_t)
    if w_t is None:
        assert w is None
    else:
        torch.testing.assert_close(w, w_t)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
def test_self_attention_matches_torch(training, need_weights, average):
    ours, theirs = pair()
    ours.train(training), theirs.train(training)
    x, _, _ = inputs()
    assert_same(ours, theirs, x, x, x, need_weights=need_weights, average_attn_weights=average)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cross_attention_with_other_widths_and_lengths_matches_torch(dtype):
    ours, theirs = pair(dtype=dtype, kdim=5, vdim=9)
    q, k, v = inputs(kdim=5, vdim=9, dtype=dtype)
    assert_same(ours, theirs, q, k, v, need_weights=True, average_attn_weights=False)


def test_key_padding_mask_matches_torch():
    ours, theirs = pair()
    q, k, v = inputs()
    kpm = ~padding_mask([7, 4], max_length=S)  # True = padding, PyTorch's meaning
    assert_same(ours, theirs, q, k, v, key_padding_mask=kpm, need_weights=True)


def test_float_key_padding_mask_matches_torch():
    ours, theirs = pair()
    q, k, v = inputs()
    kpm = torch.randn(B, S, dtype=torch.float64)
    assert_same(ours, theirs, q, k, v, key_padding_mask=kpm, need_weights=True)


def test_bool_attn_mask_uses_the_opposite_polarity_of_torch():
    ours, theirs = pair()
    q, k, v = inputs()
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(3)) > 0.3
    mask[:, 0] = True  # keep every row non-empty; empty rows are tested separately
    out, w = ours(q, k, v, attn_mask=mask, need_weights=True)
    out_t, w_t = theirs(q, k, v, attn_mask=~mask, need_weights=True)  # True = masked out
    torch.testing.assert_close(out, out_t)
    torch.testing.assert_close(w, w_t)


def test_float_attn_mask_is_added_like_torch():
    ours, theirs = pair()
    q, k, v = inputs()
    mask = torch.randn(L, S, dtype=torch.float64)
    assert_same(ours, theirs, q, k, v, attn_mask=mask, need_weights=True)


def test_per_batch_per_head_mask_matches_torch_3d_layout():
    ours, theirs = pair()
    q, k, v = inputs()
    mask = torch.rand(B, H, L, S, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[..., 0] = True
    out, _ = ours(q, k, v, attn_mask=mask)
    out_t, _ = theirs(q, k, v, attn_mask=~mask.reshape(B * H, L, S))
    torch.testing.assert_close(out, out_t)


def test_causal_matches_torch_given_its_explicit_mask():
    ours, theirs = pair()
    x, _, _ = inputs()
    torch_mask = ~causal_mask(L)  # PyTorch needs the mask even with is_causal=True
    out, w = ours(x, x, x, is_causal=True, need_weights=True)
    out_t, w_t = theirs(x, x, x, attn_mask=torch_mask, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, out_t)
    torch.testing.assert_close(w, w_t)
    assert torch.all(w.triu(diagonal=1) == 0)


def test_batch_first_false_and_unbatched_inputs_match_torch():
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(E, H, batch_first=False, dtype=torch.float64)
    ours = MultiHeadAttention.from_torch(theirs)
    assert not ours.batch_first
    q, k, v = inputs()
    seq_first = [t.transpose(0, 1) for t in (q, k, v)]  # (L, B, E)
    assert_same(ours, theirs, *seq_first, need_weights=True)
    assert_same(ours, theirs, q[0], k[0], v[0], need_weights=True)  # (L, E)


def test_without_bias_matches_torch():
    ours, theirs = pair(bias=False)
    assert ours.q_proj.bias is None and ours.out_proj.bias is None
    x, _, _ = inputs()
    assert_same(ours, theirs, x, x, x, need_weights=False)


def test_gradients_match_torch():
    ours, theirs = pair()
    q, k, v = inputs(Sk=L)
    kpm = ~padding_mask([5, 3], max_length=L)
    ours(q, k, v, key_padding_mask=kpm)[0].pow(2).sum().backward()
    theirs(q, k, v, key_padding_mask=kpm)[0].pow(2).sum().backward()
    assert theirs.in_proj_weight.grad is not None
    grad_in = torch.cat([ours.q_proj.weight.grad, ours.k_proj.weight.grad, ours.v_proj.weight.grad])
    torch.testing.assert_close(grad_in, theirs.in_proj_weight.grad)
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)


def test_dropout_matches_torch_for_the_same_seed():
    ours, theirs = pair(dropout=0.4)
    x, _, _ = inputs()
    torch.manual_seed(9)
    out_t, w_t = theirs(x, x, x, need_weights=True, average_attn_weights=False)
    torch.manual_seed(9)
    out, w = ours(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, out_t)
    torch.testing.assert_close(w, w_t)
    ours.eval()  # no dropout at evaluation time: rows sum to one again
    _, w = ours(x, x, x, need_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, L, dtype=w.dtype))


def test_fully_padded_sequence_gives_no_nan_where_torch_does():
    ours, theirs = pair()
    q, k, v = inputs()
    kpm = ~padding_mask([S, 0], max_length=S)  # the second sequence is all padding
    out, w = ours(q, k, v, key_padding_mask=kpm, need_weights=True)
    out_t, w_t = theirs(q, k, v, key_padding_mask=kpm, need_weights=True)
    assert torch.isnan(out_t[1]).all() and torch.isnan(w_t[1]).all()  # PyTorch: NaN
    assert torch.isfinite(out).all() and torch.all(w[1] == 0)
    # No attention output at all, so the module returns the output projection's bias.
    torch.testing.assert_close(out[1], ours.out_proj.bias.expand(L, E))
    torch.testing.assert_close(out[0], out_t[0])
    ours.zero_grad()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters())


def test_round_trip_through_torch_keeps_every_weight():
    ours, _ = pair(kdim=5, vdim=9)
    back = MultiHeadAttention.from_torch(ours.to_torch())
    for (name, a), (_, b) in zip(ours.named_parameters(), back.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_from_torch_keeps_mode_device_and_dtype():
    theirs = nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64).eval()
    ours = MultiHeadAttention.from_torch(theirs)
    assert not ours.training
    assert ours.q_proj.weight.dtype == torch.float64


# --- grouped-query attention -------------------------------------------------------------


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_grouped_query_attention_equals_full_heads_with_shared_projections(num_kv_heads):
    torch.manual_seed(0)
    heads, dim = 4, 16
    D = dim // heads
    gqa = MultiHeadAttention(dim, heads, num_kv_heads=num_kv_heads, dtype=torch.float64)
    assert gqa.k_proj.weight.shape == (num_kv_heads * D, dim)
    full = MultiHeadAttention(dim, heads, dtype=torch.float64)
    group = heads // num_kv_heads
    with torch.no_grad():
        full.q_proj.load_state_dict(gqa.q_proj.state_dict())
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for src, dst in ((gqa.k_proj, full.k_proj), (gqa.v_proj, full.v_proj)):
            # repeat each key/value head's rows for the query heads it serves
            dst.weight.copy_(
                src.weight.view(num_kv_heads, D, dim).repeat_interleave(group, 0).reshape(dim, dim)
            )
            dst.bias.copy_(src.bias.view(num_kv_heads, D).repeat_interleave(group, 0).reshape(dim))
    x = torch.randn(2, 6, dim, dtype=torch.float64)
    out, w = gqa(x, x, x, is_causal=True, need_weights=True, average_attn_weights=False)
    out_full, w_full = full(x, x, x, is_causal=True, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, out_full)
    torch.testing.assert_close(w, w_full)


# --- thin wrappers -----------------------------------------------------------------------


def test_wrappers_are_the_multi_head_module_with_the_right_inputs():
    torch.manual_seed(0)
    x, context = torch.randn(B, L, E), torch.randn(B, S, 6)
    kpm = ~padding_mask([L, 3])
    self_attn = SelfAttention(E, H)
    torch.testing.assert_close(
        self_attn(x, key_padding_mask=kpm), self_attn.attention(x, x, x, key_padding_mask=kpm)[0]
    )
    cross = CrossAttention(E, H, context_dim=6)
    torch.testing.assert_close(cross(x, context), cross.attention(x, context, context)[0])
    causal = CausalSelfAttention(E, H)
    torch.testing.assert_close(causal(x), causal.attention(x, x, x, is_causal=True)[0])


def test_causal_self_attention_does_not_look_ahead():
    torch.manual_seed(0)
    layer = CausalSelfAttention(E, H).double()
    x = torch.randn(1, L, E, dtype=torch.float64)
    changed = x.clone()
    changed[:, 3:] = 5.0
    torch.testing.assert_close(layer(x)[:, :3], layer(changed)[:, :3])


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"embed_dim": 10, "num_heads": 3},
            ValueError,
            r"embed_dim must be divisible by num_heads .*got embed_dim=10, num_heads=3",
        ),
        (
            {"embed_dim": 12, "num_heads": 4, "num_kv_heads": 3},
            ValueError,
            r"num_kv_heads must divide",
        ),
        ({"embed_dim": 12, "num_heads": 0}, ValueError, r"num_heads must be >= 1; got 0"),
        ({"embed_dim": 12.0, "num_heads": 3}, TypeError, r"embed_dim must be an int; got float"),
        (
            {"embed_dim": 12, "num_heads": 3, "dropout": 1.5},
            ValueError,
            r"dropout must be in \[0, 1\]",
        ),
    ],
)
def test_bad_construction_raises(kwargs, error, message):
    with pytest.raises(error, match=message):
        MultiHeadAttention(**kwargs)


def test_bad_forward_inputs_raise_clear_errors():
    mha = MultiHeadAttention(E, H)
    x = torch.randn(B, L, E)
    with pytest.raises(
        ValueError, match=r"query must have embed_dim=12 features .* got query \(2, 5, 8\)"
    ):
        mha(x[..., :8], x, x)
    with pytest.raises(ValueError, match=r"key and value must have the same length S"):
        mha(x, x, x[:, :4])
    with pytest.raises(ValueError, match=r"same batch size B"):
        mha(x, x[:1], x[:1])
    with pytest.raises(ValueError, match=r"all be 3-D \(B, L, E\) or all 2-D"):
        mha(x, x[0], x[0])
    with pytest.raises(TypeError, match=r"module's dtype torch.float32; got torch.float64"):
        mha(x.double(), x.double(), x.double())
    with pytest.raises(
        ValueError, match=r"key_padding_mask must have shape \(B, S\) = \(2, 5\); got \(5, 2\)"
    ):
        mha(x, x, x, key_padding_mask=torch.zeros(L, B, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"key_padding_mask must be bool"):
        mha(x, x, x, key_padding_mask=torch.zeros(B, L, dtype=torch.long))
    with pytest.raises(ValueError, match=r"either attn_mask or is_causal"):
        mha(x, x, x, attn_mask=causal_mask(L), is_causal=True)
    with pytest.raises(TypeError, match=r"need_weights must be True or False; got str 'no'"):
        mha(x, x, x, need_weights="no")
    with pytest.raises(TypeError, match=r"is_causal must be True or False; got int 1"):
        mha(x, x, x, is_causal=1)
    with pytest.raises(ValueError, match=r"attn_mask must broadcast to the scores shape"):
        mha(x, x, x, attn_mask=torch.ones(B * H, L, L, dtype=torch.bool))


@pytest.mark.parametrize("batch_first", [True, False])
def test_shapes_in_input_errors_are_the_ones_received(batch_first):
    mha = MultiHeadAttention(E, H, batch_first=batch_first)
    x = torch.randn(B, L, E) if batch_first else torch.randn(L, B, E)  # (B, L, E) / (L, B, E)
    other_batch = x[:1] if batch_first else x[:, :1]
    shorter = x[:, :4] if batch_first else x[:4]
    with pytest.raises(
        ValueError, match=re.escape(f"same batch size B; got query {tuple(x.shape)}")
    ):
        mha(x, other_batch, other_batch)
    with pytest.raises(
        ValueError,
        match=re.escape(f"same length S; got key {tuple(x.shape)}, value {tuple(shorter.shape)}"),
    ):
        mha(x, x, shorter)
    assert mha(x, shorter, shorter)[0].shape == x.shape  # S != L: cross-attention


def spy_on_checks(monkeypatch):
    """Record every call of a ``check_*`` function of ``attention._checks``.

    Each module imported the functions by name, so every module's reference is replaced,
    ``_checks``' own included (one check calling another counts). A call is recorded as
    ``(function, the name it checks)``; the name is the first argument where that is a
    string (``check_flag("need_weights", ...)``), else None.
    """
    calls = []

    def spy(name, check):
        def recorded(*args, **kwargs):
            calls.append((name, args[0] if args and isinstance(args[0], str) else None))
            return check(*args, **kwargs)

        return recorded

    modules = [m for n, m in sys.modules.items() if n == "attention" or n.startswith("attention.")]
    for name in dir(_checks):
        check = getattr(_checks, name)
        if name.startswith("check_") and callable(check):
            for module in modules:
                if getattr(module, name, None) is check:
                    monkeypatch.setattr(module, name, spy(name, check))
    return calls


@pytest.mark.parametrize(
    "masks",
    [
        {"attn_mask": torch.ones(L, S, dtype=torch.bool), "need_weights": True},
        {"attn_mask": torch.zeros(B, 1, L, S), "key_padding_mask": torch.zeros(B, S)},
        {"is_causal": True, "key_padding_mask": torch.zeros(B, S, dtype=torch.bool)},
    ],
    ids=["bool-mask", "float-masks", "causal-padding"],
)
def test_each_argument_is_validated_once_per_forward(monkeypatch, masks):
    # The module validates its inputs and masks, then calls functional's unchecked core:
    # before issue 28 the combined mask, the query and key, is_causal and the scale were
    # checked a second time inside attention_weights.
    mha = MultiHeadAttention(E, H, dtype=torch.float32)
    q, k, v = inputs(dtype=torch.float32)
    calls = spy_on_checks(monkeypatch)
    mha(q, k, v, **masks)
    counts = Counter(calls)
    assert [call for call, n in counts.items() if n > 1] == []
    assert counts[("check_multi_head_inputs", None)] == 1
    assert counts[("check_mask_or_causal", None)] == 1
    assert counts[("check_attn_mask", None)] == ("attn_mask" in masks)
    assert counts[("check_key_padding_mask", None)] == ("key_padding_mask" in masks)


@pytest.mark.parametrize(
    ("bias", "alignment"), [(causal_upper_left, "top_left"), (causal_lower_right, "bottom_right")]
)
def test_causal_bias_as_attn_mask(bias, alignment):
    # The CausalBias becomes the bool mask it stands for (it used to reach the softmax
    # as the bias object itself, which has no usable shape).
    ours, _ = pair()
    q, k, v = inputs()
    expected, _ = ours(q, k, v, attn_mask=causal_mask(L, S, alignment=alignment))
    out, _ = ours(q, k, v, attn_mask=bias(L, S))
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_torch_conversion_errors():
    with pytest.raises(ValueError, match=r"no grouped-query attention"):
        MultiHeadAttention(E, H, num_kv_heads=1).to_torch()
    with pytest.raises(TypeError, match=r"must be a torch.nn.MultiheadAttention; got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)], ids=["bf16", "fp16"]
)
def test_low_precision_is_within_pytorch_tolerances_of_float64(dtype, tol):
    ours, _ = pair(dtype=torch.float64)
    q, k, v = inputs()
    reference, _ = ours(q, k, v)
    low = MultiHeadAttention.from_torch(ours.to_torch().to(dtype))
    out, _ = low(q.to(dtype), k.to(dtype), v.to(dtype))
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), reference, atol=tol, rtol=tol)


def test_gradcheck_through_the_module_with_padding_and_causal_mask():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2, num_kv_heads=1, dtype=torch.float64)
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    kpm = torch.tensor([[False, False, False], [True, False, False]])

    def run(x):
        return mha(x, x, x, key_padding_mask=kpm, is_causal=True)[0]

    assert torch.autograd.gradcheck(run, (x,))

"""PyTorch's own nn.MultiheadAttention tests, re-run against this package's module.

Each test mirrors a CPU-relevant test of PyTorch's ``test/nn/test_multihead_attention.py``
(or of ``test/test_transformers.py``, or the no-batch-dim samples of
``torch/testing/_internal/common_modules.py``) and says which in its docstring. The
package's ``MultiHeadAttention`` is built with ``from_torch`` from the very module
upstream tests, and both are called on the same inputs: outputs and attention weights
must agree. The package takes PyTorch's masks in its own convention (a bool
``attn_mask`` is True where a query may attend, and a 3-D ``(B * H, L, S)`` mask is
``(B, H, L, S)``), so ``package_mask`` converts them; ``key_padding_mask`` is taken as
is. Fast-path-only checks (mocks, nested tensors, TorchScript) and ``static_k`` /
``static_v``, which the package does not have, are left out.

The ``test_difference_*`` tests pin down where the package deliberately departs from
PyTorch; the tests marked ``xfail(strict=True)`` record differences that are not
deliberate (yet).
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention import MultiHeadAttention


def tol(dtype: torch.dtype) -> dict[str, float]:
    """``assert_close`` keywords: 1e-12 for float64, 1e-3 for float16, defaults otherwise."""
    if dtype == torch.float64:
        return {"atol": 1e-12, "rtol": 1e-12}
    if dtype == torch.float16:
        return {"atol": 1e-3, "rtol": 1e-3}
    return {}


def package_mask(attn_mask: Tensor | None, num_heads: int, batched: bool = True) -> Tensor | None:
    """PyTorch's ``attn_mask`` in the package's convention.

    Bool: PyTorch's True (masked out) becomes False (may not attend). 3-D, batched:
    PyTorch's ``(B * H, L, S)`` becomes ``(B, H, L, S)``. Unbatched 3-D ``(H, L, S)``
    already broadcasts to the package's ``(1, H, L, S)``. Float masks are added to the
    scores on both sides.
    """
    if attn_mask is None:
        return None
    if attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask
    if attn_mask.dim() == 3 and batched and attn_mask.shape[0] % num_heads == 0:
        attn_mask = attn_mask.unflatten(0, (-1, num_heads))
    return attn_mask


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Random values for every parameter, biases included (PyTorch initialises them to 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 0.5)
    return module


def both(module: nn.MultiheadAttention, *args: Tensor, **kwargs: object) -> tuple:
    """``(torch_out, torch_weights, our_out, our_weights)`` on the same inputs and masks.

    ``attn_mask`` is given in PyTorch's convention and converted for the package.
    """
    ours = MultiHeadAttention.from_torch(module)
    attn_mask = kwargs.pop("attn_mask", None)
    batched = args[0].dim() == 3
    theirs_out, theirs_w = module(*args, attn_mask=attn_mask, **kwargs)
    kwargs.setdefault("need_weights", True)  # PyTorch's default; the package's is False
    our_out, our_w = ours(
        *args, attn_mask=package_mask(attn_mask, module.num_heads, batched), **kwargs
    )
    return theirs_out, theirs_w, our_out, our_w


# --- TestMultiheadAttentionNN ------------------------------------------------------------

VARIANTS = {  # the helper calls of upstream's test_multihead_attention (static_k/v left out)
    "no_masking": {},
    "key_padding_mask": {"add_key_padding_mask": True},
    "add_bias_kv": {"add_bias_kv": True},
    "add_zero_attn": {"add_zero_attn": True},
    "add_bias_kv_zero_attn": {"add_key_padding_mask": True, "add_bias_kv": True,
                              "add_zero_attn": True},
    "same_embed_dim": {"add_key_padding_mask": True, "add_zero_attn": True,
                       "same_embed_dim": True},
}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask")
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("average_attn_weights", [True, False])
def test_multihead_attention(average_attn_weights, variant):
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNN::test_multihead_attention.

    Upstream's random grid (batch and source length 2-10, head size 3-10, 4-10 heads,
    kdim = vdim 5-20 unless ``same_embed_dim``; a one-step query; a random 0/-inf float
    ``attn_mask`` of shape ``(1, S)``; a random bool ``key_padding_mask``), 10 draws
    instead of 100. Output and weights (averaged or per head) must match PyTorch's.
    A row that the masks hide entirely is NaN in PyTorch's output (need_weights=True,
    see test_difference_fully_masked_row_need_weights); the package gives it zero
    attention: weights 0, output the output projection's bias.
    """
    options = VARIANTS[variant]
    rng = random.Random(f"{variant}-{average_attn_weights}")
    torch.manual_seed(0)
    for draw in range(10):
        batch_sz, seq_len = rng.randint(2, 10), rng.randint(2, 10)
        d_head = rng.randint(3, 10)
        nheads = rng.randint(2, 5) * 2
        d_model = d_head * nheads
        kv_dim = d_model if options.get("same_embed_dim") else rng.randint(5, 20)

        key_padding_mask = None
        if options.get("add_key_padding_mask"):
            seq_mask = torch.randint(0, 2, (1, seq_len)) == 1
            key_padding_mask = seq_mask.expand(batch_sz, seq_len)
        decoder_state = torch.rand(batch_sz, d_model)
        K = torch.rand(batch_sz, seq_len, kv_dim)
        attn_mask = torch.randint(0, 2, (1, seq_len)).float()
        attn_mask = attn_mask.masked_fill(attn_mask == 0, float("-inf")).masked_fill(
            attn_mask > 0, 0.0
        )
        module = nn.MultiheadAttention(
            d_model,
            nheads,
            add_bias_kv=options.get("add_bias_kv", False),
            add_zero_attn=options.get("add_zero_attn", False),
            kdim=kv_dim,
            vdim=kv_dim,
        )
        randomize(module, seed=draw)
        query = decoder_state.unsqueeze(0)  # (1, B, d_model): one step, batch_first=False
        source = K.transpose(0, 1)  # (S, B, kdim)
        theirs, theirs_w, ours, ours_w = both(
            module,
            query,
            source,
            source,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            need_weights=True,
            average_attn_weights=average_attn_weights,
        )
        assert ours.shape == theirs.shape == (1, batch_sz, d_model)
        assert ours_w.shape == theirs_w.shape
        assert not ours.isnan().any() and not ours_w.isnan().any()
        attended = ~theirs.isnan().any(dim=-1)  # (1, B)
        torch.testing.assert_close(ours[attended], theirs[attended])
        torch.testing.assert_close(ours_w[attended[0]], theirs_w[attended[0]])  # batch axis
        hidden = ~attended
        torch.testing.assert_close(ours[hidden], module.out_proj.bias.expand_as(ours)[hidden])
        assert (ours_w[hidden[0]] == 0).all()


def test_multihead_attn_3d_attn_mask():
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNN::test_multihead_attn_3d_attn_mask.

    PyTorch's per-sample masks repeated per head, ``(N * H, T, S)``, equal the package's
    ``(N, H, T, S)``; and each sample alone with its 2-D mask gives the same output.
    """  # noqa: E501
    embed_dim, num_heads, batch_size, src_len, tgt_len = 8, 4, 8, 3, 2
    torch.manual_seed(0)
    query = torch.rand(batch_size, tgt_len, embed_dim)
    key = value = torch.rand(batch_size, src_len, embed_dim)
    attn_mask = torch.randint(0, 2, (batch_size, tgt_len, src_len)).float()
    attn_mask = attn_mask.masked_fill(attn_mask == 0, float("-inf")).masked_fill(
        attn_mask == 1, 0.0
    )
    module = randomize(nn.MultiheadAttention(embed_dim, num_heads))
    attn_mask_3d = torch.repeat_interleave(attn_mask, num_heads, dim=0)  # (N * H, T, S)
    theirs, _, ours, _ = both(
        module, query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),
        attn_mask=attn_mask_3d,
    )  # fmt: skip
    attended = ~theirs.isnan().any(dim=-1)
    torch.testing.assert_close(ours[attended], theirs[attended])
    assert not ours.isnan().any()
    package = MultiHeadAttention.from_torch(module)
    for i in range(batch_size):
        one = package(
            query[i].unsqueeze(1), key[i].unsqueeze(1), value[i].unsqueeze(1),
            attn_mask=attn_mask[i],
        )[0]  # fmt: skip
        torch.testing.assert_close(one, ours[:, i : i + 1])


def test_multihead_attn_no_bias():
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNN::test_multihead_attn_no_bias."""  # noqa: E501
    module = nn.MultiheadAttention(8, 4, bias=False)
    ours = MultiHeadAttention.from_torch(module)
    assert module.in_proj_bias is None and module.out_proj.bias is None
    for proj in (ours.q_proj, ours.k_proj, ours.v_proj, ours.out_proj):
        assert proj.bias is None
    assert MultiHeadAttention(8, 4, bias=False).out_proj.bias is None
    x = torch.randn(5, 3, 8)
    theirs, theirs_w, ours_out, ours_w = both(module, x, x, x)
    torch.testing.assert_close(ours_out, theirs)
    torch.testing.assert_close(ours_w, theirs_w)


def _invalid_shape_cases(key_value_2d: int) -> list:
    """Upstream's invalid-shape cases: ``(query, key, value, kwargs)`` makers."""
    q3 = lambda: torch.randn(4, 4, 4)  # noqa: E731
    q2 = lambda: torch.randn(4, 4)  # noqa: E731
    bools = torch.tensor([False, False, True, True])
    return [
        pytest.param(lambda: (q3(), torch.randn(key_value_2d, key_value_2d), q3(), {}),
                     id="3d_query_2d_key"),
        pytest.param(lambda: (q3(), q3(), torch.randn(key_value_2d, key_value_2d), {}),
                     id="3d_query_2d_value"),
        pytest.param(lambda: (q3(), q3(), q3(), {"key_padding_mask": bools[: key_value_2d]}),
                     id="3d_query_1d_key_padding_mask"),
        pytest.param(lambda: (q2(), torch.randn(4, 4, 4), q2(), {}), id="2d_query_3d_key"),
        pytest.param(lambda: (q2(), q2(), torch.randn(4, 4, 4), {}), id="2d_query_3d_value"),
        pytest.param(lambda: (q2(), q2(), q2(), {"key_padding_mask": bools.repeat(2)[None]}),
                     id="2d_query_2d_key_padding_mask"),
        pytest.param(lambda: (q2(), q2(), q2(),
                              {"attn_mask": torch.randn(5, 4, 4).bernoulli_().bool()}),
                     id="2d_query_3d_attn_mask_wrong_heads"),
    ]  # fmt: skip


@pytest.mark.parametrize("make", _invalid_shape_cases(4))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_multihead_attn_invalid_shape(mode, make):
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNN::test_multihead_attn_invalid_shape.

    PyTorch raises AssertionError for each case; the package must raise ValueError or
    TypeError (in training mode, and in eval mode under no_grad, upstream's fast-path try).
    """  # noqa: E501
    torch.manual_seed(0)
    module = nn.MultiheadAttention(4, 4)
    ours = MultiHeadAttention.from_torch(module)
    q, k, v, kwargs = make()
    context = torch.no_grad() if mode == "eval" else torch.enable_grad()
    if mode == "eval":
        module.eval(), ours.eval()
    with context:
        with pytest.raises(AssertionError):
            module(q, k, v, **kwargs)
        with pytest.raises((ValueError, TypeError)):
            ours(q, k, v, **package_kwargs(kwargs, module.num_heads, q.dim() == 3))


def package_kwargs(kwargs: dict, num_heads: int, batched: bool) -> dict:
    """``kwargs`` with its ``attn_mask`` (if any) in the package's convention."""
    kwargs = dict(kwargs)
    if "attn_mask" in kwargs:
        kwargs["attn_mask"] = package_mask(kwargs["attn_mask"], num_heads, batched)
    return kwargs


@pytest.mark.parametrize("make", _invalid_shape_cases(3))
def test_multihead_attn_fast_path_invalid_shape(make):
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNN::test_multihead_attn_fast_path_invalid_shape.

    batch_first=True, eval mode, no_grad, need_weights=False: the conditions of
    PyTorch's fast path. PyTorch raises AssertionError; the package ValueError or
    TypeError.
    """  # noqa: E501
    torch.manual_seed(0)
    module = nn.MultiheadAttention(4, 4, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(module)
    q, k, v, kwargs = make()
    with torch.no_grad():
        with pytest.raises(AssertionError):
            module(q, k, v, need_weights=False, **kwargs)
        with pytest.raises((ValueError, TypeError)):
            ours(q, k, v, **package_kwargs(kwargs, 4, q.dim() == 3))


# --- TestMultiheadAttentionNNDeviceType (CPU) --------------------------------------------


def test_multihead_self_attn_two_masks_fast_path():
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNNDeviceType::test_multihead_self_attn_two_masks_fast_path.

    A bool attn_mask and a bool key_padding_mask together, PyTorch's fast path (eval,
    no_grad) and its slow path against the package. Rows that the two masks hide
    entirely are excluded, as upstream does (PyTorch's fast path gives NaN there); the
    package gives them zero attention, i.e. the output projection's bias.
    """  # noqa: E501
    embed_dim, num_heads, batch_size, src_len = 14, 7, 8, 5
    torch.manual_seed(0)
    query = key = value = torch.rand(batch_size, src_len, embed_dim)
    attn_mask = torch.randint(0, 2, (src_len, src_len)).bool()
    key_padding_mask = torch.randint(0, 2, (batch_size, src_len)).bool()
    merged = attn_mask[None] | key_padding_mask[:, None, :]  # (B, L, S), True = masked
    hidden = merged.all(-1, keepdim=True).expand(batch_size, src_len, embed_dim)
    assert hidden.any()  # the seed gives some fully masked rows

    module = randomize(nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)).eval()
    ours = MultiHeadAttention.from_torch(module)
    with torch.no_grad():
        fast, _ = module(query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
        slow, _ = F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),
            embed_dim, num_heads, module.in_proj_weight, module.in_proj_bias,
            None, None, False, 0.0, module.out_proj.weight, module.out_proj.bias,
            training=False, key_padding_mask=key_padding_mask, need_weights=False,
            attn_mask=attn_mask,
        )  # fmt: skip
        mine, _ = ours(query, key, value, attn_mask=~attn_mask, key_padding_mask=key_padding_mask)
    slow = slow.transpose(0, 1)
    torch.testing.assert_close(mine.masked_fill(hidden, 0), fast.masked_fill(hidden, 0))
    torch.testing.assert_close(mine.masked_fill(hidden, 0), slow.masked_fill(hidden, 0))
    assert not mine.isnan().any()
    torch.testing.assert_close(mine[hidden], module.out_proj.bias.expand_as(mine)[hidden])


@pytest.mark.parametrize("dtype", [torch.half, torch.float, torch.double], ids=str)
def test_multihead_attention_dtype(dtype):
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNNDeviceType::test_multihead_attention_dtype.

    (Upstream runs it on CUDA only; on CPU it is as meaningful for the package.)
    """  # noqa: E501
    torch.manual_seed(0)
    embed_dim, num_heads, sl, bs = 128, 8, 10, 8
    module = nn.MultiheadAttention(embed_dim, num_heads).to(dtype)
    q, k, v = (torch.randn(sl, bs, embed_dim, dtype=dtype) for _ in range(3))
    theirs, theirs_w, ours, ours_w = both(module, q, k, v)
    assert ours.shape == q.shape and ours.dtype == dtype
    torch.testing.assert_close(ours, theirs, **tol(dtype))
    torch.testing.assert_close(ours_w, theirs_w, **tol(dtype))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [torch.half, torch.float, torch.double], ids=str)
def test_multihead_attention_dtype_batch_first(dtype, training):
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNNDeviceType::test_multihead_attention_dtype_batch_first.

    batch_first=True, in training mode and in eval mode under no_grad (PyTorch's fast
    path); need_weights=False. (Upstream: CUDA only.)
    """  # noqa: E501
    torch.manual_seed(0)
    embed_dim, num_heads, sl, bs = 128, 8, 10, 8
    module = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True).to(dtype)
    if not training:
        module.eval()
    q, k, v = (torch.randn(bs, sl, embed_dim, dtype=dtype) for _ in range(3))
    with torch.no_grad() if not training else torch.enable_grad():
        theirs, _, ours, ours_w = both(module, q, k, v, need_weights=False)
    assert ours_w is None
    assert ours.shape == q.shape and ours.dtype == dtype
    torch.testing.assert_close(ours, theirs, **tol(dtype))


def test_multihead_attn_fast_path_small_test():
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNNDeviceType::test_multihead_attn_fast_path_small_test."""  # noqa: E501
    torch.manual_seed(0)
    module = nn.MultiheadAttention(4, 4, batch_first=True, dtype=torch.double).eval()
    query = torch.randn(4, 4, 4, dtype=torch.double)
    with torch.no_grad():
        theirs, theirs_w, ours, ours_w = both(module, query, query, query)
    torch.testing.assert_close(ours, theirs, **tol(torch.double))
    torch.testing.assert_close(ours_w, theirs_w, **tol(torch.double))


def test_multihead_attn_in_proj_bias_none():
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNNDeviceType::test_multihead_attn_in_proj_bias_none."""  # noqa: E501
    torch.manual_seed(0)
    module = nn.MultiheadAttention(2, 2, bias=False, dtype=torch.double)
    query = torch.rand(2, 2, 2, dtype=torch.double)
    with torch.no_grad():
        theirs, theirs_w, ours, ours_w = both(module, query, query, query)
    torch.testing.assert_close(ours, theirs, **tol(torch.double))
    torch.testing.assert_close(ours_w, theirs_w, **tol(torch.double))


def test_multihead_attn_in_proj_weight_none():
    """Mirrors test_multihead_attention.py::TestMultiheadAttentionNNDeviceType::test_multihead_attn_in_proj_weight_none.

    kdim = vdim = 2 != embed_dim: separate projection weights, in_proj_weight is None.
    """  # noqa: E501
    torch.manual_seed(0)
    module = randomize(nn.MultiheadAttention(4, 4, vdim=2, kdim=2, dtype=torch.double))
    assert module.in_proj_weight is None
    query = torch.rand(4, 4, 4, dtype=torch.double)
    key = torch.rand(4, 4, 2, dtype=torch.double)
    with torch.no_grad():
        theirs, theirs_w, ours, ours_w = both(module, query, key, key)
    torch.testing.assert_close(ours, theirs, **tol(torch.double))
    torch.testing.assert_close(ours_w, theirs_w, **tol(torch.double))


# --- test_transformers.py: the MultiheadAttention cases ----------------------------------


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32], ids=str)
@pytest.mark.parametrize("key_padding_mask_dim", [2, None])
@pytest.mark.parametrize("attn_mask_dim", [2, 3, None])
def test_multiheadattention_fastpath_attn_mask(attn_mask_dim, key_padding_mask_dim, mask_dtype):
    """Mirrors test_transformers.py::TestTransformersAccelerator::test_multiheadattention_fastpath_attn_mask.

    2-D and 3-D (per sample, repeated per head) attn_mask and a 2-D key_padding_mask,
    bool or float (random values, as upstream's make_tensor), in training mode and in
    eval mode (PyTorch's fast path, NaN for fully masked rows: nan_to_num, as upstream).
    """  # noqa: E501
    B, L, D, H = 2, 4, 8, 4
    torch.manual_seed(0)

    def make(shape):
        if mask_dtype == torch.bool:
            return torch.randint(0, 2, shape).bool()
        return torch.empty(shape).uniform_(-9, 9)

    attn_mask = None
    if attn_mask_dim == 2:
        attn_mask = make((L, L))
    elif attn_mask_dim == 3:
        attn_mask = make((B, 1, L, L)).expand(B, H, L, L).reshape(B * H, L, L)
    key_padding_mask = make((B, L)) if key_padding_mask_dim == 2 else None

    module = randomize(nn.MultiheadAttention(D, H, batch_first=True))
    X = torch.randn(B, L, D)
    with torch.no_grad():
        module.train()  # PyTorch's slow path
        theirs, _, ours, _ = both(
            module, X, X, X, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
            need_weights=False,
        )  # fmt: skip
        module.eval()  # PyTorch's fast path
        fast, _ = module(
            X, X, X, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
        )
        ours_eval, _ = MultiHeadAttention.from_torch(module)(
            X, X, X, attn_mask=package_mask(attn_mask, H), key_padding_mask=key_padding_mask
        )
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_eval, ours)
    hidden = fast.isnan()
    torch.testing.assert_close(ours.masked_fill(hidden, 0), fast.nan_to_num())


def test_bias_is_none():
    """Mirrors test_transformers.py::TestTransformersGeneric::test_bias_is_none."""
    torch.manual_seed(0)
    x = torch.rand(1, 5, 10)
    module = nn.MultiheadAttention(10, 1, bias=False, batch_first=True).eval()
    theirs, theirs_w, ours, ours_w = both(module, x, x, x)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_w, theirs_w)


def test_train_with_is_causal():
    """Mirrors test_transformers.py::TestTransformersAccelerator::test_train_with_is_causal (its MHA part).

    With all-ones weights and inputs every output is 16 (is_causal_kernels). PyTorch
    takes is_causal only as a hint next to a causal attn_mask; the package applies the
    causal mask itself (see test_difference_is_causal_without_mask).
    """  # noqa: E501
    S, L, E, H = 1, 2, 4, 1
    qkv = torch.ones(S, L, E)
    module = nn.MultiheadAttention(E, H)
    with torch.no_grad():
        module.in_proj_weight.fill_(1.0)
        module.out_proj.weight.fill_(1.0)
    mask = nn.Transformer.generate_square_subsequent_mask(L)
    theirs, _ = module(qkv, qkv, qkv, attn_mask=mask, need_weights=False, is_causal=True)
    assert torch.equal(theirs, torch.full((S, L, E), 16.0))
    ours, _ = MultiHeadAttention.from_torch(module)(qkv, qkv, qkv, is_causal=True)
    assert torch.equal(ours, torch.full((S, L, E), 16.0))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_train_with_is_causal_random(need_weights, batch_first):
    """Mirrors test_transformers.py::TestTransformersAccelerator::test_train_with_is_causal, on random weights.

    The package's is_causal=True equals PyTorch's causal attn_mask with the is_causal
    hint, output and weights, batch_first either way.
    """  # noqa: E501
    torch.manual_seed(0)
    B, L, E, H = 3, 6, 8, 2
    module = randomize(nn.MultiheadAttention(E, H, batch_first=batch_first))
    x = torch.randn(B, L, E) if batch_first else torch.randn(L, B, E)
    mask = nn.Transformer.generate_square_subsequent_mask(L)
    theirs, theirs_w = module(x, x, x, attn_mask=mask, is_causal=True, need_weights=need_weights)
    ours, ours_w = MultiHeadAttention.from_torch(module)(
        x, x, x, is_causal=True, need_weights=need_weights
    )
    torch.testing.assert_close(ours, theirs)
    if need_weights:
        torch.testing.assert_close(ours_w, theirs_w)
        assert (ours_w.triu(1) == 0).all()


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask")
def test_incompatible_mask():
    """Mirrors test_transformers.py::TestTransformersAccelerator::test_incompatible_mask.

    (Upstream defines it inside another test, so it never runs.) A float64 input into a
    float32 module, with a float key_padding_mask and a bool attn_mask: PyTorch raises
    RuntimeError, the package TypeError.
    """
    S, L, E, H = 1, 2, 4, 1
    module = nn.MultiheadAttention(E, H)
    qkv = torch.ones(S, L, E, dtype=torch.float64)
    kpm = torch.ones(S, L) * float("-inf")
    am = torch.ones(L, L).bool()
    with pytest.raises(RuntimeError):
        module(qkv, qkv, qkv, need_weights=False, key_padding_mask=kpm, attn_mask=am)
    with pytest.raises(TypeError, match="dtype"):
        MultiHeadAttention.from_torch(module)(qkv, qkv, qkv, key_padding_mask=kpm, attn_mask=~am)


# --- common_modules.py: module_inputs_torch_nn_MultiheadAttention (no batch dim) ----------


@pytest.mark.parametrize("with_key_padding_mask", [False, True])
@pytest.mark.parametrize("with_attn_mask", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_no_batch_dim(batch_first, with_attn_mask, with_key_padding_mask):
    """Mirrors common_modules.py::module_inputs_torch_nn_MultiheadAttention (test_modules.py's no-batch-dim samples).

    Unbatched ``(3, 3)`` inputs, 3 heads, an ``(S,)`` key_padding_mask and an
    ``(H, L, S)`` bool attn_mask, for each of bias, add_bias_kv, add_zero_attn on or
    off: the package matches PyTorch (output and weights), and, as upstream's
    ``no_batch_dim_reference_mha``, equals itself on the input with a batch axis of 1
    added and removed.
    """  # noqa: E501
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 3) for _ in range(3))
    kpm = torch.tensor([False, False, True]) if with_key_padding_mask else None
    attn_mask = torch.tensor([False, False, True]).expand(3, 3, 3) if with_attn_mask else None
    for bias, add_bias_kv, add_zero_attn in itertools.product([True, False], repeat=3):
        module = randomize(
            nn.MultiheadAttention(3, 3, batch_first=batch_first, bias=bias,
                                  add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
        )  # fmt: skip
        theirs, theirs_w, ours, ours_w = both(
            module, q, k, v, key_padding_mask=kpm, attn_mask=attn_mask
        )
        assert ours.shape == (3, 3) and ours_w.shape == (3, 3 + add_bias_kv + add_zero_attn)
        torch.testing.assert_close(ours, theirs)
        torch.testing.assert_close(ours_w, theirs_w)

        package = MultiHeadAttention.from_torch(module)
        axis = 0 if batch_first else 1
        batched, batched_w = package(
            *(t.unsqueeze(axis) for t in (q, k, v)),
            key_padding_mask=None if kpm is None else kpm[None],
            attn_mask=package_mask(attn_mask, 3, batched=False),
            need_weights=True,
        )
        torch.testing.assert_close(batched.squeeze(axis), ours)
        torch.testing.assert_close(batched_w.squeeze(0), ours_w)


@pytest.mark.parametrize("average_attn_weights", [True, False])
def test_multihead_attention_no_batch_dim_float_masks(average_attn_weights):
    """Mirrors common_modules.py::module_inputs_torch_nn_MultiheadAttention, with float masks.

    The same unbatched input with an additive ``(S,)`` float key_padding_mask and an
    ``(L, S)`` float attn_mask, weights per head or averaged.
    """
    torch.manual_seed(0)
    module = randomize(nn.MultiheadAttention(6, 3, batch_first=True))
    q, k, v = torch.randn(4, 6), torch.randn(5, 6), torch.randn(5, 6)
    kpm = torch.randn(5)
    attn_mask = torch.randn(4, 5)
    theirs, theirs_w, ours, ours_w = both(
        module, q, k, v, key_padding_mask=kpm, attn_mask=attn_mask,
        average_attn_weights=average_attn_weights,
    )  # fmt: skip
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_w, theirs_w)


# --- Deliberate differences from PyTorch --------------------------------------------------


def test_difference_fully_masked_row_need_weights():
    """A query whose keys are all masked, with need_weights=True.

    nn.MultiheadAttention computes the weights itself and returns NaN for that row, in
    the weights and in the output; with need_weights=False it uses SDPA and gives zero
    attention (the output projection's bias). The package gives zero attention in both
    cases: weights of 0, output equal to the bias, no NaN.
    """
    torch.manual_seed(0)
    module = randomize(nn.MultiheadAttention(4, 2, batch_first=True))
    ours = MultiHeadAttention.from_torch(module)
    x = torch.randn(2, 3, 4)
    kpm = torch.tensor([[True, True, True], [False, True, False]])  # batch 0: no key at all
    theirs, theirs_w = module(x, x, x, key_padding_mask=kpm, need_weights=True)
    assert theirs[0].isnan().all() and theirs_w[0].isnan().all()
    mine, mine_w = ours(x, x, x, key_padding_mask=kpm, need_weights=True)
    assert not mine.isnan().any() and (mine_w[0] == 0).all()
    torch.testing.assert_close(mine[0], module.out_proj.bias.expand(3, 4))
    torch.testing.assert_close(mine[1], theirs[1])
    torch.testing.assert_close(mine_w[1], theirs_w[1])
    theirs_no_w, _ = module(x, x, x, key_padding_mask=kpm, need_weights=False)
    torch.testing.assert_close(mine, theirs_no_w)


def test_difference_bool_attn_mask_convention():
    """The meaning of a bool attn_mask.

    PyTorch's module: True = may NOT attend (masked out). The package: True = may attend,
    as for F.scaled_dot_product_attention; key_padding_mask keeps PyTorch's meaning
    (True = padding) in both.
    """
    torch.manual_seed(0)
    module = randomize(nn.MultiheadAttention(4, 2, batch_first=True))
    ours = MultiHeadAttention.from_torch(module)
    x = torch.randn(2, 3, 4)
    causal_masked_out = torch.ones(3, 3, dtype=torch.bool).triu(1)  # PyTorch's convention
    theirs, _ = module(x, x, x, attn_mask=causal_masked_out)
    torch.testing.assert_close(ours(x, x, x, attn_mask=~causal_masked_out)[0], theirs)
    assert not torch.allclose(ours(x, x, x, attn_mask=causal_masked_out)[0], theirs)


def test_difference_3d_attn_mask_layout():
    """A 3-D attn_mask.

    PyTorch's module takes ``(B * H, L, S)``, batch-major; the package takes masks that
    broadcast to ``(B, H, L, S)``, so PyTorch's layout must be unflattened, and passing
    it as is raises ValueError (for B > 1).
    """
    torch.manual_seed(0)
    B, L, E, H = 2, 3, 4, 2
    module = randomize(nn.MultiheadAttention(E, H, batch_first=True))
    ours = MultiHeadAttention.from_torch(module)
    x = torch.randn(B, L, E)
    mask = torch.randn(B * H, L, L)
    theirs, _ = module(x, x, x, attn_mask=mask)
    torch.testing.assert_close(ours(x, x, x, attn_mask=mask.view(B, H, L, L))[0], theirs)
    with pytest.raises(ValueError, match="attn_mask"):
        ours(x, x, x, attn_mask=mask)


def test_difference_is_causal_without_mask():
    """is_causal=True without an attn_mask.

    PyTorch's module treats is_causal as a hint about attn_mask and raises RuntimeError
    ("Need attn_mask if specifying the is_causal hint"); the package applies the
    top-left causal mask itself.
    """
    torch.manual_seed(0)
    module = randomize(nn.MultiheadAttention(4, 2, batch_first=True))
    x = torch.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="attn_mask"):
        module(x, x, x, is_causal=True)
    expected, _ = module(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(3))
    ours, _ = MultiHeadAttention.from_torch(module)(x, x, x, is_causal=True)
    torch.testing.assert_close(ours, expected)


def test_difference_attn_mask_with_is_causal():
    """attn_mask together with is_causal=True.

    PyTorch's module accepts both (is_causal is a hint; the mask is used, or dropped for
    SDPA's causal path). The package raises ValueError, naming attn_mask.
    """
    module = nn.MultiheadAttention(4, 2, batch_first=True)
    x = torch.randn(2, 3, 4)
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    assert module(x, x, x, attn_mask=mask, is_causal=True)[0].shape == x.shape
    with pytest.raises(ValueError, match="attn_mask"):
        MultiHeadAttention.from_torch(module)(x, x, x, attn_mask=mask, is_causal=True)


@pytest.mark.parametrize("which", ["attn_mask", "key_padding_mask"])
def test_difference_integer_masks(which):
    """Masks of an integer dtype.

    PyTorch's module raises AssertionError ("only bool and floating types of ... are
    supported"); the package raises TypeError, naming the mask.
    """
    module = nn.MultiheadAttention(4, 4)
    x = torch.randn(4, 4, 4)
    mask = torch.zeros(4, 4, dtype=torch.long)
    with pytest.raises(AssertionError):
        module(x, x, x, **{which: mask})
    with pytest.raises(TypeError, match=which):
        MultiHeadAttention.from_torch(module)(x, x, x, **{which: mask})


_Q = (4, 4, 4)  # (L, B, E) for nn.MultiheadAttention(4, 4): L = B = H = E = 4
MODULE_ERROR_CASES = [
    pytest.param(((4, 4, 5), _Q, _Q), {}, ValueError, "query", id="query_width"),
    pytest.param((_Q, (4, 3, 4), (4, 3, 4)), {}, ValueError, "batch size", id="batch_size"),
    pytest.param((_Q, (5, 4, 4), _Q), {}, ValueError, "length", id="key_value_length"),
    pytest.param((_Q, _Q, _Q), {"dtype": torch.float64}, TypeError, "dtype", id="input_dtype"),
    pytest.param((_Q, _Q, _Q), {"key_padding_mask": torch.zeros(3, 4, dtype=torch.bool)},
                 ValueError, "key_padding_mask", id="key_padding_mask_shape"),
    pytest.param((_Q, _Q, _Q), {"attn_mask": torch.zeros(3, 4, dtype=torch.bool)},
                 ValueError, "attn_mask", id="attn_mask_2d_shape"),
    pytest.param((_Q, _Q, _Q), {"attn_mask": torch.zeros(3, 4, 4, dtype=torch.bool)},
                 ValueError, "attn_mask", id="attn_mask_3d_wrong_first_dim"),
]  # fmt: skip


@pytest.mark.parametrize(("shapes", "kwargs", "error", "match"), MODULE_ERROR_CASES)
def test_difference_error_types(shapes, kwargs, error, match):
    """Bad shapes and dtypes given to the module.

    PyTorch raises AssertionError (or a RuntimeError from inside a reshape or a matmul,
    e.g. "shape '[4, 16, 1]' is invalid" for mismatched batch sizes); the package raises
    ValueError or TypeError with a message that names the argument.
    """
    module = nn.MultiheadAttention(4, 4)
    ours = MultiHeadAttention.from_torch(module)
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", torch.float32)
    torch.manual_seed(0)
    args = [torch.randn(shape, dtype=dtype) for shape in shapes]
    with pytest.raises((AssertionError, RuntimeError)):
        module(*args, **kwargs)
    with pytest.raises(error, match=match):
        ours(*args, **package_kwargs(kwargs, 4, batched=True))


def test_difference_error_types_constructor():
    """An embed_dim that num_heads does not divide: PyTorch AssertionError, package ValueError."""
    with pytest.raises(AssertionError):
        nn.MultiheadAttention(5, 2)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(5, 2)


def test_difference_defaults():
    """Default arguments.

    PyTorch: ``batch_first=False`` and ``need_weights=True``; the package: ``batch_first
    =True`` and ``need_weights=False`` (no ``L x S`` weights kept unless asked for).
    ``from_torch`` copies batch_first from the module.
    """
    assert nn.MultiheadAttention(4, 2).batch_first is False
    assert MultiHeadAttention(4, 2).batch_first is True
    x = torch.randn(2, 3, 4)
    module = nn.MultiheadAttention(4, 2)
    assert module(x, x, x)[1] is not None
    ours = MultiHeadAttention.from_torch(module)
    assert ours.batch_first is False
    assert ours(x, x, x)[1] is None


def test_difference_attn_mask_broadcasts_to_batch_heads_queries_keys():
    """PyTorch's module takes an ``attn_mask`` of ``(L, S)`` or ``(B * H, L, S)`` only and
    refuses a 1-D mask or a ``(B, L, S)`` one. The package's mask broadcasts to
    ``(B, H, L, S)`` by the usual rules: a 1-D ``(S,)`` mask applies to every query, and a
    3-D mask is per head, ``(H, L, S)`` (so a ``(B, L, S)`` mask is read per head when
    ``B == H``: write ``(B, 1, L, S)`` for one mask per sequence)."""
    torch.manual_seed(0)
    module = nn.MultiheadAttention(4, 2, batch_first=True)
    ours = MultiHeadAttention.from_torch(module)
    x = torch.randn(3, 5, 4)
    keep = torch.tensor([True, True, False, True, True])  # (S,), True = may attend
    with pytest.raises(AssertionError):
        module(x, x, x, attn_mask=~keep)
    out, _ = ours(x, x, x, attn_mask=keep)
    expected, _ = module(x, x, x, attn_mask=~keep.expand(5, 5))
    torch.testing.assert_close(out, expected)
    per_head = torch.randn(2, 5, 5)  # (H, L, S)
    out, _ = ours(x, x, x, attn_mask=per_head)
    expected, _ = module(x, x, x, attn_mask=per_head.repeat(3, 1, 1))  # (B * H, L, S)
    torch.testing.assert_close(out, expected)

"""attention.efficient: each variant equals dense attention with the matching mask,
skips the work it claims to skip, and keeps memory linear in the sequence length.

Lengths 267, 514 and 1030 are divisible by none of the block sizes used unless a test
says otherwise (267 = 3 * 89); sizes are pairwise distinct so a swapped axis fails.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attention import (
    block_sparse_attention,
    block_sparse_mask,
    causal_mask,
    flash_attention,
    linear_attention,
    scaled_dot_product_attention,
    sliding_window_attention,
    sliding_window_mask,
    strided_layout,
)
from tests import helpers

B, H, D, Dv = 2, 3, 16, 8
LENGTHS = [(267, 267), (514, 514), (1030, 1030), (267, 514), (514, 267)]
IDS = [f"{L}x{S}" for L, S in LENGTHS]


# The tiled loops issue many small operations: one thread (tests/conftest.py); no
# result here depends on the thread count.
pytestmark = pytest.mark.usefixtures("one_thread")


make_qkv = functools.partial(helpers.make_qkv, D=D, Dv=Dv, dtype=torch.float64)


def grads(fn, q, k, v, *extra):
    """Gradients of a fixed, non-trivial function of the output with respect to q, k, v."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, *extra)]
    out = fn(*leaves)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    out.backward(weight)
    return [t.grad for t in leaves]


def assert_grads_close(fn, reference, *inputs, rtol=1e-8, atol=1e-8):
    for ours, theirs in zip(grads(fn, *inputs), grads(reference, *inputs), strict=True):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol)


class LargestTensor(TorchDispatchMode):
    """Record the largest tensor any PyTorch operation produces while active."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def saved_shapes(fn, *inputs):
    """Shapes of every tensor autograd saves for the backward pass of ``fn(*inputs)``."""
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*leaves)
    return shapes


class ScoresComputed(TorchDispatchMode):
    """Count the scores q . k that matrix products compute while active.

    A product is a block of scores when its inner size is the head size D, or D + 1
    (the forward loop's [Q scale, -m] [K, 1]^T). FLOPs would mix in that extra column,
    which the loop adds to some blocks and not others; the scores count visited pairs.
    """

    PRODUCTS = (torch.ops.aten.bmm, torch.ops.aten.mm, torch.ops.aten.baddbmm)

    def __init__(self, head_size: int):
        super().__init__()
        self.head_size = head_size
        self.by_inner: dict[int, int] = {}  # inner size (D or D + 1) -> scores

    @property
    def count(self) -> int:
        return sum(self.by_inner.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.PRODUCTS:
            a, b = args[-2:] if func.overloadpacket is torch.ops.aten.baddbmm else args[:2]
            inner = a.shape[-1]
            if inner in (self.head_size, self.head_size + 1):
                scores = a.shape[:-1].numel() * b.shape[-1]
                self.by_inner[inner] = self.by_inner.get(inner, 0) + scores
        return func(*args, **(kwargs or {}))


def scores_computed(fn) -> int:
    with ScoresComputed(D) as counter:
        fn()
    return counter.count


# --- flash_attention: parity ----------------------------------------------------------


@pytest.mark.parametrize(("L", "S"), LENGTHS, ids=IDS)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_matches_torch_in_float64(L, S, is_causal):
    q, k, v = make_qkv(1, 2, L=L, S=S)
    out = flash_attention(q, k, v, is_causal=is_causal, block_q=128, block_k=100)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize(("L", "S"), LENGTHS, ids=IDS)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_matches_torch_in_float32_with_torch_tolerances(L, S, is_causal):
    q, k, v = make_qkv(B, H, L=L, S=S, dtype=torch.float32)
    torch.testing.assert_close(
        flash_attention(q, k, v, is_causal=is_causal),
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
    )


@pytest.mark.parametrize(
    ("block_q", "block_k"),
    [(7, 5), (89, 257), (100, 128), (267, 514), (1000, 1000)],
    ids=["7x5", "divide", "128", "whole", "larger"],
)
def test_flash_is_exact_for_any_block_size(block_q, block_k):
    q, k, v = make_qkv(B, L=267, S=514)
    for is_causal in (False, True):
        torch.testing.assert_close(
            flash_attention(q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k),
            F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
            rtol=0,
            atol=1e-13,
        )


@pytest.mark.parametrize("lead", [(), (B,), (B, H), (B, H, 2)], ids=["2d", "3d", "4d", "5d"])
def test_flash_accepts_any_leading_dims(lead):
    q, k, v = make_qkv(*lead, L=67, S=45, dtype=torch.float32)
    out = flash_attention(q, k, v, block_q=16, block_k=32)
    assert out.shape == (*lead, 67, Dv)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize(
    "mask_shape",
    [(267, 514), (514,), (1, 514), (267, 1), (H, 267, 514), (B, 1, 267, 514)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_flash_matches_torch_with_broadcast_masks(mask_shape, kind):
    q, k, v = make_qkv(B, H, L=267, S=514, dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    if kind == "bool":
        mask = torch.rand(mask_shape, generator=g) > 0.3
    else:
        mask = torch.randn(mask_shape, generator=g)
    # PyTorch rejects a 1-D mask; give it the same mask expanded to (L, S).
    torch_mask = mask.expand(267, 514) if mask.ndim == 1 else mask
    torch.testing.assert_close(
        flash_attention(q, k, v, attn_mask=mask, block_q=64, block_k=100),
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask),
    )


@pytest.mark.parametrize(("Hq", "Hkv"), [(6, 2), (6, 1)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_grouped_query_attention_matches_torch(Hq, Hkv, is_causal):
    q, k, v = make_qkv(B, Hq, L=67, S=45, Hkv=Hkv, dtype=torch.float32)
    torch.testing.assert_close(
        flash_attention(q, k, v, is_causal=is_causal, enable_gqa=True, block_q=16, block_k=32),
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True),
    )


# Each entry point with the dense mask it equals: (function, keyword arguments, mask).
GROUPED_ENTRY_POINTS = {
    "flash": (flash_attention, {"block_q": 16, "block_k": 32}, None),
    "sliding_window": (
        sliding_window_attention,
        {"window": 9, "block_size": 16},
        sliding_window_mask(37, 37, window=9),
    ),
    "block_sparse": (
        block_sparse_attention,
        {"layout": strided_layout(3, stride=2), "block_size": 16},
        block_sparse_mask(strided_layout(3, stride=2), 16, 37, 37),
    ),
}


@pytest.mark.parametrize(("Hk", "Hv"), [(2, 3), (3, 2), (1, 6), (6, 2), (2, 6)])
@pytest.mark.parametrize("entry", GROUPED_ENTRY_POINTS)
def test_grouped_key_and_value_head_counts_may_differ_as_in_torch(entry, Hk, Hv):
    """PyTorch (enable_gqa=True) takes H = 6 query heads with Hk key and Hv value heads,
    each dividing H but not necessarily each other: query head h reads key head
    h // (H / Hk) and value head h // (H / Hv). Output and gradients match it."""
    fn, kwargs, mask = GROUPED_ENTRY_POINTS[entry]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 37, 5, generator=gen, dtype=torch.float64)
    k = torch.randn(2, Hk, 37, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(2, Hv, 37, 4, generator=gen, dtype=torch.float64)

    def ours(q, k, v):
        return fn(q, k, v, enable_gqa=True, **kwargs)

    def theirs(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    torch.testing.assert_close(ours(q, k, v), theirs(q, k, v), rtol=1e-10, atol=1e-10)
    assert_grads_close(ours, theirs, q, k, v, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("scale", [0.05, 3.0, -0.5])
def test_flash_custom_scale_matches_torch(scale):
    q, k, v = make_qkv(B, H, L=67, S=45)
    torch.testing.assert_close(
        flash_attention(q, k, v, scale=scale, block_q=16, block_k=32),
        F.scaled_dot_product_attention(q, k, v, scale=scale),
        rtol=0,
        atol=1e-13,
    )


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)], ids=["bf16", "fp16"]
)
def test_flash_low_precision_is_within_torch_tolerances(dtype, tol):
    q, k, v = make_qkv(B, H, L=267, S=514, dtype=dtype)
    out = flash_attention(q, k, v, is_causal=True, block_q=64, block_k=100)
    assert out.dtype == dtype
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(out.double(), reference, atol=tol, rtol=tol)


def test_flash_error_is_at_most_twice_the_naive_error():
    """FlashAttention's accuracy criterion: against a float64 reference, the tiled float32
    result is no more than 2x as wrong as the textbook float32 computation."""
    q, k, v = make_qkv(1, 4, L=1030, S=1030, D=64, Dv=64, dtype=torch.float32)
    for is_causal in (False, True):
        reference = F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), is_causal=is_causal
        )
        scores = q @ k.transpose(-2, -1) / 8.0
        if is_causal:
            scores = scores.masked_fill(~causal_mask(1030), float("-inf"))
        naive = torch.softmax(scores, dim=-1) @ v
        tiled = flash_attention(q, k, v, is_causal=is_causal, block_q=128, block_k=100)
        naive_error = (naive.double() - reference).abs().max()
        tiled_error = (tiled.double() - reference).abs().max()
        assert tiled_error <= 2 * naive_error, (is_causal, tiled_error, naive_error)


def _rising_keys(dtype: torch.dtype, rise: float) -> tuple[torch.Tensor, ...]:
    """Queries and keys whose scores climb by ``rise`` from one key to the next."""
    q, k, v = make_qkv(1, 2, L=200, S=520, dtype=torch.float64)
    k[..., 0] += rise * D**0.5 * torch.arange(520, dtype=torch.float64)  # q . k gains q_0 x
    q[..., 0] = 1.0
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("rise", [0.05, 0.5, 3.0])
def test_flash_scores_rising_far_above_the_held_shift_stay_exact(dtype, rise):
    """Once every row has met a key, the forward loop holds its shift m fixed and skips
    the rescaling; a query block in which a later score rose so far above m that a term
    overflowed is done again with m raised block by block. Scores that climb steadily
    along the keys, by 5, 52 or 312 per block of 104 keys (held throughout; held, then
    past float32's e^88 within two blocks; past it at once), must give dense
    attention's output and gradients."""
    q, k, v = _rising_keys(dtype, rise)
    for kwargs in ({}, {"is_causal": True}):
        ours = flash_attention(q, k, v, **kwargs, block_q=64, block_k=104)
        assert torch.isfinite(ours).all()
        assert_as_exact_as_naive(ours, q, k, v, causal_mask(200, 520) if kwargs else None)
    if dtype == torch.float64:
        assert_grads_close(
            lambda q, k, v: flash_attention(q, k, v, block_q=64, block_k=104),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
            q,
            k,
            v,
        )


def test_flash_rows_that_meet_their_first_key_late_are_exact():
    """A row whose keys are all masked in the first blocks has no shift to hold; the loop
    holds none until every row of the block has met a key. Its first scores lie far
    below 0, where a shift of 0 would make every term underflow."""
    q, k, v = make_qkv(1, 2, L=130, S=400, dtype=torch.float32)
    q = q * 60  # scores of hundreds, positive and negative
    mask = torch.ones(130, 400, dtype=torch.bool)
    mask[5, :300] = False  # row 5 meets its keys in the last blocks only
    mask[70, 100:] = False  # row 70 only in the first
    ours = flash_attention(q, k, v, attn_mask=mask, block_q=64, block_k=64)
    assert_as_exact_as_naive(ours, q, k, v, mask)


def assert_as_exact_as_naive(ours, q, k, v, mask) -> None:
    """In float64, equal to dense attention to 1e-12; in float32, at most twice as far
    from the float64 result as the textbook float32 computation (scores in the
    hundreds carry float32 rounding of ~1e-5 in their exponents, tiled or not)."""
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    if q.dtype == torch.float64:
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-12)
        return
    scores = q @ k.transpose(-2, -1) / D**0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    naive = torch.softmax(scores, dim=-1) @ v
    ours_error = (ours.double() - expected).abs().max()
    naive_error = (naive.double() - expected).abs().max()
    assert ours_error <= 2 * naive_error, (ours_error, naive_error)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_peaked_scores_far_below_the_exp_floor_stay_exact(dtype):
    """In blocks with masked pairs the loop clamps exp's argument at -80 and zeroes what
    falls under e^-79 (PyTorch's CPU exp is 15-25x slower below about -87); other blocks
    keep the plain exp. Scores spread over thousands, so most terms sit far under the
    floor, must give dense attention's output and gradients either way (causal and
    windowed blocks masked, full ones not): the terms changed are below 5e-35 of the
    row's largest."""
    q, k, v = make_qkv(1, 2, L=267, S=514, dtype=dtype)
    q = q * 40  # score gaps of hundreds to thousands
    for kwargs in ({}, {"is_causal": True}):
        gaps = (q.double() @ k.double().transpose(-2, -1)) / D**0.5
        assert (gaps - gaps.amax(-1, keepdim=True) < -80).float().mean() > 0.5
        window = sliding_window_mask(267, 514, window=50)
        for ours, mask in (
            (flash_attention(q, k, v, **kwargs, block_q=64, block_k=100), None),
            (sliding_window_attention(q, k, v, window=50, block_size=64), window),
        ):
            args = (mask,) if mask is not None else ()
            kw = kwargs if mask is None else {}
            exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), *args, **kw)
            error = (ours.double() - exact).abs().max()
            if dtype == torch.float64:
                assert error < 1e-10, error
            else:  # scores in the hundreds carry float32 rounding of ~1e-5 each
                naive = F.scaled_dot_product_attention(q, k, v, *args, **kw)
                assert error <= 2 * (naive.double() - exact).abs().max(), error
    if dtype == torch.float64:
        assert_grads_close(
            lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_q=64, block_k=100),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            q,
            k,
            v,
        )


# --- flash_attention: gradients -------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"scale": 0.7}, {"enable_gqa": True}],
    ids=["plain", "causal", "scale", "gqa"],
)
@pytest.mark.parametrize(("L", "S"), [(267, 514), (514, 267)], ids=["267x514", "514x267"])
def test_flash_gradients_equal_torch_in_float64(kwargs, L, S):
    Hkv = 1 if kwargs.get("enable_gqa") else None
    q, k, v = make_qkv(1, 2, L=L, S=S, Hkv=Hkv)
    assert_grads_close(
        lambda q, k, v: flash_attention(q, k, v, **kwargs, block_q=128, block_k=100),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
        q,
        k,
        v,
    )


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_flash_gradients_with_a_mask_equal_torch_including_the_mask_gradient(kind):
    q, k, v = make_qkv(1, 2, L=267, S=514)
    g = torch.Generator().manual_seed(3)
    if kind == "bool":
        mask = torch.rand(267, 514, generator=g) > 0.3
        assert_grads_close(
            lambda q, k, v: flash_attention(q, k, v, mask, block_q=128, block_k=100),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask),
            q,
            k,
            v,
        )
    else:  # an additive bias (a learned relative-position bias, say) gets a gradient too
        bias = torch.randn(2, 1, 514, generator=g, dtype=torch.float64)  # broadcast over L
        assert_grads_close(
            lambda q, k, v, b: flash_attention(q, k, v, b, block_q=128, block_k=100),
            lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, b),
            q,
            k,
            v,
            bias,
        )


def test_flash_passes_gradcheck_with_masks_and_an_empty_row():
    q, k, v = make_qkv(1, L=9, S=7, D=3, Dv=2)
    mask = torch.rand(9, 7, generator=torch.Generator().manual_seed(4)) > 0.4
    mask[2] = False  # an empty row
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, mask, block_q=2, block_k=3), (q, k, v)
    )
    finite_bias = torch.randn(9, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: flash_attention(q, k, v, b, block_q=4, block_k=2),
        (q, k, v, finite_bias),
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_q=4, block_k=2),
        (q, k, v),
    )


# --- flash_attention: fully masked rows and empty inputs ------------------------------


@pytest.mark.parametrize("kind", ["bool", "float -inf"])
def test_flash_fully_masked_rows_give_zeros_and_finite_gradients(kind):
    q, k, v = make_qkv(B, H, L=267, S=514)
    mask = torch.rand(267, 514, generator=torch.Generator().manual_seed(2)) > 0.5
    mask[[0, 100, 266]] = False  # queries that may attend to nothing, in different blocks
    if kind == "float -inf":
        mask = torch.zeros(267, 514, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    out = flash_attention(q, k, v, attn_mask=mask, block_q=64, block_k=100)
    assert not out.isnan().any()
    assert torch.all(out[..., [0, 100, 266], :] == 0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert_grads_close(
        lambda q, k, v: flash_attention(q, k, v, attn_mask=mask, block_q=64, block_k=100),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        q,
        k,
        v,
    )


def test_flash_zero_keys_give_zeros_and_zero_queries_give_empty():
    q, k, v = make_qkv(B, L=4, S=0)
    torch.testing.assert_close(flash_attention(q, k, v), torch.zeros(B, 4, Dv, dtype=q.dtype))
    q, k, v = make_qkv(B, L=0, S=3)
    assert flash_attention(q, k, v).shape == (B, 0, Dv)


# --- flash_attention: memory and skipped work -----------------------------------------


def test_flash_saves_no_attention_matrix_for_backward():
    L, S = 1030, 514
    q, k, v = make_qkv(B, H, L=L, S=S, dtype=torch.float32)
    ours = saved_shapes(lambda q, k, v: flash_attention(q, k, v, is_causal=True), q, k, v)
    # exactly the inputs, the output and one log-sum-exp per query
    assert sorted(ours) == sorted([q.shape, k.shape, v.shape, (B, H, L, Dv), (B, H, L)])
    # the check can fail: dense attention (ours or autograd through tiles) saves (L, S)
    dense = saved_shapes(scaled_dot_product_attention, q, k, v)
    assert any(shape[-2:] == (L, S) for shape in dense)


@pytest.mark.parametrize(
    "fn",
    [
        lambda q, k, v: flash_attention(q, k, v, block_q=128, block_k=64),
        lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_q=128, block_k=64),
        lambda q, k, v: sliding_window_attention(q, k, v, 50, block_size=128),
        lambda q, k, v: block_sparse_attention(q, k, v, strided_layout(9, stride=3), 128),
    ],
    ids=["flash", "flash-causal", "sliding", "block-sparse"],
)
def test_no_intermediate_tensor_grows_with_length_squared(fn):
    """Every tensor built in the forward and backward passes is at most one block of
    scores, (B, H, block_q, block_k), or the size of an input with one more column (the
    keys with a column of ones, [K, 1]): memory is linear."""
    L = S = 1030
    q, k, v = (t.requires_grad_() for t in make_qkv(1, 2, L=L, S=S, dtype=torch.float32))
    with LargestTensor() as largest:
        fn(q, k, v).sum().backward()
    D = k.shape[-1]
    assert largest.numel <= max(2 * 128 * 128, k.numel() // D * (D + 1))
    with LargestTensor() as dense:
        scaled_dot_product_attention(q, k, v).sum().backward()
    assert dense.numel >= 2 * L * S  # the check would catch a dense implementation


def test_flash_holds_the_shift_after_the_first_key_block():
    """Once every row has met a key, each block's scores come from the product with the
    extra column ([Q scale, -m] [K, 1]^T, inner size D + 1): only the first key block of
    each query block takes the full update (inner size D). Random scores never
    overflow, so nothing is redone."""
    q, k, v = make_qkv(1, 2, L=256, S=320, dtype=torch.float32)
    with ScoresComputed(D) as counter:
        flash_attention(q, k, v, block_q=64, block_k=64)
    # 4 query blocks x 5 key blocks of 64 x 64, for 2 heads
    assert counter.by_inner == {D: 4 * 2 * 64 * 64, D + 1: 4 * 4 * 2 * 64 * 64}


def test_flash_causal_skips_the_blocks_above_the_diagonal():
    q, k, v = make_qkv(1, 2, L=512, S=512, dtype=torch.float32)
    full = scores_computed(lambda: flash_attention(q, k, v, block_q=64, block_k=64))
    assert full == 2 * 512 * 512  # the check counts every pair once
    causal = scores_computed(
        lambda: flash_attention(q, k, v, is_causal=True, block_q=64, block_k=64)
    )
    # 8 x 8 blocks: 36 on or below the diagonal are computed, 28 above it are skipped
    assert causal == full * 36 // 64


# --- sliding_window_attention -------------------------------------------------------


def dense_window(q, k, v, window, causal=True, alignment="top_left"):
    L, S = q.shape[-2], k.shape[-2]
    mask = sliding_window_mask(L, S, window=window, causal=causal, alignment=alignment)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(("L", "S"), LENGTHS, ids=IDS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "two-sided"])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_sliding_window_equals_dense_attention_with_the_window_mask(L, S, causal, alignment):
    q, k, v = make_qkv(1, L=L, S=S)
    for window, block_size in [(1, 64), (37, 100), (300, 128), (2000, 256)]:
        out = sliding_window_attention(
            q, k, v, window, causal=causal, alignment=alignment, block_size=block_size
        )
        expected = dense_window(q, k, v, window, causal, alignment)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-13)


def test_sliding_window_float32_matches_torch_tolerances():
    q, k, v = make_qkv(B, H, L=1030, S=1030, dtype=torch.float32)
    torch.testing.assert_close(sliding_window_attention(q, k, v, 100), dense_window(q, k, v, 100))


def test_sliding_window_gradients_equal_dense_in_float64():
    q, k, v = make_qkv(1, 2, L=514, S=267)
    for causal, alignment in [(True, "top_left"), (False, "bottom_right")]:
        assert_grads_close(
            lambda q, k, v, c=causal, a=alignment: sliding_window_attention(
                q, k, v, 40, causal=c, alignment=a, block_size=64
            ),
            lambda q, k, v, c=causal, a=alignment: dense_window(q, k, v, 40, c, a),
            q,
            k,
            v,
        )
    small = [t.requires_grad_() for t in make_qkv(1, L=11, S=13, D=3, Dv=2)]
    assert torch.autograd.gradcheck(
        lambda q, k, v: sliding_window_attention(
            q, k, v, 3, alignment="bottom_right", block_size=4
        ),
        small,
    )


def test_sliding_window_queries_before_the_first_key_get_zeros():
    # bottom-right with L > S: the first L - S queries sit before key 0 and see nothing
    q, k, v = make_qkv(B, L=300, S=100)
    out = sliding_window_attention(q, k, v, 10, alignment="bottom_right", block_size=64)
    assert torch.all(out[:, :200] == 0)
    assert not out.isnan().any()
    torch.testing.assert_close(out, dense_window(q, k, v, 10, alignment="bottom_right"))
    qg, *_ = grads(
        lambda q, k, v: sliding_window_attention(
            q, k, v, 10, alignment="bottom_right", block_size=64
        ),
        q,
        k,
        v,
    )
    assert torch.isfinite(qg).all() and torch.all(qg[:, :200] == 0)


def test_sliding_window_work_grows_with_the_window_not_the_length():
    q, k, v = make_qkv(1, 2, L=2048, S=2048, dtype=torch.float32)
    dense = scores_computed(
        lambda: flash_attention(q, k, v, is_causal=True, block_q=128, block_k=128)
    )
    local = scores_computed(lambda: sliding_window_attention(q, k, v, 64, block_size=128))
    # each query block of 128 visits at most 128 + 63 keys instead of up to 2048
    assert local <= 2 * 2048 * (128 + 64)  # B * H = 2
    assert local < dense / 5


# --- block_sparse_attention ---------------------------------------------------------


def random_layout(L, S, block_size, seed):
    shape = (-(-L // block_size), -(-S // block_size))
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.5


@pytest.mark.parametrize(("L", "S"), LENGTHS, ids=IDS)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_block_sparse_equals_dense_attention_with_the_block_mask(L, S, is_causal):
    q, k, v = make_qkv(1, 2, L=L, S=S)
    for block_size in (89, 128):  # 89 divides 267 and 1030 = 2 * 515 does not
        layout = random_layout(L, S, block_size, seed=L + S + block_size)
        mask = block_sparse_mask(layout, block_size, L, S)
        if is_causal:
            mask = mask & causal_mask(L, S)
        out = block_sparse_attention(q, k, v, layout, block_size, is_causal=is_causal)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-13)


def test_block_sparse_strided_pattern_in_float32():
    q, k, v = make_qkv(B, H, L=1030, S=1030, dtype=torch.float32)
    layout = strided_layout(17, stride=4)  # 17 blocks of 64 cover 1030 positions
    mask = block_sparse_mask(layout, 64, 1030, 1030) & causal_mask(1030)
    torch.testing.assert_close(
        block_sparse_attention(q, k, v, layout, 64, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )


def test_block_sparse_gradients_equal_dense_in_float64_with_empty_rows():
    q, k, v = make_qkv(1, 2, L=514, S=267)
    layout = random_layout(514, 267, 100, seed=7)
    layout[2] = False  # query block 2 attends to nothing
    mask = block_sparse_mask(layout, 100, 514, 267)
    out = block_sparse_attention(q, k, v, layout, 100)
    assert torch.all(out[..., 200:300, :] == 0)
    assert_grads_close(
        lambda q, k, v: block_sparse_attention(q, k, v, layout, 100),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        q,
        k,
        v,
    )
    small = [t.requires_grad_() for t in make_qkv(1, L=11, S=13, D=3, Dv=2)]
    assert torch.autograd.gradcheck(
        lambda q, k, v: block_sparse_attention(
            q, k, v, strided_layout(4, stride=2)[:3], 4, is_causal=True
        ),
        small,
    )


def test_block_sparse_computes_only_the_true_blocks():
    q, k, v = make_qkv(1, 2, L=1024, S=1024, dtype=torch.float32)
    layout = strided_layout(8, stride=3)
    dense = scores_computed(lambda: flash_attention(q, k, v, block_q=128, block_k=128))
    sparse = scores_computed(lambda: block_sparse_attention(q, k, v, layout, 128))
    assert sparse == dense * int(layout.sum()) // layout.numel()


# --- linear_attention ---------------------------------------------------------------


def quadratic_linear_attention(q, k, v, is_causal=False, phi=None, eps=1e-6):
    """The defining O(L S) form: weights φ(q_i)·φ(k_j), normalised by their sum."""
    phi = phi or (lambda x: F.elu(x) + 1)
    weights = phi(q) @ phi(k).transpose(-2, -1)  # (..., L, S)
    if is_causal:
        weights = weights * causal_mask(q.shape[-2], k.shape[-2])
    return weights @ v / (weights.sum(dim=-1, keepdim=True) + eps)


@pytest.mark.parametrize(("L", "S"), LENGTHS, ids=IDS)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_linear_attention_equals_its_quadratic_form(L, S, is_causal):
    q, k, v = make_qkv(B, H, L=L, S=S)
    expected = quadratic_linear_attention(q, k, v, is_causal)
    for chunk_size in (1, 64, 89, 5000):
        out = linear_attention(q, k, v, is_causal, chunk_size=chunk_size)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_linear_attention_float32_and_a_feature_map_that_changes_the_size(is_causal):
    q, k, v = make_qkv(B, H, L=514, S=267, dtype=torch.float32)
    projection = torch.randn(D, 24, generator=torch.Generator().manual_seed(0))

    def phi(x):  # D -> M = 24 positive features
        return torch.exp(x @ projection.to(x.dtype) / 4)

    torch.testing.assert_close(
        linear_attention(q, k, v, is_causal, feature_map=phi, eps=0.0),
        quadratic_linear_attention(q.double(), k.double(), v.double(), is_causal, phi, 0.0).float(),
    )


def test_linear_attention_is_not_softmax_attention():
    q, k, v = make_qkv(L=50, S=50)
    assert not torch.allclose(linear_attention(q, k, v), scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_linear_attention_gradients_equal_the_quadratic_form(is_causal):
    q, k, v = make_qkv(1, 2, L=267, S=514)
    assert_grads_close(
        lambda q, k, v: linear_attention(q, k, v, is_causal, chunk_size=50),
        lambda q, k, v: quadratic_linear_attention(q, k, v, is_causal),
        q,
        k,
        v,
    )
    small = [t.requires_grad_() for t in make_qkv(1, L=9, S=7, D=3, Dv=2)]
    assert torch.autograd.gradcheck(
        lambda q, k, v: linear_attention(q, k, v, is_causal, chunk_size=4), small
    )


def test_linear_attention_with_no_keys_gives_zeros_even_without_eps():
    q, k, v = make_qkv(B, L=5, S=0)
    for is_causal in (False, True):
        out = linear_attention(q, k, v, is_causal, eps=0.0)
        torch.testing.assert_close(out, torch.zeros(B, 5, Dv, dtype=q.dtype))
    assert linear_attention(*make_qkv(B, L=0, S=3), is_causal=True).shape == (B, 0, Dv)


def test_causal_linear_attention_keeps_memory_linear():
    q, k, v = (t.requires_grad_() for t in make_qkv(1, 2, L=1030, S=1030, dtype=torch.float32))
    with LargestTensor() as largest:
        linear_attention(q, k, v, is_causal=True, chunk_size=64).sum().backward()
    assert largest.numel <= q.numel()  # no (L, S) weights, no L prefix-sum matrices


# --- bad input ----------------------------------------------------------------------


def bad_input_cases():
    q, k, v = make_qkv(B, H, L=5, S=7, dtype=torch.float32)
    layout = torch.ones(3, 4, dtype=torch.bool)
    return [
        (flash_attention, (q, k, v), {"block_q": 0}, ValueError, r"block_q must be >= 1; got 0"),
        (flash_attention, (q, k, v), {"block_k": -2}, ValueError, r"block_k must be >= 1; got -2"),
        (flash_attention, (q, k, v), {"block_k": 2.0}, TypeError, r"block_k must be an int"),
        (
            flash_attention,
            (q, k[..., :4], v),
            {},
            ValueError,
            r"same head size D.*query \(2, 3, 5, 16\), key \(2, 3, 7, 4\)",
        ),
        (
            flash_attention,
            (q, k, v[..., :6, :]),
            {},
            ValueError,
            r"key \(2, 3, 7, 16\), value \(2, 3, 6, 8\)",
        ),
        (
            flash_attention,
            (q, k, v),
            {"is_causal": True, "attn_mask": torch.ones(5, 7, dtype=torch.bool)},
            ValueError,
            r"either attn_mask or is_causal",
        ),
        (
            flash_attention,
            (q, k, v),
            {"attn_mask": torch.ones(7, 5, dtype=torch.bool)},
            ValueError,
            r"attn_mask must broadcast to the scores shape .* = \(2, 3, 5, 7\); got \(7, 5\)",
        ),
        (flash_attention, (q, k.double(), v), {}, TypeError, r"query and key must have the same"),
        (flash_attention, (q, k, v), {"scale": "1"}, TypeError, r"scale must be a real number"),
        (sliding_window_attention, (q, k, v, 0), {}, ValueError, r"window must be >= 1; got 0"),
        (sliding_window_attention, (q, k, v, 2.5), {}, TypeError, r"window must be an int"),
        (
            sliding_window_attention,
            (q, k, v, 2),
            {"block_size": 0},
            ValueError,
            r"block_size must be >= 1; got 0",
        ),
        (
            sliding_window_attention,
            (q, k, v, 2),
            {"alignment": "center"},
            ValueError,
            r"alignment must be 'top_left' or 'bottom_right'; got 'center'",
        ),
        (
            block_sparse_attention,
            (q, k, v, layout, 3),
            {},
            ValueError,
            r"layout must have shape \(ceil\(L / block_size\), ceil\(S / block_size\)\) = "
            r"\(2, 3\) for L=5, S=7, block_size=3; got \(3, 4\)",
        ),
        (
            block_sparse_attention,
            (q, k, v, layout[:, :3], 2),
            {},
            ValueError,
            r"= \(3, 4\) for L=5, S=7, block_size=2; got \(3, 3\)",
        ),
        (
            block_sparse_attention,
            (q, k, v, layout.float(), 2),
            {},
            TypeError,
            r"layout must be a bool tensor; got torch.float32",
        ),
        (
            block_sparse_attention,
            (q, k, v, layout[None], 2),
            {},
            ValueError,
            r"layout must be 2-D \(query blocks, key blocks\); got shape \(1, 3, 4\)",
        ),
        (
            block_sparse_attention,
            (q, k, v, layout, 0),
            {},
            ValueError,
            r"block_size must be >= 1; got 0",
        ),
        # A truthy non-bool must not silently switch a mode on.
        (flash_attention, (q, k, v), {"is_causal": "no"}, TypeError, r"is_causal must be True or"),
        (flash_attention, (q, k, v), {"enable_gqa": 1}, TypeError, r"enable_gqa must be True or"),
        (
            flash_attention,
            (q, k, v, True),  # is_causal passed where PyTorch's signature has attn_mask
            {},
            TypeError,
            r"got bool \(the fourth positional argument is attn_mask.*pass is_causal=True by",
        ),
        (sliding_window_attention, (q, k, v, 2), {"causal": 0}, TypeError, r"causal must be True"),
        (
            block_sparse_attention,
            (q, k, v, layout[:2, :3], 3),
            {"is_causal": "yes"},
            TypeError,
            r"is_causal must be True or False; got str 'yes'",
        ),
        (linear_attention, (q, k, v), {"is_causal": None}, TypeError, r"is_causal must be True"),
        (flash_attention, (q.int(), k, v), {}, TypeError, r"query must have a floating-point"),
        (flash_attention, (q[0, 0, 0], k, v), {}, ValueError, r"query must have at least 2"),
        (
            flash_attention,
            (q, k[:, :2], v[:, :2]),
            {"enable_gqa": True},
            ValueError,
            r"H must be a multiple of .* Hkv; got H=3, Hkv=2",
        ),
        (
            flash_attention,
            (q, k, v),
            {"attn_mask": torch.ones(5, 7, dtype=torch.int64)},
            TypeError,
            r"attn_mask must be bool .* got torch.int64",
        ),
        (linear_attention, (q, k, v), {"eps": -1.0}, ValueError, r"eps must be finite and >= 0"),
        (linear_attention, (q, k, v), {"eps": "0"}, TypeError, r"eps must be a real number"),
        (
            linear_attention,
            (q, k, v),
            {"chunk_size": 0},
            ValueError,
            r"chunk_size must be >= 1; got 0",
        ),
        (
            linear_attention,
            (q, k, v),
            {"feature_map": lambda x: x.tolist()},
            TypeError,
            r"feature_map must return a tensor; got list",
        ),
        (
            linear_attention,
            (q, k, v),
            {"feature_map": lambda x: x[..., :1, :]},
            ValueError,
            r"only the last dimension; got query \(2, 3, 5, 16\) -> \(2, 3, 1, 16\)",
        ),
        (
            linear_attention,
            (q, k, v),
            {"feature_map": lambda x: x[..., : x.shape[-2]]},
            ValueError,
            r"same feature size M; got φ\(query\) \(2, 3, 5, 5\), φ\(key\) \(2, 3, 7, 7\)",
        ),
        (
            linear_attention,
            (q, torch.cat([k, k[:1]]), torch.cat([v, v[:1]])),  # batch 3 against 2
            {},
            ValueError,
            r"query and key must have leading dimensions that broadcast",
        ),
    ]


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "error", "message"),
    bad_input_cases(),
    ids=lambda x: getattr(x, "__name__", None) if callable(x) else None,
)
def test_bad_input_raises_a_clear_error(fn, args, kwargs, error, message):
    with pytest.raises(error, match=message):
        fn(*args, **kwargs)

"""Linear attention with decay: its three forms, its state, and MiniMax's Lightning attention.

Sizes are pairwise distinct (B=2, H=3, L=13, D=5, Dv=7) and L is no multiple of the
chunk sizes tried. The reference is a float64 loop written here, one token at a time.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attention.linear_decay import decayed_linear_attention

pytestmark = pytest.mark.usefixtures("one_thread")

B, H, L, D, DV = 2, 3, 13, 5, 7
FORMS = ("parallel", "recurrent", "chunked")
DECAYS = ("none", "per head", "per step", "per step and channel")
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


def make_inputs(
    decay: str, dtype: torch.dtype, *, L: int = L, Hkv: int = H, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor]:
    """q, k, v, a decay of the given kind in [0.3, 1] (some exactly 1), an initial state."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q, k, v = draw(B, H, L, D), draw(B, Hkv, L, D), draw(B, Hkv, L, DV)
    shape = {"none": None, "per head": (H,), "per step": (B, H, L)}.get(decay, (B, H, L, D))
    gamma = None
    if shape is not None:
        gamma = 0.3 + 0.7 * torch.rand(*shape, generator=g, dtype=torch.float64)
        gamma.view(-1)[::3] = 1.0  # no forgetting at some steps
    state = draw(B, H, D, DV)
    return (
        q.to(dtype),
        k.to(dtype),
        v.to(dtype),
        None if gamma is None else gamma.to(dtype),
        state.to(dtype),
    )


def naive(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor | None, state: Tensor | None, scale: float
) -> tuple[Tensor, Tensor]:
    """S_t = diag(γ_t) S_{t-1} + k_t v_tᵀ, o_t = scale · S_tᵀ q_t, in float64, token by token."""
    q, k, v = q.double(), k.double(), v.double()
    Bq, Hq, Lq, Dq = q.shape
    if gamma is None:
        gamma = torch.ones(Bq, Hq, Lq, 1, dtype=torch.float64)
    elif gamma.ndim == 1:
        gamma = gamma.double().view(1, Hq, 1, 1).expand(Bq, Hq, Lq, 1)
    elif gamma.ndim == 3:
        gamma = gamma.double().unsqueeze(-1)
    S = torch.zeros(Bq, Hq, Dq, v.shape[-1], dtype=torch.float64)
    if state is not None:
        S = state.double()
    outs = []
    for t in range(Lq):
        kv = k[:, :, t, :, None] * v[:, :, t, None, :]  # (B, H, D, Dv): k_t v_tᵀ
        S = gamma[:, :, t, :, None].double() * S + kv
        outs.append(scale * torch.einsum("bhd,bhde->bhe", q[:, :, t], S))
    return torch.stack(outs, dim=2), S


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("decay", DECAYS)
def test_every_form_equals_a_token_by_token_loop(
    decay: str, with_state: bool, dtype: torch.dtype
) -> None:
    q, k, v, gamma, state = make_inputs(decay, dtype)
    initial = state if with_state else None
    expected, expected_state = naive(q, k, v, gamma, initial, scale=D**-0.5)
    for form in FORMS:
        for chunk_size in (1, 4, L, 64):  # 4 does not divide 13; 64 > L is one chunk
            if form != "chunked" and chunk_size != 4:
                continue  # chunk_size is the chunked form's alone
            out, new_state = decayed_linear_attention(
                q,
                k,
                v,
                gamma,
                form=form,
                chunk_size=chunk_size,
                initial_state=initial,
                return_state=True,
            )
            assert out.dtype == dtype and out.shape == (B, H, L, DV)
            assert new_state.dtype == dtype and new_state.shape == (B, H, D, DV)
            atol = TOL[dtype] * 10  # |o| reaches ~10: a relative 1e-12 / 1e-5
            torch.testing.assert_close(out.double(), expected, rtol=0, atol=atol)
            torch.testing.assert_close(new_state.double(), expected_state, rtol=0, atol=atol)


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("form", FORMS)
def test_a_prefix_state_continues_the_sequence(form: str, decay: str) -> None:
    q, k, v, gamma, _ = make_inputs(decay, torch.float64)
    full, full_state = decayed_linear_attention(
        q, k, v, gamma, form=form, chunk_size=3, return_state=True
    )
    for split in (0, 1, 6, L):
        first = slice(0, split)
        rest = slice(split, L)

        def part(t: Tensor | None, s: slice) -> Tensor | None:
            return t if t is None or t.ndim == 1 else t[:, :, s]

        head, state = decayed_linear_attention(
            q[:, :, first], k[:, :, first], v[:, :, first], part(gamma, first),
            form=form, chunk_size=3, return_state=True,
        )  # fmt: skip
        # The continuation in another form: the state is the same object for all three.
        other = FORMS[(FORMS.index(form) + 1) % 3]
        tail, end_state = decayed_linear_attention(
            q[:, :, rest], k[:, :, rest], v[:, :, rest], part(gamma, rest),
            form=other, chunk_size=5, initial_state=state, return_state=True,
        )  # fmt: skip
        torch.testing.assert_close(torch.cat([head, tail], dim=2), full, rtol=0, atol=1e-12)
        torch.testing.assert_close(end_state, full_state, rtol=0, atol=1e-12)


def test_the_decay_matrix_is_the_product_of_the_steps_between() -> None:
    """q = k = 1 (D = 1), values the identity: the output is the matrix D_ij itself."""
    gamma = torch.rand(1, 1, 9, dtype=torch.float64) * 0.9 + 0.05  # per step
    ones = torch.ones(1, 1, 9, 1, dtype=torch.float64)
    eye = torch.eye(9, dtype=torch.float64).view(1, 1, 9, 9)
    expected = torch.zeros(9, 9, dtype=torch.float64)
    for i in range(9):
        for j in range(i + 1):
            expected[i, j] = math.prod(gamma[0, 0, j + 1 : i + 1].tolist())
    for form in FORMS:
        out = decayed_linear_attention(ones, ones, eye, gamma, form=form, chunk_size=4, scale=1.0)
        torch.testing.assert_close(out[0, 0], expected, rtol=1e-14, atol=0)


def test_without_decay_it_is_causal_linear_attention_without_normaliser() -> None:
    q, k, v, _, _ = make_inputs("none", torch.float64)
    expected = ((q @ k.transpose(-2, -1)) * 0.25).tril() @ v
    for form in FORMS:
        out = decayed_linear_attention(q, k, v, form=form, chunk_size=4, scale=0.25)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_a_fixed_decay_per_head_is_retnets_mask() -> None:
    """RetNet: (Q Kᵀ ⊙ D) V with D_ij = γ_h^(i-j) for j <= i."""
    q, k, v, gamma, _ = make_inputs("per head", torch.float64)
    assert gamma is not None
    i = torch.arange(L)
    distance = (i[:, None] - i[None, :]).double()  # (L, L)
    mask = torch.where(distance >= 0, gamma.view(H, 1, 1) ** distance, 0.0)  # (H, L, L)
    expected = (q @ k.transpose(-2, -1) * mask) @ v
    for form in FORMS:
        out = decayed_linear_attention(q, k, v, gamma, form=form, chunk_size=4, scale=1.0)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_strong_decay_over_a_long_sequence_stays_finite_and_exact() -> None:
    """The product of 600 decays of 0.01 is 1e-1200: far below float64's range. Ratios of
    cumulative products would give 0/0; the segment sums in log space do not."""
    g = torch.Generator().manual_seed(1)
    n = 600
    q, k = torch.randn(2, 1, 1, n, 2, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, n, 3, generator=g, dtype=torch.float64)
    gamma = torch.full((1, 1, n, 2), 0.01, dtype=torch.float64)
    gamma[..., 1] = 0.999  # one channel that remembers
    expected, _ = naive(q, k, v, gamma, None, scale=1.0)
    for form, dtype in [(f, d) for f in FORMS for d in (torch.float64, torch.float32)]:
        out = decayed_linear_attention(
            q.to(dtype), k.to(dtype), v.to(dtype), gamma.to(dtype), form=form, scale=1.0
        )
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), expected, rtol=0, atol=TOL[dtype] * 100)


def test_grouped_heads_equal_repeated_heads() -> None:
    q, k, v, gamma, state = make_inputs("per step", torch.float64, Hkv=1)
    grouped = decayed_linear_attention(q, k, v, gamma, enable_gqa=True, initial_state=state)
    repeated = decayed_linear_attention(
        q, k.expand(-1, H, -1, -1), v.expand(-1, H, -1, -1), gamma, initial_state=state
    )
    torch.testing.assert_close(grouped, repeated, rtol=0, atol=1e-14)  # memory layouts differ


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(dtype: torch.dtype) -> None:
    q, k, v, gamma, _ = make_inputs("per step", dtype)
    out, state = decayed_linear_attention(q, k, v, gamma, return_state=True)
    assert out.dtype == dtype and state.dtype == torch.float32
    expected, expected_state = decayed_linear_attention(
        q.float(), k.float(), v.float(), gamma.float(), return_state=True
    )
    torch.testing.assert_close(out, expected.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(state, expected_state, rtol=0, atol=0)


def test_an_empty_sequence_returns_the_state_unchanged() -> None:
    q, k, v, gamma, state = make_inputs("per step", torch.float64, L=0)
    for form in FORMS:
        out, new_state = decayed_linear_attention(
            q, k, v, gamma, form=form, initial_state=state, return_state=True
        )
        assert out.shape == (B, H, 0, DV)
        assert torch.equal(new_state, state)


@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_finite_differences(form: str) -> None:
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 1, 2, 5, 3, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 5, 2, generator=g, dtype=torch.float64)
    gamma = 0.2 + 0.7 * torch.rand(1, 2, 5, 3, generator=g, dtype=torch.float64)
    state = torch.randn(1, 2, 3, 2, generator=g, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (q, k, v, gamma, state)]

    def f(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        return decayed_linear_attention(
            q, k, v, gamma, form=form, chunk_size=2, initial_state=state, return_state=True
        )

    assert torch.autograd.gradcheck(f, inputs)


# --- errors ---------------------------------------------------------------------------

Call = Callable[[], object]


def bad_calls() -> list[tuple[str, Call, type[Exception], str]]:
    q, k, v, gamma, state = make_inputs("per step", torch.float32)

    def call(**changes: object) -> Call:
        arguments: dict[str, object] = {"query": q, "key": k, "value": v, "decay": gamma}
        arguments.update(changes)
        return lambda: decayed_linear_attention(**arguments)  # type: ignore[arg-type]

    return [
        ("3-D query", call(query=q[0]), ValueError, r"query.*at least 4 dimensions.*\(3, 13, 5\)"),
        ("key length", call(key=k[:, :, :4]), ValueError, r"length L.*key \(2, 3, 4, 5\)"),
        ("key size", call(key=k[..., :4]), ValueError, r"head size D.*key \(2, 3, 13, 4\)"),
        ("heads", call(key=k[:, :1]), ValueError, r"same number of heads H.*enable_gqa"),
        (
            "gqa heads",
            call(key=k[:, :2], value=v[:, :2], enable_gqa=True),
            ValueError,
            r"divide the query's H = 3",
        ),
        ("value batch", call(value=v[:1]), ValueError, r"batch size B.*value \(1, 3, 13, 7\)"),
        ("dtype", call(key=k.double()), TypeError, r"query and key must have the same dtype"),
        ("not a tensor", call(value=v.tolist()), TypeError, r"value must be a torch.Tensor"),
        (
            "decay shape",
            call(decay=gamma[:, :, :5]),
            ValueError,
            r"decay must have one of the shapes per head \(3,\), per step \(2, 3, 13\), "
            r"per step and channel \(2, 3, 13, 5\); got \(2, 3, 5\)",
        ),
        ("decay zero", call(decay=torch.zeros(H)), ValueError, r"decay must lie in \(0, 1\]"),
        ("decay > 1", call(decay=torch.full((H,), 1.5)), ValueError, r"decay.*e\.g\. 1\.5"),
        ("decay nan", call(decay=torch.full((H,), math.nan)), ValueError, r"decay.*\(0, 1\]"),
        (
            "decay dtype",
            call(decay=gamma.half()),
            TypeError,
            r"decay must have the query's dtype torch.float32; got torch.float16",
        ),
        ("form", call(form="scan"), ValueError, r"form must be one of .*'scan'"),
        ("chunk 0", call(chunk_size=0), ValueError, r"chunk_size must be >= 1; got 0"),
        ("chunk float", call(chunk_size=4.0), TypeError, r"chunk_size must be an int"),
        ("scale", call(scale="1"), TypeError, r"scale must be a real number"),
        ("flag", call(return_state=1), TypeError, r"return_state must be True or False"),
        (
            "state shape",
            call(initial_state=state.transpose(-2, -1)),
            ValueError,
            r"initial_state must have shape \(B, H, D, Dv\) = \(2, 3, 5, 7\); "
            r"got \(2, 3, 7, 5\)",
        ),
        (
            "state dtype",
            call(initial_state=state.double()),
            TypeError,
            r"initial_state must have the query's dtype torch.float32; got torch.float64",
        ),
    ]


@pytest.mark.parametrize(("what", "call", "error", "match"), bad_calls(), ids=lambda x: x)
def test_bad_input_is_refused_with_the_shapes(
    what: str, call: Call, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call()


# --- MiniMax-01's Lightning attention -------------------------------------------------


class LinearCache:
    """The two methods MiniMaxLightningAttention calls on its cache, holding one state."""

    def __init__(self, state: Tensor) -> None:
        self.state = state

    def get_linear_cache(self, layer_idx: int) -> Tensor:
        return self.state

    def set_linear_cache(self, layer_idx: int, state: Tensor) -> None:
        self.state = state


def lightning_layer(dtype: torch.dtype) -> types.SimpleNamespace:
    """A tiny MiniMax-Text-01 linear-attention layer (block size 4) and its pieces."""
    pytest.importorskip("transformers")
    from transformers import MiniMaxConfig
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    torch.manual_seed(0)
    config = MiniMaxConfig(
        hidden_size=16,
        num_attention_heads=3,
        head_dim=4,
        num_key_value_heads=3,
        num_hidden_layers=4,
        block_size=4,
        intermediate_size=8,
        num_local_experts=2,
        vocab_size=10,
    )
    assert config.layer_types[1] == "linear_attention"
    layer = MiniMaxLightningAttention(config, layer_idx=1).to(dtype).eval()
    with torch.no_grad():
        layer.norm.weight.uniform_(0.5, 1.5)  # not the identity
    if dtype == torch.float64:
        # The layer computes its decay buffers in float32 at construction, and .to()
        # only casts them: recomputed in float64 by its own method, or float64 would
        # carry float32's rounding (about 1e-7) in every decay.
        decays = layer.decay_factors(layer.slope_rate)
        layer.query_decay, layer.key_decay, layer.diagonal_decay = decays
    hidden = torch.randn(2, 11, 16, dtype=torch.float64).to(dtype)  # 11: blocks of 4, 4, 3
    return types.SimpleNamespace(layer=layer, hidden=hidden, H=3, Dh=4)


def lightning_inputs(ns: types.SimpleNamespace) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Query, key, value as the layer makes them, and its decay e^{-s_h} per head."""
    layer, hidden = ns.layer, ns.hidden
    qkv = layer.act_fn(layer.qkv_proj(hidden))  # (B, L, 3 H Dh), SiLU
    qkv = qkv.view(*hidden.shape[:2], ns.H, 3 * ns.Dh)  # (B, L, H, 3 Dh)
    q, k, v = (t.transpose(1, 2) for t in qkv.split(ns.Dh, dim=-1))  # (B, H, L, Dh) each
    decay = torch.exp(-layer.slope_rate.view(ns.H))  # (H,): the layer's ratio per step
    return q, k, v, decay


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lightning_attention_equals_minimax_from_its_weights(dtype: torch.dtype) -> None:
    """MiniMaxLightningAttention.forward (its block loop, no cache) against
    decayed_linear_attention with the layer's decay per head and scale 1, compared at
    three places: the core (the norm's input, captured by a hook), the final state it
    returns, and the layer's output (norm, sigmoid gate and out-projection applied here
    with the layer's own modules)."""
    ns = lightning_layer(dtype)
    layer, hidden = ns.layer, ns.hidden
    captured: list[Tensor] = []
    hook = layer.norm.register_forward_hook(lambda m, args, out: captured.append(args[0]))
    with torch.no_grad():
        expected, expected_state = layer(hidden, None, None)
    hook.remove()
    core = captured[0]  # (B, L, H Dh)

    q, k, v, decay = lightning_inputs(ns)
    with torch.no_grad():
        for form in FORMS:
            ours, state = decayed_linear_attention(
                q, k, v, decay, form=form, chunk_size=3, scale=1.0, return_state=True
            )
            ours = ours.transpose(1, 2).reshape(core.shape)  # (B, L, H Dh)
            out = layer.out_proj(torch.sigmoid(layer.output_gate(hidden)) * layer.norm(ours))
            tol = {torch.float64: 1e-12, torch.float32: 1e-5}[dtype]
            torch.testing.assert_close(ours, core, rtol=tol, atol=tol)
            torch.testing.assert_close(state, expected_state, rtol=tol, atol=tol)
            torch.testing.assert_close(out, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lightning_decoding_continues_from_our_state(dtype: torch.dtype) -> None:
    """The layer's decoding branch (a cache holding a state: one step per token) starts
    from the state of our prefill and gives our continuation."""
    ns = lightning_layer(dtype)
    layer, hidden = ns.layer, ns.hidden
    q, k, v, decay = lightning_inputs(ns)
    with torch.no_grad():
        full = decayed_linear_attention(q, k, v, decay, scale=1.0)
        _, state = decayed_linear_attention(
            q[:, :, :7], k[:, :, :7], v[:, :, :7], decay, scale=1.0, return_state=True
        )
        cache = LinearCache(state)
        captured: list[Tensor] = []
        hook = layer.norm.register_forward_hook(lambda m, args, out: captured.append(args[0]))
        layer(hidden[:, 7:], None, None, past_key_values=cache)
        hook.remove()
    tail = full[:, :, 7:].transpose(1, 2).reshape(captured[0].shape)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(captured[0], tail, rtol=tol, atol=tol)
    _, end_state = decayed_linear_attention(q, k, v, decay, scale=1.0, return_state=True)
    torch.testing.assert_close(cache.state, end_state, rtol=tol, atol=tol)

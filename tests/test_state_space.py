"""Mamba-2's SSD: the scan, the attention form, and Transformers' Mamba2Mixer.

Sizes are pairwise distinct (B=2, L=11, H=4 heads in G=2 groups, P=3, N=5); L is no
multiple of the chunk sizes tried. The float64 reference is the scan written here.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attention.linear_decay import decayed_linear_attention
from attention.state_space import ssd

pytestmark = pytest.mark.usefixtures("one_thread")

B, L, H, G, P, N = 2, 11, 4, 2, 3, 5
FORMS = ("parallel", "recurrent", "chunked")


def make_inputs(dtype: torch.dtype, *, L: int = L, seed: int = 0) -> types.SimpleNamespace:
    """x, dt, A, B, C, D and an initial state, with decays e^{ΔA} spread over (0.05, 1]."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    dt = F.softplus(torch.randn(B, L, H, generator=g, dtype=torch.float64)).to(dtype)
    A = -torch.rand(H, generator=g, dtype=torch.float64).to(dtype) * 3
    return types.SimpleNamespace(
        x=draw(B, L, H, P),
        dt=dt,
        A=A,
        B=draw(B, L, G, N),
        C=draw(B, L, G, N),
        D=draw(H),
        state=draw(B, H, P, N),
    )


def scan(
    x: Tensor, dt: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor, D: Tensor, h: Tensor | None
) -> tuple[Tensor, Tensor]:
    """h_t = e^{Δ_t A} h_{t-1} + Δ_t x_t B_tᵀ, y_t = h_t C_t + D x_t, in float64, per head."""
    x, dt, A, Bm, Cm, D = (t.double() for t in (x, dt, A, Bm, Cm, D))
    b, n, heads, p = x.shape
    group = heads // Bm.shape[2]
    h = torch.zeros(b, heads, p, Bm.shape[-1], dtype=torch.float64) if h is None else h.double()
    ys = []
    for t in range(n):
        Bt = Bm[:, t].repeat_interleave(group, dim=1)  # (B, H, N): head h reads group h // group
        Ct = Cm[:, t].repeat_interleave(group, dim=1)
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]  # (B, H, 1, 1)
        h = decay * h + dt[:, t, :, None, None] * x[:, t, :, :, None] * Bt[:, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", h, Ct) + D[:, None] * x[:, t])
    return torch.stack(ys, dim=1), h


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_state", [False, True])
def test_every_form_equals_the_scan(with_state: bool, dtype: torch.dtype) -> None:
    a = make_inputs(dtype)
    initial = a.state if with_state else None
    expected, expected_state = scan(a.x, a.dt, a.A, a.B, a.C, a.D, initial)
    atol = {torch.float64: 1e-12, torch.float32: 1e-5}[dtype] * 10  # |y| reaches ~10
    for form, chunk_size in [("parallel", 64), ("recurrent", 64), ("chunked", 1), ("chunked", 4)]:
        y, state = ssd(
            a.x, a.dt, a.A, a.B, a.C, a.D,
            form=form, chunk_size=chunk_size, initial_state=initial, return_state=True,
        )  # fmt: skip
        assert y.dtype == dtype and y.shape == (B, L, H, P) and state.shape == (B, H, P, N)
        torch.testing.assert_close(y.double(), expected, rtol=0, atol=atol)
        torch.testing.assert_close(state.double(), expected_state, rtol=0, atol=atol)


def test_a_prefix_state_continues_the_sequence() -> None:
    a = make_inputs(torch.float64)
    full, full_state = ssd(a.x, a.dt, a.A, a.B, a.C, a.D, return_state=True)
    for split in (0, 5, L):
        first, rest = slice(0, split), slice(split, L)
        head, state = ssd(
            a.x[:, first], a.dt[:, first], a.A, a.B[:, first], a.C[:, first], a.D,
            form="parallel", return_state=True,
        )  # fmt: skip
        tail, end = ssd(
            a.x[:, rest], a.dt[:, rest], a.A, a.B[:, rest], a.C[:, rest], a.D,
            form="recurrent", initial_state=state, return_state=True,
        )  # fmt: skip
        torch.testing.assert_close(torch.cat([head, tail], dim=1), full, rtol=0, atol=1e-12)
        torch.testing.assert_close(end, full_state, rtol=0, atol=1e-12)


def test_ssd_is_decayed_linear_attention_with_mambas_names() -> None:
    """The mapping itself: query C, key B, value Δx, decay e^{ΔA}, scale 1, plus D x."""
    a = make_inputs(torch.float64)
    group = H // G
    attention = decayed_linear_attention(
        a.C.repeat_interleave(group, dim=2).transpose(1, 2),  # (B, H, L, N)
        a.B.repeat_interleave(group, dim=2).transpose(1, 2),
        (a.x * a.dt[..., None]).transpose(1, 2),  # (B, H, L, P)
        torch.exp(a.dt * a.A).transpose(1, 2),  # (B, H, L)
        scale=1.0,
    ).transpose(1, 2)  # (B, L, H, P)
    expected = attention + a.D[:, None] * a.x
    ours = ssd(a.x, a.dt, a.A, a.B, a.C, a.D)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-13)  # memory layouts differ


def test_a_step_that_forgets_everything_is_allowed() -> None:
    """e^{ΔA} below float32's range (ΔA = -200): the state is wiped, not refused."""
    a = make_inputs(torch.float32)
    a.dt[:, 5] = 200.0
    a.A[:] = -1.0
    expected, _ = scan(a.x, a.dt, a.A, a.B, a.C, a.D, a.state)
    for form in FORMS:
        y = ssd(a.x, a.dt, a.A, a.B, a.C, a.D, form=form, chunk_size=4, initial_state=a.state)
        assert torch.isfinite(y).all()
        scale = expected.abs().amax(dim=(0, 2, 3), keepdim=True)  # Δ = 200 makes y large
        torch.testing.assert_close(y.double() / scale, expected / scale, rtol=0, atol=1e-5)


# --- against Transformers' Mamba-2 ----------------------------------------------------


def mamba2() -> types.ModuleType:
    pytest.importorskip("transformers")
    from transformers.models.mamba2 import modeling_mamba2

    return modeling_mamba2


def test_the_mask_is_mambas_segment_sum_exactly() -> None:
    """float64: the decay matrix (the output for q = k = 1 and identity values) is
    exp(segment_sum(Δ A)), the 1-semiseparable mask of Transformers' chunk scan."""
    modeling = mamba2()
    g = torch.Generator().manual_seed(3)
    log_decay = -torch.rand(1, 1, 9, generator=g, dtype=torch.float64) * 2  # Δ_t A
    ones = torch.ones(1, 1, 9, 1, dtype=torch.float64)
    eye = torch.eye(9, dtype=torch.float64).view(1, 1, 9, 9)
    expected = torch.exp(modeling.segment_sum(log_decay))[0, 0]  # (L, L)
    for form in FORMS:
        mask = decayed_linear_attention(
            ones, ones, eye, log_decay.exp(), form=form, chunk_size=4, scale=1.0
        )[0, 0]
        torch.testing.assert_close(mask, expected, rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ssd_equals_mambas_chunk_scan(dtype: torch.dtype) -> None:
    """``mamba2_chunk_scan`` (the mixer's torch path: chunks of 4, padded to 12) with its
    dt_bias, softplus and clamp, an initial state and the final state, against ssd given
    the step sizes after those. The chunk scan computes in float32 whatever its inputs'
    dtype (it casts x, B, C, Δ and A), so float64 agrees to float32's rounding only."""
    modeling = mamba2()
    a = make_inputs(dtype)
    g = torch.Generator().manual_seed(4)
    dt_raw = torch.randn(B, L, H, generator=g, dtype=torch.float64).to(dtype)
    dt_bias = torch.randn(H, generator=g, dtype=torch.float64).to(dtype)
    limit = (0.2, 2.0)  # a clamp that bites at both ends
    expected, expected_state = modeling.mamba2_chunk_scan(
        a.x, dt_raw, a.A, a.B, a.C,
        chunk_size=4, D=a.D, dt_bias=dt_bias, initial_states=a.state, dt_softplus=True,
        dt_limit=limit, return_final_states=True,
    )  # fmt: skip
    dt = F.softplus(dt_raw + dt_bias).clamp(*limit)
    assert ((dt == limit[0]).any() and (dt == limit[1]).any()).item()
    tol = 1e-5
    for form in FORMS:
        y, state = ssd(
            a.x, dt, a.A, a.B, a.C, a.D,
            form=form, chunk_size=3, initial_state=a.state, return_state=True,
        )  # fmt: skip
        torch.testing.assert_close(y, expected.to(dtype), rtol=tol, atol=tol)
        torch.testing.assert_close(state, expected_state.to(dtype), rtol=tol, atol=tol)


def test_ssd_recurrent_step_equals_mambas_state_update() -> None:
    """Decoding: ``mamba2_selective_state_update`` (one token, the state updated in
    place, Transformers' layout (B, H, P, N)) continues from ssd's prefix state."""
    modeling = mamba2()
    a = make_inputs(torch.float32)
    _, state = ssd(a.x[:, :-1], a.dt[:, :-1], a.A, a.B[:, :-1], a.C[:, :-1], a.D, return_state=True)
    full, full_state = ssd(a.x, a.dt, a.A, a.B, a.C, a.D, return_state=True)
    cache = state.clone()
    out = modeling.mamba2_selective_state_update(
        cache,
        a.x[:, -1],  # (B, H, P)
        a.dt[:, -1, :, None].expand(-1, -1, P),  # (B, H, P): the mixer's expanded layout
        a.A[:, None, None].expand(-1, P, N),
        a.B[:, -1],  # (B, G, N)
        a.C[:, -1],
        a.D[:, None].expand(-1, P),
    )
    torch.testing.assert_close(out, full[:, -1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache, full_state, rtol=1e-5, atol=1e-5)


def mixer_and_inputs(dtype: torch.dtype) -> tuple[torch.nn.Module, Tensor]:
    """A tiny Mamba2Mixer (4 heads of 3 in 2 groups, state 5, chunks of 4), with random
    A, Δ bias, D and norm weight so that none of them is the identity."""
    modeling = mamba2()
    from transformers import Mamba2Config

    torch.manual_seed(0)
    config = Mamba2Config(
        hidden_size=6, num_heads=H, head_dim=P, expand=2, n_groups=G, state_size=N,
        chunk_size=4, conv_kernel=3, num_hidden_layers=1, vocab_size=10,
    )  # fmt: skip
    mixer = modeling.Mamba2Mixer(config, layer_idx=0).to(dtype).eval()
    with torch.no_grad():
        mixer.A_log.uniform_(-1.0, 1.5)
        mixer.dt_bias.uniform_(-1.0, 1.0)
        mixer.D.uniform_(-1.0, 1.0)
        mixer.norm.weight.uniform_(0.5, 1.5)
    hidden = torch.randn(B, L, 6, dtype=torch.float64).to(dtype)
    return mixer, hidden


def mixer_with_ssd(mixer: torch.nn.Module, hidden: Tensor, core: Callable[..., Tensor]) -> Tensor:
    """Mamba2Mixer's forward written out from its weights, with ``core`` for the SSM."""
    inner, K = H * P, mixer.conv_kernel_size  # the mixer's intermediate_size
    gate, xBC, dt = mixer.in_proj(hidden).split([inner, inner + 2 * G * N, H], dim=-1)
    conv = mixer.conv1d
    xBC = F.conv1d(xBC.transpose(1, 2), conv.weight, conv.bias, padding=K - 1, groups=xBC.shape[-1])
    xBC = F.silu(xBC[..., :L]).transpose(1, 2)  # (B, L, inner + 2 G N): causal, then SiLU
    x, Bm, Cm = xBC.split([inner, G * N, G * N], dim=-1)
    dt = F.softplus(dt + mixer.dt_bias).clamp(*mixer.time_step_limit)  # (B, L, H)
    A = -torch.exp(mixer.A_log.float())  # float32 in every dtype, as the mixer makes it
    y = core(x.view(B, L, H, P), dt, A, Bm.view(B, L, G, N), Cm.view(B, L, G, N), mixer.D)
    return mixer.out_proj(mixer.norm(y.reshape(B, L, inner), gate))  # gated RMSNorm, projection


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ssd_reproduces_mamba2_mixer_from_its_weights(dtype: torch.dtype) -> None:
    """Mamba2Mixer.forward (no cache: the chunk-scan path) against the mixer written out
    in ``mixer_with_ssd`` with ssd as its core. The mixer computes its SSM, and its gated
    norm, in float32 even in a float64 model, so float64 agrees to float32's rounding:
    the float64 exactness of the core is the scan test's and segment_sum's above."""
    mixer, hidden = mixer_and_inputs(dtype)
    with torch.no_grad():
        expected = mixer(hidden)
        for form in FORMS:
            ours = mixer_with_ssd(
                mixer, hidden, lambda *args, form=form: ssd(*args, form=form, chunk_size=3)
            )
            torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


# --- errors ---------------------------------------------------------------------------

Call = Callable[[], object]


def bad_calls() -> list[tuple[str, Call, type[Exception], str]]:
    a = make_inputs(torch.float32)

    def call(**changes: object) -> Call:
        arguments: dict[str, object] = {"x": a.x, "dt": a.dt, "A": a.A, "B": a.B, "C": a.C}
        arguments.update(changes)
        return lambda: ssd(**arguments)  # type: ignore[arg-type]

    shapes: list[tuple[str, dict[str, object], str]] = [
        (
            "dt",
            {"dt": a.dt[..., :1]},
            r"dt must have shape \(B, L, H\) = \(2, 11, 4\); got \(2, 11, 1\)",
        ),
        ("A", {"A": a.A[:2]}, r"A must have shape \(H,\) = \(4,\); got \(2,\)"),
        (
            "B",
            {"B": a.B[:, :3]},
            r"B must have shape \(B, L, G, N\) = \(2, 11, G, N\); got \(2, 3, 2, 5\)",
        ),
        (
            "C",
            {"C": a.C[..., :4]},
            r"C must have shape \(B, L, G, N\) like B = \(2, 11, 2, 5\); got \(2, 11, 2, 4\)",
        ),
        (
            "groups",
            {"B": torch.ones(B, L, 3, N), "C": torch.ones(B, L, 3, N)},
            r"groups G must divide the number of heads H = 4; got B \(2, 11, 3, 5\)",
        ),
        ("D", {"D": a.D[:3]}, r"D must have shape \(H,\) = \(4,\); got \(3,\)"),
        (
            "state",
            {"initial_state": a.state.transpose(-2, -1)},
            r"initial_state must have shape \(B, H, P, N\) = \(2, 4, 3, 5\); got \(2, 4, 5, 3\)",
        ),
        ("3-D x", {"x": a.x[0]}, r"x must have at least 4 dimensions"),
        ("negative dt", {"dt": -a.dt}, r"dt must hold finite step sizes >= 0"),
        ("positive A", {"A": -a.A}, r"A must hold finite values <= 0"),
        ("form", {"form": "scan"}, r"form must be one of"),
        ("chunk", {"chunk_size": 0}, r"chunk_size must be >= 1"),
    ]
    types_ = [
        ("dtype", {"B": a.B.double()}, r"x and B must have the same dtype"),
        ("A dtype", {"A": a.A.half()}, r"A must have x's dtype torch.float32; got torch.float16"),
    ]
    return [(what, call(**c), ValueError, m) for what, c, m in shapes] + [
        (what, call(**c), TypeError, m) for what, c, m in types_
    ]


@pytest.mark.parametrize(("what", "call", "error", "match"), bad_calls(), ids=lambda x: x)
def test_bad_input_is_refused_with_the_shapes(
    what: str, call: Call, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call()

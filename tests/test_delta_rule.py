"""The delta rule, against the recurrence written out, its laws, and Transformers' models.

Transformers' code compared: Gated DeltaNet as Qwen3-Next and Qwen3.5 run it
(``torch_chunk_gated_delta_rule``, ``torch_recurrent_gated_delta_rule`` and the layers
``Qwen3NextGatedDeltaNet``, ``Qwen3_5GatedDeltaNet``) and Kimi Delta Attention as Kimi
Linear runs it (``chunk_kimi_delta_attention``, ``recurrent_kimi_delta_attention`` and
``KimiLinearDeltaAttention``). Their functions compute in float32 whatever the input's
dtype; `float64_inside` runs their code unchanged in float64, so that float64 compares
to the last bits.

Sizes are tiny and pairwise distinct (B=2, H=3, L=37, D=6, Dv=5); nothing is
downloaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from attention.delta_rule import delta_rule_attention
from attention.integrations import huggingface_layers

try:  # the optional `hf` extra: only the tests against the models need it
    import transformers
    from transformers.models.kimi_linear import modeling_kimi_linear as kimi
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen3_5
    from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next
except ImportError:
    transformers = None

needs_transformers = pytest.mark.skipif(transformers is None, reason="needs transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

B, H, L, D, DV = 2, 3, 37, 6, 5
DECAYS = ["none", "per head", "per channel"]
F64 = torch.float64


def make_inputs(
    decay: str, *, dtype: torch.dtype = F64, L: int = L, seed: int = 0
) -> dict[str, torch.Tensor | None]:
    """Unit queries and keys (the models' L2 norm), betas in (0, 1), gates in [0.5, 1)."""
    g = torch.Generator().manual_seed(seed)
    q, k = F.normalize(torch.randn(2, B, H, L, D, generator=g, dtype=F64), dim=-1)
    gate_shape = {"none": None, "per head": (B, H, L), "per channel": (B, H, L, D)}[decay]
    inputs = {
        "query": q,
        "key": k,
        "value": torch.randn(B, H, L, DV, generator=g, dtype=F64),
        "beta": torch.rand(B, H, L, generator=g, dtype=F64),
        "decay": None
        if gate_shape is None
        else 0.5 + 0.5 * torch.rand(*gate_shape, generator=g, dtype=F64),
    }
    return {name: None if t is None else t.to(dtype) for name, t in inputs.items()}


def recurrence_written_out(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
    scale: float,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """S_t = (I - β_t k_t k_tᵀ) Γ_t S_{t-1} + β_t k_t v_tᵀ, o_t = scale S_tᵀ q_t, as
    matrices, one batch element, head and step at a time."""
    out = torch.zeros(*value.shape, dtype=F64)
    state = state.clone()
    eye = torch.eye(query.shape[-1], dtype=F64)
    for b in range(query.shape[0]):
        for h in range(query.shape[1]):
            S = state[b, h]
            for t in range(query.shape[2]):
                if decay is None:
                    gamma = eye
                elif decay.ndim == 3:
                    gamma = decay[b, h, t] * eye
                else:
                    gamma = torch.diag(decay[b, h, t])
                k = key[b, h, t].unsqueeze(-1)  # (D, 1)
                v = value[b, h, t].unsqueeze(0)  # (1, Dv)
                S = (eye - beta[b, h, t] * k @ k.T) @ gamma @ S + beta[b, h, t] * k @ v
                out[b, h, t] = scale * S.T @ query[b, h, t]
            state[b, h] = S
    return out, state


# --- the three forms, the recurrence, the state -------------------------------------


@pytest.mark.parametrize("decay", DECAYS)
def test_every_form_equals_the_recurrence_written_out(decay: str) -> None:
    inputs = make_inputs(decay)
    state = torch.randn(B, H, D, DV, generator=torch.Generator().manual_seed(1), dtype=F64)
    expected, expected_state = recurrence_written_out(**inputs, scale=0.7, state=state)
    runs = [("recurrent", 1), ("parallel", 3)] + [("chunked", n) for n in (1, 5, 16, L, 64)]
    for form, size in runs:
        out, final = delta_rule_attention(
            **inputs,
            form=form,
            chunk_size=size,
            scale=0.7,
            initial_state=state,
            return_state=True,
        )
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0, msg=f"{form} {size}")
        torch.testing.assert_close(final, expected_state, atol=1e-12, rtol=0)


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
@pytest.mark.parametrize("decay", DECAYS)
def test_a_split_sequence_continued_from_its_state_equals_the_whole(form: str, decay: str) -> None:
    inputs = make_inputs(decay)
    whole, whole_state = delta_rule_attention(**inputs, form=form, chunk_size=8, return_state=True)
    cut = 13  # not a multiple of the chunk size
    first = {n: None if t is None else t[:, :, :cut] for n, t in inputs.items()}
    rest = {n: None if t is None else t[:, :, cut:] for n, t in inputs.items()}
    out_1, state = delta_rule_attention(**first, form=form, chunk_size=8, return_state=True)
    out_2, final = delta_rule_attention(
        **rest, form=form, chunk_size=8, initial_state=state, return_state=True
    )
    torch.testing.assert_close(torch.cat([out_1, out_2], dim=2), whole, atol=1e-12, rtol=0)
    torch.testing.assert_close(final, whole_state, atol=1e-12, rtol=0)


def test_an_empty_sequence_gives_an_empty_output_and_the_state_back() -> None:
    inputs = make_inputs("per head", L=0)
    state = torch.randn(B, H, D, DV, dtype=F64)
    for form in ("chunked", "recurrent"):
        out, final = delta_rule_attention(
            **inputs, form=form, initial_state=state, return_state=True
        )
        assert out.shape == (B, H, 0, DV)
        assert torch.equal(final, state)


def test_half_precision_runs_in_float32_and_keeps_a_float32_state() -> None:
    inputs = make_inputs("per channel")
    expected, expected_state = delta_rule_attention(**inputs, return_state=True)
    half = {n: t.to(torch.bfloat16) for n, t in inputs.items() if t is not None}
    half["decay"] = inputs["decay"].float()  # a float32 gate: bf16 rounds 0.999 to 1
    for form in ("chunked", "recurrent"):
        out, state = delta_rule_attention(**half, form=form, return_state=True)
        assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
        torch.testing.assert_close(out.double(), expected, atol=5e-2, rtol=0)
        torch.testing.assert_close(state.double(), expected_state, atol=5e-2, rtol=0)


# --- the delta rule as online regression --------------------------------------------


@pytest.mark.parametrize("decay", DECAYS)
def test_one_write_with_beta_one_stores_the_value_at_a_unit_key(decay: str) -> None:
    """S_1ᵀ k = v whatever S_0 held at k, and with a gate too: the gate acts before the
    read (a gate after the write would give γ v). Directions orthogonal to k keep what
    the gated state gives them; β = 1/2 stores the midpoint of old and new."""
    g = torch.Generator().manual_seed(2)
    k = F.normalize(torch.randn(1, 1, 1, D, generator=g, dtype=F64), dim=-1)
    v = torch.randn(1, 1, 1, DV, generator=g, dtype=F64)
    S0 = torch.randn(1, 1, D, DV, generator=g, dtype=F64)
    gamma = {
        "none": None,
        "per head": torch.full((1, 1, 1), 0.3, dtype=F64),
        "per channel": 0.1 + 0.9 * torch.rand(1, 1, 1, D, generator=g, dtype=F64),
    }[decay]
    gated = S0 if gamma is None else S0 * (gamma.view(1, 1, -1, 1))  # Γ S_0
    other = torch.randn(D, generator=g, dtype=F64)
    other = (other - (other @ k.flatten()) * k.flatten()).view(1, 1, 1, D)  # ⊥ k

    def write(beta: float, form: str) -> torch.Tensor:
        """The state after one step, S_1."""
        b = torch.full((1, 1, 1), beta, dtype=F64)
        kwargs = {"form": form, "initial_state": S0, "return_state": True}
        return delta_rule_attention(k, k, v, b, gamma, **kwargs)[1]

    for form in ("chunked", "recurrent"):
        S1 = write(1.0, form)
        torch.testing.assert_close(k @ S1, v, atol=1e-14, rtol=0)
        torch.testing.assert_close(other @ S1, other @ gated, atol=1e-14, rtol=0)
        half = write(0.5, form)
        torch.testing.assert_close(k @ half, (v + k @ gated) / 2, atol=1e-14, rtol=0)


@pytest.mark.parametrize(("beta_k2", "growth"), [(2.5, 1.5), (1.5, 0.5), (2.0, 1.0)])
def test_a_key_longer_than_sqrt_2_over_beta_makes_the_update_expansive(
    beta_k2: float, growth: float
) -> None:
    """Written again and again with v = 0, the state along k is scaled by
    |1 - β‖k‖²| per step: it grows once ‖k‖ > sqrt(2 / β). The other directions stay."""
    g = torch.Generator().manual_seed(3)
    steps, beta = 12, 0.8
    unit = F.normalize(torch.randn(D, generator=g, dtype=F64), dim=0)
    key = (unit * math.sqrt(beta_k2 / beta)).expand(1, 1, steps, D)
    S0 = torch.randn(1, 1, D, DV, generator=g, dtype=F64)
    _, S = delta_rule_attention(
        key,
        key,
        torch.zeros(1, 1, steps, DV, dtype=F64),
        torch.full((1, 1, steps), beta, dtype=F64),
        chunk_size=5,
        initial_state=S0,
        return_state=True,
    )
    along_before, along_after = unit @ S0[0, 0], unit @ S[0, 0]
    torch.testing.assert_close(along_after.norm(), along_before.norm() * growth**steps)
    across = S0[0, 0] - unit[:, None] * along_before  # the part of S_0 orthogonal to k
    torch.testing.assert_close(S[0, 0] - unit[:, None] * along_after, across)


# --- gradients ------------------------------------------------------------------------


@pytest.mark.parametrize("decay", ["per head", "per channel"])
def test_the_forms_have_the_same_gradients_and_a_strong_gate_gives_no_nan(decay: str) -> None:
    """The chunked form's exponents are masked before exp: unmasked, e^{G_r - G_s} for
    s > r overflows under a strong gate, and inf * 0 would put NaN in the gradients."""
    for strength in (1.0, 1e-30):  # a gate of 1e-30 per step: G falls by 69 per step
        inputs = make_inputs(decay)
        inputs["decay"] = inputs["decay"] * strength
        grads = {}
        for form in ("chunked", "recurrent"):
            leaves = {n: t.clone().requires_grad_() for n, t in inputs.items() if t is not None}
            out = delta_rule_attention(**leaves, form=form, chunk_size=16)
            (out * torch.linspace(-1, 1, DV, dtype=F64)).sum().backward()
            grads[form] = {n: t.grad for n, t in leaves.items()}
            assert all(torch.isfinite(g).all() for g in grads[form].values())
        for name in ("query", "key", "value", "beta"):
            torch.testing.assert_close(grads["chunked"][name], grads["recurrent"][name])


# --- errors ---------------------------------------------------------------------------


def _bad(**changes: object) -> dict[str, object]:
    inputs: dict[str, object] = dict(make_inputs("per head", dtype=torch.float32))
    inputs.update(changes)
    return inputs


BAD_INPUTS = [
    (_bad(query=torch.zeros(B, H, L, D, 1)), ValueError, r"query must be \(B, H, L, D\)"),
    (_bad(key=torch.zeros(B, H, L + 1, D)), ValueError, r"key must have the query's shape"),
    (_bad(value=torch.zeros(B, H, L - 1, DV)), ValueError, r"value must be \(B, H, L, Dv\)"),
    (_bad(value=torch.zeros(B, H, L, DV, dtype=F64)), TypeError, "same dtype"),
    (_bad(key=[[1.0]]), TypeError, "key must be a torch.Tensor"),
    (_bad(beta=torch.zeros(B, H, L, 1)), ValueError, r"beta must have shape \(B, H, L\)"),
    (_bad(beta=torch.zeros(B, H, L, dtype=F64)), TypeError, "beta must have the query's dtype"),
    (_bad(beta=torch.zeros(B, H, L, device="meta")), ValueError, "beta must be on the query's"),
    (_bad(beta=torch.full((B, H, L), math.nan)), ValueError, "beta must be finite"),
    (_bad(decay=torch.ones(B, H, L, DV)), ValueError, "decay must have one of the shapes"),
    (_bad(decay=torch.zeros(B, H, L)), ValueError, r"decay must lie in \(0, 1\]"),
    (_bad(decay=torch.full((B, H, L), 1.5)), ValueError, r"decay must lie in \(0, 1\]"),
    (_bad(decay=torch.full((B, H, L), math.nan)), ValueError, r"decay must lie in \(0, 1\]"),
    (_bad(decay=torch.ones(B, H, L, dtype=torch.int64)), TypeError, "floating-point"),
    (_bad(initial_state=torch.zeros(B, H, DV, D)), ValueError, r"initial_state must have shape"),
    (_bad(initial_state=torch.zeros(B, H, D, DV, dtype=F64)), TypeError, "initial_state"),
    (_bad(form="quadratic"), ValueError, "form must be one of"),
    (_bad(chunk_size=0), ValueError, "chunk_size must be >= 1"),
    (_bad(chunk_size=2.5), TypeError, "chunk_size must be an int"),
    (_bad(scale=math.inf), ValueError, "scale must be finite"),
    (_bad(return_state=1), TypeError, "return_state must be True or False"),
]


@pytest.mark.parametrize(("inputs", "error", "match"), BAD_INPUTS)
def test_bad_inputs_are_refused(inputs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        delta_rule_attention(**inputs)


def test_bfloat16_inputs_take_a_float32_gate_but_not_a_float64_one() -> None:
    inputs = {n: t.to(torch.bfloat16) for n, t in make_inputs("none").items() if t is not None}
    gate = torch.full((B, H, L), 0.9)
    assert delta_rule_attention(**inputs, decay=gate).dtype == torch.bfloat16
    with pytest.raises(TypeError, match=r"bfloat16 or torch.float32; got torch.float64"):
        delta_rule_attention(**inputs, decay=gate.double())


# --- Transformers: Qwen3-Next, Qwen3.5 (Gated DeltaNet), Kimi Linear (KDA) -----------

HK, HV = 2, 4  # Qwen's key heads and value heads: each key head serves HV / HK value heads
TOLERANCE = {torch.float32: 2e-6, F64: 1e-13}  # measured at most 9.1e-7 and 1.2e-15
Reference = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


class _Float64Torch:
    """``torch`` as a Transformers module sees it, with ``float32`` standing for float64."""

    def __getattr__(self, name: str) -> object:
        return F64 if name == "float32" else getattr(torch, name)


@pytest.fixture
def float64_inside(monkeypatch: pytest.MonkeyPatch) -> Callable[[torch.dtype], None]:
    """Call with the test's dtype: for float64, run the three models' code in float64.

    Their functions cast every input to float32 (and Kimi's chunked one, and the
    layers' gates, call ``.float()``), which would round float64 inputs at float32
    precision. Inside the test, their modules see `_Float64Torch` and ``.float()`` is
    ``.double()``; the code itself runs unchanged.
    """

    def use(dtype: torch.dtype) -> None:
        if dtype == F64:
            for module in (qwen3_next, qwen3_5, kimi):
                monkeypatch.setattr(module, "torch", _Float64Torch())
            monkeypatch.setattr(torch.Tensor, "float", torch.Tensor.double)

    return use


def model_inputs(
    per_channel: bool, dtype: torch.dtype, *, Hk: int, Hv: int, Dv: int
) -> dict[str, torch.Tensor]:
    """Transformers' layout ``(B, L, heads, ·)``; the log-gate g <= 0, the state S_0."""
    g = torch.Generator().manual_seed(4)
    gate_shape = (B, L, Hv, D) if per_channel else (B, L, Hv)
    inputs = {
        "query": torch.randn(B, L, Hk, D, generator=g, dtype=F64),  # not normalised:
        "key": torch.randn(B, L, Hk, D, generator=g, dtype=F64),  # the kernels do it
        "value": torch.randn(B, L, Hv, Dv, generator=g, dtype=F64),
        "g": -F.softplus(torch.randn(*gate_shape, generator=g, dtype=F64)),
        "beta": torch.rand(B, L, Hv, generator=g, dtype=F64),
        "initial_state": torch.randn(B, Hv, D, Dv, generator=g, dtype=F64),
    }
    return {name: t.to(dtype) for name, t in inputs.items()}


def ours_on(
    inputs: dict[str, torch.Tensor], form: str, chunk_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """`delta_rule_attention` on Transformers' inputs: normalised, heads repeated,
    ``(B, H, L, ·)``, the gate exp(g)."""
    group = inputs["value"].shape[2] // inputs["key"].shape[2]
    q, k = (
        huggingface_layers._unit(inputs[n]).repeat_interleave(group, dim=2).transpose(1, 2)
        for n in ("query", "key")
    )
    out, state = delta_rule_attention(
        q,
        k,
        inputs["value"].transpose(1, 2),
        inputs["beta"].transpose(1, 2),
        inputs["g"].exp().transpose(1, 2),
        form=form,
        chunk_size=chunk_size,
        initial_state=inputs["initial_state"],
        return_state=True,
    )
    return out.transpose(1, 2), state  # Transformers' (B, L, H, Dv)


def assert_matches(
    reference: Reference, inputs: dict[str, torch.Tensor], dtype: torch.dtype, **kwargs: object
) -> None:
    expected, expected_state = reference(
        **inputs, output_final_state=True, use_qk_l2norm_in_kernel=True, **kwargs
    )
    assert expected.dtype == dtype
    for form, size in (("chunked", 5), ("parallel", 5), ("recurrent", 1)):
        out, state = ours_on(inputs, form, size)
        tol = TOLERANCE[dtype]
        torch.testing.assert_close(out, expected, atol=tol, rtol=0, msg=f"{form} {size}")
        torch.testing.assert_close(state, expected_state, atol=tol, rtol=0)


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["qwen3_next", "qwen3_5"])
def test_gated_delta_rule_equals_qwens_chunked_and_recurrent_functions(
    name: str, dtype: torch.dtype, float64_inside: Callable[[torch.dtype], None]
) -> None:
    float64_inside(dtype)
    module = qwen3_next if name == "qwen3_next" else qwen3_5
    inputs = model_inputs(False, dtype, Hk=HK, Hv=HV, Dv=DV)
    assert_matches(module.torch_chunk_gated_delta_rule, inputs, dtype, chunk_size=8)
    assert_matches(module.torch_recurrent_gated_delta_rule, inputs, dtype)


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["float32", "float64"])
def test_per_channel_gate_equals_kimi_delta_attention_chunked_and_recurrent(
    dtype: torch.dtype, float64_inside: Callable[[torch.dtype], None]
) -> None:
    float64_inside(dtype)
    inputs = model_inputs(True, dtype, Hk=H, Hv=H, Dv=D)  # Kimi: D = Dv, no head groups
    assert_matches(kimi.chunk_kimi_delta_attention, inputs, dtype, chunk_size=8)
    assert_matches(kimi.recurrent_kimi_delta_attention, inputs, dtype)


# The layers, from their own weights: the package's own layer code, which
# attention.integrations.huggingface.patch puts in place of Transformers' (projections,
# short convolution, gates and the gated RMSNorm; the recurrence is delta_rule_attention).
# tests/test_huggingface_layers.py runs it in whole models, with the cache.

E, CONV = 24, 4  # model width, convolution kernel
LAYER_L = 70  # more than Transformers' 64-position chunks


def tiny_layer(name: str, dtype: torch.dtype) -> torch.nn.Module:
    """A freshly initialised layer of the model ``name``, with every weight set."""
    torch.manual_seed(0)
    common = {
        "hidden_size": E,
        "rms_norm_eps": 1e-6,
        "num_hidden_layers": 1,
        "layer_types": ["linear_attention"],
    }
    layer: torch.nn.Module
    if name == "kimi":
        config = transformers.KimiLinearConfig(
            linear_head_dim=D, linear_num_heads=H, linear_conv_kernel_dim=CONV, **common
        )
        layer = kimi.KimiLinearDeltaAttention(config, layer_idx=0)
        torch.nn.init.normal_(layer.forget_gate.dt_bias)  # left uninitialised (empty)
        torch.nn.init.uniform_(layer.forget_gate.A_log, -3.0, 0.0)
        gain = layer.o_norm.weight
    else:
        sizes = {
            "linear_num_key_heads": HK,
            "linear_num_value_heads": HV,
            "linear_key_head_dim": D,
            "linear_value_head_dim": DV,
            "linear_conv_kernel_dim": CONV,
        }
        if name == "qwen3_next":
            config = transformers.Qwen3NextConfig(**sizes, **common)
            layer = qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0)
        else:
            config = transformers.Qwen3_5TextConfig(**sizes, **common)
            layer = qwen3_5.Qwen3_5GatedDeltaNet(config, layer_idx=0)
        torch.nn.init.uniform_(layer.A_log, -3.0, 0.0)  # gates in (0.5, 1): a long memory
        torch.nn.init.normal_(layer.dt_bias)
        gain = layer.norm.weight
    torch.nn.init.uniform_(gain, 0.5, 1.5)  # not ones: the gain must be applied
    return layer.eval().to(dtype)


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["qwen3_next", "qwen3_5", "kimi"])
def test_delta_rule_reproduces_the_models_layers(
    name: str, dtype: torch.dtype, float64_inside: Callable[[torch.dtype], None]
) -> None:
    float64_inside(dtype)
    layer = tiny_layer(name, dtype)
    x = torch.randn(B, LAYER_L, E, generator=torch.Generator().manual_seed(5), dtype=dtype)
    with torch.no_grad():
        expected = layer(x)
        if name == "kimi":
            ours = huggingface_layers._kimi_delta_attention(layer, x, None, None)
        else:
            ours = huggingface_layers._gated_delta_net(layer, x, None, None)
    assert expected.dtype == dtype
    torch.testing.assert_close(ours, expected, atol=TOLERANCE[dtype], rtol=0)

"""The variants current open models use, against the Transformers code of a model using each.

- soft-capping: Gemma 2's eager attention;
- the learned sink logit: gpt-oss's eager attention; StreamingLLM's sink tokens: a mask;
- RMSNorm and QK-norm: Qwen 3's and Gemma 3's norms, and a whole Qwen 3 attention layer;
- interleaved local and global layers: the ``layer_types`` of Gemma 2, Gemma 3, Cohere 2
  and gpt-oss (global layer last), CWM and ModernBERT (global layer first) and Ministral
  (every layer local, its config's default), and the KV cache Transformers keeps for them.

Sizes are tiny and pairwise distinct (B=2, H=4, Hkv=2, L=5, S=7, D=6); nothing is
downloaded.
"""

from __future__ import annotations

import types

import pytest
import torch

from attention import (
    apply_rotary,
    causal_mask,
    flash_attention,
    interleaved_layer_types,
    kv_cache_positions,
    rms_norm,
    scaled_dot_product_attention,
    sink_attention,
    sliding_window_mask,
    soft_cap,
    softcap_score_mod,
)
from tests.helpers import make_qkv

transformers = pytest.importorskip("transformers")

B, H, HKV, L, S, D = 2, 4, 2, 5, 7, 6


def hf_module(**attributes: object) -> types.SimpleNamespace:
    """The few attributes Transformers' eager attention functions read from their layer."""
    return types.SimpleNamespace(training=False, num_key_value_groups=H // HKV, **attributes)


def additive_causal(L: int, S: int, dtype: torch.dtype) -> torch.Tensor:
    """A bottom-right causal mask as Transformers passes it: 0 or the dtype's minimum."""
    keep = causal_mask(L, S, alignment="bottom_right")
    return torch.zeros(L, S, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


# --- soft-capping -------------------------------------------------------------------


def test_softcap_equals_gemma2_eager_attention() -> None:
    """float32 only: Gemma 2's eager softmax runs in float32 whatever the input's dtype
    (test_score_mods.py checks soft-capping in float64 against flex_attention)."""
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    dtype = torch.float32
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=D, dtype=dtype, Hkv=HKV)
    q = q * 8  # large scores, so that the cap bites (|score| up to ~40 against cap 5)
    mask = additive_causal(L, S, dtype)
    expected, _ = eager_attention_forward(
        hf_module(head_dim=D), q, k, v, mask, scaling=D**-0.5, softcap=5.0
    )
    expected = expected.transpose(1, 2)  # Transformers returns (B, L, H, D)
    mod = softcap_score_mod(5.0)
    ours = scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, score_mod=mod)
    tiled = flash_attention(
        q,
        k,
        v,
        attn_mask=causal_mask(L, S, alignment="bottom_right"),
        enable_gqa=True,
        score_mod=mod,
        block_q=2,
        block_k=3,
    )
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(tiled, expected, atol=1e-6, rtol=0)


def test_soft_cap_bounds_the_scores_and_keeps_small_ones() -> None:
    s = torch.linspace(-1e4, 1e4, 2001, dtype=torch.float64)
    capped = soft_cap(s, 50.0)
    assert capped.abs().max() <= 50.0  # tanh rounds to exactly 1 beyond ~19: the cap itself
    assert (capped.diff() >= 0).all()  # order kept
    small = torch.linspace(-1, 1, 101, dtype=torch.float64)
    # |cap(s) - s| <= |s|^3 / (3 c^2), the first term of tanh's series
    assert ((soft_cap(small, 50.0) - small).abs() <= small.abs() ** 3 / (3 * 50.0**2)).all()


@pytest.mark.parametrize(
    ("dtype", "multiple"),
    [(torch.float64, 19.0), (torch.float32, 9.0), (torch.float16, 4.5), (torch.bfloat16, 3.5)],
)
def test_soft_cap_reaches_the_cap_where_the_docstring_says(
    dtype: torch.dtype, multiple: float
) -> None:
    # The module's docstring: a capped score rounds to c itself beyond about 19c in
    # float64, 9c in float32, 4.5c in float16 and 3.5c in bfloat16 (measured 19.06,
    # 9.01, 4.51, 3.47-3.48 for c = 5, 30, 50).
    for cap in (5.0, 30.0, 50.0):
        ratio = torch.linspace(0, 25, 250_001, dtype=torch.float64)
        scores = (ratio * cap).to(dtype)
        at_cap = soft_cap(scores, cap) == cap
        first = scores[at_cap.nonzero().min()].double().item() / cap
        assert bool(at_cap[at_cap.nonzero().min() :].all())  # and stays there
        assert abs(first - multiple) < 0.03 * multiple, (cap, first)


@pytest.mark.parametrize("cap", [0.0, -1.0, float("inf"), float("nan"), True, "5"])
def test_bad_cap_is_refused(cap: object) -> None:
    with pytest.raises((TypeError, ValueError), match="cap"):
        softcap_score_mod(cap)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="cap"):
        soft_cap(torch.zeros(2), cap)  # type: ignore[arg-type]


# --- sinks --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sink_attention_equals_gpt_oss_eager_attention(dtype: torch.dtype) -> None:
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=D, dtype=dtype, Hkv=HKV)
    sinks = torch.tensor([-2.0, 0.0, 1.5, 4.0], dtype=dtype)
    mask = additive_causal(L, S, dtype)
    expected, _ = eager_attention_forward(hf_module(sinks=sinks), q, k, v, mask, scaling=0.3)
    ours = sink_attention(q, k, v, sinks, attn_mask=mask, scale=0.3, enable_gqa=True)
    tol = {"atol": 1e-6, "rtol": 0} if dtype == torch.float32 else {"atol": 1e-15, "rtol": 0}
    torch.testing.assert_close(ours, expected.transpose(1, 2), **tol)


def test_a_sink_scales_the_output_by_the_logistic_of_lse_minus_sink() -> None:
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=D, dtype=torch.float64)
    sinks = torch.tensor([-1.0, 0.5, 2.0, 3.0], dtype=torch.float64)
    keep = causal_mask(L, S, alignment="bottom_right")
    scores = (q @ k.transpose(-2, -1) / D**0.5).masked_fill(~keep, float("-inf"))
    share = torch.sigmoid(scores.logsumexp(-1, keepdim=True) - sinks.view(H, 1, 1))
    plain = scaled_dot_product_attention(q, k, v, attn_mask=keep)
    torch.testing.assert_close(
        sink_attention(q, k, v, sinks, attn_mask=keep), plain * share, atol=1e-15, rtol=0
    )


def test_sinks_take_a_fully_masked_row_and_give_zeros() -> None:
    q, k, v = make_qkv(1, H, L=L, S=S, D=D, Dv=D, dtype=torch.float64)
    mask = torch.ones(L, S, dtype=torch.bool)
    mask[2] = False
    out = sink_attention(q, k, v, torch.zeros(H, dtype=torch.float64), attn_mask=mask)
    assert out[..., 2, :].eq(0).all() and out.isfinite().all()


@pytest.mark.parametrize(
    ("sinks", "error", "match"),
    [
        (torch.zeros(3), ValueError, r"sinks must have shape \(4,\).*got \(3,\)"),
        (torch.tensor([0.0, 0.0, float("-inf"), 0.0]), ValueError, "finite"),
        (torch.zeros(4, dtype=torch.long), TypeError, "sinks must have a floating-point"),
        ([0.0] * 4, TypeError, "sinks must be a torch.Tensor"),
    ],
)
def test_bad_sinks_are_refused(sinks: object, error: type, match: str) -> None:
    q, k, v = make_qkv(1, H, L=L, S=S, D=D, Dv=D, dtype=torch.float32)
    with pytest.raises(error, match=match):
        sink_attention(q, k, v, sinks)  # type: ignore[arg-type]


def test_streaming_mask_is_the_window_plus_the_first_keys() -> None:
    for L_, S_, window, sinks, alignment in [
        (9, 9, 3, 2, "top_left"),
        (4, 11, 4, 1, "bottom_right"),
    ]:
        mask = sliding_window_mask(L_, S_, window=window, sinks=sinks, alignment=alignment)
        offset = S_ - L_ if alignment == "bottom_right" else 0
        for i in range(L_):
            p = i + offset
            seen = {j for j in range(S_) if j <= p and (p - j < window or j < sinks)}
            assert set(mask[i].nonzero().flatten().tolist()) == seen
    assert torch.equal(sliding_window_mask(6, window=2, sinks=0), sliding_window_mask(6, window=2))
    with pytest.raises(ValueError, match="sinks"):
        sliding_window_mask(6, window=2, sinks=-1)


# --- RMSNorm and QK-norm ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_equals_transformers_norms_bit_for_bit(dtype: torch.dtype) -> None:
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, L, H, D, generator=g).to(dtype)
    weight = torch.randn(D, generator=g).to(dtype)
    qwen, gemma = Qwen3RMSNorm(D, eps=1e-6).to(dtype), Gemma3RMSNorm(D, eps=1e-6).to(dtype)
    qwen.weight.data, gemma.weight.data = weight.clone(), weight.clone()
    with torch.no_grad():
        assert torch.equal(rms_norm(x, weight, eps=1e-6), qwen(x))
        assert torch.equal(rms_norm(x, weight, eps=1e-6, offset=1.0), gemma(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_in_olmo2s_order_equals_olmo2_bit_for_bit(dtype: torch.dtype) -> None:
    """OLMo 2 multiplies by the gain in float32, then casts: its own order."""
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, L, H * D, generator=g).to(dtype)  # the whole projection, all heads
    weight = torch.randn(H * D, generator=g).to(dtype)
    olmo2 = Olmo2RMSNorm(H * D, eps=1e-6).to(dtype)
    olmo2.weight.data = weight.clone()
    with torch.no_grad():
        expected = olmo2(x)
    assert torch.equal(rms_norm(x, weight, eps=1e-6, order="multiply_then_cast"), expected)
    llama_order = rms_norm(x, weight, eps=1e-6)
    # The orders agree to the bit in float32 only: the choice matters in half precision.
    assert torch.equal(llama_order, expected) == (dtype == torch.float32)


def test_qk_norm_reproduces_a_qwen3_attention_layer() -> None:
    """Qwen 3's attention from the package's parts: RMSNorm per head, RoPE, GQA, causal."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    config = transformers.Qwen3Config(
        hidden_size=24,
        num_attention_heads=H,
        num_key_value_heads=HKV,
        head_dim=D,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(0)
    layer = Qwen3Attention(config, layer_idx=0).eval()
    for norm in (layer.q_norm, layer.k_norm):
        torch.nn.init.uniform_(norm.weight, 0.5, 1.5)  # not ones: the gain must be applied
    x = torch.randn(B, L, 24)
    positions = torch.arange(L).expand(B, L)
    with torch.no_grad():
        cos_sin = Qwen3RotaryEmbedding(config)(x, positions)
        expected, _ = layer(x, cos_sin, additive_causal(L, L, torch.float32))

        def heads(proj: torch.nn.Linear, norm: torch.nn.Module) -> torch.Tensor:
            t = rms_norm(proj(x).view(B, L, -1, D), norm.weight, eps=1e-6).transpose(1, 2)
            return apply_rotary(t, torch.arange(L), base=1000.0, pairing="half")

        q, k = heads(layer.q_proj, layer.q_norm), heads(layer.k_proj, layer.k_norm)
        v = layer.v_proj(x).view(B, L, HKV, D).transpose(1, 2)
        out = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        ours = layer.o_proj(out.transpose(1, 2).reshape(B, L, H * D))
    torch.testing.assert_close(ours, expected, atol=2e-6, rtol=0)


def test_qk_norm_keeps_scores_bounded_when_the_weights_grow() -> None:
    g = torch.Generator().manual_seed(0)
    x, w_q, w_k = (torch.randn(n, D, generator=g, dtype=torch.float64) for n in (L, D, D))
    for grow in (1.0, 10.0, 100.0):
        q, k = x @ (grow * w_q), x @ (grow * w_k)
        normed = rms_norm(q, eps=0.0) @ rms_norm(k, eps=0.0).T / D**0.5
        assert normed.abs().max() <= D**0.5 + 1e-12  # |q| = |k| = sqrt(D) after RMSNorm
    assert (q @ k.T).abs().max() > 1e4  # without it, the same scores grow with the weights


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"weight": torch.ones(5)}, ValueError, r"weight must have shape \(6,\).*got \(5,\)"),
        ({"eps": -1.0}, ValueError, "eps"),
        ({"offset": "1"}, TypeError, "offset"),
        ({"order": "olmo2"}, ValueError, r"order must be one of \('cast_then_multiply', "),
    ],
)
def test_bad_rms_norm_arguments_are_refused(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        rms_norm(torch.ones(3, D), **kwargs)


# --- interleaved local and global layers --------------------------------------------


@pytest.mark.parametrize(
    ("config", "global_every", "global_first"),
    [
        ("Gemma2Config", 2, False),
        ("GptOssConfig", 2, False),
        ("Cohere2Config", 4, False),
        ("Gemma3TextConfig", 6, False),
        # Ministral 8B's own order, one global layer then three local ones (Transformers'
        # model page), is not what MinistralConfig() defaults to (every layer local):
        # CWM's config writes that order, and ModernBERT's the same with groups of 3.
        ("MinistralConfig", None, False),
        ("CwmConfig", 4, True),
        ("ModernBertConfig", 3, True),
    ],
)
def test_layer_types_equal_the_configs_of_transformers(
    config: str, global_every: int | None, global_first: bool
) -> None:
    layer_types = getattr(transformers, config)(num_hidden_layers=13).layer_types
    ours = interleaved_layer_types(13, global_every=global_every, global_first=global_first)
    assert ours == layer_types


def test_global_first_follows_modernberts_group_size() -> None:
    for every in (2, 4, 5):
        config = transformers.ModernBertConfig(
            num_hidden_layers=11, global_attn_every_n_layers=every
        )
        assert interleaved_layer_types(11, global_every=every, global_first=True) == (
            config.layer_types
        )


def test_kv_cache_positions_equal_what_transformers_caches() -> None:
    config = transformers.Gemma3TextConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=4,
    )
    model = transformers.Gemma3ForCausalLM(config).eval()
    ids = torch.randint(0, 16, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        for length in (9, 10):
            cached = sum(layer.keys.shape[-2] for layer in cache.layers)
            assert cached == kv_cache_positions(config.layer_types, window=4, length=length)
            cache = model(ids[:, :1], past_key_values=cache, use_cache=True).past_key_values


def test_bad_layer_patterns_are_refused() -> None:
    with pytest.raises(ValueError, match="global_every"):
        interleaved_layer_types(4, global_every=0)
    with pytest.raises(TypeError, match="global_first must be True or False; got str 'yes'"):
        interleaved_layer_types(4, global_every=2, global_first="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"layer_types\[1\]"):
        kv_cache_positions(["full_attention", "local"], window=4, length=8)
    with pytest.raises(ValueError, match="window"):
        kv_cache_positions([], window=0, length=8)

"""attention.latent: multi-head latent attention, against Transformers' DeepSeek-V3.

Sizes are pairwise distinct (E=48, H=3, d_c=16, d_c'=12, D_n=8, D_r=4, D_v=6) so that a
transposed or mis-split axis cannot pass by accident. Transformers' modules are built from
tiny configs with random weights; nothing is downloaded.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch import Tensor

from attention.latent import LatentCache, MultiHeadLatentAttention, kv_cache_numbers_per_token

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

E, H, DC, DQ, DN, DR, DV = 48, 3, 16, 12, 8, 4, 6
BASE = 10000.0
# DeepSeek-style YaRN, with mscale != mscale_all_dim so that both YaRN factors matter:
# RoPE's attention factor (on q_rope, k_rope) and the softmax scale's mscale**2.
YARN = {
    "rope_type": "yarn",
    "factor": 40.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 0.5,
}

# Our parameter -> Transformers' DeepseekV3Attention submodule.
TRANSFORMERS_NAMES = {
    "q_proj": "q_proj",
    "q_down_proj": "q_a_proj",
    "q_norm_weight": "q_a_layernorm",
    "q_up_proj": "q_b_proj",
    "kv_down_proj": "kv_a_proj_with_mqa",
    "kv_norm_weight": "kv_a_layernorm",
    "kv_up_proj": "kv_b_proj",
    "out_proj": "o_proj",
}


def make_mla(
    q_latent_dim: int | None = DQ,
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    **kwargs: Any,
) -> MultiHeadLatentAttention:
    """A module with random weights, norm gains included (ones would hide a missing norm)."""
    torch.manual_seed(seed)
    mla = MultiHeadLatentAttention(
        E,
        H,
        kv_latent_dim=DC,
        q_latent_dim=q_latent_dim,
        nope_head_dim=DN,
        rope_head_dim=DR,
        value_head_dim=DV,
        dtype=dtype,
        **kwargs,
    )
    with torch.no_grad():
        for p in mla.parameters():
            p.normal_(0.0, 0.3)
        for gain in (mla.q_norm_weight, mla.kv_norm_weight):
            if gain is not None:
                gain.add_(1.0)
    return mla.eval()


# Transformers' DeepSeek-V3 attention, weights copied in


def transformers_attention(
    q_latent_dim: int | None, rope_interleave: bool, rope_scaling: dict[str, Any] | None
) -> tuple[Any, Any, MultiHeadLatentAttention]:
    """Transformers' attention and rotary embedding, and our module with its weights."""
    pytest.importorskip("transformers")
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    rope_parameters = {"rope_type": "default", "rope_theta": BASE}
    if rope_scaling is not None:
        rope_parameters = {**rope_scaling, "rope_theta": BASE}
    config = DeepseekV3Config(
        hidden_size=E,
        num_attention_heads=H,
        num_key_value_heads=H,
        kv_lora_rank=DC,
        q_lora_rank=q_latent_dim,
        qk_nope_head_dim=DN,
        qk_rope_head_dim=DR,
        v_head_dim=DV,
        rope_interleave=rope_interleave,
        rope_parameters=rope_parameters,
        max_position_embeddings=64 * 40,
        attention_bias=True,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(1)
    reference = DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_(0.0, 0.3)
    ours = make_mla(
        q_latent_dim,
        dtype=torch.float32,
        rope_base=BASE,
        rope_pairing="interleaved" if rope_interleave else "half",
        rope_scaling=rope_scaling,
        bias=True,
    )
    theirs = {module: ours_name for ours_name, module in TRANSFORMERS_NAMES.items()}
    state = {}
    for name, tensor in reference.state_dict().items():
        module, _, leaf = name.rpartition(".")
        ours_name = theirs[module]
        state[ours_name if ours_name.endswith("_weight") else f"{ours_name}.{leaf}"] = tensor
    ours.load_state_dict(state)  # strict: every parameter on both sides
    return reference, DeepseekV3RotaryEmbedding(config), ours


def causal_bias(L: int, S: int) -> Tensor:
    """Transformers' additive causal mask ``(1, 1, L, S)``, aligned bottom-right."""
    i = torch.arange(L).unsqueeze(-1) + (S - L)
    blocked = torch.arange(S) > i  # (L, S)
    bias = torch.zeros(L, S).masked_fill(blocked, torch.finfo(torch.float32).min)
    return bias[None, None]


def ulps(a: Tensor, b: Tensor) -> float:
    """Max difference in units of float32 rounding of the larger magnitude."""
    return ((a - b).abs() / (torch.finfo(a.dtype).eps * b.abs().max())).max().item()


@pytest.mark.parametrize("q_latent_dim", [DQ, None], ids=["q_lora", "q_full"])
@pytest.mark.parametrize("rope_interleave", [True, False], ids=["interleave", "half"])
@pytest.mark.parametrize("rope_scaling", [None, YARN], ids=["rope", "yarn"])
def test_equals_transformers_deepseek_v3(
    q_latent_dim: int | None, rope_interleave: bool, rope_scaling: dict[str, Any] | None
) -> None:
    reference, rotary, ours = transformers_attention(q_latent_dim, rope_interleave, rope_scaling)
    torch.manual_seed(2)
    B, L = 2, 7
    x = torch.randn(B, L, E)
    positions = torch.arange(L).expand(B, L)
    with torch.no_grad():
        expected, _ = reference(x, rotary(x, positions), causal_bias(L, L))
        for absorbed in (False, True):
            out = ours(x, absorbed=absorbed)
            # float32 rounding only: Transformers' cos and sin come from float32 angles,
            # ours from float64 ones (see the next test), and the absorbed form sums in
            # another order. Measured: at most 3.0e-7, 1.9 ulps of the largest output.
            torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
            assert ulps(out, expected) <= 4


@pytest.mark.parametrize("rope_interleave", [True, False], ids=["interleave", "half"])
def test_bitwise_equal_with_the_same_cos_sin(rope_interleave: bool) -> None:
    # Given cos and sin from float64 angles, as apply_rotary computes them, Transformers'
    # module returns our naive output bit for bit with rotate_half pairs. Interleaved pairs
    # stay interleaved in ours and are de-interleaved in Transformers' (a permutation of
    # q_rope and k_rope alike, same scores), so the dot products sum in another order.
    reference, _, ours = transformers_attention(DQ, rope_interleave, None)
    torch.manual_seed(2)
    L = 7
    x = torch.randn(2, L, E)
    inv_freq = 1.0 / BASE ** (torch.arange(0, DR, 2, dtype=torch.float64) / DR)
    angles = torch.arange(L, dtype=torch.float64)[:, None] * inv_freq  # (L, D_r / 2)
    angles = torch.cat([angles, angles], dim=-1)[None]  # (1, L, D_r), Transformers' layout
    cos_sin = (angles.cos().float(), angles.sin().float())
    with torch.no_grad():
        expected, _ = reference(x, cos_sin, causal_bias(L, L))
        out = ours(x)
    if rope_interleave:
        assert ulps(out, expected) <= 4
    else:
        assert torch.equal(out, expected)


@pytest.mark.parametrize("rope_interleave", [True, False], ids=["interleave", "half"])
def test_cache_holds_what_transformers_caches(rope_interleave: bool) -> None:
    pytest.importorskip("transformers")
    from transformers import DynamicCache

    reference, rotary, ours = transformers_attention(DQ, rope_interleave, None)
    torch.manual_seed(2)
    B, L = 2, 5
    x = torch.randn(B, L, E)
    theirs = DynamicCache(config=reference.config)
    cache = LatentCache()
    with torch.no_grad():
        reference(x, rotary(x, torch.arange(L).expand(B, L)), causal_bias(L, L), theirs)
        ours(x, cache=cache)
    latent, rope_key = theirs.layers[0].keys, theirs.layers[0].values  # (B, 1, S, *)
    assert latent.shape == (B, 1, L, DC) and rope_key.shape == (B, 1, L, DR)
    assert cache.latent is not None and cache.rope_key is not None
    assert torch.equal(cache.latent, latent[:, 0])  # no RoPE in it: bit for bit
    ours_rope_key = cache.rope_key
    if rope_interleave:  # Transformers stores rotated pairs de-interleaved: (evens, odds)
        ours_rope_key = torch.cat([ours_rope_key[..., 0::2], ours_rope_key[..., 1::2]], -1)
    torch.testing.assert_close(ours_rope_key, rope_key[:, 0], rtol=0, atol=1e-6)
    assert cache.nbytes == latent.nbytes + rope_key.nbytes


def test_decoding_with_transformers_cache_equals_ours() -> None:
    # Prefill 4 tokens, then 3 single tokens: Transformers with its DynamicCache against
    # ours with a LatentCache, step by step.
    pytest.importorskip("transformers")
    from transformers import DynamicCache

    reference, rotary, ours = transformers_attention(DQ, True, None)
    torch.manual_seed(3)
    B, S = 2, 7
    x = torch.randn(B, S, E)
    theirs, cache = DynamicCache(config=reference.config), LatentCache()
    with torch.no_grad():
        for start, stop in ((0, 4), (4, 5), (5, 6), (6, 7)):
            chunk, positions = x[:, start:stop], torch.arange(start, stop).expand(B, -1)
            mask = causal_bias(stop - start, stop)
            expected, _ = reference(chunk, rotary(chunk, positions), mask, theirs)
            torch.testing.assert_close(ours(chunk, cache=cache), expected, rtol=0, atol=5e-7)
    assert len(cache) == theirs.get_seq_length() == S


# The two forms, the cache, positions


@pytest.mark.parametrize("q_latent_dim", [DQ, None], ids=["q_lora", "q_full"])
def test_absorbed_equals_naive(q_latent_dim: int | None) -> None:
    mla = make_mla(q_latent_dim)
    x = torch.randn(2, 7, E, dtype=torch.float64)
    with torch.no_grad():
        naive, absorbed = mla(x), mla(x, absorbed=True)
    assert (naive - absorbed).abs().max().item() < 1e-12
    assert naive.abs().max().item() > 0.1  # not trivially small


@pytest.mark.parametrize("absorbed", [False, True], ids=["naive", "absorbed"])
def test_decoding_with_cache_equals_one_pass(absorbed: bool) -> None:
    mla = make_mla(rope_scaling=YARN)
    x = torch.randn(2, 7, E, dtype=torch.float64)
    cache = LatentCache()
    with torch.no_grad():
        full = mla(x, absorbed=absorbed)
        steps = [mla(x[:, :4], cache=cache, absorbed=absorbed)]
        steps += [mla(x[:, t : t + 1], cache=cache, absorbed=absorbed) for t in range(4, 7)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-12
    assert len(cache) == 7 and cache.latent is not None and cache.rope_key is not None
    assert cache.latent.shape == (2, 7, DC) and cache.rope_key.shape == (2, 7, DR)


def test_absorbed_equals_naive_with_cache() -> None:
    mla = make_mla()
    x = torch.randn(2, 7, E, dtype=torch.float64)
    naive_cache, absorbed_cache = LatentCache(), LatentCache()
    with torch.no_grad():
        for chunk in (x[:, :3], x[:, 3:5], x[:, 5:6], x[:, 6:]):
            naive = mla(chunk, cache=naive_cache)
            absorbed = mla(chunk, cache=absorbed_cache, absorbed=True)
            assert (naive - absorbed).abs().max().item() < 1e-12
    assert naive_cache.latent is not None and absorbed_cache.latent is not None
    assert torch.equal(naive_cache.latent, absorbed_cache.latent)


def test_the_future_does_not_leak() -> None:
    mla = make_mla()
    x = torch.randn(1, 6, E, dtype=torch.float64)
    changed = x.clone()
    changed[:, 4:] = torch.randn(1, 2, E, dtype=torch.float64)
    with torch.no_grad():
        for absorbed in (False, True):
            a, b = mla(x, absorbed=absorbed), mla(changed, absorbed=absorbed)
            assert torch.equal(a[:, :4], b[:, :4])
            assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_positions_per_sequence() -> None:
    # (B, L) positions give each sequence its own offset, as two separate calls would.
    mla = make_mla()
    x = torch.randn(2, 5, E, dtype=torch.float64)
    positions = torch.stack([torch.arange(5), torch.arange(3, 8)])  # (B, L)
    with torch.no_grad():
        both = mla(x, positions=positions)
        first = mla(x[:1], positions=torch.arange(5))
        second = mla(x[1:], positions=torch.arange(3, 8))
        shifted = mla(x[1:])
        spread = mla(x[1:], positions=torch.arange(0, 10, 2))
    torch.testing.assert_close(both, torch.cat([first, second]), rtol=0, atol=1e-12)
    # RoPE sees distances only: one offset for every token changes nothing, new
    # distances do.
    torch.testing.assert_close(second, shifted, rtol=0, atol=1e-12)
    assert not torch.allclose(spread, shifted)


# Cache sizes, measured on Transformers' caches


def transformers_cache_numbers_per_token(model_type: str, **sizes: Any) -> float:
    """Numbers a Transformers model caches per token and layer, from its cache's tensors."""
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModel

    layers, B, L = 2, 2, 5
    config = AutoConfig.for_model(
        model_type, vocab_size=50, num_hidden_layers=layers, intermediate_size=32, **sizes
    )
    model = AutoModel.from_config(config).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 50, (B, L)), use_cache=True).past_key_values
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    assert len(tensors) == 2 * layers
    numbers = sum(t.numel() for t in tensors)
    return numbers / (B * L * layers)


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_numbers_per_token_of_llama_caches(num_kv_heads: int) -> None:
    measured = transformers_cache_numbers_per_token(
        "llama", hidden_size=E, num_attention_heads=4, num_key_value_heads=num_kv_heads
    )
    assert measured == kv_cache_numbers_per_token(num_kv_heads=num_kv_heads, head_dim=E // 4)
    assert measured == 2 * num_kv_heads * (E // 4)


@pytest.mark.parametrize("q_latent_dim", [DQ, None], ids=["q_lora", "q_full"])
def test_numbers_per_token_of_deepseek_v3_cache(q_latent_dim: int | None) -> None:
    measured = transformers_cache_numbers_per_token(
        "deepseek_v3",
        hidden_size=E,
        num_attention_heads=H,
        num_key_value_heads=H,
        kv_lora_rank=DC,
        q_lora_rank=q_latent_dim,
        qk_nope_head_dim=DN,
        qk_rope_head_dim=DR,
        v_head_dim=DV,
        moe_intermediate_size=8,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
    )
    assert measured == kv_cache_numbers_per_token(kv_latent_dim=DC, rope_head_dim=DR) == DC + DR
    # Ours holds the same per token, in numbers and in bytes.
    cache = LatentCache()
    with torch.no_grad():
        make_mla(q_latent_dim, dtype=torch.float32)(torch.randn(2, 5, E), cache=cache)
    assert cache.numbers_per_token == measured
    assert cache.nbytes == measured * 2 * 5 * 4  # B * S tokens, 4 bytes each


def test_kv_cache_numbers_per_token() -> None:
    assert kv_cache_numbers_per_token(num_kv_heads=3, head_dim=5, value_head_dim=7) == 36
    assert kv_cache_numbers_per_token(kv_latent_dim=512, rope_head_dim=0) == 512


# Bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(num_kv_heads=2), ValueError, "num_kv_heads=2, head_dim=None"),
        (dict(kv_latent_dim=512), ValueError, "kv_latent_dim=512, rope_head_dim=None"),
        (dict(num_kv_heads=2, head_dim=4, kv_latent_dim=8), ValueError, "not both"),
        (dict(), ValueError, "pass num_kv_heads and head_dim"),
        (dict(num_kv_heads=0, head_dim=4), ValueError, "num_kv_heads must be >= 1; got 0"),
        (dict(num_kv_heads=2.0, head_dim=4), TypeError, "num_kv_heads must be an int"),
    ],
)
def test_kv_cache_numbers_per_token_bad_input(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        kv_cache_numbers_per_token(**kwargs)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (dict(rope_head_dim=5), ValueError, "rope_head_dim must be even.*got 5"),
        (dict(num_heads=0), ValueError, "num_heads must be >= 1; got 0"),
        (dict(kv_latent_dim=16.0), TypeError, "kv_latent_dim must be an int"),
        (dict(rope_pairing="adjacent"), ValueError, "rope_pairing must be one of"),
        (dict(rope_scaling={"rope_type": "yarn"}), ValueError, "missing"),
        (dict(eps=-1.0), ValueError, "eps must be >= 0"),
        (dict(bias=1), TypeError, "bias must be True or False"),
    ],
)
def test_constructor_bad_input(
    change: dict[str, Any], error: type[Exception], message: str
) -> None:
    kwargs: dict[str, Any] = dict(
        embed_dim=E,
        num_heads=H,
        kv_latent_dim=DC,
        nope_head_dim=DN,
        rope_head_dim=DR,
        value_head_dim=DV,
    )
    with pytest.raises(error, match=message):
        MultiHeadLatentAttention(**{**kwargs, **change})


def test_forward_bad_input() -> None:
    mla = make_mla()
    x = torch.randn(2, 5, E, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"x must be \(B, L, E\) with E = embed_dim = 48; got"):
        mla(x[..., :40])
    with pytest.raises(ValueError, match=r"got \(5, 48\)"):
        mla(x[0])
    with pytest.raises(TypeError, match=r"parameters' dtype torch\.float64; got x torch\.float32"):
        mla(x.float())
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        mla(x.tolist())
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        mla(x, positions=torch.arange(5.0))
    with pytest.raises(ValueError, match=r"positions must broadcast to .* \(2, 5\); got shape"):
        mla(x, positions=torch.arange(4))
    with pytest.raises(TypeError, match="cache must be a LatentCache or None; got KVCache"):
        from attention.kv_cache import KVCache

        mla(x, cache=KVCache())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="absorbed must be True or False"):
        mla(x, absorbed=1)  # type: ignore[arg-type]


def test_failed_call_leaves_the_cache_unchanged() -> None:
    mla = make_mla()
    cache = LatentCache()
    with torch.no_grad():
        mla(torch.randn(2, 3, E, dtype=torch.float64), cache=cache)
        with pytest.raises(
            ValueError, match=r"new latent must match the cached latent \(B, S, d_c\)"
        ):
            mla(torch.randn(3, 1, E, dtype=torch.float64), cache=cache)
    assert len(cache) == 3


def test_latent_cache_bad_input() -> None:
    cache = LatentCache()
    with pytest.raises(ValueError, match=r"latent \(2, 3, 16\), rope_key \(2, 4, 4\)"):
        cache.append(torch.zeros(2, 3, 16), torch.zeros(2, 4, 4))
    cache.append(torch.zeros(2, 3, 16), torch.zeros(2, 3, 4))
    with pytest.raises(
        ValueError,
        match=r"cached rope_key \(B, S, D_r\) in every size but S; got rope_key \(2, 1, 5\)",
    ):
        cache.append(torch.zeros(2, 1, 16), torch.zeros(2, 1, 5))
    with pytest.raises(TypeError, match="same dtype"):
        cache.append(torch.zeros(2, 1, 16, dtype=torch.float64), torch.zeros(2, 1, 4))
    assert len(cache) == 3
    cache.reset()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.numbers_per_token == 0

"""RoPE's two pairings and its context-extension rules, against Hugging Face Transformers.

``rope_frequencies`` computes in float64; Transformers computes the same formulas in
float32, so the frequencies agree to a few float32 ulps (``rtol=5e-7``) and the attention
factors exactly. Sizes are pairwise distinct (B=2, H=3, L=5, D=12).
"""

from __future__ import annotations

import math

import pytest
import torch

from attention import apply_rotary, rope_frequencies

B, H, L, D = 2, 3, 5, 12

# The largest gap measured against Transformers 5.x float32 is 4.5e-7 (dynamic NTK at
# 25x the trained length, where base' ** x is evaluated in float32): about 4 ulps.
FREQUENCY_RTOL = 5e-7

# Phi-3-like: one factor per pair (D/2 = 8), short ones up to L_0 = 4096, long ones beyond.
LONGROPE = {
    "rope_type": "longrope",
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.3, 1.5, 1.8],
    "long_factor": [1.0, 1.25, 1.9, 3.7, 8.5, 19.0, 33.0, 48.0],
}

CASES = {
    "default": (64, 10000.0, None, None),
    "default-llama3-base": (128, 500000.0, {"rope_type": "default"}, None),
    "linear": (128, 500000.0, {"rope_type": "linear", "factor": 8.0}, None),
    "dynamic-at-L0": (
        64,
        10000.0,
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048},
        None,
    ),
    "dynamic-beyond": (
        64,
        10000.0,
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048},
        7000,
    ),
    "dynamic-far": (
        96,
        1e6,
        {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4096},
        100_000,
    ),
    "yarn": (
        64,
        10000.0,
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        None,
    ),
    "yarn-betas-untruncated": (
        128,
        1e6,
        {
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 2048,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "truncate": False,
        },
        None,
    ),
    "yarn-mscale": (
        64,
        10000.0,
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "mscale": 1.0,
            "mscale_all_dim": 0.5,
        },
        None,
    ),
    "yarn-attention-factor": (
        64,
        10000.0,
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 4096,
            "attention_factor": 1.5,
        },
        None,
    ),
    "llama3.1": (
        128,
        500000.0,
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        None,
    ),
    "llama3.2": (
        64,
        500000.0,
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        None,
    ),
    "longrope-short": (16, 10000.0, LONGROPE, None),
    "longrope-long": (16, 10000.0, LONGROPE, 9000),
    "longrope-attention-factor": (16, 10000.0, {**LONGROPE, "attention_factor": 1.25}, 5000),
}


def hf_config(dim, base, scaling):
    """A tiny LlamaConfig whose ``rope_parameters`` hold the same rule and values."""
    from transformers import LlamaConfig

    params = dict(scaling or {"rope_type": "default"})
    trained = params.get("original_max_position_embeddings", 4096)
    max_positions = int(params.get("factor", 1.0) * trained)
    if params["rope_type"] == "dynamic":
        # Transformers' dynamic rule reads the trained length from max_position_embeddings.
        max_positions = params.pop("original_max_position_embeddings")
    return LlamaConfig(
        hidden_size=2 * dim,
        num_attention_heads=2,
        head_dim=dim,
        max_position_embeddings=max_positions,
        rope_parameters={**params, "rope_theta": base},
    )


def hf_frequencies(dim, base, scaling, seq_len):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = hf_config(dim, base, scaling)
    rule = config.rope_parameters["rope_type"]
    if rule == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rule](config, "cpu", seq_len=seq_len)


@pytest.mark.parametrize(("dim", "base", "scaling", "seq_len"), CASES.values(), ids=CASES.keys())
def test_frequencies_match_transformers(dim, base, scaling, seq_len):
    pytest.importorskip("transformers")
    ours, our_factor = rope_frequencies(dim, base=base, scaling=scaling, seq_len=seq_len)
    theirs, their_factor = hf_frequencies(dim, base, scaling, seq_len)
    assert ours.dtype == torch.float64
    assert ours.shape == theirs.shape == (dim // 2,)
    torch.testing.assert_close(ours.float(), theirs, rtol=FREQUENCY_RTOL, atol=0)
    assert our_factor == their_factor


def test_the_rules_change_the_frequencies_as_documented():
    theta, _ = rope_frequencies(D, base=100.0)
    linear, _ = rope_frequencies(D, base=100.0, scaling={"rope_type": "linear", "factor": 4.0})
    torch.testing.assert_close(linear, theta / 4, rtol=0, atol=0)
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    ratio = rope_frequencies(D, base=100.0, scaling=llama3)[0] / theta
    wavelength = 2 * math.pi / theta
    assert torch.equal(ratio[wavelength < 16], torch.ones_like(ratio[wavelength < 16]))  # kept
    assert torch.allclose(ratio[wavelength > 64], torch.tensor(1 / 8, dtype=torch.float64))
    between = ratio[(wavelength >= 16) & (wavelength <= 64)]
    assert between.numel() > 0 and ((between > 1 / 8) & (between < 1)).all()
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    same, _ = rope_frequencies(D, base=100.0, scaling=dynamic, seq_len=10)  # below L_0
    assert torch.equal(same, theta)
    longer, _ = rope_frequencies(D, base=100.0, scaling=dynamic, seq_len=256)
    assert longer[0] == theta[0] and (longer[1:] < theta[1:]).all()  # only the base changes


def interleave_permutation(dim):
    """Feature 2i of the interleaved layout is feature i of the half layout, 2i+1 is i+D/2."""
    half = torch.arange(dim // 2)
    return torch.stack([half, half + dim // 2], -1).flatten()


@pytest.mark.parametrize(
    "scaling", [None, CASES["yarn"][2], CASES["llama3.1"][2]], ids=["plain", "yarn", "llama3"]
)
def test_the_pairings_are_one_function_up_to_a_permutation(scaling):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(B, H, L, D, generator=g), torch.randn(B, H, L + 2, D, generator=g)
    perm = interleave_permutation(D)
    positions_q, positions_k = torch.arange(40, 40 + L), torch.arange(L + 2)
    half = apply_rotary(q, positions_q, pairing="half", scaling=scaling)
    interleaved = apply_rotary(q[..., perm], positions_q, scaling=scaling)
    assert torch.equal(interleaved, half[..., perm])
    assert not torch.allclose(half, apply_rotary(q, positions_q, scaling=scaling))
    # Scores of q and k permuted alike are the same.
    scores_half = half @ apply_rotary(k, positions_k, pairing="half", scaling=scaling).mT
    rotated_k = apply_rotary(k[..., perm], positions_k, scaling=scaling)
    torch.testing.assert_close(interleaved @ rotated_k.mT, scores_half)


@pytest.mark.parametrize(
    ("name", "positions"),
    [
        ("default", torch.arange(L)),
        ("linear", torch.tensor([0, 3, 17, 40, 63])),
        ("dynamic-beyond", torch.tensor([0, 9, 30, 40, 63])),
        ("yarn-mscale", torch.tensor([2, 3, 5, 7, 63])),
        ("llama3.1", torch.arange(L) + 50),
        ("longrope-short", torch.arange(L) + 20),
        ("longrope-long", torch.arange(L) + 20),
    ],
)
def test_half_pairing_is_transformers_apply_rotary_pos_emb(name, positions):
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    dim, base, scaling, _ = CASES[name]
    if name in ("dynamic-beyond", "longrope-long"):
        # Scale a short trained length, so that the last positions are beyond it.
        scaling = {**scaling, "original_max_position_embeddings": 16}
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(B, H, L, dim, generator=g), torch.randn(B, H, L, dim, generator=g)
    rotary = LlamaRotaryEmbedding(hf_config(dim, base, scaling))
    position_ids = positions.expand(B, L)  # (B, L)
    cos, sin = rotary(q, position_ids)  # (B, L, D) each, float32 angles
    q_theirs, k_theirs = apply_rotary_pos_emb(q, k, cos, sin)
    kwargs = {"base": base, "scaling": scaling, "pairing": "half"}
    # Transformers rounds the angles p * theta_i to float32: about 1e-5 at p = 63.
    torch.testing.assert_close(apply_rotary(q, positions, **kwargs), q_theirs, atol=2e-5, rtol=0)
    torch.testing.assert_close(apply_rotary(k, positions, **kwargs), k_theirs, atol=2e-5, rtol=0)


def test_yarn_attention_factor_scales_the_rotated_vectors():
    x = torch.randn(L, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    y = apply_rotary(x, scaling=yarn)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1) * (0.1 * math.log(4.0) + 1))


LLAMA3 = CASES["llama3.1"][2]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"dim": 7}, ValueError, r"dim must be even .*got 7"),
        ({"dim": 0}, ValueError, r"dim must be >= 2"),
        ({"dim": 8.0}, TypeError, r"dim"),
        ({"scaling": [("rope_type", "linear")]}, TypeError, r"scaling must be a dict or None"),
        (
            {"scaling": {"rope_type": "ntk"}},
            ValueError,
            r"scaling\['rope_type'\] must be one of \('default', 'linear', 'dynamic', 'yarn', "
            r"'llama3', 'longrope'\); got 'ntk'",
        ),
        (
            {"dim": 16, "scaling": {**LONGROPE, "long_factor": [1.0] * 5}},
            ValueError,
            r"scaling\['long_factor'\] must be a list of dim / 2 = 8 finite numbers > 0",
        ),
        (
            {"dim": 16, "scaling": {**LONGROPE, "short_factor": [1.0] * 7 + [0.0]}},
            ValueError,
            r"scaling\['short_factor'\] must be a list of dim / 2 = 8",
        ),
        ({"scaling": {"factor": 2.0}}, ValueError, r"must have a 'rope_type' key, one of"),
        ({"scaling": {"rope_type": "linear"}}, ValueError, r"'linear' is missing \['factor'\]"),
        (
            {"scaling": {"rope_type": "yarn", "factor": 2.0}},
            ValueError,
            r"'yarn' is missing \['original_max_position_embeddings'\]",
        ),
        (
            {"scaling": {"rope_type": "linear", "factor": 0.0}},
            ValueError,
            r"scaling\['factor'\] must be finite and > 0; got 0.0",
        ),
        (
            {"scaling": {"rope_type": "linear", "factor": -2.0}},
            ValueError,
            r"scaling\['factor'\] must be finite and > 0",
        ),
        (
            {"scaling": {"rope_type": "linear", "factor": "2"}},
            TypeError,
            r"scaling\['factor'\] must be a real number",
        ),
        (
            {"scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 8.0}},
            ValueError,
            r"unknown keys \['beta_fast'\] for rope_type 'linear'; expected \['factor'\]",
        ),
        (
            {"scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
            ValueError,
            r"must not hold 'rope_theta'; pass it as base=",
        ),
        (
            {"scaling": {**LLAMA3, "original_max_position_embeddings": 0}},
            ValueError,
            r"original_max_position_embeddings",
        ),
        (
            {"scaling": {**LLAMA3, "low_freq_factor": 4.0, "high_freq_factor": 1.0}},
            ValueError,
            r"high_freq_factor'\] must be greater than scaling\['low_freq_factor'\]",
        ),
        (
            {"scaling": {**CASES["yarn"][2], "beta_slow": 0.0}},
            ValueError,
            r"scaling\['beta_slow'\] must be finite and > 0",
        ),
        (
            {"scaling": {**CASES["yarn"][2], "attention_factor": -1.0}},
            ValueError,
            r"scaling\['attention_factor'\] must be finite and > 0",
        ),
        (
            {"scaling": {**CASES["yarn"][2], "truncate": 1}},
            TypeError,
            r"scaling\['truncate'\] must be a bool",
        ),
        (
            {"dim": 2, "scaling": CASES["dynamic-at-L0"][2]},
            ValueError,
            r"'dynamic' needs dim >= 4",
        ),
        ({"base": 0.0}, ValueError, r"base must be finite and > 0"),
    ],
)
def test_rope_frequencies_rejects_bad_arguments(kwargs, error, message):
    kwargs = {"dim": D, **kwargs}
    with pytest.raises(error, match=message):
        rope_frequencies(**kwargs)


def test_apply_rotary_rejects_an_unknown_pairing_or_rule():
    with pytest.raises(ValueError, match=r"pairing must be one of \('interleaved', 'half'\)"):
        apply_rotary(torch.zeros(L, D), pairing="neox")
    with pytest.raises(ValueError, match=r"must be one of .*got 'ntk'"):
        apply_rotary(torch.zeros(L, D), scaling={"rope_type": "ntk"})

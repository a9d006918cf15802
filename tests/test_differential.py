"""Differential attention and the output gate, against DiffLlama's and Qwen3-Next's layers.

The parity tests build tiny configs (nothing is downloaded), take the layer's own
weights, do the projections, norms and RoPE here with the package's functions, and call
`differential_attention` / `gated_attention_output` for the rest. RoPE tables are
computed in float64 and handed to the layer as its ``position_embeddings`` (Transformers'
rotary modules compute them in float32 whatever the model's dtype).
"""

from __future__ import annotations

import math

import pytest
import torch

from attention import apply_rotary, rms_norm, scaled_dot_product_attention
from attention.differential import (
    differential_attention,
    differential_lambda,
    differential_lambda_init,
    gated_attention_output,
)
from tests.helpers import make_qkv, rope_tables

transformers = pytest.importorskip("transformers")

B, H, HKV, L, S, D = 2, 4, 2, 5, 7, 6
HIDDEN = 24


def additive_causal(n: int, dtype: torch.dtype) -> torch.Tensor:
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.zeros(n, n, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def heads(t: torch.Tensor, width: int) -> torch.Tensor:
    """``(B, L, n * width) -> (B, n, L, width)``."""
    return t.view(*t.shape[:2], -1, width).transpose(1, 2)


# --- differential attention -----------------------------------------------------------


def diffllama_layer(dtype: torch.dtype, implementation: str, layer_idx: int) -> torch.nn.Module:
    from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention

    config = transformers.DiffLlamaConfig(
        hidden_size=HIDDEN,
        num_attention_heads=H,
        num_key_value_heads=HKV,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
        attn_implementation=implementation,
    )
    torch.manual_seed(0)
    layer = DiffLlamaAttention(config, layer_idx=layer_idx).eval()
    with torch.no_grad():  # larger lambda vectors: lambda moves well away from lambda_init
        for p in (layer.lambda_q1, layer.lambda_k1, layer.lambda_q2, layer.lambda_k2):
            p.mul_(4)
    return layer.to(dtype)


def diffllama_lambda(layer: torch.nn.Module) -> torch.Tensor:
    """DiffLlama's lambda as its forward computes it: the dot products summed in float32,
    whatever the model's dtype (``torch.sum(..., dtype=torch.float32)``)."""
    lam = [
        torch.exp(torch.sum(q * k, dim=-1, dtype=torch.float32)).to(q.dtype)
        for q, k in ((layer.lambda_q1, layer.lambda_k1), (layer.lambda_q2, layer.lambda_k2))
    ]
    return lam[0] - lam[1] + layer.lambda_init


# float64 runs the layer's SDPA path: its eager path rounds the softmax to float32
# (softmax(..., dtype=torch.float32).to(query.dtype)) whatever the model's dtype.
@pytest.mark.parametrize(
    ("dtype", "implementation", "atol"),
    [(torch.float32, "eager", 1e-6), (torch.float64, "sdpa", 2e-15)],
)
def test_differential_attention_reproduces_a_diffllama_layer(
    dtype: torch.dtype, implementation: str, atol: float
) -> None:
    layer = diffllama_layer(dtype, implementation, layer_idx=3)
    x = torch.randn(B, L, HIDDEN, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        expected, _ = layer(x, rope_tables(L, D, 1000.0, dtype), additive_causal(L, dtype))

        q, k = (
            apply_rotary(heads(p(x), D), base=1000.0, pairing="half")
            for p in (layer.q_proj, layer.k_proj)
        )
        v = heads(layer.v_proj(x), D)  # (B, Hkv, L, D)
        # DiffLlama's layout: query heads i and i + H/2 make one differential head, key
        # heads likewise, and its value is value heads j and j + Hkv/2 side by side.
        q1, q2 = q.chunk(2, dim=1)  # (B, H/2, L, D) each
        k1, k2 = k.chunk(2, dim=1)  # (B, Hkv/2, L, D) each
        value = torch.cat(v.chunk(2, dim=1), dim=-1)  # (B, Hkv/2, L, 2D)
        lambda_init = differential_lambda_init(3)
        assert lambda_init == layer.lambda_init
        lam = differential_lambda(
            layer.lambda_q1, layer.lambda_k1, layer.lambda_q2, layer.lambda_k2, lambda_init
        )
        if dtype == torch.float64:
            # DiffLlama sums lambda's dot products in float32 even in a float64 model.
            torch.testing.assert_close(lam, diffllama_lambda(layer), atol=1e-6, rtol=0)
            lam = diffllama_lambda(layer)
        out = differential_attention(
            q1,
            k1,
            q2,
            k2,
            value,
            lam,
            is_causal=True,
            enable_gqa=True,
            lambda_init=lambda_init,
            eps=layer.config.rms_norm_eps,
        )  # (B, H/2, L, 2D)
        ours = layer.o_proj(out.transpose(1, 2).reshape(B, L, H * D))
    torch.testing.assert_close(ours, expected, atol=atol, rtol=0)


def test_lambda_init_is_diffllamas_for_every_layer() -> None:
    from transformers.models.diffllama.modeling_diffllama import lambda_init_fn

    for layer_idx in range(40):
        assert differential_lambda_init(layer_idx) == lambda_init_fn(layer_idx)
    # The paper's 1-based l: layer l = 1 starts at 0.8 - 0.6 = 0.2.
    assert differential_lambda_init(0) == pytest.approx(0.2, abs=1e-15)


def test_differential_lambda_is_the_reparameterisation() -> None:
    g = torch.Generator().manual_seed(0)
    q1, k1, q2, k2 = (0.3 * torch.randn(3, D, generator=g, dtype=torch.float64) for _ in range(4))
    lam = differential_lambda(q1, k1, q2, k2, 0.5)  # one lambda per head: (3,)
    for h in range(3):
        expected = math.exp(q1[h] @ k1[h]) - math.exp(q2[h] @ k2[h]) + 0.5
        assert lam[h].item() == pytest.approx(expected, abs=1e-15)
    assert differential_lambda(q1[0], k1[0], q2[0], k2[0], 0.5).shape == ()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_with_lambda_zero_differential_attention_is_softmax_attention(dtype: torch.dtype) -> None:
    q1, k1, v = make_qkv(B, H, L=L, S=S, D=D, Dv=2 * D, dtype=dtype, Hkv=HKV)
    q2, k2, _ = make_qkv(B, H, L=L, S=S, D=D, Dv=1, dtype=dtype, Hkv=HKV, seed=1)
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(2)) < 0.7
    plain = scaled_dot_product_attention(q1, k1, v, attn_mask=mask, enable_gqa=True)
    diff = differential_attention(q1, k1, q2, k2, v, 0.0, attn_mask=mask, enable_gqa=True)
    assert torch.equal(diff, plain)  # the second map is multiplied by 0, exactly
    normed = differential_attention(
        q1,
        k1,
        q2,
        k2,
        v,
        torch.tensor(0.0, dtype=dtype),
        attn_mask=mask,
        enable_gqa=True,
        lambda_init=0.35,
    )
    torch.testing.assert_close(normed, (1 - 0.35) * rms_norm(plain, eps=1e-5), atol=0, rtol=0)


def test_rows_of_the_difference_sum_to_one_minus_lambda() -> None:
    """(P1 - lambda P2) applied to a value of ones: each row's sum, 1 - lambda_h."""
    q1, k1, _ = make_qkv(B, H, L=L, S=S, D=D, Dv=1, dtype=torch.float64)
    q2, k2, _ = make_qkv(B, H, L=L, S=S, D=D, Dv=1, dtype=torch.float64, seed=1)
    lam = torch.tensor([0.1, 0.5, 0.8, 1.3], dtype=torch.float64)  # one per head
    out = differential_attention(
        q1, k1, q2, k2, torch.ones(S, 1, dtype=torch.float64), lam, is_causal=True
    )
    expected = (1 - lam).view(H, 1, 1).expand(B, H, L, 1)
    torch.testing.assert_close(out, expected, atol=1e-15, rtol=0)
    # and the heads are independent: head 2 alone, with its own scalar lambda
    q1, k1, _ = make_qkv(B, H, L=L, S=S, D=D, Dv=3, dtype=torch.float64)
    v = torch.randn(B, H, S, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    full = differential_attention(q1, k1, q2, k2, v, lam)
    one = differential_attention(q1[:, 2:3], k1[:, 2:3], q2[:, 2:3], k2[:, 2:3], v[:, 2:3], 0.8)
    torch.testing.assert_close(full[:, 2:3], one, atol=1e-15, rtol=0)


# --- the output gate ------------------------------------------------------------------


def qwen3_next_layer(dtype: torch.dtype, implementation: str) -> torch.nn.Module:
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    config = transformers.Qwen3NextConfig(
        hidden_size=HIDDEN,
        num_attention_heads=H,
        num_key_value_heads=HKV,
        head_dim=8,
        partial_rotary_factor=0.5,  # RoPE on the first 4 of the 8 features
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1000.0,
            "partial_rotary_factor": 0.5,
        },
        attn_implementation=implementation,
    )
    torch.manual_seed(0)
    layer = Qwen3NextAttention(config, layer_idx=3).eval()
    for norm in (layer.q_norm, layer.k_norm):
        torch.nn.init.uniform_(norm.weight, -0.5, 0.5)  # the gain is 1 + weight
    return layer.to(dtype)


def qwen3_next_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``Qwen3NextRMSNorm``: gain ``1 + weight``, in float32 whatever the model's dtype.

    The package's `rms_norm` works in float64 on float64 input; given float32 copies it
    rounds as the model does.
    """
    normed = rms_norm(x.float(), weight.float(), eps=1e-6, offset=1.0)
    return normed.to(x.dtype)


@pytest.mark.parametrize(
    ("dtype", "implementation", "atol"),
    [(torch.float32, "eager", 1e-6), (torch.float64, "sdpa", 1e-15)],
)
def test_gated_attention_reproduces_a_qwen3_next_attention_layer(
    dtype: torch.dtype, implementation: str, atol: float
) -> None:
    layer = qwen3_next_layer(dtype, implementation)
    Dh, R = 8, 4
    x = torch.randn(B, L, HIDDEN, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        expected, _ = layer(x, rope_tables(L, R, 1000.0, dtype), additive_causal(L, dtype))

        # Qwen3-Next's q_proj: per head, the query's 8 outputs, then the gate's 8.
        query, gate = heads(layer.q_proj(x), 2 * Dh).chunk(2, dim=-1)  # (B, H, L, Dh) each
        key = heads(layer.k_proj(x), Dh)  # (B, Hkv, L, Dh)
        query, key = (
            qwen3_next_rms_norm(t, norm.weight)
            for t, norm in ((query, layer.q_norm), (key, layer.k_norm))
        )
        query, key = (
            torch.cat([apply_rotary(t[..., :R], base=1000.0, pairing="half"), t[..., R:]], dim=-1)
            for t in (query, key)
        )
        value = heads(layer.v_proj(x), Dh)
        out = scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=True)
        gated = gated_attention_output(out, gate)  # (B, H, L, Dh)
        ours = layer.o_proj(gated.transpose(1, 2).reshape(B, L, H * Dh))
        ungated = layer.o_proj(out.transpose(1, 2).reshape(B, L, H * Dh))
    torch.testing.assert_close(ours, expected, atol=atol, rtol=0)
    assert (ungated - expected).abs().max() > 1e-2  # the gate is not a no-op


def test_the_gate_scales_each_feature_by_its_logistic() -> None:
    out = torch.randn(B, H, L, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(gated_attention_output(out, torch.zeros_like(out)), out / 2)
    per_head = torch.tensor([-math.inf, 0.0, 2.0, math.inf], dtype=torch.float64).view(H, 1, 1)
    gated = gated_attention_output(out, per_head)  # headwise: one logit per head
    assert gated[:, 0].eq(0).all() and torch.equal(gated[:, 3], out[:, 3])
    torch.testing.assert_close(gated[:, 2], out[:, 2] / (1 + math.exp(-2.0)), atol=1e-15, rtol=0)


# --- bad input ------------------------------------------------------------------------


def test_bad_differential_arguments_are_refused() -> None:
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=D, dtype=torch.float32)
    with pytest.raises(
        ValueError, match=r"query2 must have the shape of query1; .*query2 \(2, 4, 4, 6\)"
    ):
        differential_attention(q, k, q[..., :4, :], k, v, 0.5)
    with pytest.raises(ValueError, match=r"key2 must have the shape of key1"):
        differential_attention(q, k, q, k[..., :3, :], v, 0.5)
    with pytest.raises(
        ValueError, match=r"lambda_full must have shape \(\) or \(4,\), one per head; got \(3,\)"
    ):
        differential_attention(q, k, q, k, v, torch.zeros(3))
    with pytest.raises(ValueError, match="lambda_full must be finite"):
        differential_attention(q, k, q, k, v, float("nan"))
    with pytest.raises(TypeError, match="lambda_full must be a real number; got str"):
        differential_attention(q, k, q, k, v, "0.5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lambda_init must be a real number"):
        differential_attention(q, k, q, k, v, 0.5, lambda_init=True)
    with pytest.raises(ValueError, match="key and value must have the same length S"):
        differential_attention(q, k, q, k, v[..., :3, :], 0.5)
    with pytest.raises(TypeError, match="query1 and query2 must have the same dtype"):
        differential_attention(q, k, q.double(), k.double(), v, 0.5)
    with pytest.raises(ValueError, match="pass either attn_mask or is_causal"):
        differential_attention(
            q, k, q, k, v, 0.5, attn_mask=torch.ones(L, S, dtype=torch.bool), is_causal=True
        )
    with pytest.raises(ValueError, match="layer_idx must be >= 0; got -1"):
        differential_lambda_init(-1)
    with pytest.raises(TypeError, match="layer_idx must be an int"):
        differential_lambda_init(1.0)  # type: ignore[arg-type]
    z = torch.zeros(D)
    with pytest.raises(ValueError, match=r"same shape \(\.\.\., D\); .*lambda_k2 \(5,\)"):
        differential_lambda(z, z, z, torch.zeros(5), 0.2)
    with pytest.raises(ValueError, match="lambda_init must be finite"):
        differential_lambda(z, z, z, z, float("inf"))
    with pytest.raises(
        ValueError,
        match=r"gate must broadcast to attn_output's shape \(2, 4, 5, 6\); got gate \(4, 5, 2\)",
    ):
        gated_attention_output(q, torch.zeros(H, L, 2))
    with pytest.raises(TypeError, match="attn_output and gate must have the same dtype"):
        gated_attention_output(q, q.double())

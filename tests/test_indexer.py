"""DeepSeek Sparse Attention (attention.indexer), against Transformers' DeepSeek-V3.2 layer.

The parity tests build a tiny ``DeepseekV32Config`` (nothing is downloaded), take the
layer's own weights, do the projections, norms and RoPE here with the package's
functions, and call `indexer_scores`, `topk_keys` and `topk_sparse_attention` for the
rest. The RoPE tables are computed in float64 and handed to the layer as its
``position_embeddings``: Transformers' rotary module computes them in float32 even for a
float64 model, which would cap the float64 comparison at float32's rounding.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attention.indexer
from attention import apply_rotary, rms_norm, scaled_dot_product_attention
from attention.indexer import indexer_scores, topk_keys, topk_mask, topk_sparse_attention
from tests.helpers import make_qkv, rope_tables

transformers = pytest.importorskip("transformers")

B, H, HKV, L, S, D, DV = 2, 4, 2, 5, 7, 6, 3

# The tiny DeepSeek-V3.2: pairwise-distinct sizes where the layer allows.
TINY = {
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,  # MLA expands its latent to every head
    "q_lora_rank": 12,
    "kv_lora_rank": 10,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 6,
    "v_head_dim": 5,
    "index_n_heads": 5,  # with 3, some keys tie at 0 (ReLU cuts every head) in the top k
    "index_head_dim": 8,
    "index_topk": 3,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
}
SEQ = 9  # longer than index_topk: most queries drop keys


def rotate_first(x: torch.Tensor, dims: int, base: float, pairing: str) -> torch.Tensor:
    """RoPE on the first ``dims`` features of ``x`` ``(..., L, D)``; the rest pass through."""
    rotated = apply_rotary(x[..., :dims], base=base, pairing=pairing)  # type: ignore[arg-type]
    return torch.cat([rotated, x[..., dims:]], dim=-1)


def additive_causal(n: int, dtype: torch.dtype) -> torch.Tensor:
    """``(B, 1, n, n)``: 0 where a query may attend, the dtype's minimum elsewhere."""
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    mask = torch.zeros(n, n, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    return mask.expand(B, 1, n, n)


def deepseek_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``DeepseekV32RMSNorm``: it normalises in float32 whatever the model's dtype.

    The package's `rms_norm` works in float64 on float64 input; given a float32 copy it
    rounds as the model does.
    """
    return weight * rms_norm(x.float(), eps=1e-6).to(x.dtype)


def deepseek_layer(dtype: torch.dtype, implementation: str) -> torch.nn.Module:
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    config = transformers.DeepseekV32Config(**TINY, attn_implementation=implementation)
    torch.manual_seed(0)
    layer = DeepseekV32Attention(config, layer_idx=0).eval()
    # Norms start at ones and zeros; random gains and biases make each one count.
    for norm in (layer.q_a_layernorm, layer.kv_a_layernorm, layer.indexer.k_norm):
        torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
    torch.nn.init.normal_(layer.indexer.k_norm.bias, std=0.3)
    return layer.to(dtype)


def dsa_from_the_layers_weights(
    layer: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index scores, chosen keys and the layer's output, from its weights and our functions."""
    c = layer.config
    R, base = c.qk_rope_head_dim, c.rope_parameters["rope_theta"]
    n = x.shape[1]
    q_resid = deepseek_rms_norm(layer.q_a_proj(x), layer.q_a_layernorm.weight)  # (B, n, r_q)

    # The indexer: H_I heads for the query, one key; RoPE on the first R features, half-split.
    ix = layer.indexer
    iq = ix.wq_b(q_resid).view(B, n, c.index_n_heads, c.index_head_dim).transpose(1, 2)
    iq = rotate_first(iq, R, base, "half")  # (B, H_I, n, D_I)
    ik = F.layer_norm(ix.wk(x), (c.index_head_dim,), ix.k_norm.weight, ix.k_norm.bias, eps=1e-6)
    ik = rotate_first(ik, R, base, "half")  # (B, n, D_I)
    w = ix.weights_proj(x).transpose(1, 2) * c.index_n_heads**-0.5  # (B, H_I, n)
    scores = indexer_scores(iq, ik, w, is_causal=True)  # (B, n, n)
    chosen = topk_keys(scores, c.index_topk)  # (B, n, k)

    # The main attention, MLA: [no-RoPE part, RoPE part] per head, RoPE interleaved.
    q = layer.q_b_proj(q_resid).view(B, n, c.num_attention_heads, -1).transpose(1, 2)
    q_nope, q_rot = q.split([c.qk_nope_head_dim, R], dim=-1)
    latent, k_rot = layer.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, R], dim=-1)
    latent = deepseek_rms_norm(latent, layer.kv_a_layernorm.weight)  # (B, n, d_c)
    kv = layer.kv_b_proj(latent).view(B, n, c.num_attention_heads, -1).transpose(1, 2)
    k_nope, value = kv.split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)
    k_rot = apply_rotary(k_rot, base=base).unsqueeze(1)  # (B, 1, n, R): one key for all heads
    query = torch.cat([q_nope, apply_rotary(q_rot, base=base)], dim=-1)  # (B, H, n, D)
    key = torch.cat([k_nope, k_rot.expand(-1, c.num_attention_heads, -1, -1)], dim=-1)
    out = topk_sparse_attention(query, key, value, chosen, scale=layer.scaling)  # (B, H, n, Dv)
    return scores, chosen, layer.o_proj(out.transpose(1, 2).reshape(B, n, -1))


# float64 runs the layer's SDPA path: its eager path rounds the softmax to float32
# (softmax(..., dtype=torch.float32).to(query.dtype)) whatever the model's dtype.
@pytest.mark.parametrize(
    ("dtype", "implementation", "atol"),
    [(torch.float32, "eager", 1e-6), (torch.float64, "sdpa", 1e-15)],
)
def test_dsa_reproduces_deepseek_v32s_indexer_and_attention(
    dtype: torch.dtype, implementation: str, atol: float
) -> None:
    layer = deepseek_layer(dtype, implementation)
    c = layer.config
    x = torch.randn(B, SEQ, c.hidden_size, generator=torch.Generator().manual_seed(1)).to(dtype)
    cos_sin = rope_tables(SEQ, c.qk_rope_head_dim, c.rope_parameters["rope_theta"], dtype)
    mask = additive_causal(SEQ, dtype)
    positions = torch.arange(SEQ).expand(B, SEQ)
    with torch.no_grad():
        expected, _ = layer(x, cos_sin, mask)
        q_resid = layer.q_a_layernorm(layer.q_a_proj(x))
        expected_keys = layer.indexer(x, q_resid, cos_sin, mask[:, 0], positions).long()
        scores, chosen, ours = dsa_from_the_layers_weights(layer, x)

    # Tie-free: the scores that decide the order of the top k + 1 keys of each row are
    # far apart (the model scores in float32), so the indices cannot flip on rounding.
    top = scores.sort(dim=-1, descending=True).values[..., : c.index_topk + 1]
    gaps = (top[..., :-1] - top[..., 1:])[top[..., 1:].isfinite()]
    assert gaps.min() > 1e-4
    # The keys the model chose, in its order; where a query has fewer than k keys, it
    # lists masked (future) keys, which its mask removes, and we list -1.
    real = chosen >= 0
    assert torch.equal(chosen[real], expected_keys[real])
    query_position = torch.arange(SEQ).view(1, SEQ, 1)
    assert (expected_keys[~real] > query_position.expand_as(real)[~real]).all()
    allowed = (query_position + 1).clamp(max=c.index_topk).squeeze(-1)  # (1, SEQ)
    assert torch.equal(real.sum(-1), allowed.expand(B, SEQ))
    torch.testing.assert_close(ours, expected, atol=atol, rtol=0)


def test_the_indexer_ranks_as_deepseeks_formula_says() -> None:
    """Each score against the paper's equation, term by term, in float64."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(B, 3, L, D, generator=g, dtype=torch.float64)  # (B, H_I, L, D_I)
    k = torch.randn(B, S, D, generator=g, dtype=torch.float64)
    w = torch.randn(B, 3, L, generator=g, dtype=torch.float64)
    keep = torch.rand(L, S, generator=g) < 0.6
    scores = indexer_scores(q, k, w, attn_mask=keep, scale=0.7)
    for b, t, s in [(0, 0, 0), (1, 4, 6), (1, 2, 3), (0, 3, 5)]:
        expected = sum(w[b, j, t] * torch.relu(q[b, j, t] @ k[b, s] * 0.7) for j in range(3))
        if keep[t, s]:
            torch.testing.assert_close(scores[b, t, s], expected, atol=1e-15, rtol=0)
        else:
            assert scores[b, t, s] == float("-inf")
    half = indexer_scores(q.half(), k.half(), w.half(), is_causal=True)
    assert half.dtype == torch.float32  # scores are compared, not stored: no 16-bit ties
    default = indexer_scores(q, k, w)  # scale 1 / sqrt(D_I)
    torch.testing.assert_close(default, indexer_scores(q, k, w, scale=1 / D**0.5), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("enable_gqa", [False, True])
def test_sparse_attention_equals_dense_attention_under_the_mask_of_the_indices(
    dtype: torch.dtype, enable_gqa: bool
) -> None:
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=DV, dtype=dtype, Hkv=HKV if enable_gqa else None)
    g = torch.Generator().manual_seed(3)
    # Each query picks 4 distinct keys at random, in random order; some slots are -1,
    # and query 2 of batch 1 picks nothing at all (it gets zeros, as a masked row).
    indices = torch.rand(B, L, S, generator=g).argsort(dim=-1)[..., :4]  # (B, L, k)
    indices[torch.rand(B, L, 4, generator=g) < 0.3] = -1
    indices[1, 2] = -1
    sparse = topk_sparse_attention(q, k, v, indices, enable_gqa=enable_gqa)
    mask = topk_mask(indices, S).unsqueeze(1)  # (B, 1, L, S), shared by the heads
    dense = scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)
    atol = 1e-6 if dtype == torch.float32 else 1e-15
    torch.testing.assert_close(sparse, dense, atol=atol, rtol=0)
    assert sparse[1, :, 2].eq(0).all()
    # int32 indices (the model's) and one key head shared by all (MLA's multi-query form)
    shared = topk_sparse_attention(q, k[:, :1], v[:, :1], indices.int(), enable_gqa=True)
    expected = scaled_dot_product_attention(q, k[:, :1], v[:, :1], attn_mask=mask)
    torch.testing.assert_close(shared, expected, atol=atol, rtol=0)
    broadcast = topk_sparse_attention(q, k[:, :1], v[:, :1], indices)  # a head axis of 1
    torch.testing.assert_close(broadcast, expected, atol=atol, rtol=0)


def test_sparse_attention_has_the_gradients_of_dense_attention() -> None:
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=DV, dtype=torch.float64)
    indices = torch.rand(B, L, S, generator=torch.Generator().manual_seed(6)).argsort(-1)[..., :3]
    indices[0, 1, 2] = -1
    grads = []
    for dense in (False, True):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        if dense:
            mask = topk_mask(indices, S).unsqueeze(1)
            out = scaled_dot_product_attention(*inputs, attn_mask=mask)
        else:
            out = topk_sparse_attention(*inputs, indices)
        out.pow(2).sum().backward()
        grads.append([t.grad for t in inputs])
    for sparse_grad, dense_grad in zip(*grads, strict=True):
        torch.testing.assert_close(sparse_grad, dense_grad, atol=1e-14, rtol=0)


def test_sparse_attention_ignores_the_keys_it_did_not_choose() -> None:
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=DV, dtype=torch.float64)
    indices = torch.tensor([[0, 3], [1, 5], [4, 3], [4, -1], [3, 1]]).expand(B, L, 2)
    unchosen = ~topk_mask(indices, S).any(dim=(0, 1))  # keys no query chose
    assert unchosen.any()
    k2, v2 = k.clone(), v.clone()
    k2[..., unchosen, :], v2[..., unchosen, :] = 1e3, float("nan")
    assert torch.equal(
        topk_sparse_attention(q, k, v, indices), topk_sparse_attention(q, k2, v2, indices)
    )


def test_with_k_at_least_the_allowed_keys_dsa_is_full_causal_attention() -> None:
    q, k, v = make_qkv(B, H, L=S, S=S, D=D, Dv=DV, dtype=torch.float64)  # self-attention
    g = torch.Generator().manual_seed(4)
    iq = torch.randn(B, 3, S, 8, generator=g, dtype=torch.float64)
    scores = indexer_scores(
        iq,
        torch.randn(B, S, 8, generator=g, dtype=torch.float64),
        torch.randn(B, 3, S, generator=g, dtype=torch.float64),
        is_causal=True,
    )
    full = scaled_dot_product_attention(q, k, v, is_causal=True)
    for top in (S, S + 5):  # k larger than S: S columns, as the model's min(k, S)
        chosen = topk_keys(scores, top)
        assert chosen.shape == (B, S, S)
        torch.testing.assert_close(topk_sparse_attention(q, k, v, chosen), full, atol=1e-15, rtol=0)
    fewer = topk_sparse_attention(q, k, v, topk_keys(scores, 3))  # the last queries drop keys
    assert not torch.allclose(fewer[..., 3:, :], full[..., 3:, :])
    torch.testing.assert_close(fewer[..., :3, :], full[..., :3, :], atol=1e-15, rtol=0)


def test_topk_keys_marks_masked_slots_and_orders_by_score() -> None:
    scores = torch.tensor(
        [[3.0, float("-inf"), 1.0, 2.0], [0.5, float("-inf"), float("-inf"), -4.0]]
    )
    assert topk_keys(scores, 3).tolist() == [[0, 3, 2], [0, 3, -1]]
    assert topk_keys(scores, 9).tolist() == [[0, 3, 2, -1], [0, 3, -1, -1]]
    assert topk_keys(scores, 1).dtype == torch.int64


def test_the_cost_numbers_of_the_docstring_follow_deepseek_v32s_config() -> None:
    """The module's table, recomputed from ``DeepseekV32Config``'s defaults."""
    c = transformers.DeepseekV32Config()
    H_I, D_I, k = c.index_n_heads, c.index_head_dim, c.index_topk
    assert (H_I, D_I, k) == (64, 128, 2048)
    indexer_per_key = H_I * D_I + H_I
    # MLA's multi-query form: every head scores the latent and its RoPE key, sums latents.
    main_per_key = c.num_attention_heads * (c.kv_lora_rank + c.qk_rope_head_dim + c.kv_lora_rank)
    context = 128 * 1024

    def tex(n: float) -> str:
        mantissa, exponent = f"{n:.2e}".split("e")
        return f"{mantissa} \\cdot 10^{{{int(exponent)}}}"

    doc = attention.indexer.__doc__
    assert doc is not None
    for number in (f"{indexer_per_key:,}", f"{main_per_key:,}", f"{context:,}"):
        assert number.replace(",", "{,}") in doc, number
    for number in (main_per_key * k, indexer_per_key * context, main_per_key * context):
        assert tex(number) in doc, tex(number)
    assert f"about {indexer_per_key * context / (main_per_key * k):.1f} times" in doc
    assert f"{round(main_per_key * k / indexer_per_key, -2):,.0f}".replace(",", "{,}") in doc
    assert round(main_per_key / indexer_per_key) == 17
    # MLA's multi-head form: each head's own 192-number key and 128-number value
    heads_per_key = c.num_attention_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim)
    assert f"{heads_per_key:,}".replace(",", "{,}") in doc
    crossover = f"{round(heads_per_key * k / indexer_per_key, -2):,.0f}"
    assert crossover.replace(",", "{,}") in doc
    assert round(main_per_key * context / (indexer_per_key * context + main_per_key * k)) == 13


# --- bad input ------------------------------------------------------------------------


def test_bad_indices_are_refused() -> None:
    q, k, v = make_qkv(B, H, L=L, S=S, D=D, Dv=DV, dtype=torch.float32)
    good = torch.zeros(1, L, 2, dtype=torch.long)
    good[..., 1] = 1
    cases = [
        (good.float(), TypeError, "indices must be an integer tensor"),
        (good.bool(), TypeError, "indices must be an integer tensor"),
        (good.tolist(), TypeError, "indices must be a torch.Tensor"),
        (torch.zeros(1, L, S + 1, dtype=torch.long), ValueError, r"k = 8 keys .* S = 7"),
        (good + 6, ValueError, r"\[0, S\) = \[0, 7\).* got 7"),
        (good - 3, ValueError, r"or be -1 for no key; got -3"),
        (torch.zeros(1, L, 2, dtype=torch.long), ValueError, r"twice for one query; row \(0, 0\)"),
        (good[:, :3], ValueError, r"one row per query, L = 5 .* got indices \(1, 3, 2\)"),
        (torch.tensor([0, 1]), ValueError, r"at least 2-D; got \(2,\)"),
        (good.expand(3, L, 2), ValueError, "leading dimensions that broadcast"),
    ]
    for indices, error, match in cases:
        with pytest.raises(error, match=match):
            topk_sparse_attention(q, k, v, indices)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must have a head axis"):
        topk_sparse_attention(q[0, 0], k[0, 0], v[0, 0], good[0])
    with pytest.raises(ValueError, match=r"k = 2 keys per query from only S = 1"):
        topk_mask(good, 1)
    assert topk_mask(good, 2).shape == (1, L, 2)


def test_bad_indexer_inputs_are_refused() -> None:
    q = torch.zeros(B, 3, L, D)
    k, w = torch.zeros(B, S, D), torch.zeros(B, 3, L)
    with pytest.raises(ValueError, match=r"weights must be \(\.\.\., H_I, L\) = \(\.\.\., 3, 5\)"):
        indexer_scores(q, k, w.transpose(1, 2))
    with pytest.raises(ValueError, match="same head size D_I"):
        indexer_scores(q, torch.zeros(B, S, D + 1), w)
    with pytest.raises(ValueError, match="pass either attn_mask or is_causal"):
        indexer_scores(q, k, w, attn_mask=torch.ones(L, S, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask must broadcast to the scores shape"):
        indexer_scores(q, k, w, attn_mask=torch.ones(3, L, S, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"index_query and weights must have the same dtype"):
        indexer_scores(q, k, w.double())
    with pytest.raises(ValueError, match="index_query must have at least 3 dimensions"):
        indexer_scores(q[0, 0], k, w)
    with pytest.raises(ValueError, match=r"k must be >= 1; got 0"):
        topk_keys(torch.zeros(L, S), 0)
    with pytest.raises(TypeError, match="k must be an int"):
        topk_keys(torch.zeros(L, S), 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN"):
        topk_keys(torch.tensor([[0.0, float("nan")]]), 1)

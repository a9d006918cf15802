"""FlexAttention's ``score_mod`` and ``mask_mod`` on the dense and the tiled functions.

The forward of `scaled_dot_product_attention` and `flash_attention` is compared with
PyTorch's own `flex_attention` (eager on the CPU, with a `create_block_mask` block mask),
for the mods of the FlexAttention announcement: causal, sliding window, documents,
prefix-LM, ALiBi, a T5 bias table, soft-capping. FlexAttention has no backward on the
CPU, so the tiled backward is compared with autograd through `_dense`, the same
computation written densely here. Block sizes 8 and 16 divide none of L = 37, S = 29.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attention._tiled as tiled
from attention import (
    RelativePositionBias,
    alibi_bias,
    alibi_slopes,
    flash_attention,
    relative_position_buckets,
    scaled_dot_product_attention,
)
from attention._tiled import Band, make_schedule
from tests import helpers

B, H, L, D, Dv = 2, 3, 37, 8, 5
BLOCKS = {"block_q": 8, "block_k": 16}

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]

# Two packed sequences per batch row would need a (B, L) table; one shared layout of
# three documents of lengths 11, 17 and 9 is enough to test the capture of a tensor.
DOCUMENT_ID = torch.tensor([0] * 11 + [1] * 17 + [2] * 9)
PREFIX = 6
WINDOW = 5
CAP = 2.0
SLOPES = alibi_slopes(H, dtype=torch.float64)
T5 = RelativePositionBias(H, num_buckets=8, max_distance=20, dtype=torch.float64)
T5_BUCKETS = relative_position_buckets(L, L, num_buckets=8, max_distance=20)


def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


def sliding_window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return (q_idx - kv_idx).abs() < WINDOW


def causal_window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return causal(b, h, q_idx, kv_idx) & sliding_window(b, h, q_idx, kv_idx)


def document(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return (DOCUMENT_ID[q_idx] == DOCUMENT_ID[kv_idx]) & (q_idx >= kv_idx)


def prefix_lm(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return (kv_idx < PREFIX) | (q_idx >= kv_idx)


def softcap(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return CAP * torch.tanh(score / CAP)


def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return score - SLOPES[h] * (q_idx - kv_idx).abs()


def t5_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return score + T5.table.weight.detach()[T5_BUCKETS[q_idx, kv_idx], h]


CASES: dict[str, tuple[ScoreMod | None, MaskMod | None]] = {
    "causal": (None, causal),
    "sliding_window": (None, sliding_window),
    "causal_window": (None, causal_window),
    "document": (None, document),
    "prefix_lm": (None, prefix_lm),
    "alibi": (alibi, causal),
    "t5": (t5_bias, None),
    "softcap_window": (softcap, causal_window),
}


def _flex(
    q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None, mask_mod: MaskMod | None
) -> Tensor:
    """PyTorch's FlexAttention, eager (it warns that it is not compiled)."""
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(mask_mod, B, H, q.shape[-2], k.shape[-2], device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    assert isinstance(out, Tensor)
    return out


def _dense(
    q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None, mask_mod: MaskMod | None
) -> Tensor:
    """The same attention in plain tensor operations: the gradient reference."""
    Lq, S = q.shape[-2], k.shape[-2]
    b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
    q_idx, kv_idx = torch.arange(Lq).view(1, 1, Lq, 1), torch.arange(S).view(1, 1, 1, S)
    scores = q @ k.transpose(-2, -1) / D**0.5
    if score_mod is not None:
        scores = score_mod(scores, b, h, q_idx, kv_idx)
    if mask_mod is not None:
        scores = scores.masked_fill(~mask_mod(b, h, q_idx, kv_idx), float("-inf"))
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row: zeros
    return p @ v


@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_flex_attention(name: str) -> None:
    score_mod, mask_mod = CASES[name]
    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    expected = _flex(q, k, v, score_mod, mask_mod)
    dense = scaled_dot_product_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod)
    tiles = flash_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, **BLOCKS)
    torch.testing.assert_close(dense, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(tiles, expected, atol=1e-12, rtol=0)


def test_cross_attention_float32_matches_flex_attention() -> None:
    """L != S, float32: softcap and a causal mask, bottom-right aligned by the mod."""

    def bottom_right(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return q_idx + (29 - 23) >= kv_idx

    q, k, v = helpers.make_qkv(B, H, L=23, S=29, D=D, Dv=Dv, dtype=torch.float32)
    expected = _flex(q, k, v, softcap, bottom_right)
    dense = scaled_dot_product_attention(q, k, v, score_mod=softcap, mask_mod=bottom_right)
    tiles = flash_attention(q, k, v, score_mod=softcap, mask_mod=bottom_right, **BLOCKS)
    torch.testing.assert_close(dense, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(tiles, expected, atol=1e-6, rtol=0)


def test_mods_equal_the_package_biases() -> None:
    """ALiBi and the T5 table as score_mods equal the same biases passed as attn_mask."""
    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    for score_mod, bias in ((alibi, alibi_bias(H, L, dtype=torch.float64)), (t5_bias, T5(L))):
        for attend in (scaled_dot_product_attention, flash_attention):
            expected = scaled_dot_product_attention(q, k, v, attn_mask=bias.detach())
            torch.testing.assert_close(
                attend(q, k, v, score_mod=score_mod), expected, atol=1e-12, rtol=0
            )


def test_masks_apply_after_score_mod() -> None:
    """is_causal and a float attn_mask combine with the mods, after score_mod."""
    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    bias = alibi_bias(H, L, dtype=torch.float64)

    def softcap_then_alibi(score: Tensor, *indices: Tensor) -> Tensor:
        return alibi(softcap(score, *indices), *indices)

    expected = _flex(q, k, v, softcap_then_alibi, causal_window)
    for attend in (scaled_dot_product_attention, flash_attention):
        out = attend(q, k, v, bias, score_mod=softcap, mask_mod=sliding_window)
        torch.testing.assert_close(out, _flex(q, k, v, softcap_then_alibi, sliding_window))
        out = attend(q, k, v, is_causal=True, score_mod=softcap_then_alibi, mask_mod=sliding_window)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_grouped_query_attention() -> None:
    """h is the query head, with enable_gqa as in FlexAttention."""
    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64, Hkv=1)
    expected = scaled_dot_product_attention(
        q, k.expand(B, H, L, D), v.expand(B, H, L, Dv), score_mod=alibi, mask_mod=causal
    )
    for attend in (scaled_dot_product_attention, flash_attention):
        out = attend(q, k, v, enable_gqa=True, score_mod=alibi, mask_mod=causal)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["causal_window", "document", "alibi", "t5", "softcap_window"])
def test_tiled_backward_matches_dense_autograd(name: str) -> None:
    score_mod, mask_mod = CASES[name]
    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    grad_out = torch.randn(
        B, H, L, Dv, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    inputs = [t.requires_grad_() for t in (q, k, v)]
    tiles = flash_attention(*inputs, score_mod=score_mod, mask_mod=mask_mod, **BLOCKS)
    grads = torch.autograd.grad(tiles, inputs, grad_out)
    expected = torch.autograd.grad(_dense(*inputs, score_mod, mask_mod), inputs, grad_out)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_fully_masked_rows_give_zeros_and_finite_gradients() -> None:
    def late_keys(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx > q_idx + 30) & (h > 0)  # head 0 and queries 7.. see nothing

    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (q, k, v)]
    for attend in (scaled_dot_product_attention, flash_attention):
        out = attend(*inputs, score_mod=softcap, mask_mod=late_keys)
        assert torch.equal(out[:, 0], torch.zeros(B, L, Dv, dtype=torch.float64))
        assert torch.equal(out[:, :, 7:], torch.zeros(B, H, L - 7, Dv, dtype=torch.float64))
        torch.testing.assert_close(out, _dense(*inputs, softcap, late_keys), atol=1e-12, rtol=0)
        grads = torch.autograd.grad(out.sum(), inputs)
        assert all(bool(g.isfinite().all()) for g in grads)


def test_learned_bias_table() -> None:
    """The dense function differentiates the table a score_mod captures; tiles refuse."""
    bias = RelativePositionBias(H, num_buckets=8, max_distance=20, dtype=torch.float64)

    def learned(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + bias.table.weight[T5_BUCKETS[q_idx, kv_idx], h]

    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    out = scaled_dot_product_attention(q, k, v, score_mod=learned)
    (grad,) = torch.autograd.grad(out.sum(), bias.table.weight)
    out = scaled_dot_product_attention(q, k, v, attn_mask=bias(L))
    (expected,) = torch.autograd.grad(out.sum(), bias.table.weight)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)

    with pytest.raises(NotImplementedError, match="score_mod"):
        flash_attention(q, k, v, score_mod=learned)
    with torch.no_grad():  # nothing to differentiate: fine
        out = flash_attention(q, k, v, score_mod=learned, **BLOCKS)
    torch.testing.assert_close(out, _flex(q, k, v, t5_from(bias), None), atol=1e-12, rtol=0)


def t5_from(bias: RelativePositionBias) -> ScoreMod:
    table = bias.table.weight.detach()
    return lambda score, b, h, q_idx, kv_idx: score + table[T5_BUCKETS[q_idx, kv_idx], h]


def test_dense_rules_refuse_mods() -> None:
    """create_graph=True needs the dense backward, which does not apply the mods."""
    q, k, v = (
        t.requires_grad_()
        for t in helpers.make_qkv(B, H, L=9, S=9, D=D, Dv=Dv, dtype=torch.float64)
    )
    out = flash_attention(q, k, v, mask_mod=causal)
    with pytest.raises(NotImplementedError, match="create_graph"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


def test_mask_mod_skips_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks where mask_mod keeps no pair are never computed; full blocks not masked."""
    grid = {"batch": (B, H), "device": torch.device("cpu")}
    dense = make_schedule(L, L, 8, 16)
    assert sum(map(len, dense.key_blocks)) == 5 * 3
    # Causal as a mod: the blocks above the diagonal are skipped, and only the blocks
    # on it are masked (unlike the causal band, a mod does not clip a block's keys).
    as_mod = make_schedule(L, L, 8, 16, mask_mod=causal, **grid)
    assert [len(blocks) for blocks in as_mod.key_blocks] == [1, 1, 2, 2, 3]
    assert as_mod.partial == {(0, 0), (8, 0), (16, 16), (24, 16), (32, 32)}
    # With a band, mask_mod is evaluated on the band's (clipped) blocks: the causal band
    # keeps keys 0..36 for queries 32..36, the window only keys 28..36.
    both = make_schedule(L, L, 8, 16, band=Band(0, None), mask_mod=sliding_window, **grid)
    assert both.key_blocks[4] == ((16, 32), (32, 37))
    documents = make_schedule(L, L, 8, 16, mask_mod=document, **grid)
    # Queries 8..15 (documents 0 and 1) see keys 0..15; 16..23 (document 1) keys 11..23.
    assert documents.key_blocks[1] == ((0, 16),)
    assert documents.key_blocks[2] == ((0, 16), (16, 32))
    assert documents.key_blocks[4] == ((16, 32), (32, 37))
    assert sum(map(len, documents.key_blocks)) == 8

    calls: list[tuple[int, int, int, int]] = []
    block_scores = tiled._block_scores

    def spy(*args: Any, **kwargs: Any) -> tuple[Tensor, bool]:
        i0, i1, j0, j1 = args[5:9]
        calls.append((i0, i1, j0, j1))
        return block_scores(*args, **kwargs)

    q, k, v = helpers.make_qkv(B, H, L=L, S=L, D=D, Dv=Dv, dtype=torch.float64)
    monkeypatch.setattr(tiled, "_block_scores", spy)
    flash_attention(q, k, v, mask_mod=document, **BLOCKS)
    visited = {(i0, j0) for i0, _, j0, _ in calls}
    assert visited == {
        (i0, j0)
        for (i0, _), blocks in zip(documents.query_blocks(), documents.key_blocks, strict=True)
        for j0, _ in blocks
    }
    assert len(visited) == 8  # of 15


@pytest.mark.parametrize("attend", [scaled_dot_product_attention, flash_attention])
def test_errors(attend: Callable[..., Tensor]) -> None:
    q, k, v = helpers.make_qkv(B, H, L=9, S=9, D=D, Dv=Dv, dtype=torch.float64)
    with pytest.raises(TypeError, match="score_mod must be callable"):
        attend(q, k, v, score_mod=3.0)
    with pytest.raises(TypeError, match="mask_mod must be callable"):
        attend(q, k, v, mask_mod="causal")
    with pytest.raises(TypeError, match=r"mask_mod must return a bool tensor .*torch\.int64"):
        attend(q, k, v, mask_mod=lambda b, h, q_idx, kv_idx: q_idx - kv_idx)
    with pytest.raises(TypeError, match=r"score_mod must return a floating-point .*torch\.int64"):
        attend(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: q_idx - kv_idx)
    with pytest.raises(ValueError, match=r"score_mod must return a tensor broadcastable"):
        attend(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: s.sum(-1))
    with pytest.raises(ValueError, match=r"need 4-D inputs .* got query \(9, 8\)"):
        attend(q[0, 0], k[0, 0], v[0, 0], mask_mod=causal)

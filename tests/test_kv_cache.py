"""Incremental decoding with a KV cache equals full causal attention."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention import CausalSelfAttention, KVCache, MultiHeadAttention, causal_mask


def decode_in_chunks(layer, x, chunks):
    cache = KVCache()
    outputs, start = [], 0
    for size in chunks:
        outputs.append(layer(x[:, start : start + size], kv_cache=cache))
        start += size
    assert len(cache) == x.shape[1]
    return torch.cat(outputs, dim=1)


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_token_by_token_equals_full_causal_attention(num_kv_heads):
    torch.manual_seed(0)
    layer = CausalSelfAttention(16, 4, num_kv_heads=num_kv_heads).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    torch.testing.assert_close(decode_in_chunks(layer, x, [1] * 9), layer(x))


@settings(max_examples=25, deadline=None)
@given(chunks=st.lists(st.integers(1, 4), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_any_chunking_equals_full_causal_attention(chunks, seed):
    torch.manual_seed(seed)
    layer = CausalSelfAttention(8, 2).double()
    x = torch.randn(1, sum(chunks), 8, dtype=torch.float64)
    torch.testing.assert_close(decode_in_chunks(layer, x, chunks), layer(x))


def test_cached_causal_mask_is_bottom_right_aligned():
    # Two new queries over five cached keys see keys 0..3 and 0..4: bottom-right.
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2)
    cache = KVCache()
    x = torch.randn(1, 5, 8)
    mha(x[:, :3], x[:, :3], x[:, :3], is_causal=True, kv_cache=cache)
    _, w = mha(x[:, 3:], x[:, 3:], x[:, 3:], is_causal=True, kv_cache=cache, need_weights=True)
    assert torch.equal(w[0] > 0, causal_mask(2, 5, alignment="bottom_right"))


def test_key_padding_mask_covers_cached_keys():
    torch.manual_seed(0)
    layer = CausalSelfAttention(8, 2).double()
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    padding = torch.tensor([[True, False, False, False]])  # first token is padding
    full = layer(x, key_padding_mask=padding)
    cache = KVCache()
    layer(x[:, :3], key_padding_mask=padding[:, :3], kv_cache=cache)
    last = layer(x[:, 3:], key_padding_mask=padding, kv_cache=cache)
    torch.testing.assert_close(last, full[:, 3:])


def test_reset_starts_a_new_sequence():
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    cache.reset()
    assert len(cache) == 0 and cache.key is None


def test_append_rejects_mismatched_shapes():
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    with pytest.raises(
        ValueError, match=r"new key must match the cached key \(B, Hkv, S, D\) in every size but S"
    ):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 5))
    with pytest.raises(
        ValueError, match=r"new value must match the cached value \(B, Hkv, S, Dv\)"
    ):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 6))
    with pytest.raises(ValueError, match=r"key and value must be \(B, Hkv, L_new, D\)"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 5))
    with pytest.raises(TypeError, match=r"cached_key and key must have the same dtype"):
        cache.append(
            torch.zeros(1, 2, 1, 4, dtype=torch.float64),
            torch.zeros(1, 2, 1, 5, dtype=torch.float64),
        )

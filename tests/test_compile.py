"""``torch.compile`` (the CPU inductor backend) gives what eager mode gives.

Readers drop the package's functions and modules into models they compile; the
compiled code must compute the same numbers. Shapes are tiny: the cost here is the
compilation (a few seconds per function), not the arithmetic.
"""

from __future__ import annotations

import pytest
import torch

from attention import MultiHeadAttention, flash_attention, scaled_dot_product_attention


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Each test compiles from scratch: no graph from another test is reused."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def inputs():
    torch.manual_seed(0)
    return torch.randn(3, 2, 4, 9, 8).unbind(0)  # q, k, v: (B, H, L, D)


def test_compiled_scaled_dot_product_attention_matches_eager():
    q, k, v = inputs()
    mask = torch.rand(9, 9) > 0.3
    mask[0] = False  # a fully masked row: zeros, compiled too
    compiled = torch.compile(scaled_dot_product_attention)
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": mask}):
        expected = scaled_dot_product_attention(q, k, v, **kwargs)
        torch.testing.assert_close(compiled(q, k, v, **kwargs), expected)


def test_compiled_flash_attention_matches_eager():
    q, k, v = inputs()
    compiled = torch.compile(flash_attention)
    expected = flash_attention(q, k, v, is_causal=True, block_q=4, block_k=4)
    torch.testing.assert_close(compiled(q, k, v, is_causal=True, block_q=4, block_k=4), expected)


def test_compiled_module_matches_eager_forward_and_backward():
    torch.manual_seed(0)
    module = MultiHeadAttention(8, 2, num_kv_heads=1).eval()
    compiled = torch.compile(module)
    x = torch.randn(2, 9, 8, requires_grad=True)
    expected, _ = module(x, x, x, is_causal=True)
    (expected_grad,) = torch.autograd.grad(expected.square().sum(), x)
    out, _ = compiled(x, x, x, is_causal=True)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)

"""Accuracy: the tiled kernel's error against float64, beside the textbook version's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from attention import flash_attention
from attention_bench.cases import Config, naive_attention

ACCURACY_N = 1024  # float64 references of (1, 8, n, n) at 1024: 64 MiB, a second


def measure_accuracy(config: Config, n: int = ACCURACY_N) -> list[dict[str, Any]]:
    """Errors against float64, and gradients against SDPA's in float64, at length ``n``.

    FlashAttention's own criterion: the tiled result in float32 may be no further from
    a float64 reference than twice the textbook float32 result is. Its gradients,
    computed in float64, must equal those of ``F.scaled_dot_product_attention`` to
    rounding (a wrong backward formula is off by far more than 1e-8).
    """
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.batch, config.heads, n, config.head_dim)  # (B, H, n, D)
    q, k, v, grad_out = (torch.randn(shape, generator=generator) for _ in range(4))
    rows = []
    for causal in config.causal:
        with torch.no_grad():
            exact = naive_attention(q.double(), k.double(), v.double(), causal)
            naive_error = (naive_attention(q, k, v, causal).double() - exact).abs().max()
            flash_error = (flash_attention(q, k, v, is_causal=causal).double() - exact).abs().max()

        def gradients(fn: Callable[..., torch.Tensor], causal: bool = causal) -> list[torch.Tensor]:
            leaves = [t.double().requires_grad_() for t in (q, k, v)]
            fn(*leaves, is_causal=causal).backward(grad_out.double())  # type: ignore[no-untyped-call]
            return [t.grad for t in leaves if t.grad is not None]

        differences = zip(
            gradients(flash_attention), gradients(F.scaled_dot_product_attention), strict=True
        )
        rows.append(
            {
                "n": n,
                "causal": causal,
                "naive_max_error": naive_error.item(),
                "flash_max_error": flash_error.item(),
                "error_ratio": (flash_error / naive_error).item(),
                "gradient_max_difference_float64": max(
                    (ours - theirs).abs().max().item() for ours, theirs in differences
                ),
            }
        )
    return rows

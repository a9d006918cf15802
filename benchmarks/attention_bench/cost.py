r"""The cost model: attended pairs, credited FLOPs, and why a point is skipped.

Softmax attention does two products of $2 \cdot L S D$ FLOPs each per head: $4 L S D$
forward, counted over the pairs the function *attends to* (causal: $n(n+1)/2$ pairs; a
window of $w$: the pairs inside the band); work done and then masked away is not
credited. The backward pass counts as 2.5 forward passes (FlashAttention's convention:
five products of the forward's size), so forward + backward is 3.5 forward for every
softmax implementation, recomputing or not. Linear attention is counted as its own
products and its backward as 2 forward passes.
"""

from __future__ import annotations

import numpy as np

from attention_bench.cases import BACKWARD, IMPLEMENTATIONS, Config, Point

# Softmax attention's backward pass, in forward passes (FlashAttention's count).
BACKWARD_FACTOR = {"softmax": 2.5, "linear": 2.0}


def attended_pairs(n: int, causal: bool, window: int | None = None) -> int:
    """Query-key pairs one head attends to, for ``L = S = n``."""
    i = np.arange(n)
    if window is None:
        return n * (n + 1) // 2 if causal else n * n
    if causal:  # keys i - window + 1 .. i
        return int(np.minimum(i + 1, window).sum())
    low, high = np.maximum(0, i - window + 1), np.minimum(n - 1, i + window - 1)
    return int((high - low + 1).sum())


def flop_count(point: Point, config: Config, chunk: int = 64) -> float:
    """FLOPs credited to a point (see the module docstring for the convention)."""
    impl = IMPLEMENTATIONS[point.implementation]
    n, D, heads = point.n, config.head_dim, config.batch * config.heads
    if impl.kind == "linear":
        forward = 4 * n * D * D  # φ(K)ᵀV and φ(Q)·that, (D, D) each
        if point.causal:  # plus the C x C products inside each chunk
            forward += 2 * n * min(chunk, n) * (D + D)
        factor = BACKWARD_FACTOR["linear"]
    else:
        window = config.window if impl.kind == "window" else None
        forward = 4 * D * attended_pairs(n, point.causal, window)
        factor = BACKWARD_FACTOR["softmax"]
    total = float(heads * forward)
    return total * (1 + factor) if point.mode == BACKWARD else total


def skip_reason(point: Point, config: Config, available_bytes: int | None = None) -> str | None:
    """Why a point is not measured, or None if it is."""
    impl = IMPLEMENTATIONS[point.implementation]
    if impl.forward_only and point.mode == BACKWARD:
        return "forward only: it is here to show the effect of the query blocks"
    matrices = impl.dense_matrices[point.mode == BACKWARD]
    one = config.batch * config.heads * point.n**2 * 4  # one (B, H, n, n) float32 matrix
    limit = f"run only up to n = {config.dense_limit}, to keep the benchmark short"
    if matrices and point.mode == BACKWARD and point.n > config.dense_limit:
        return (
            f"materialises (B, H, n, n) matrices, about {matrices} alive in the backward"
            f" pass ({matrices * one / 2**30:.2g} GiB at n = {point.n}); {limit}"
        )
    if matrices and point.causal and point.n > config.dense_limit:
        return f"computes all n² scores and masks them, so a causal mask saves nothing; {limit}"
    if matrices and available_bytes is not None and matrices * one > available_bytes / 2:
        return (
            f"needs about {matrices * one / 2**30:.1f} GiB, more than half of the "
            f"{available_bytes / 2**30:.1f} GiB available"
        )
    return None

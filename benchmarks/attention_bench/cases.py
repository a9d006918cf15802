"""What is measured: the implementations, the configuration, one point, and its call.

Every implementation computes attention for ``B = 1`` sequence of ``H = 8`` heads of
size ``D = 64`` in float32 by default, self-attention with ``L = S = n``, with and
without a causal mask, forward only and forward + backward. `make_step` builds a
point's inputs from a fixed seed and returns the call that the timing and memory
modules run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attention import (
    flash_attention,
    linear_attention,
    numpy_reference,
    scaled_dot_product_attention,
    sliding_window_attention,
)

FORWARD, BACKWARD = "forward", "forward+backward"


MODES = (FORWARD, BACKWARD)


FULL_SIZES = (256, 512, 1024, 2048, 4096, 8192)


QUICK_SIZES = (256, 512, 1024)


MiB = 2**20


@dataclass(frozen=True)
class Implementation:
    """One way of computing attention, and what its cost model is."""

    name: str
    label: str
    description: str
    kind: str = "dense"  # "dense": every allowed pair; "window"; "linear"
    backend: str = "torch"  # or "numpy"
    forward_only: bool = False
    # Builds (B, H, n, n) matrices: how many are alive at the peak, forward / forward +
    # backward (read off the memory this benchmark measures, rounded up).
    dense_matrices: tuple[int, int] = (0, 0)


IMPLEMENTATIONS = {
    impl.name: impl
    for impl in [
        Implementation(
            "naive",
            "naive torch",
            "softmax(q @ k.T / sqrt(D)) @ v in PyTorch, the n x n matrix materialised; "
            "causal: masked_fill with a triu mask built per call",
            dense_matrices=(2, 3),
        ),
        Implementation(
            "numpy",
            "NumPy reference",
            "attention.numpy_reference.scaled_dot_product_attention (and its hand-derived "
            "backward); causal: a tril bool mask built per call",
            backend="numpy",
            dense_matrices=(3, 4),
        ),
        Implementation(
            "package",
            "package SDPA (readable)",
            "attention.scaled_dot_product_attention: the package's readable version, "
            "the n x n matrix materialised",
            dense_matrices=(2, 3),
        ),
        Implementation(
            "flash",
            "flash_attention",
            "attention.flash_attention: tiled online softmax in plain PyTorch, 256 x 256 "
            "blocks (FlashAttention-2 loop order), recomputing backward",
        ),
        Implementation(
            "flash_keys_only",
            "flash, key blocks only",
            "attention.flash_attention with block_q = n: the loop over key blocks only, "
            "so the score tile is n x 256 (1-D tiling); shows why the query blocks matter",
            forward_only=True,
        ),
        Implementation(
            "sdpa",
            "F.scaled_dot_product_attention",
            "torch.nn.functional.scaled_dot_product_attention: PyTorch's fused CPU "
            "flash-attention kernel for these inputs",
        ),
        Implementation(
            "linear",
            "linear_attention",
            "attention.linear_attention (elu + 1 features): a different function, "
            "O(n D^2) work; causal in chunks of 64",
            kind="linear",
        ),
        Implementation(
            "sliding_window",
            "sliding_window_attention",
            "attention.sliding_window_attention: only the blocks of the band of `window` "
            "keys are computed (two-sided band when not causal)",
            kind="window",
        ),
    ]
}


@dataclass(frozen=True)
class Config:
    """What to measure, and how long to spend on it."""

    sizes: tuple[int, ...] = FULL_SIZES
    implementations: tuple[str, ...] = tuple(IMPLEMENTATIONS)
    modes: tuple[str, ...] = MODES
    causal: tuple[bool, ...] = (False, True)
    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    window: int = 256
    budget_s: float = 0.3  # minimum measuring time per point (blocked_autorange)
    # Timed calls per point at least. Calls of a second or more get exactly this many,
    # so it sets how far one disturbed call can move a median (5: two of five).
    min_repeats: int = 5
    matmul_sizes: tuple[int, ...] = (2048, 4096)
    memory: bool = True
    # The implementations that materialise (B, H, n, n) matrices run backward, and with
    # a causal mask, only up to this n: beyond it a call takes seconds to minutes and
    # GiB, and a causal mask makes them no cheaper (they compute every score).
    dense_limit: int = 2048
    threads: int = field(default_factory=torch.get_num_threads)
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.implementations) - set(IMPLEMENTATIONS)
        if unknown:
            raise ValueError(
                f"unknown implementations {sorted(unknown)}; known: {list(IMPLEMENTATIONS)}"
            )
        if set(self.modes) - set(MODES):
            raise ValueError(f"modes must be among {MODES}; got {self.modes}")
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"sizes must be positive; got {self.sizes}")


@dataclass(frozen=True)
class Point:
    """One measurement: an implementation at one length, mask and mode."""

    implementation: str
    n: int
    causal: bool
    mode: str

    def label(self) -> str:
        """Short description for the progress line."""
        mask = "causal" if self.causal else "full"
        return f"n={self.n} {self.mode} {mask} {self.implementation}"


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Any:
    """The textbook version: the whole ``(..., L, S)`` score matrix, then softmax."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, S)
    if causal:
        L, S = scores.shape[-2:]
        future = torch.ones(L, S, dtype=torch.bool).triu(1)  # True above the diagonal
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, L, D)


def _torch_function(name: str, n: int, causal: bool, window: int) -> Callable[..., Any]:
    functions: dict[str, Callable[..., Any]] = {
        "naive": lambda q, k, v: naive_attention(q, k, v, causal),
        "package": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=causal),
        "flash": lambda q, k, v: flash_attention(q, k, v, is_causal=causal),
        "flash_keys_only": lambda q, k, v: flash_attention(
            q, k, v, is_causal=causal, block_q=max(n, 1)
        ),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "linear": lambda q, k, v: linear_attention(q, k, v, is_causal=causal),
        "sliding_window": lambda q, k, v: sliding_window_attention(
            q, k, v, window=window, causal=causal
        ),
    }
    return functions[name]


def make_step(point: Point, config: Config) -> Callable[[], None]:
    """Inputs for one point, and a call that runs it once (forward, or forward + backward).

    The inputs are built here, outside the call, from a fixed seed.
    """
    impl = IMPLEMENTATIONS[point.implementation]
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.batch, config.heads, point.n, config.head_dim)  # (B, H, n, D)
    q, k, v, grad_out = (torch.randn(shape, generator=generator) for _ in range(4))
    backward = point.mode == BACKWARD

    if impl.backend == "numpy":
        qn, kn, vn, don = (t.numpy() for t in (q, k, v, grad_out))
        n = point.n

        def numpy_step() -> None:
            mask = np.tril(np.ones((n, n), dtype=bool)) if point.causal else None
            _, weights = numpy_reference.scaled_dot_product_attention(qn, kn, vn, mask)
            if backward:
                numpy_reference.scaled_dot_product_attention_backward(don, qn, kn, vn, weights)

        return numpy_step

    function = _torch_function(point.implementation, point.n, point.causal, config.window)
    if not backward:

        def forward_step() -> None:
            with torch.no_grad():
                function(q, k, v)

        return forward_step

    leaves = [t.requires_grad_() for t in (q, k, v)]

    def backward_step() -> None:
        for t in leaves:
            t.grad = None  # every call allocates its gradients afresh
        function(q, k, v).backward(grad_out)

    return backward_step

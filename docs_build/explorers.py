"""The interactive explorers' side of the build: their starting states, and the static
figure each one shows a reader without JavaScript.

A page places an explorer with a hidden markdown-exec block that calls one of the
``*_explorer()`` functions below. Each prints a ``<div data-explorer="...">`` holding

- ``data-state``: the starting state, as JSON, which the page's script
  (``docs/assets/explorers/explorers.js``) reads when it mounts the explorer;
- a static figure of that same state, computed here with the package: what a reader
  without JavaScript sees, and what the explorer replaces when it starts.

The random numbers of the mask and online-softmax explorers come from the same seeded
generator in both languages (``normals`` here, ``normals`` in ``attention.js``), so the
static figure and the live explorer start from the same numbers.
"""

from __future__ import annotations

import html
import inspect
import json
import math
from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
import torch

import attention
from docs_build.figures import figure_html


def normals(seed: int) -> Callable[[], float]:
    """Standard normal draws: mulberry32 and Box-Muller, as ``normals`` in attention.js."""
    state = seed & 0xFFFFFFFF

    def imul(a: int, b: int) -> int:  # JavaScript's Math.imul: 32-bit wrap-around product
        return (a * b) & 0xFFFFFFFF

    def uniform() -> float:
        nonlocal state
        state = (state + 0x6D2B79F5) & 0xFFFFFFFF
        t = state
        t = imul(t ^ (t >> 15), t | 1)
        t ^= (t + imul(t ^ (t >> 7), t | 61)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    def draw() -> float:
        u, v = uniform(), uniform()  # JavaScript evaluates left to right: 1 - u, then v
        return math.sqrt(-2 * math.log(1 - u)) * math.cos(2 * math.pi * v)

    return draw


def random_matrix(rows: int, cols: int, draw: Callable[[], float]) -> torch.Tensor:
    """``(rows, cols)`` float64 draws, row by row, as ``randomMatrix`` in attention.js."""
    return torch.tensor([[draw() for _ in range(cols)] for _ in range(rows)], dtype=torch.float64)


def _emit(name: str, state: dict[str, Any], fig: Any, caption: str) -> None:
    block_print = inspect.currentframe().f_back.f_back.f_globals.get("print", print)  # type: ignore[union-attr]
    data = html.escape(json.dumps(state), quote=True)
    block_print(
        f'<div class="explorer" data-explorer="{name}" data-state="{data}">'
        f'<div class="explorer-static">{figure_html(fig, caption)}</div></div>'
    )
    plt.close(fig)


SDPA_STATE: dict[str, Any] = {
    "query": [1.5, 0.5],
    "keys": [[2.0, 1.0], [-1.0, 2.0], [0.5, -2.0], [-2.0, -1.0]],
    "values": [[2.0, 2.0], [-2.0, 1.5], [1.0, -2.0], [-1.5, -1.5]],
    "scaling": "sqrt",
    "D": 2,
}


def sdpa_explorer() -> None:
    """The playground of the scaled dot-product attention page."""
    s = SDPA_STATE
    q = torch.tensor([s["query"]], dtype=torch.float64)
    K = torch.tensor(s["keys"], dtype=torch.float64)
    V = torch.tensor(s["values"], dtype=torch.float64)
    weights = attention.attention_weights(q, K)[0]  # scale 1/sqrt(2)
    out = attention.scaled_dot_product_attention(q, K, V)[0]
    # matplotlib gets arrays: a tensor there warns under NumPy 2 (__array_wrap__).
    q, K, V, weights, out = (t.numpy() for t in (q, K, V, weights, out))
    fig, (left, right, bars) = plt.subplots(1, 3, figsize=(9.5, 3.2), layout="constrained")
    for ax, title in ((left, "query and keys"), (right, "values and output")):
        ax.set(xlim=(-3, 3), ylim=(-3, 3), aspect="equal", title=title)
        ax.axhline(0, color="0.8", lw=0.8)
        ax.axvline(0, color="0.8", lw=0.8)
    left.scatter(*K.T, color="C0")
    left.scatter(*q.T, color="C1")
    left.annotate("q", q[0], xytext=(6, 6), textcoords="offset points")
    for j, (k, v) in enumerate(zip(K, V, strict=True)):
        left.annotate(f"k{j + 1}", k, xytext=(6, 6), textcoords="offset points")
        right.annotate(f"v{j + 1}", v, xytext=(6, 6), textcoords="offset points")
    right.scatter(*V.T, color="C2")
    right.scatter(*out, marker="s", facecolor="none", edgecolor="C1", s=80)
    right.annotate("output", out, xytext=(6, -12), textcoords="offset points")
    bars.barh([f"k{j + 1}" for j in range(len(K))], weights, color="C0")
    bars.invert_yaxis()
    bars.set(xlim=(0, 1), title="softmax weights")
    _emit(
        "sdpa",
        s,
        fig,
        "The playground's starting point: a query, four keys and their values in two "
        "dimensions; the weights are the softmax of the scores scaled by 1/√2, and the "
        f"output, ({out[0]:.2f}, {out[1]:.2f}), is the values' weighted mean. With "
        "JavaScript on, the points can be dragged.",
    )


MASK_STATE: dict[str, Any] = {
    "L": 5,
    "S": 5,
    "causal": True,
    "alignment": "top_left",
    "window": 0,
    "lengths": [5, 3],
    "seed": 3,
}


def mask_explorer() -> None:
    """The explorer of the masks page (its static figure: sequence 1, as it starts)."""
    s = MASK_STATE
    L, S = s["L"], s["S"]
    mask = attention.combine_masks(
        attention.causal_mask(L, S, alignment=s["alignment"]),
        attention.padding_mask(s["lengths"], max_length=S)[:, None, :],
    )[0]
    draw = normals(s["seed"])
    q, k = random_matrix(10, 4, draw)[:L], random_matrix(10, 4, draw)[:S]
    weights = attention.attention_weights(q, k, attn_mask=mask)
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.5, 3.0), layout="constrained")
    left.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1.3)
    left.set(title="mask", xlabel="key j", ylabel="query i")
    right.imshow(weights.numpy(), cmap="Oranges", vmin=0, vmax=1)
    right.set(title="softmax weights", xlabel="key j")
    _emit(
        "masks",
        s,
        fig,
        "The mask explorer's starting point: a causal mask over 5 queries and 5 keys "
        "(left) and the softmax weights it leaves (right), each row a distribution over "
        "the keys at or before its query. With JavaScript on, the sizes, the alignment, "
        "a sliding window and the padding of two sequences can be changed.",
    )


ONLINE_STATE: dict[str, Any] = {"S": 8, "D": 4, "blockSize": 2, "seed": 1}


def online_softmax_explorer() -> None:
    """The block-by-block stepper of the complexity page."""
    s = ONLINE_STATE
    draw = normals(s["seed"])
    q = random_matrix(1, s["D"], draw)
    K = random_matrix(s["S"], s["D"], draw)
    V = random_matrix(s["S"], 2, draw)
    b = s["blockSize"]
    seen = list(range(b, s["S"] + 1, b))
    # The online state after a block is exactly attention over the keys seen so far.
    prefix = torch.stack([attention.scaled_dot_product_attention(q, K[:n], V[:n])[0] for n in seen])
    dense = attention.scaled_dot_product_attention(q, K, V)[0]
    fig, ax = plt.subplots(figsize=(6.0, 3.0), layout="constrained")
    for d, color in enumerate(("C0", "C1")):
        ax.plot(seen, prefix[:, d], "o-", color=color, label=f"output component {d + 1}")
        ax.axhline(dense[d], color=color, ls="--", lw=1)
    ax.set(xlabel="keys seen", ylabel="output so far", xticks=seen)
    ax.legend(frameon=False)
    _emit(
        "online-softmax",
        s,
        fig,
        f"The online softmax in blocks of {b} keys: after each block the running output "
        "is exactly attention over the keys seen so far; after the last it equals the "
        "dense result (dashed). With JavaScript on, the explorer steps through the "
        "running maximum, sum and accumulator block by block.",
    )

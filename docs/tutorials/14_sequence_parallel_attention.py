# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sequence-parallel attention
#
# **You will learn** how one attention layer runs when its sequence is cut
# across several processes, each holding only its own positions of $Q$,
# $K$ and $V$. You will split a sequence between $W = 4$ processes
# (**ranks**) in two layouts, start four real processes from this page,
# and run the three strategies of
# [`attention.distributed`](../../reference/distributed/) in them: ring
# attention, which passes the keys and values from rank to rank;
# all-gather attention, which collects them all on every rank; and
# Ulysses, which trades positions for heads. Each one's output and
# gradients, put back together, equal dense attention on the whole
# sequence to float64 rounding. You will then count the bytes each rank
# sends, check them against the formulas, and count how much causal work
# each rank gets under each layout.
#
# The [sequence parallelism page](../../concepts/sequence-parallelism/)
# explains the strategies and when each wins; here we run them. Runs in
# under 10 seconds on a CPU.

# %%
import os
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.distributed as dist

import attention
from attention.distributed import (
    all_gather_attention,
    count_traffic,
    gather_sequence,
    ring_attention,
    run_on_ranks,
    shard_sequence,
    ulysses_attention,
    unshard_sequence,
)

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## 1. One sequence, four ranks
#
# A sequence of $n$ positions is cut into $W$ pieces, one per rank: each
# rank keeps $n / W$ rows of $Q$, $K$ and $V$, and computes the output
# rows of its own queries. The letters are those of the package: $n$ is
# the whole sequence's length, $n / W$ what one rank holds.
#
# [`shard_sequence`](../../reference/distributed/#attention.distributed.shard_sequence)
# gives the piece that rank $r$ holds. With `layout="contiguous"` that is
# one run of consecutive positions. With `layout="zigzag"` the sequence is
# cut into $2W$ chunks and rank $r$ holds chunks $r$ and $2W - 1 - r$: one
# from the start and one from the end (section 5 shows why). Shard the
# positions $0, \dots, 15$ themselves to see who holds what:

# %%
W, n_small = 4, 16
positions = torch.arange(n_small)
held = {}
for layout in ("contiguous", "zigzag"):
    held[layout] = [
        shard_sequence(positions, r, W, layout=layout, dim=0)
        for r in range(W)
    ]
    print(f"{layout}:")
    for r, p in enumerate(held[layout]):
        print(f"  rank {r} holds positions {p.tolist()}")
    # every position is held by exactly one rank, and comes back in order
    assert sorted(torch.cat(held[layout]).tolist()) == positions.tolist()
    assert torch.equal(
        unshard_sequence(held[layout], layout=layout, dim=0), positions
    )

chunk = n_small // (2 * W)  # zigzag: 2W chunks of 2 positions
for r in range(W):
    mine = list(range(r * chunk, (r + 1) * chunk))
    mirror = list(range((2 * W - 1 - r) * chunk, (2 * W - r) * chunk))
    assert held["zigzag"][r].tolist() == mine + mirror

# %% [markdown]
# On real tensors the sequence axis of $(B, H, n, D)$ is cut the same way,
# and rank $r$'s shard is the full tensor indexed by the positions it
# holds. The sizes used from here on, pairwise distinct so that a swapped
# axis cannot pass unnoticed:

# %%
B, H, n, D = 2, 8, 40, 16  # batch, heads, sequence length, head size
x = torch.randn(B, H, n, D, dtype=torch.float64)
for layout in ("contiguous", "zigzag"):
    every = torch.arange(n)
    for r in range(W):
        shard = shard_sequence(x, r, W, layout=layout)  # (B, H, n/W, D)
        where = shard_sequence(every, r, W, layout=layout, dim=0)
        assert torch.equal(shard, x[:, :, where])
print(
    f"full tensor {tuple(x.shape)}, each rank's shard {tuple(shard.shape)}"
)
assert shard.shape == (B, H, n // W, D)

# %% [markdown]
# ## 2. Four real processes
#
# [`run_on_ranks(fn, W, *args)`](../../reference/distributed/#attention.distributed.run_on_ranks)
# starts $W$ Python processes, joins them in one `torch.distributed`
# process group (the gloo backend, over this machine's loopback), calls
# `fn(*args)` in each, and returns what each returned, rank 0 first.
# Inside `fn`, `torch.distributed.get_rank()` tells a process which rank
# it is. On a cluster, `torchrun` plays this part (see section 6).
#
# Here is what every rank runs. `full_inputs` builds the whole sequence's
# $Q$, $K$, $V$, an upstream gradient and a key padding mask from one
# seed, so every rank (and later this notebook) has the same numbers
# without sending them anywhere. `on_each_rank` keeps its rank's shard of
# each, runs one strategy after another (forward, then backward with the
# fixed upstream gradient), counts the bytes it sends with
# [`count_traffic`](../../reference/distributed/#attention.distributed.count_traffic),
# and puts the output and the three gradients back together with
# [`gather_sequence`](../../reference/distributed/#attention.distributed.gather_sequence),
# so that we can compare them with dense attention.


# %%
def full_inputs(n, B=2, H=8, D=16):
    """The whole sequence, the same on every rank (one seed): q, k, v
    and an upstream gradient (B, H, n, D), float64, and a key padding
    mask (B, n), True for a padding key."""
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad = (
        torch.randn(B, H, n, D, generator=gen, dtype=torch.float64)
        for _ in range(4)
    )
    padding = torch.zeros(B, n, dtype=torch.bool)
    padding[0, -6:] = True  # the first sequence ends 6 positions early
    padding[1, :3] = True  # the second starts 3 positions late
    return q, k, v, grad, padding


def on_each_rank(n, runs):
    """One rank's part of every run: its shard in, forward and backward,
    bytes counted, the output and gradients gathered from all ranks."""
    strategies = {
        "ring": ring_attention,
        "all-gather": all_gather_attention,
        "Ulysses": ulysses_attention,
    }
    rank, W = dist.get_rank(), dist.get_world_size()
    q, k, v, grad, padding = full_inputs(n)
    report = {
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "positions": shard_sequence(
            torch.arange(n), rank, W, layout="zigzag", dim=0
        ),
        "traffic": {},
        "gathered": {},
    }
    for run in runs:
        strategy, is_causal, layout, padded = run

        def shard(t, dim=-2, layout=layout):
            return shard_sequence(t, rank, W, layout=layout, dim=dim)

        # this rank's rows: (B, H, n/W, D) each, and (B, n/W)
        q_r, k_r, v_r = (shard(t).requires_grad_() for t in (q, k, v))
        mask = shard(padding, dim=-1) if padded else None
        with count_traffic() as forward:
            out = strategies[strategy](
                q_r,
                k_r,
                v_r,
                is_causal=is_causal,
                key_padding_mask=mask,
                layout=layout,
            )
        with count_traffic() as backward:
            out.backward(shard(grad))
        report["traffic"][run] = (forward, backward)
        report["gathered"][run] = [  # (B, H, n, D) each
            gather_sequence(t, layout=layout)
            for t in (out.detach(), q_r.grad, k_r.grad, v_r.grad)
        ]
    return report


# %% [markdown]
# How do four other processes get a function that exists only in this
# notebook? `run_on_ranks` starts the ranks with `torch.multiprocessing`,
# by **forking** this process where the operating system can (Linux
# does): each rank begins as a copy of this process, with its modules
# already imported and its variables and functions defined,
# `on_each_rank` and `full_inputs` included. So we pass `on_each_rank`
# as it is, and no rank has to import PyTorch again.
#
# One thing does not survive the copy: threads. PyTorch's CPU build runs
# its parallel loops on GNU OpenMP threads, and a fork copies only the
# thread that called it; a rank that used the thread pool it inherited
# would wait forever for threads that are not there. So each forked rank
# computes on one thread, as the workers of PyTorch's `DataLoader` do.
# Where the system does not fork (Windows, and macOS, where forking is
# unsafe), the ranks are fresh Python interpreters that import `fn` by
# its module and name: there the two functions would go in a module of
# their own.
#
# Six runs, all in one launch: the three strategies with causal masking
# and the zigzag layout, and the three again without causal masking but
# with the key padding mask, in the contiguous layout.

# %%
STRATEGIES = ("ring", "all-gather", "Ulysses")
RUNS = [  # (strategy, is_causal, layout, key padding)
    *((s, True, "zigzag", False) for s in STRATEGIES),
    *((s, False, "contiguous", True) for s in STRATEGIES),
]

start = time.perf_counter()
reports = run_on_ranks(on_each_rank, W, n, RUNS, timeout=120)
seconds = time.perf_counter() - start
print(
    f"{W} processes started, ran {len(RUNS)} runs each and returned"
    f" in {seconds:.1f} s"
)

# %% [markdown]
# Four reports came back, one per rank. Each rank was its own process
# (its own process id, none of them this notebook's), computed on one
# thread, and held the zigzag positions that `shard_sequence` gives here:

# %%
for rank, report in enumerate(reports):
    print(
        f"rank {rank}: process {report['pid']},"
        f" {report['threads']} thread,"
        f" holds {report['positions'].tolist()}"
    )
assert len(reports) == W
assert all(report["threads"] == 1 for report in reports)
assert len({r["pid"] for r in reports} | {os.getpid()}) == W + 1
every = torch.arange(n)
for rank, report in enumerate(reports):
    expected = shard_sequence(every, rank, W, layout="zigzag", dim=0)
    assert torch.equal(report["positions"], expected)

# %% [markdown]
# ## 3. Every strategy is exact
#
# No rank ever held all of $K$ and $V$ at once in the ring, and none held
# all heads of the whole sequence in Ulysses; yet attention is a softmax
# over *all* keys. The ring and the all-gather compute, on each rank,
# partial results over blocks of keys and merge them with the online
# softmax's rule (the one derived in
# [Efficient attention from scratch](../11_efficient_attention_from_scratch/)):
# partial outputs weighted by their log-sum-exps. Ulysses re-shards with
# an all-to-all so that each rank holds $H / W = 2$ heads of the *whole*
# sequence, and attends them as one process would. If all of this is
# right, the gathered outputs and gradients are dense attention's.
#
# The reference is computed here, in this notebook, on the full sequence
# with the package's
# [`scaled_dot_product_attention`](../../reference/functional/#attention.functional.scaled_dot_product_attention)
# in float64, from the same `full_inputs`:

# %%
q, k, v, grad, padding = full_inputs(n)
assert q.shape == (B, H, n, D)  # the sizes of section 1
print(f"{'strategy':<11}{'masking':<20}{'layout':<11} max |rank - dense|")
worst = 0.0
for run in RUNS:
    strategy, is_causal, layout, padded = run
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    keep = ~padding[:, None, None, :] if padded else None  # (B, 1, 1, n)
    out = attention.scaled_dot_product_attention(
        *leaves, attn_mask=keep, is_causal=is_causal
    )
    out.backward(grad)
    dense = [out.detach()] + [t.grad for t in leaves]  # out, dq, dk, dv
    gathered = reports[0]["gathered"][run]
    error = max(
        (g - d).abs().max().item()
        for g, d in zip(gathered, dense, strict=True)
    )
    masking = "causal" if is_causal else "key padding"
    print(f"{strategy:<11}{masking:<20}{layout:<11} {error:.1e}")
    assert error < 1e-10, run
    worst = max(worst, error)
    for report in reports[1:]:  # every rank gathered the same tensors
        for a, b in zip(report["gathered"][run], gathered, strict=True):
            assert torch.equal(a, b)
print(f"largest difference over outputs and gradients: {worst:.1e}")

# %% [markdown]
# Every difference is at the level of float64 rounding (about $10^{-16}$
# per operation), for the output and for the gradients of $Q$, $K$ and
# $V$, with causal masking across ranks and with padding keys on some
# ranks only. The gradients are exact too because each strategy's
# backward pass sends the gradients of the keys and values back to the
# rank that owns them: summed along the ring, reduce-scattered after the
# all-gather, or re-sharded by a second all-to-all.
#
# ## 4. What each rank sends
#
# Exactness is the same for all three; what differs is the traffic. Take
# as the unit one **block**, one rank's shard of $K$ (or of $V$):
# $B \cdot H \cdot \frac{n}{W} \cdot D$ numbers of 8 bytes. Per rank, in
# one forward and backward pass:
#
# - **ring**: the key/value blocks go around the ring in $W - 1$ hops,
#   so each rank sends $2(W-1)$ blocks forward. Backward the blocks go
#   around again (they were not kept: memory stays at one block), and
#   beside them their gradients, $W$ hops each until they are home:
#   $2(W-1) + 2W$ blocks.
# - **all-gather**: each rank contributes its two blocks once and
#   receives the $2(W-1)$ others. Backward, a reduce-scatter sends the
#   gradients of the other ranks' keys and values to them: $2(W-1)$.
# - **Ulysses**: four all-to-alls ($Q$, $K$, $V$ in, the output back),
#   each sending $\frac{W-1}{W}$ of a block (a rank keeps its own share):
#   $4 \frac{W-1}{W}$ blocks, and the same backward.
#
# Each forward call also checks first that the ranks agree on the call
# (shapes, dtypes and flags, in an all-gather of 24 integers of 4 bytes:
# 96 bytes sent), so that a rank with a wrong shape fails at once instead
# of leaving the others waiting. The counts each rank made:

# %%
block = B * H * (n // W) * D * 8  # bytes: one rank's shard of K
check = 24 * 4  # bytes: the shape check, once per forward call
formulas = {  # bytes one rank sends: (forward, backward)
    "ring": (2 * (W - 1) * block + check, (2 * (W - 1) + 2 * W) * block),
    "all-gather": (2 * block + check, 2 * (W - 1) * block),
    "Ulysses": (
        4 * (W - 1) * block // W + check,
        4 * (W - 1) * block // W,
    ),
}
causal_runs = {run[0]: run for run in RUNS if run[1]}  # unpadded


def in_blocks(counts):
    """Bytes by operation, the shape check left out, in blocks."""
    bytes_ = sum(b for op, b in counts.items() if op != "shape check")
    return bytes_ / block


print(f"one block = {B}·{H}·{n // W}·{D} float64 = {block:,} bytes")
print("strategy    forward  backward  received  operations")
for strategy, run in causal_runs.items():
    forward, backward = reports[0]["traffic"][run]
    operations = sorted(
        (set(forward.sent) | set(backward.sent)) - {"shape check"}
    )
    print(
        f"{strategy:<11}{in_blocks(forward.sent):>8.2f}"
        f"{in_blocks(backward.sent):>10.2f}"
        f"{in_blocks(forward.received):>10.2f}  {', '.join(operations)}"
    )
    for rank, report in enumerate(reports):  # every rank, to the byte
        forward, backward = report["traffic"][run]
        sent = (forward.sent_bytes, backward.sent_bytes)
        assert sent == formulas[strategy], (strategy, rank, sent)
        assert forward.sent["shape check"] == check
print("(blocks sent forward, sent backward, received forward)")

# %% [markdown]
# Measured and predicted agree to the byte, on every rank. Two things to
# read in them:
#
# - The all-gather *sends* little but *receives* as much as the ring
#   (6 blocks each at $W = 4$): what arrives at each rank is the same.
#   The counts are each rank's share as the algorithm sees it; how the
#   backend routes an all-gather (relaying other ranks' blocks, say) is not
#   visible here.
# - The block is $\frac{1}{W}$ of the sequence. So for a fixed sequence,
#   the ring's forward traffic per rank, $2(W-1)$ blocks, is
#   $\frac{2(W-1)}{W}$ times the size of all of $K$: it grows towards two
#   whole tensors (all of $K$ and all of $V$) as $W$ grows. Ulysses' is
#   $\frac{4(W-1)}{W^2}$ times that size: it *falls* as $W$ grows. The
#   formulas just checked at $W = 4$ give, as multiples of all of $K$:

# %%
print(f"{'W':>3}{'ring':>8}{'Ulysses':>9}   (forward, per rank)")
ring_share, ulysses_share = [], []
for w in (2, 4, 8):  # Ulysses needs W to divide H = 8
    ring_share.append(2 * (w - 1) / w)
    ulysses_share.append(4 * (w - 1) / w**2)
    print(f"{w:>3}{ring_share[-1]:>8.3f}{ulysses_share[-1]:>9.3f}")
assert ring_share == sorted(ring_share)  # grows with W
assert ulysses_share == sorted(ulysses_share, reverse=True)  # falls
assert ring_share[0] == ulysses_share[0]  # a tie at W = 2

# %% [markdown]
# Ulysses sends four tensors where the ring sends two, so at $W = 2$ they
# tie; past that Ulysses sends less, and the gap widens with every rank
# added. Ulysses' limit is the number of heads: $W$ must divide $H$ (and
# $H_{kv}$ with grouped-query attention, which also shrinks the ring's
# blocks).
#
# The ring has another advantage that byte counts do not show: it
# **overlaps** its transfers with its compute. At each step a rank first
# posts the transfer of the block it holds to the next rank (asynchronous
# `isend`/`irecv`) and only then attends its queries to that block; by
# the time it is done, the next block has usually arrived. Attending to a
# block costs about $(n / W)^2 H D$ operations, sending it about
# $(n / W) H D$ numbers, so the longer the shards the more completely the
# transfers hide behind the arithmetic. The all-gather and Ulysses must
# wait for their collectives before they can compute.
#
# ## 5. Who does the work, under causal masking
#
# With causal masking the query at position $i$ attends to keys
# $0, \dots, i$: $i + 1$ (query, key) pairs. Late positions cost more than
# early ones, and the ranks wait for one another at every step of an
# exchange, so the slowest rank sets the pace. Count the pairs each rank's
# queries attend to, from the positions it holds (the 16 positions of
# section 1):

# %%
work = {
    layout: [int((p + 1).sum()) for p in held[layout]]
    for layout in ("contiguous", "zigzag")
}
total = n_small * (n_small + 1) // 2  # all causal pairs
for layout, pairs in work.items():
    print(f"{layout:>10}: pairs per rank {pairs}, total {sum(pairs)}")
    assert sum(pairs) == total
per_rank = n_small // W
# contiguous: rank r holds positions r * per_rank .. (r + 1) * per_rank - 1
assert work["contiguous"] == [
    per_rank**2 * r + per_rank * (per_rank + 1) // 2 for r in range(W)
]
assert work["contiguous"] == [10, 26, 42, 58]
assert work["zigzag"] == [total // W] * W == [34] * W  # exactly balanced
first, last = work["contiguous"][0], work["contiguous"][-1]
print(
    f"contiguous: rank 0 does {first / total:.2%} of the work"
    f" (1/W² = {1 / W**2:.2%}),\n"
    f"            rank {W - 1} does {last / first:.1f} times as much"
)

# %% [markdown]
# Why the zigzag balances exactly: its two chunks mirror each other, so
# each position $i$ a rank holds in its early chunk comes with position
# $n - 1 - i$ in its late one, and the two attend to
# $(i + 1) + (n - i) = n + 1$ keys together, whatever $i$ is. Every rank
# holds $\frac{n}{2W}$ such pairs: $\frac{n(n+1)}{2W}$ pairs of work
# each, a $W$-th of the total. The picture, each attended (query, key)
# pair coloured by the rank that computes it:

# %% caption="Left and middle: the causal (query, key) pairs of 16 positions cut across 4 ranks, each coloured by the rank that holds the query (blank: a future key, never computed). Contiguous gives each rank 4 consecutive rows, so rank 0 has a small corner and rank 3 the widest band; zigzag gives each rank 2 early rows and their 2 mirror rows at the end. Right: the pairs per rank, contiguous 10, 26, 42 and 58 (plain bars), zigzag 34 on every rank (hatched), a quarter of the 136 pairs (dotted line)."
colours = plt.get_cmap("tab10").colors[:W]
fig, axes = plt.subplots(
    1,
    3,
    figsize=(7.5, 2.9),
    layout="constrained",
    gridspec_kw={"width_ratios": [1, 1, 1.25]},
)
for ax, layout in zip(axes[:2], ("contiguous", "zigzag"), strict=True):
    owner = np.zeros((n_small, n_small, 4))  # RGBA, clear: not computed
    for r, p in enumerate(held[layout]):
        for i in p.tolist():
            owner[i, : i + 1] = (*colours[r], 1.0)  # query i, keys 0..i
    ax.imshow(owner)
    ax.set(title=layout, xlabel="key", xticks=[0, 15], yticks=[0, 15])
axes[0].set_ylabel("query")
ranks = np.arange(W)
axes[2].bar(ranks - 0.2, work["contiguous"], 0.4, color=colours)
axes[2].bar(
    ranks + 0.2,
    work["zigzag"],
    0.4,
    color=colours,
    hatch="//",
    edgecolor="white",
)
axes[2].axhline(total / W, color="grey", ls=":", lw=1)
_ = axes[2].set(
    xticks=ranks,
    xlabel="rank (hatched: zigzag)",
    ylabel="(query, key) pairs",
    title="work per rank",
)

# %% [markdown]
# The contiguous layout gives rank 0 the top-left corner, about $1/W^2$
# of the work, and the last rank the widest band. For longer sequences the
# shares approach their limits: the first rank's share tends to exactly
# $1 / W^2$, the last rank does $2W - 1$ times the first rank's work, and
# since the slowest rank sets the pace, the contiguous layout takes up to
# $\frac{2W - 1}{W}$ times as long as the balanced one:


# %%
def pairs_per_rank(length, layout):
    """Causal (query, key) pairs each rank's queries attend to."""
    every = torch.arange(length)
    held = [
        shard_sequence(every, r, W, layout=layout, dim=0) for r in range(W)
    ]
    return torch.stack([(p + 1).sum() for p in held])  # query i: i + 1


print(
    f"{'n':>7}{'rank 0 share':>14}{'last/first':>12}{'slowest/mean':>14}"
)
for length in (16, 256, 4096, 65536):
    contiguous = pairs_per_rank(length, "contiguous").double()
    zigzag = pairs_per_rank(length, "zigzag").double()
    mean = zigzag.mean()
    assert torch.equal(zigzag, mean.expand(W))  # balanced, at every n
    share = (contiguous[0] / contiguous.sum()).item()
    spread = (contiguous[-1] / contiguous[0]).item()
    slowest = (contiguous.max() / mean).item()
    print(f"{length:>7}{share:>14.4f}{spread:>12.3f}{slowest:>14.4f}")
limits = (1 / W**2, 2 * W - 1, (2 * W - 1) / W)
print(
    f"{'limit':>7}{limits[0]:>14.4f}{limits[1]:>12.3f}{limits[2]:>14.4f}"
)
assert abs(share - limits[0]) < 1e-4
assert abs(spread - limits[1]) < 1e-2
assert abs(slowest - limits[2]) < 1e-4

# %% [markdown]
# With four ranks, contiguous causal attention takes 1.75 times as long
# as it needs to; with many ranks, nearly twice. The zigzag layout costs
# nothing: each rank still holds $n / W$ positions, and the strategies
# only need to know which global positions those are (the `layout`
# argument), which is all the causal mask depends on.
#
# ## 6. What this does not show
#
# The four processes of section 2 ran on the machine that runs this
# notebook:

# %%
cpus = os.cpu_count() or 1
print(
    f"{W} ranks on {cpus} logical CPU{'s' if cpus > 1 else ''}"
    + (": more ranks than CPUs, so they took turns" if cpus < W else "")
)

# %% [markdown]
# They shared its cores, its memory and its memory bandwidth, and their
# "transfers" were copies through the loopback network of one operating
# system. The wall-clock time printed in section 2, that of four
# single-threaded processes sharing these cores, says nothing about a GPU
# cluster, where each rank has a device of its own, the collectives run
# over NVLink or InfiniBand (NCCL, not gloo), and whether the ring's
# transfers hide behind its compute is the question that matters. What
# carries over unchanged is what was checked here: the results are exact,
# the bytes each rank sends follow the formulas, and the zigzag layout
# balances causal work.
#
# [Run sequence-parallel attention on GPUs](../../how-to/run-sequence-parallel-on-gpus/)
# shows the same functions under `torchrun` with NCCL, one GPU per rank;
# the [sequence parallelism page](../../concepts/sequence-parallelism/)
# compares the strategies' traffic and memory at the sizes of a real
# model, and says when each one wins.
#
# ## Summary
#
# - Sequence parallelism cuts the positions of $Q$, $K$, $V$ across $W$
#   ranks; `shard_sequence` gives each rank its $n / W$ positions,
#   contiguous or zigzag, and `gather_sequence` puts a result back
#   together.
# - `run_on_ranks` starts real processes by forking this one where the
#   system can, so a function defined in a notebook runs on every rank as
#   it is; each forked rank computes on one thread.
# - Ring, all-gather and Ulysses attention all equal dense attention to
#   float64 rounding, outputs and gradients (asserted above).
# - Per rank, in one forward and backward pass, the ring sends $2(W-1)$
#   blocks forward and $4W - 2$ backward, the all-gather receives as many
#   forward, and Ulysses sends $4 \frac{W-1}{W}$ blocks each way: for a
#   given sequence the ring's traffic does not fall as ranks are added,
#   Ulysses' does, and the ring can hide its own behind its compute.
# - Under causal masking the contiguous layout gives the last rank
#   $2W - 1$ times the first rank's work; the zigzag layout gives every
#   rank exactly $\frac{n(n+1)}{2W}$ pairs.
#
# ## Exercises
#
# 1. Change the causal runs in `RUNS` to the contiguous layout and run
#    the notebook again. Do the differences of section 3 or the traffic of
#    section 4 change?
# 2. Predict the traffic table of section 4 for $W = 2$, in blocks. What
#    does the 96-byte shape check become? To check, set `W = 2` in the
#    first cell of section 1 and run everything up to section 5 (whose
#    assertions are written for four ranks).
# 3. Give the model $H = 6$ heads (`full_inputs(n, H=6)` inside
#    `on_each_rank`). Which strategy fails on 4 ranks, and what does its
#    error message say?
#
# **Answers.**
# 1. Neither. The layout decides which positions each rank holds and so
#    how much causal work it does, not what is computed: the differences
#    stay at rounding level and the bytes are the same.
# 2. With $W = 2$ a block is twice as large (20 positions). Ring: 2
#    blocks forward, 6 backward; all-gather: 2 and 2; Ulysses: 2 and 2.
#    The shape check still sends 96 bytes: every rank sends its 12
#    integers once, whatever $W$ is.
# 3. Ulysses, on every rank: `run_on_ranks` raises a `RuntimeError`
#    carrying the traceback of the first rank to fail, which ends in a
#    `ValueError` saying that the number of query heads must be divisible
#    by the number of ranks (4), with the query's shape and its 6 heads.
#    The ring and the all-gather work for any $H$.
#
# **Where next:** the [sequence parallelism page](../../concepts/sequence-parallelism/)
# for the strategies at scale, the
# [`attention.distributed` reference](../../reference/distributed/), and
# [Efficient attention from scratch](../11_efficient_attention_from_scratch/)
# for the online softmax that merges the ranks' partial results.

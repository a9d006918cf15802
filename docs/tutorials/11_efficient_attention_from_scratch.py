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
# # Efficient attention from scratch
#
# **You will learn** how attention can be computed exactly without ever
# holding the $L \times S$ matrix of scores: the **online softmax**, derived
# one cell at a time from a stream of scores, then a streaming weighted sum
# for one query, then a two-dimensional tiled attention in about twenty
# lines, checked against PyTorch's fused kernel and against the package's
# [`flash_attention`](../../reference/efficient/#attention.efficient.flash_attention).
# You will then measure what tiling buys (peak memory, forward) and what it
# leaves as it was (the arithmetic), time the tile loop against PyTorch's
# fused kernel on your CPU, and see why the backward pass
# needs more than a tile loop: autograd through the loop stores every tile,
# while FlashAttention's backward recomputes them from one number per query.
#
# The [complexity page](../../concepts/complexity/) counts the cost of
# dense attention; here we build the way around it. Runs in about 5 seconds
# on a CPU.

# %%
import contextlib
import math
import os
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)
# One thread: the timings compare implementations on equal terms, and stay
# steady when other work shares the machine.
torch.set_num_threads(1)

# %% [markdown]
# ## 1. What we want to avoid
#
# The textbook computation builds the scores $Z = QK^\top/\sqrt{D}$ and the
# probabilities $P = \operatorname{softmax}(Z)$, both $L \times S$ per head,
# before the output $PV$, which is only $L \times D_v$. At $L = S = 8192$
# one float32 $P$ is 256 MiB per head; with 32 heads that is 8 GiB for
# numbers that the forward pass uses once and then discards.


# %%
def naive_attention(q, k, v):
    scores = (
        q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    )  # (..., L, S)
    return torch.softmax(scores, dim=-1) @ v  # (..., L, Dv)


for n in (1024, 8192):
    print(
        f"n = {n}: P is {n * n * 4 / 2**20:,.0f} MiB per head in float32,"
        f" the output {n * 64 * 4 / 2**20:.2f} MiB (D = 64)"
    )

# %% [markdown]
# The output of query $i$ needs only row $i$ of $P$, and that row only
# through two things: its **normaliser** $\sum_j e^{z_{ij}}$ and the
# weighted sum $\sum_j e^{z_{ij}} v_j$. Both are sums over keys, and a sum
# can be taken a piece at a time. The only obstacle is the subtraction of
# the row maximum that keeps `exp` from overflowing, which seems to need the
# whole row before anything else can start.
#
# ## 2. The softmax needs the maximum first
#
# The numerically safe softmax of a row of scores $z_1, \dots, z_S$ is
#
# $$p_j = \frac{e^{z_j - m}}{\ell}, \qquad m = \max_j z_j, \qquad
# \ell = \sum_j e^{z_j - m}.$$
#
# Subtracting $m$ changes nothing mathematically (it cancels between the
# numerator and $\ell$) but keeps every exponent $\le 0$. Without it, float32
# `exp` overflows to infinity above about 88.7, and scores that large occur:
# unscaled dot products of long vectors, or a model with sharp attention.
# The [softmax stability page](../../concepts/softmax-stability/) has the
# details. Here is a row of 12 such scores, drifting upwards so that the
# largest one so far changes several times along the row:

# %%
scores = 84 + torch.linspace(0, 6, 12) + torch.randn(12)  # float32
print("scores:", " ".join(f"{z:.1f}" for z in scores.tolist()))

unshifted = torch.exp(scores).sum()  # overflows
print("sum of exp(z) without the shift:", unshifted.item())
assert torch.isinf(unshifted)

m = scores.max()  # pass 1: the maximum
ell = torch.exp(scores - m).sum()  # pass 2: the sum
p = torch.exp(scores - m) / ell  # pass 3: normalise
torch.testing.assert_close(p, torch.softmax(scores, dim=0))

# %% [markdown]
# That is three passes over the row, and the second cannot start before the
# first has seen every score. For attention, every pass over a row of $P$
# means computing or storing all of it.
#
# ## 3. The online softmax, one score at a time
#
# Suppose the scores arrive one by one. After $t$ of them keep two numbers:
#
# $$m_t = \max_{j \le t} z_j, \qquad \ell_t = \sum_{j \le t} e^{z_j - m_t}.$$
#
# When $z_{t+1}$ arrives the maximum is easy: $m_{t+1} = \max(m_t,
# z_{t+1})$. The sum must be re-expressed against the new maximum. Every old
# term changes by the same factor,
#
# $$e^{z_j - m_{t+1}} = e^{z_j - m_t} \, e^{m_t - m_{t+1}},$$
#
# so the whole old sum does:
#
# $$\ell_{t+1} = \sum_{j \le t+1} e^{z_j - m_{t+1}}
# = e^{m_t - m_{t+1}} \, \ell_t + e^{z_{t+1} - m_{t+1}}.$$
#
# The **rescaling factor** $e^{m_t - m_{t+1}}$ is 1 when the maximum did not
# move, and below 1 when it did: the old terms were measured against a
# smaller maximum and shrink to the new one. Every exponent stays $\le 0$,
# so nothing overflows. Start from $m_0 = -\infty$, $\ell_0 = 0$ (the first
# rescaling factor is $e^{-\infty} = 0$, which drops the empty sum). At the
# end $m_S = m$ and $\ell_S = \ell$: the same two numbers as the three-pass
# version, from one pass. Their combination $m + \log \ell$ is the
# **log-sum-exp** of the row, which `torch.logsumexp` computes directly.

# %%
m = torch.tensor(float("-inf"))  # running maximum m_t
ell = torch.tensor(0.0)  # running sum of exp(z_j - m_t)
trace_m, trace_ell = [], []
for z in scores:  # one score at a time
    m_new = torch.maximum(m, z)
    ell = torch.exp(m - m_new) * ell + torch.exp(z - m_new)  # rescale, add
    m = m_new
    trace_m.append(m.item())
    trace_ell.append(ell.item())

print(f"one pass:        m = {m.item():.4f}, ell = {ell.item():.4f}")
print(f"m + log(ell)   = {(m + ell.log()).item():.6f}")
print(f"torch.logsumexp= {torch.logsumexp(scores, dim=0).item():.6f}")
torch.testing.assert_close(m + ell.log(), torch.logsumexp(scores, dim=0))
torch.testing.assert_close(torch.exp(scores - m) / ell, p)

# %% [markdown]
# The trace shows the mechanism. While the maximum stays put, each score
# adds $e^{z_t - m_t} \le 1$ to $\ell_t$. When a new maximum arrives, the
# old sum is first shrunk by the rescaling factor and the new score adds
# exactly $e^0 = 1$; the bigger the jump, the deeper the drop. Throughout,
# $1 \le \ell_t \le t$.

# %% caption="Online softmax over 12 scores between about 83 and 90: the scores (top, dots), the largest above 88.7 where exp overflows float32 (dotted line), and their running maximum m_t (steps). The running sum ℓ_t (bottom) stays between 1 and about 3, far below the bound t (dotted): at each new maximum (red triangles) the old sum is shrunk before the new score adds exactly 1, so it drops after the big jumps at steps 7 and 12."
steps = np.arange(1, len(scores) + 1)
moved = np.r_[True, np.diff(trace_m) > 0]  # steps where the max changed
fig, (ax1, ax2) = plt.subplots(
    2, 1, figsize=(7, 4.6), sharex=True, layout="constrained"
)
ax1.plot(steps, scores.numpy(), "o", label="score zₜ")
ax1.step(steps, trace_m, where="post", label="running max mₜ")
ax1.axhline(88.7, color="grey", ls=":", lw=1)
ax1.text(1, 88.9, "exp(z) overflows float32 above 88.7", fontsize=8)
ax1.set(ylabel="score")
ax1.legend(loc="lower right", fontsize=8)
ax2.plot(steps, trace_ell, "-", color="C2", label="running sum ℓₜ")
ax2.plot(
    steps[moved],
    np.array(trace_ell)[moved],
    "v",
    color="C3",
    label="new maximum: old sum rescaled",
)
ax2.plot(steps, steps, ":", color="grey", lw=1, label="t (upper bound)")
ax2.set(xlabel="scores seen t", ylabel="ℓₜ")
_ = ax2.legend(fontsize=8)

# %% [markdown]
# ## 4. The weighted sum, streamed: one query over blocks of keys
#
# Attention needs more than the normaliser: the output of a query is
# $o = \sum_j p_j v_j = \frac{1}{\ell} \sum_j e^{z_j - m} v_j$. Keep the
# unnormalised sum against the running maximum,
# $\tilde{o}_t = \sum_{j \le t} e^{z_j - m_t} v_j$, a vector of size $D_v$.
# It changes with the maximum exactly as $\ell_t$ does, so it gets the same
# factor:
#
# $$\tilde{o}_{t+1} = e^{m_t - m_{t+1}} \, \tilde{o}_t
# + e^{z_{t+1} - m_{t+1}} \, v_{t+1}, \qquad o = \tilde{o}_S / \ell_S.$$
#
# Nothing forces one score at a time. A **block** of keys $K_b$ gives a
# block of scores $z_b = q K_b^\top / \sqrt{D}$ at once; the block's largest
# score updates the maximum, and the block's exponentials are summed (for
# $\ell$) and multiplied into its values (for $\tilde{o}$):
#
# $$\begin{aligned}
# m' &= \max\bigl(m, \max z_b\bigr), \\
# \ell' &= e^{m - m'} \ell + \textstyle\sum e^{z_b - m'}, \\
# \tilde{o}' &= e^{m - m'} \tilde{o} + e^{z_b - m'} V_b .
# \end{aligned}$$
#
# One query of size $D = 16$ against $S = 53$ keys in blocks of 8 (the last
# block is short):

# %%
D, S, block = 16, 53, 8
q1 = torch.randn(D)  # one query
K, V = torch.randn(S, D), torch.randn(S, D)

m = torch.tensor(float("-inf"))
ell = torch.tensor(0.0)
acc = torch.zeros(D)  # unnormalised output, o-tilde
for j0 in range(0, S, block):
    z_b = K[j0 : j0 + block] @ q1 / math.sqrt(D)  # (block,) scores
    m_new = torch.maximum(m, z_b.max())
    rescale = torch.exp(m - m_new)
    e_b = torch.exp(z_b - m_new)  # (block,)
    ell = rescale * ell + e_b.sum()
    acc = rescale * acc + e_b @ V[j0 : j0 + block]  # (D,)
    m = m_new
streamed = acc / ell

dense = attention.scaled_dot_product_attention(q1[None], K, V)[0]
print(f"max |streamed - dense| = {(streamed - dense).abs().max():.2e}")
torch.testing.assert_close(streamed, dense)

# %% [markdown]
# Only one block of scores existed at any time: 8 numbers instead of 53.
#
# ## 5. Tiled attention in two dimensions
#
# Now do this for many queries at once. Cut the queries into blocks of
# `block_q` rows as well: each query block keeps its own $m$, $\ell$ and
# $\tilde{O}$ (one row each per query) and sweeps over the key blocks. The
# largest thing alive is one `block_q` $\times$ `block_k` tile of scores.
# This is the loop order of FlashAttention-2: query blocks outside, key
# blocks inside, so a query block's running state never leaves the loop.
#
# Causal attention (top-left aligned, as PyTorch's `is_causal`: query $i$
# sees keys $j \le i$) costs nothing extra to support. Key blocks that start
# after a query block's last row are **skipped**, not computed and masked;
# only blocks that cross the diagonal need a mask inside. Every query sees
# key 0, so after the first key block no row's maximum is $-\infty$ and the
# rescaling never computes $-\infty - (-\infty)$.


# %%
def tiled_attention(
    q, k, v, is_causal=False, block_q=128, block_k=128, visited=None
):
    """softmax(q k^T / sqrt(D)) v for (..., L, D), (..., S, D), (..., S, Dv),
    one (block_q, block_k) tile of scores at a time. If visited is a list,
    (i0, j0, masked) is appended to it for every tile computed."""
    *batch, L, D = q.shape
    S, Dv = k.shape[-2], v.shape[-1]
    rows = []
    for i0 in range(0, L, block_q):
        i1 = min(i0 + block_q, L)
        q_i = q[..., i0:i1, :] / math.sqrt(D)  # (..., bq, D)
        m = q.new_full((*batch, i1 - i0, 1), float("-inf"))  # running max
        ell = q.new_zeros(*batch, i1 - i0, 1)  # running sum
        acc = q.new_zeros(*batch, i1 - i0, Dv)  # unnormalised output
        last = min(i1, S) if is_causal else S  # causal: later keys skipped
        for j0 in range(0, last, block_k):
            j1 = min(j0 + block_k, S)
            z = q_i @ k[..., j0:j1, :].transpose(-2, -1)  # (..., bq, bk)
            masked = is_causal and j1 - 1 > i0  # tile crosses the diagonal
            if masked:
                future = (
                    torch.arange(j0, j1) > torch.arange(i0, i1)[:, None]
                )
                z = z.masked_fill(future, float("-inf"))
            if visited is not None:
                visited.append((i0, j0, masked))
            m_new = torch.maximum(m, z.amax(dim=-1, keepdim=True))
            e = torch.exp(z - m_new)  # (..., bq, bk)
            rescale = torch.exp(m - m_new)  # (..., bq, 1)
            ell = rescale * ell + e.sum(dim=-1, keepdim=True)
            acc = rescale * acc + e @ v[..., j0:j1, :]  # (..., bq, Dv)
            m = m_new
        rows.append(acc / ell)
    return torch.cat(rows, dim=-2)  # (..., L, Dv)


# %% [markdown]
# Check it against PyTorch's `F.scaled_dot_product_attention` with lengths
# that are not multiples of the block size (so the last blocks are short),
# $L \ne S$, distinct sizes for every axis, and the causal mask; then
# against the package's `flash_attention` with the same blocks.

# %%
B, H, L, S, D, Dv = 2, 3, 300, 517, 16, 24
q = torch.randn(B, H, L, D)
k, v = torch.randn(B, H, S, D), torch.randn(B, H, S, Dv)
for is_causal in (False, True):
    ours = tiled_attention(q, k, v, is_causal, block_q=64, block_k=96)
    torch_out = F.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal
    )
    package = attention.flash_attention(
        q, k, v, is_causal=is_causal, block_q=64, block_k=96
    )
    print(
        f"is_causal={is_causal!s:<5}: max |ours - SDPA|"
        f" {(ours - torch_out).abs().max():.1e},"
        f" max |ours - flash| {(ours - package).abs().max():.1e}"
    )
    torch.testing.assert_close(ours, torch_out)
    torch.testing.assert_close(ours, package)

# %% [markdown]
# The package's loop adds one refinement. The shift $m$ does not have to be
# the maximum: $e^{z - c} / \sum e^{z - c}$ is the softmax for *any* $c$, as
# long as no term overflows and some do not underflow. So once every row of
# a query block has met a key, `flash_attention` holds $m$ where it is:
# two of the four passes over each tile (`amax` and the subtraction) and the
# rescaling of $\ell$ and $\tilde{o}$ are gone, leaving `exp` and the row
# sum. It even folds the $-m$ into the product, appending $-m$ to each
# query row and a 1 to each key. If a later score rises so far above the held
# $m$ that a term overflows, it redoes that query block with the update
# above. Here the first key block's maximum is held for all 517 keys:

# %%
z = q[0, 0] @ k[0, 0].T / math.sqrt(D)  # (L, S) scores of one head
held = z[:, :96].amax(dim=-1, keepdim=True)  # the first key block's max
terms = torch.exp(z - held)  # some above 1: later keys score higher
print(f"largest term against the held shift: {terms.max():.2f}")
torch.testing.assert_close(
    terms / terms.sum(dim=-1, keepdim=True), torch.softmax(z, dim=-1)
)

# %% [markdown]
# The causal schedule on a square example shows the work saved by skipping.
# Run `tiled_attention` itself with $L = S = 300$ in $64 \times 64$ tiles and
# let it record, in `visited`, every tile it computes and whether it masked
# it: the tiles above the diagonal never appear, and only those on it are
# masked.

# %% caption="The causal schedule of tiled_attention for L = S = 300 in 64×64 tiles, a 5×5 grid of query blocks (rows) by key blocks (columns): the 10 tiles above the diagonal are skipped (white), the 5 on the diagonal are computed with the mask (orange) and the 10 below it are computed whole (teal), so 60 % of the tiles are computed."
n, bs = 300, 64
visited = []  # (i0, j0, masked), filled in by the loop itself
x = torch.randn(n, 8)
tiled_attention(x, x, x, True, block_q=bs, block_k=bs, visited=visited)
nb = math.ceil(n / bs)
kind = np.zeros((nb, nb))  # 0 skipped, 1 masked inside, 2 computed whole
for i0, j0, masked in visited:
    kind[i0 // bs, j0 // bs] = 1 if masked else 2
counts = {
    name: int((kind == c).sum())
    for c, name in enumerate(["skipped", "masked", "whole"])
}
print(
    ", ".join(f"{c} {name}" for name, c in counts.items()),
    f"-> {(kind > 0).mean():.0%} of the tiles computed",
)
assert len(visited) == int((kind > 0).sum())  # no tile computed twice
assert counts["skipped"] == nb * (nb - 1) // 2  # all above the diagonal
assert counts["masked"] == nb  # only the diagonal tiles

fig, ax = plt.subplots(figsize=(4.2, 3.8), layout="constrained")
cmap = plt.matplotlib.colors.ListedColormap(
    ["white", "#f4a261", "#2a9d8f"]
)
ax.imshow(kind, cmap=cmap, vmin=0, vmax=2)
for a in range(nb):
    for b in range(nb):
        ax.text(
            b,
            a,
            ["skip", "mask", "full"][int(kind[a, b])],
            ha="center",
            va="center",
            fontsize=7,
        )
ax.set_xticks(range(nb), [f"{j}" for j in range(0, n, bs)])
ax.set_yticks(range(nb), [f"{i}" for i in range(0, n, bs)])
_ = ax.set(
    xlabel="key block starts at",
    ylabel="query block starts at",
    title="causal tiles, L = S = 300, 64 x 64",
)

# %% [markdown]
# ## 6. Memory, measured
#
# How much memory does each version need on top of its inputs? PyTorch's
# profiler, with `profile_memory=True`, records every allocation and every
# free (a free is an allocation of negative size) with a timestamp. Sorting
# them by time and keeping a running total gives the peak, the same method
# as on the [complexity page](../../concepts/complexity/). The profiler's
# C++ backend writes two log lines to the process's standard error each
# time it starts and stops; `quiet_stderr` keeps them out of this page.


# %% caption="Peak extra memory of one forward call (B = 1, H = 2, D = 64, float32) against n = 256 to 2048 on log–log axes for the naive version, our tile loop, flash_attention and PyTorch's SDPA, measured while this page was built; the dotted line is one n×n float32 matrix per head and the legend gives each slope. The naive version runs above and parallel to that line (slope about 2: it holds P); the three tiled versions stay far below it, with slopes of about 1 or less."
@contextlib.contextmanager
def quiet_stderr():
    """Send file descriptor 2 to /dev/null (C++ log lines included)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def peak_extra_bytes(fn, *args):
    """Largest number of bytes allocated and not yet freed during fn(*args)."""
    with (
        quiet_stderr(),
        profile(
            activities=[ProfilerActivity.CPU], profile_memory=True
        ) as prof,
    ):
        fn(*args)
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:  # walk the tree of recorded events
        event = stack.pop()
        stack.extend(event.children)
        if event.tag.name == "Allocation":
            events.append(
                (event.start_time_ns, event.extra_fields.alloc_size)
            )
    running = np.cumsum([size for _, size in sorted(events)])  # time order
    return int(running.max())


implementations = {
    "naive": naive_attention,
    "ours": tiled_attention,  # section 5
    "flash": attention.flash_attention,
    "SDPA": F.scaled_dot_product_attention,  # PyTorch's fused kernel
}
B, H, D = 1, 2, 64
ns = np.array([256, 512, 1024, 2048])
peak = {name: [] for name in implementations}
with torch.no_grad():
    for n in ns:
        q, k, v = (torch.randn(B, H, n, D) for _ in range(3))
        for name, fn in implementations.items():
            peak[name].append(peak_extra_bytes(fn, q, k, v))
peak = {name: np.array(p) for name, p in peak.items()}
slope = {
    name: float(np.polyfit(np.log(ns), np.log(p), 1)[0])
    for name, p in peak.items()
}

MiB = 2**20
one_p = B * H * ns**2 * 4  # bytes of one float32 n x n matrix per head
print("peak extra memory in MiB")
print(f"{'n':>5} {'one P':>7} " + " ".join(f"{k:>7}" for k in peak))
for i, n in enumerate(ns):
    cells = " ".join(f"{p[i] / MiB:>7.2f}" for p in peak.values())
    print(f"{n:>5} {one_p[i] / MiB:>7.2f} {cells}")
print("slope", " " * 7, " ".join(f"{s:>7.2f}" for s in slope.values()))

assert slope["naive"] > 1.8  # quadratic: it holds P
assert np.all(peak["naive"] >= one_p)
for name in ("ours", "flash", "SDPA"):
    assert slope[name] < 1.3, name  # at most linear
    assert peak[name][-1] < one_p[-1] / 4, name  # far below one P

fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
for (name, p), marker in zip(peak.items(), "osDv", strict=True):
    ax.loglog(
        ns,
        p / MiB,
        marker=marker,
        label=f"{name} (slope {slope[name]:.2f})",
    )
ax.loglog(ns, one_p / MiB, "k:", lw=1, label="one P: B·H·n²·4 bytes")
ax.set_xticks(ns, [str(n) for n in ns])
ax.set_xticks([], minor=True)
ax.set(
    xlabel="sequence length n = L = S",
    ylabel="peak extra memory (MiB)",
    title=f"forward, B={B}, H={H}, D={D}, float32",
)
_ = ax.legend(fontsize=8)

# %% [markdown]
# The naive version peaks at a small multiple of one $P$ (scores and
# probabilities are alive together) and grows as $n^2$. The three tiled
# versions hold tiles whose size is set by the block sizes, plus buffers
# proportional to $n$ (the output, $m$, $\ell$); at these sizes the fixed
# workspace is a large part of the total, so their slopes come out at or
# below 1.
#
# Time is another matter. Tiling does not reduce the arithmetic (every
# query still meets every key: the cell below counts the FLOPs of the
# three versions PyTorch's FLOP counter can see into and checks that they
# are the same), and our loop runs one small matrix product per tile from
# Python. Median of three calls, as a ratio to PyTorch's fused C++ kernel,
# each call on one thread and timed by that thread's CPU time
# (`time.thread_time`), which counts the work of the call rather than the
# waiting while other programs run. The numbers still vary with the
# machine and its load, and which version comes out ahead depends on the
# processor, so the sentence at the end is written from the times it
# measured; compare ratios, not seconds:


# %%
def cpu_seconds(fn, *args):
    start = time.thread_time()
    fn(*args)
    return time.thread_time() - start


def baddbmm_flops(acc, a, b, out_shape=None, **kwargs):
    return 2 * a[0] * a[1] * a[2] * b[2]  # (b, n, m) @ (b, m, p), in place


def counted_flops(fn, *args):
    """Matrix-product FLOPs of fn(*args). The counter has no formula for
    the in-place product flash_attention adds P V with: given here."""
    extra = {torch.ops.aten.baddbmm_: baddbmm_flops}
    with FlopCounterMode(display=False, custom_mapping=extra) as counter:
        fn(*args)
    return counter.get_total_flops()


print("CPU time as a multiple of SDPA's (median of 3 calls, one thread)")
print(
    f"{'n':>5} {'SDPA ms':>8} "
    + " ".join(f"{k:>7}" for k in implementations)
)
ratios = {}
threads = torch.get_num_threads()
torch.set_num_threads(1)
with torch.no_grad():  # all four ran above already: no warm-up needed
    for n in (1024, 2048):
        q, k, v = (torch.randn(B, H, n, D) for _ in range(3))
        # take turns, so that a burst of load on the machine hits all four
        runs = [
            [cpu_seconds(fn, q, k, v) for fn in implementations.values()]
            for _ in range(3)
        ]
        median = np.median(runs, axis=0)  # seconds, one per implementation
        sdpa = median[-1]
        ratios[n] = dict(zip(implementations, median / sdpa, strict=True))
        cells = " ".join(f"{t / sdpa:>7.2f}" for t in median)
        print(f"{n:>5} {1e3 * sdpa:>8.1f} {cells}")
        # The same arithmetic, whatever the clock says: 4·B·H·n²·D FLOPs,
        # exactly for the two written with @, within 1 % for flash (its
        # keys carry a column of ones). SDPA's kernel is opaque to the
        # counter.
        work = 4 * B * H * n * n * D
        assert counted_flops(naive_attention, q, k, v) == work
        assert counted_flops(tiled_attention, q, k, v) == work
        flash_work = counted_flops(attention.flash_attention, q, k, v)
        assert abs(flash_work / work - 1) < 0.01
torch.set_num_threads(threads)


# The sentence, written from the ratios just measured.
def against_sdpa(ratio):
    if ratio > 1.1:
        return f"slower than SDPA ({ratio:.2f}x its time)"
    if ratio < 0.9:
        return f"faster than SDPA ({ratio:.2f}x its time)"
    return f"about as fast as SDPA ({ratio:.2f}x its time)"


last = ratios[2048]
print()
print(
    textwrap.fill(
        f"At n = 2048 on this machine, our loop was"
        f" {against_sdpa(last['ours'])}, flash_attention"
        f" {against_sdpa(last['flash'])} and the naive version"
        f" {against_sdpa(last['naive'])}, for the same work:"
        f" {4 * B * H * 2048**2 * D:,} FLOPs, as counted for the three the"
        f" counter sees.",
        width=72,
    )
)


# %% [markdown]
# All four do the same arithmetic. What separates them is data movement
# and overhead. The naive version writes $P$ to main memory and reads it
# back for each step of the softmax and again for $PV$, which costs more as
# $P$ outgrows the CPU's caches; a tile is used while it is still in cache.
# Our loop and `flash_attention` pay for Python between tiles, which
# PyTorch's C++ kernel does not. Which of these costs weighs more depends
# on the processor, and on some CPUs a Python tile loop can come close to
# the fused kernel: read the sentence above for yours, and the
# [Performance page](../../performance/) for the committed benchmark and
# the machine it ran on. On a GPU, where on-chip memory is small and fast
# and main memory comparatively slow, the saving in memory traffic is much
# larger: that is where FlashAttention's speed-up comes from (Dao et al.
# measured it on GPUs).
#
# ## 7. The backward pass: storing tiles or recomputing them
#
# Training needs gradients. Autograd can differentiate our tile loop as it
# stands, but to do so it **saves** the inputs of every operation that
# needs them in the backward pass: every tile of scores, every tile of
# exponentials, every rescaling factor. Together they are $P$ again, in
# pieces, more than twice over. A *saved-tensors hook* sees each tensor
# autograd saves; we add up the distinct storages, leaving out $Q$, $K$ and
# $V$ themselves (they exist anyway).


# %% caption="Bytes that autograd saves for the backward pass of one head (D = 64) against n = 256, 512 and 1024 on log–log axes, the legend giving each slope. Our tile loop saves the most, more than the naive version's one P at every n, and both grow as n²; flash_attention and PyTorch's SDPA save only the output and one log-sum-exp per row, and their lines coincide (SDPA hollow and dashed), growing linearly."
def saved_for_backward_bytes(fn, q, k, v):
    """Bytes of the distinct tensors autograd saves while running fn."""
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in inputs:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(q, k, v)
    return sum(saved.values())


ns_grad = np.array([256, 512, 1024])
saved = {name: [] for name in implementations}
for n in ns_grad:
    q, k, v = (
        torch.randn(1, 1, n, D, requires_grad=True) for _ in range(3)
    )
    for name, fn in implementations.items():
        saved[name].append(saved_for_backward_bytes(fn, q, k, v))
saved = {name: np.array(b) for name, b in saved.items()}
saved_slope = {
    name: float(np.polyfit(np.log(ns_grad), np.log(b), 1)[0])
    for name, b in saved.items()
}
print("saved for backward in MiB")
print(f"{'n':>5} " + " ".join(f"{k:>7}" for k in saved))
for i, n in enumerate(ns_grad):
    print(
        f"{n:>5} "
        + " ".join(f"{b[i] / MiB:>7.3f}" for b in saved.values())
    )
print("slope", " ".join(f"{s:>7.2f}" for s in saved_slope.values()))
assert saved_slope["ours"] > 1.8  # every tile kept: ~ n^2
assert saved_slope["flash"] < 1.2  # O and lse: ~ n
assert saved["ours"][-1] > 10 * saved["flash"][-1]
assert np.all(saved["ours"] > saved["naive"])  # tiles: more than one P
# flash and SDPA save the same tensors (O and the log-sum-exp)
np.testing.assert_allclose(saved["flash"], saved["SDPA"], rtol=0.1)

fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
for (name, b), marker in zip(saved.items(), "osDv", strict=True):
    hollow = (
        {"mfc": "none", "ms": 11, "ls": "--"} if name == "SDPA" else {}
    )
    ax.loglog(
        ns_grad,
        b / MiB,
        marker=marker,
        label=f"{name} (slope {saved_slope[name]:.2f})",
        **hollow,
    )
ax.set_xticks(ns_grad, [str(n) for n in ns_grad])
ax.set_xticks([], minor=True)
ax.set(
    xlabel="sequence length n",
    ylabel="saved for backward (MiB)",
    title="what autograd keeps after the forward pass, one head, D=64",
)
_ = ax.legend(fontsize=8)

# %% [markdown]
# Our loop saves more than the naive version does at every $n$ (asserted
# above): each tile's scores, exponentials and masks, instead of one $P$.
# The package's `flash_attention` and PyTorch's kernel save the same few
# bytes (their lines coincide, asserted to within 10%): only the output $O$
# and the **log-sum-exp** of each row,
# $\operatorname{lse}_i = m_i + \log \ell_i$: one number per query. That
# number is enough to rebuild any tile of $P$ exactly,
# $p_{ij} = e^{z_{ij} - \operatorname{lse}_i}$, so the backward
# pass of its custom `torch.autograd.Function` recomputes each tile's
# probabilities, uses them for the tile's share of $dQ$, $dK$ and $dV$, and
# drops them. It does more arithmetic (the scores are computed twice) for
# memory linear in $n$. The formulas are derived on the
# [backward pass page](../../concepts/backward-pass/).
#
# Recomputing must still give the right gradients. In float64, on a small
# problem with distinct sizes, the gradients of `flash_attention`, of
# autograd through our loop, and of PyTorch's kernel agree:

# %%
B, H, L, S, D, Dv = 2, 3, 37, 53, 16, 8
q = torch.randn(B, H, L, D, dtype=torch.float64, requires_grad=True)
k = torch.randn(B, H, S, D, dtype=torch.float64, requires_grad=True)
v = torch.randn(B, H, S, Dv, dtype=torch.float64, requires_grad=True)
grad_out = torch.randn(B, H, L, Dv, dtype=torch.float64)


def gradients(out):
    return torch.autograd.grad(out, (q, k, v), grad_out)


for is_causal in (False, True):
    ref = gradients(
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    )
    flash = gradients(
        attention.flash_attention(
            q, k, v, is_causal=is_causal, block_q=16, block_k=16
        )
    )
    ours = gradients(tiled_attention(q, k, v, is_causal, 16, 16))
    worst = max(
        (a - b).abs().max().item() for a, b in zip(flash, ref, strict=True)
    )
    print(
        f"is_causal={is_causal!s:<5}: max |flash grad - SDPA grad| ="
        f" {worst:.1e}"
    )
    for a, b, c in zip(flash, ours, ref, strict=True):
        torch.testing.assert_close(a, c)
        torch.testing.assert_close(b, c)

# %% [markdown]
# ## Summary
#
# - The **online softmax** keeps a running maximum $m$ and a running sum
#   $\ell$; when the maximum moves, the old sum is multiplied by
#   $e^{m_{\text{old}} - m_{\text{new}}}$. One pass gives what three passes
#   give, and $m + \log \ell$ is the row's log-sum-exp.
# - The unnormalised output $\tilde{o}$ is rescaled by the same factor, so a
#   query's output can be accumulated over blocks of keys and divided by
#   $\ell$ at the end. This is **exact** attention, not an approximation
#   (asserted against PyTorch for odd lengths, $L \ne S$ and causal).
# - Tiling queries and keys bounds the largest intermediate by one tile:
#   peak memory measured linear in $n$ instead of quadratic. The arithmetic
#   is unchanged (counted), so tiling alone buys no speed; in plain Python
#   each tile also pays for its dispatch, which a fused kernel does not.
# - Autograd through the tile loop stores every tile (memory $\sim n^2$
#   again); FlashAttention saves only $O$ and the log-sum-exp and
#   recomputes the tiles in its backward pass, with the same gradients.
# - Variants that change *which* tiles are visited (sliding windows, block
#   sparsity) reuse this loop: see [Attention variants](../../concepts/variants/)
#   and the [`attention.efficient` reference](../../reference/efficient/).
#
# ## Exercises
#
# 1. In section 3, drop the rescaling (`ell = ell + torch.exp(z - m_new)`).
#    Which assertion fails, and is $\ell$ too large or too small? *Hint:*
#    each old term was computed against a smaller maximum.
# 2. Call `tiled_attention` with `block_q=L, block_k=S`, and then with
#    `block_q=1, block_k=1` (on the first 20 queries and 30 keys, to keep it
#    quick). Are the results still equal to SDPA's? What do the two
#    extremes correspond to?
# 3. For causal attention with $L = S = n$ and square tiles of $b$, how many
#    tiles are computed? Check your formula against the schedule picture.
# 4. Measure `peak_extra_bytes` of `tiled_attention` at $n = 2048$ for
#    blocks of 64, 128 and 256. How does the peak change, and why?
#
# **Answers.**
# 1. The log-sum-exp check fails first (the softmax check would fail
#    too): $\ell$ comes out too large, because terms summed
#    against an old, smaller maximum are never shrunk when the maximum
#    grows.
# 2. Yes, both. One tile covering everything is the naive computation (one
#    $L \times S$ tile); tiles of $1 \times 1$ are the one-score-at-a-time
#    loop of section 3 run for every query (exact, and very slow).
# 3. With $c = \lceil n / b \rceil$ blocks per side, $c(c + 1)/2$ tiles, of
#    which $c$ lie on the diagonal: 15 of 25 for the picture's $c = 5$.
# 4. It grows with the block size: the workspace is a few tiles of
#    `block_q` $\times$ `block_k` floats per head, independent of $n$.
#
# **Where next:** the [complexity page](../../concepts/complexity/) measures
# time and memory of these implementations at larger sizes, and
# [Attention variants](../../concepts/variants/) shows the sparse and
# linear variants built on the same ideas.

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
# # Generating with a KV cache
#
# **You will learn** why a language model that generates one token at a time
# keeps the keys and values of every earlier token (a **KV cache**), how to
# pass one to the package's attention layers, and how to check that decoding
# token by token with the cache gives *exactly* what one causal pass over the
# whole sequence gives. You will see why the causal mask of the new tokens
# must be aligned to the bottom-right corner, feed a whole prompt at once
# before decoding (chunked prefill), count the operations each step saves,
# measure the time saved, and compute how much memory the cache costs per
# token with ordinary multi-head attention and with grouped-query attention.
#
# The tools are [`attention.KVCache`](../../reference/kv_cache/#attention.kv_cache.KVCache)
# and the `kv_cache=` argument of
# [`attention.CausalSelfAttention`](../../reference/multi_head/#attention.multi_head.CausalSelfAttention).
# Runs in a few seconds on a CPU.

# %%
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)
torch.set_num_threads(1)  # for the timings of section 6, see there

# %% [markdown]
# ## 1. A small causal model
#
# A decoder-only language model reads tokens $x_0, \dots, x_{t-1}$ and
# predicts $x_t$. Each of its layers lets position $i$ read from positions
# $0, \dots, i$ only (a **causal** mask), so the output at position $i$ never
# depends on anything after it. Generating text repeats one step: run the
# model, take the prediction at the last position, append it, run again.
#
# Our model is as small as it can be while keeping every part that matters
# for the cache: a token embedding plus the sinusoidal position encoding,
# `layers` blocks of layer norm, causal self-attention and a residual
# connection, and a linear head that turns the last hidden vector into one
# score (logit) per vocabulary entry. The weights are random: the model
# produces nonsense, but it is the *same* nonsense with and without the
# cache, and that is what we check.
#
# Only attention mixes positions; the embedding, the layer norms and the head
# act on each position separately. So only attention needs to remember
# anything about earlier positions: its keys and values. The `forward` below
# takes an optional list of caches, one
# [`KVCache`](../../reference/kv_cache/#attention.kv_cache.KVCache) per layer,
# and passes each to its layer. One detail is easy to miss: the new tokens'
# **positions** start where the cache ends, not at 0.


# %%
class TinyDecoder(nn.Module):
    """Embedding + positions, `layers` causal attention blocks, a head."""

    def __init__(
        self, vocab, E, H, layers, num_kv_heads=None, max_len=512
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, E)
        table = attention.sinusoidal_encoding(max_len, E)  # (max_len, E)
        self.register_buffer("positions", table)
        self.norms = nn.ModuleList(nn.LayerNorm(E) for _ in range(layers))
        self.blocks = nn.ModuleList(
            attention.CausalSelfAttention(E, H, num_kv_heads=num_kv_heads)
            for _ in range(layers)
        )
        self.head = nn.Linear(E, vocab)

    def forward(self, tokens, caches=None):
        """Logits (B, L, vocab) for tokens (B, L): the whole sequence, or,
        with `caches`, only the new tokens after the cached ones."""
        start = 0 if caches is None else len(caches[0])
        L = tokens.shape[1]
        x = self.embed(tokens) + self.positions[start : start + L]
        for i, (norm, block) in enumerate(
            zip(self.norms, self.blocks, strict=True)
        ):
            cache = None if caches is None else caches[i]
            x = x + block(norm(x), kv_cache=cache)  # (B, L, E)
        return self.head(x)  # (B, L, vocab)


def new_caches(model):
    return [attention.KVCache() for _ in model.blocks]


VOCAB, E, H, LAYERS = 100, 256, 4, 2
model = TinyDecoder(VOCAB, E, H, LAYERS).eval()
tokens = torch.randint(0, VOCAB, (1, 24))  # (B, T): one sequence
with torch.no_grad():
    full = model(tokens)  # all 24 positions in one causal pass
print("tokens:", tuple(tokens.shape), "-> logits:", tuple(full.shape))

# %% [markdown]
# ## 2. Token by token with the cache equals the full pass
#
# Now feed the same 24 tokens one at a time. At step $t$ the model gets only
# token $x_t$. Each attention layer projects it to one query, one key and one
# value per head, appends the key and value to its cache, and lets the query
# attend over all $t + 1$ cached keys. The keys and values of earlier tokens
# are never recomputed: they depend only on those tokens (and on earlier ones
# through the layers below), which do not change.
#
# Stacking the 24 one-row outputs must give the 24 rows of the full pass.

# %%
caches = new_caches(model)
steps = []
with torch.no_grad():
    for t in range(tokens.shape[1]):
        steps.append(model(tokens[:, t : t + 1], caches))  # (1, 1, vocab)
decoded = torch.cat(steps, dim=1)  # (1, 24, vocab)

key = caches[0].key  # layer 0's cache: (B, Hkv, S, D)
print("cached positions per layer:", [len(c) for c in caches])
print(
    "layer 0 cached keys:",
    tuple(key.shape),
    "values:",
    tuple(caches[0].value.shape),
)
diff = (decoded - full).abs().max().item()
print(f"max |token by token - full pass| = {diff:.2e}")
torch.testing.assert_close(decoded, full)

# %% [markdown]
# The difference is float32 rounding: the one-token path multiplies
# matrices of other shapes, so the sums are accumulated in another order.
#
# ## 3. Why the mask of the new tokens is bottom-right aligned
#
# Inside a layer, $L$ new queries meet $S$ keys, of which the last $L$ are
# the new tokens' own. The new queries are the **last** $L$ positions of the
# sequence, so query $i$ (counting from 0 among the new ones) sits at
# position $S - L + i$ and may see keys $0, \dots, S - L + i$: the diagonal
# of the mask ends in the bottom-right corner. PyTorch's
# `is_causal=True` instead aligns it to the **top-left** corner (query $i$
# sees keys $0, \dots, i$), which is right only when $L = S$. The
# [masks page](../../concepts/masks/#why-decoding-with-a-kv-cache-needs-bottom-right)
# explains both alignments. Here are the two masks for $L = 3$ new queries
# over $S = 8$ keys.

# %% caption="The two causal masks for 3 new queries (positions 5, 6 and 7) over 8 keys, 1 where a query may attend. Bottom-right (top panel), right for a cache, lets the query at position 5 see keys 0 to 5 and the newest all 8; top-left (bottom panel), PyTorch's is_causal, lets the same queries see only key 0, keys 0 to 1 and keys 0 to 2."
L_new, S_all = 3, 8
masks = {
    "bottom-right (right for a cache)": attention.causal_mask(
        L_new, S_all, alignment="bottom_right"
    ),
    "top-left (PyTorch's is_causal)": attention.causal_mask(L_new, S_all),
}
fig, axes = plt.subplots(2, 1, figsize=(6, 4.6), layout="constrained")
for ax, (name, mask) in zip(axes, masks.items(), strict=True):
    attention.plot_attention(
        mask.float(),
        query_labels=[f"pos {S_all - L_new + i}" for i in range(L_new)],
        ax=ax,
        fmt=".0f",
        title=name,
        colorbar=False,
    )
    ax.set_xlabel("key position")

# %% [markdown]
# The last three rows of a full causal pass are reproduced by the
# bottom-right mask and not by the top-left one. With a single new query
# ($L = 1$, the usual decoding step) the bottom-right mask is all True, while
# `is_causal=True` would let the newest token see **only the first token**:
# a silent bug that produces fluent-looking garbage.

# %%
q, k, v = torch.randn(3, 1, H, S_all, E // H).unbind(0)  # (B, H, S, D)
reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
for L in (3, 1):
    q_new, expected = q[:, :, -L:], reference[:, :, -L:]  # last L queries
    right = attention.scaled_dot_product_attention(
        q_new,
        k,
        v,
        attn_mask=attention.causal_mask(
            L, S_all, alignment="bottom_right"
        ),
    )
    wrong = F.scaled_dot_product_attention(q_new, k, v, is_causal=True)
    err_right = (right - expected).abs().max().item()
    err_wrong = (wrong - expected).abs().max().item()
    print(
        f"L = {L}: max |diff| bottom-right {err_right:.1e}, "
        f"top-left {err_wrong:.2f}"
    )
    torch.testing.assert_close(right, expected)
    assert err_wrong > 0.1
# with one query, top-left is_causal reads key 0 alone: out = v_0
torch.testing.assert_close(wrong, v[:, :, :1])

# %% [markdown]
# The package's layers choose the alignment themselves: given a `kv_cache`,
# `is_causal=True` means bottom-right. That is why section 2 worked with no
# mask argument at all.
#
# ## 4. Chunked prefill: the prompt at once, then one token at a time
#
# A real generator receives a prompt first. Running the prompt token by token
# would waste the parallelism of attention, so the prompt goes in as one
# chunk (the **prefill**), which fills the caches, and only then does
# decoding proceed one token per step. Any split of the sequence into chunks
# must give the same result, and a chunk of several tokens after the prompt
# (here 5) is the case where the bottom-right alignment is really exercised:
# $L = 5$ queries over $S = 21$ keys.

# %%
chunks = [tokens[:, :16], tokens[:, 16:21]]  # prompt of 16, a chunk of 5
chunks += [tokens[:, t : t + 1] for t in range(21, 24)]  # then one by one
caches = new_caches(model)
with torch.no_grad():
    outs = [model(chunk, caches) for chunk in chunks]
print("chunk lengths:", [c.shape[1] for c in chunks])
chunked = torch.cat(outs, dim=1)  # (1, 24, vocab)
diff = (chunked - full).abs().max().item()
print(f"max |prefill + chunks + steps - full pass| = {diff:.2e}")
torch.testing.assert_close(chunked, full)

# %% [markdown]
# ## 5. Generating text, with and without the cache
#
# Generation feeds each prediction back in. Greedy decoding picks the most
# likely next token (`argmax` of the last logits). Without a cache, every
# step reruns the model over the whole sequence so far; with a cache, the
# prompt is prefilled once and each step runs the model on one token. Both
# must produce the same tokens.


# %%
def generate_without_cache(model, prompt, n):
    tokens = prompt
    for _ in range(n):
        logits = model(tokens)  # every position, every step: (B, t, vocab)
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
    return tokens


def generate_with_cache(model, prompt, n):
    caches = new_caches(model)
    logits = model(prompt, caches)  # prefill: (B, len(prompt), vocab)
    tokens = prompt
    for _ in range(n):
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
        logits = model(next_token, caches)  # the new token only: (B, 1, V)
    return tokens


prompt = torch.randint(0, VOCAB, (1, 8))
with torch.no_grad():
    slow = generate_without_cache(model, prompt, 40)
    fast = generate_with_cache(model, prompt, 40)
assert torch.equal(slow, fast)
print("both produced the same 40 tokens; the first 16:")
print(fast[0, 8:24].tolist())

# %% [markdown]
# ## 6. What the cache saves, counted
#
# Count the work of one attention layer at decoding step $t$ (the sequence
# has $t$ tokens, the newest one included), with model width $E = H \cdot D$
# and multiply and add counted as two FLOPs:
#
# | | projections $W^Q, W^K, W^V, W^O$ | scores $QK^\top$ and $PV$ |
# |---|---|---|
# | no cache: all $t$ positions | $4 \cdot 2 t E^2 = 8 t E^2$ | $2 \cdot 2 t^2 E = 4 t^2 E$ |
# | cache: the new position | $8 E^2$ | $4 t E$ |
#
# Without a cache the step recomputes keys and values (and queries, and
# outputs) for every position, though only the last row is used. The cache
# turns an $O(tE^2 + t^2E)$ step into an $O(E^2 + tE)$ one. PyTorch's
# `FlopCounterMode` counts the matrix products that actually run, and
# agrees with the table exactly:


# %%
def flops(fn, *args, **kwargs):
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


layer = model.blocks[0]
print(f"{'t':>5} {'no cache':>12} {'cache':>10} {'ratio':>7}")
with torch.no_grad():
    for t in (64, 128, 256, 512):
        x = torch.randn(1, t, E)
        without = flops(layer, x)  # the whole prefix again
        cache = attention.KVCache()
        layer(x[:, :-1], kv_cache=cache)  # positions 0 .. t-2 cached
        with_cache = flops(layer, x[:, -1:], kv_cache=cache)
        assert without == 8 * t * E**2 + 4 * t**2 * E
        assert with_cache == 8 * E**2 + 4 * t * E
        assert without == t * with_cache
        print(
            f"{t:>5} {without:>12,} {with_cache:>10,}"
            f" {without / with_cache:>7.0f}"
        )

# %% [markdown]
# The ratio is exactly $t$: without the cache the step computes the output
# row of every one of the $t$ positions, each at the price of the one row
# the cache computes, and then throws all but the last away.
#
# Summed over $n$ steps, generation without a cache costs about
# $4 n^2 E^2 + \tfrac{4}{3} n^3 E$ FLOPs per layer, with a cache about
# $8 n E^2 + 2 n^2 E$: the cache removes one power of $n$.
#
# Now the clock, on the same steps as the table: one step of the same
# layer at $t = 64, 128, 256, 512$, without the cache (the whole prefix
# again) and with it (the new token only, the cache filled beforehand and
# not timed), median of five. One decoding step is a handful of small
# matrix products, too small to share between threads, so this page runs
# on one thread (set at the top), and the clock is that thread's **CPU
# time** (`time.thread_time`) rather than the time on the wall: it counts
# only the work done for this page, so other programs running on the
# machine (the site is built several pages at a time) move it far less
# than they move the time on the wall. Far less is not zero, and another
# processor gives other times: the sentences this cell prints are written
# from the times it measured. What it checks is something no clock
# changes: how many calls into PyTorch one step makes. Each call, however
# small, pays Python's and PyTorch's dispatch; `TorchFunctionMode` sees
# every one.


# %% caption="CPU time of one decoding step of one attention layer at sequence length t = 64, 128, 256 and 512 (E = 256, H = 4, one thread, median of 5 on the machine that built this page), without a cache (circles: the whole prefix again) and with the KV cache (squares: the new token only), on log–log axes. The legend gives each curve's fitted slope; the label above each uncached point is how many times longer it took than the cached step, to set beside the FLOP ratio t."
def cpu_seconds(fn, *args, **kwargs):
    start = time.thread_time()
    fn(*args, **kwargs)
    return time.thread_time() - start


class CountCalls(TorchFunctionMode):
    """Counts the calls into PyTorch made inside it (reads of attributes
    such as .shape left out)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") != "__get__":
            self.calls += 1
        return func(*args, **(kwargs or {}))


def calls_into_torch(fn, *args, **kwargs):
    with CountCalls() as counter:
        fn(*args, **kwargs)
    return counter.calls


def step_seconds(t, repeats=5):
    """Median CPU seconds of one step at length t: (no cache, cache)."""
    x = torch.randn(1, t, E)
    runs = []
    for _ in range(repeats):
        cache = attention.KVCache()
        layer(x[:, :-1], kv_cache=cache)  # positions 0 .. t-2, not timed
        runs.append(
            (
                cpu_seconds(layer, x),  # the whole prefix again
                cpu_seconds(layer, x[:, -1:], kv_cache=cache),  # new token
            )
        )
    return np.median(runs, axis=0)


def step_calls(t):
    """Calls into PyTorch of one step at length t: (no cache, cache)."""
    x = torch.randn(1, t, E)
    cache = attention.KVCache()
    layer(x[:, :-1], kv_cache=cache)
    return (
        calls_into_torch(layer, x),
        calls_into_torch(layer, x[:, -1:], kv_cache=cache),
    )


ts = np.array([64, 128, 256, 512])
with torch.no_grad():
    step_seconds(ts[0], repeats=1)  # warm-up
    t_full, t_cache = np.array([step_seconds(t) for t in ts]).T
    calls_full, calls_cache = np.array([step_calls(t) for t in ts]).T
# The fixed cost, checked: every step makes the same number of calls into
# PyTorch whatever t, with the cache and without it. No load changes this.
assert len(set(calls_full)) == 1 and len(set(calls_cache)) == 1
ratio = t_full / t_cache
slope_full = np.polyfit(np.log(ts), np.log(t_full), 1)[0]
slope_cache = np.polyfit(np.log(ts), np.log(t_cache), 1)[0]
print(
    f"{'t':>5} {'no cache ms':>12} {'cache ms':>9}"
    f" {'time ratio':>11} {'FLOP ratio':>11}"
)
for t, a, b, r in zip(ts, t_full, t_cache, ratio, strict=True):
    print(f"{t:>5} {1e3 * a:>12.3f} {1e3 * b:>9.3f} {r:>11.1f} {t:>11}")
print(f"log-log slope: no cache {slope_full:.2f}, cache {slope_cache:.2f}")
flops_full, flops_cache = (
    8 * ts * E**2 + 4 * ts**2 * E,
    8 * E**2 + 4 * ts * E,
)
flop_slope_full = np.polyfit(np.log(ts), np.log(flops_full), 1)[0]
flop_slope_cache = np.polyfit(np.log(ts), np.log(flops_cache), 1)[0]
print(
    f"FLOP counts' slope: no cache {flop_slope_full:.2f},"
    f" cache {flop_slope_cache:.2f}"
)
print(
    f"calls into PyTorch per step, at every t: no cache {calls_full[0]},"
    f" cache {calls_cache[0]}"
)


# Sentences written from the times measured above, words chosen by them.
def grew(slope):
    if slope < 0.5:
        return "barely grew"
    if slope < 0.8:
        return "grew less than linearly"
    if slope <= 1.2:
        return "grew about linearly"
    return "grew faster than linearly"


def how_many(mask):
    k, n = int(np.sum(mask)), len(mask)
    if k == n:
        return f"all {n}"
    return f"{'none' if k == 0 else k} of the {n}"


if ratio[-1] > 1.25 * ratio[0]:
    trend = "widened as t grew"
elif ratio[-1] < ratio[0] / 1.25:
    trend = "narrowed as t grew"
else:
    trend = "stayed about the same"


def against_flops(slope, flop_slope):
    if abs(slope - flop_slope) <= 0.15:
        return "about as fast as its FLOPs"
    pace = "faster" if slope > flop_slope else "more slowly"
    return f"{pace} than its FLOPs"


sentences = (
    f"Measured here: the cached step {grew(slope_cache)} with t (slope"
    f" {slope_cache:.2f}); the uncached one grew as t^{slope_full:.2f},"
    f" {against_flops(slope_full, flop_slope_full)} (slope"
    f" {flop_slope_full:.2f}). The uncached step took {ratio[0]:.1f}x"
    f" the cached one's time at t = {ts[0]} and {ratio[-1]:.1f}x at"
    f" t = {ts[-1]}: the gap {trend}. That time ratio was below the FLOP"
    f" ratio t at {how_many(ratio < ts)} lengths, and below t / 4 at"
    f" {how_many(ratio < ts / 4)}."
)
print()
print(textwrap.fill(sentences, width=72))

fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
ax.loglog(
    ts, 1e3 * t_full, "o-", label=f"no cache (slope {slope_full:.2f})"
)
ax.loglog(
    ts, 1e3 * t_cache, "s-", label=f"KV cache (slope {slope_cache:.2f})"
)
for t, a, r in zip(ts, t_full, ratio, strict=True):
    ax.annotate(
        f"{r:.1f}x",
        (t, 1e3 * a),
        textcoords="offset points",
        xytext=(0, 8),
        ha="center",
    )
ax.set_xticks(ts, [str(t) for t in ts])
ax.set_xticks([], minor=True)
ax.set(
    xlabel="sequence length t at this step",
    ylabel="CPU ms per step (median of 5)",
    title="One decoding step of one layer, E=256, H=4",
)
_ = ax.legend()

# %% [markdown]
# Read the printed log-log slopes (also in the legend): a time that grows
# as $t^a$ is a line of slope $a$ on these axes. The next line gives the
# slopes of the FLOP counts of the table over the same $t$, and the last
# lines say what this run measured. Time is not FLOPs, though: besides its
# arithmetic, every step pays a fixed cost per call (Python, PyTorch's
# dispatch, the allocation of small tensors) that does not grow with $t$.
# The cell counts the calls into PyTorch one step makes and checks that
# the count is the same at every $t$, with the cache and without it.
#
# - **With the cache** a step does about a million FLOPs, a small part of
#   its time, which is then mostly that fixed cost: expect its time to
#   grow far more slowly than $t$. What does grow with $t$ is small: the
#   attention over $t$ keys, and `KVCache.append`, which concatenates,
#   copying the cache once per step ($O(tE)$, the same order as the
#   attention itself; production caches preallocate the slots).
# - **Without the cache** the arithmetic, $8tE^2 + 4t^2E$, outweighs the
#   fixed cost from a few hundred positions on, where the time grows with
#   $t$ like its FLOPs, the projections' term $8tE^2$ still the larger
#   while $t < 2E = 512$.
#
# So the cache's gain in time is expected to widen as $t$ grows, but to
# stay far below the FLOP ratio $t$ of the table above: the fixed cost is
# paid by both steps, and it is most of the cached one. How far below,
# on your machine, is what the printed sentences say. Generating $n$
# tokens adds up one step per length: with the cache about $n$ nearly
# equal steps, linear in $n$; without it steps that grow with $t$, about
# quadratic in $n$ once the arithmetic dominates. The price of the cache
# is memory, the subject of the next section.
#
# ## 7. The memory the cache costs
#
# Each layer stores one key and one value vector of size $D$ per key/value
# head and per token, so the cache grows by
#
# $$\text{bytes per token} = 2 \cdot N_{\text{layers}} \cdot H_{kv} \cdot D
# \cdot \text{bytes per number},$$
#
# with $N_{\text{layers}}$ the number of layers.
#
# **Grouped-query attention** (GQA) shrinks it: the $H$ query heads share
# $H_{kv} < H$ key/value heads (`num_kv_heads`), and **multi-query
# attention** (MQA) is the extreme $H_{kv} = 1$. The
# [multi-head attention page](../../concepts/multi-head-attention/) explains
# the sharing. Below, three models that differ only in $H_{kv}$ prefill 100
# tokens; we read the size of the actual cache tensors, compare it with the
# formula, and check that the GQA and MQA models still decode exactly like
# their own full pass.

# %%
D = E // H
prefill = torch.randint(0, VOCAB, (1, 100))
print(
    f"{'':<5} {'H':>2} {'Hkv':>4} {'bytes/token':>12} {'formula':>8}"
    f" {'vs MHA':>7}"
)
per_token = {}
for name, kv_heads in (("MHA", 4), ("GQA", 2), ("MQA", 1)):
    torch.manual_seed(1)
    m = TinyDecoder(VOCAB, E, H, LAYERS, num_kv_heads=kv_heads).eval()
    caches = new_caches(m)
    with torch.no_grad():
        first = m(prefill[:, :99], caches)  # prefill 99 tokens ...
        last = m(prefill[:, 99:], caches)  # ... and decode one
        torch.testing.assert_close(
            torch.cat([first, last], dim=1), m(prefill)
        )
    stored = sum(c.key.nbytes + c.value.nbytes for c in caches)
    per_token[name] = stored / len(caches[0])
    formula = 2 * LAYERS * kv_heads * D * caches[0].key.element_size()
    assert per_token[name] == formula
    assert caches[0].key.shape == (1, kv_heads, 100, D)
    print(
        f"{name:<5} {H:>2} {kv_heads:>4} {per_token[name]:>12,.0f}"
        f" {formula:>8,} {per_token[name] / per_token['MHA']:>7.2f}"
    )

# %% [markdown]
# Halving the key/value heads halves the cache; MQA keeps a quarter here. At
# our toy size that is 4 KiB per token. The same formula for a model shaped
# like Llama 2 7B (32 layers, 32 heads of $D = 128$, float16) shows why the
# cache, not the weights, often limits how many sequences a server can
# decode at once:


# %%
def cache_bytes_per_token(layers, kv_heads, head_dim, bytes_per_number):
    return 2 * layers * kv_heads * head_dim * bytes_per_number


for label, kv_heads in (
    ("32 KV heads (MHA)", 32),
    ("8 KV heads (GQA)", 8),
):
    per_tok = cache_bytes_per_token(32, kv_heads, 128, 2)
    print(
        f"{label:<18}: {per_tok / 2**10:>5.0f} KiB per token,"
        f" {4096 * per_tok / 2**30:.2f} GiB for 4096 tokens"
    )

# %% [markdown]
# ## Summary
#
# - Only attention mixes positions, and the keys and values of earlier
#   positions never change. A **KV cache** stores them once; each decoding
#   step then projects only the new token and attends over the cache.
# - Token-by-token decoding with the cache, and a prefill of the prompt
#   followed by chunks or single tokens, reproduce the full causal pass to
#   float32 rounding (asserted above).
# - New queries are the *last* positions of the sequence, so their causal
#   mask is **bottom-right** aligned; PyTorch's `is_causal=True` is top-left
#   and, with one query, lets it see only the first key. The new tokens'
#   positional encodings also start at the cache length.
# - A step costs $O(E^2 + tE)$ with a cache instead of $O(tE^2 + t^2E)$
#   (counted and asserted in section 6), so generating $n$ tokens goes from
#   about $n^2$ to about $n$ in arithmetic. The measured times need not
#   follow the counts closely (section 6 prints how far they did): a fixed
#   cost per call, the same at every $t$ (the calls into PyTorch are
#   counted and asserted), weighs most on the small cached step.
# - The price is memory: $2 \cdot N_{\text{layers}} \cdot H_{kv} \cdot D$ numbers
#   per token, which grouped-query and multi-query attention cut by
#   $H / H_{kv}$.
#
# ## Exercises
#
# 1. In `TinyDecoder.forward`, replace `start = ...` by `start = 0`, so that
#    every new token gets the position encoding of position 0. Does the
#    check of section 2 still pass? *Hint:* the cache is still right; the
#    inputs are not.
# 2. In section 3, use `attention.causal_mask(L, S_all)` (top-left) for
#    `right`. For which $L$ does the result still match? *Hint:* what do the
#    two masks look like when $L = S$?
# 3. Re-run the timing with a prompt of 200 tokens and $n = 64$. How does the
#    speed-up change, and why? *Hint:* without a cache, every step reruns
#    the prompt too.
# 4. A model has 24 layers, 16 query heads of $D = 64$ and 4 key/value
#    heads, and stores the cache in bfloat16. How many MiB does a batch of
#    8 sequences of 2048 tokens need? Check with `cache_bytes_per_token`.
#
# **Answers.**
# 1. No: the first position still matches (it is position 0 either way),
#    but the differences grow to order 1 from the second token on, because
#    token $t$ is embedded as if it were at position 0 while the full pass
#    uses position $t$.
# 2. Only for the prefill chunk with $L = S$ (no cached keys), where the two
#    alignments coincide; for $L = 3$ and $L = 1$ the assertion fails.
# 3. It grows: each uncached step now processes at least 200 positions,
#    while a cached step still processes one.
# 4. `cache_bytes_per_token(24, 4, 64, 2)` is 24 KiB per token;
#    $8 \cdot 2048 \cdot 24$ KiB $= 384$ MiB.
#
# **Where next:** the [masks page](../../concepts/masks/) for the two
# alignments, the [complexity page](../../concepts/complexity/) for what
# attention costs when the whole sequence is processed at once, and the
# [API reference](../../reference/kv_cache/) of `KVCache`.

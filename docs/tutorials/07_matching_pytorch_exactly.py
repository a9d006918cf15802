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
# # Matching PyTorch exactly
#
# **You will learn** to move the weights of a `torch.nn.MultiheadAttention`
# into the package's
# [`MultiHeadAttention`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention)
# and back, with the library functions and by hand, so that you know where
# every parameter lives; to compare outputs and per-head weights; to
# measure the largest difference between
# [`attention.scaled_dot_product_attention`](../../reference/functional/#attention.functional.scaled_dot_product_attention)
# and `F.scaled_dot_product_attention` over masks, causal attention,
# grouped-query attention and three dtypes; and to tell a rounding
# difference from a bug. On the way you will meet the traps that make two
# "identical" layers disagree: mask polarity, `batch_first`,
# `need_weights`, and queries that may attend to nothing.
#
# "Exactly" has a precise meaning here: equal up to floating-point
# rounding, with a tolerance that we justify rather than guess. The
# [how-to guide](../../how-to/check-against-pytorch/) condenses the checks
# into a recipe for your own code. Runs in a few seconds on a CPU.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference, computed in float64."""
    return (a.double() - b.double()).abs().max().item()


# %% [markdown]
# ## 1. Two modules, one set of weights
#
# Every size is different from every other, so a swapped axis cannot pass
# by accident: batch $B = 2$, $H = 4$ heads of size $D = 3$ (width
# $E = 12$), $L = 5$ queries and $S = 7$ keys. PyTorch initialises all
# biases to zero; we give them random values, or copying them would go
# untested.

# %%
B, H, D, L, S = 2, 4, 3, 5, 7
E = H * D

theirs = nn.MultiheadAttention(E, H, batch_first=True)
with torch.no_grad():
    theirs.in_proj_bias.normal_(std=0.5)
    theirs.out_proj.bias.normal_(std=0.5)
ours = attention.MultiHeadAttention.from_torch(theirs)

for label, module in (
    ("torch.nn.MultiheadAttention", theirs),
    ("attention.MultiHeadAttention", ours),
):
    print(label)
    for name, p in module.named_parameters():
        print(f"  {name:16s} {tuple(p.shape)}")

# %% [markdown]
# PyTorch stores the three input projections stacked in one
# $(3E, E)$ matrix, `in_proj_weight`, and their biases in one vector of
# length $3E$. The package keeps four separate `nn.Linear` layers. Same
# numbers, different boxes; `from_torch` moved them. With the same input
# both modules give the same output and the same per-head weights:

# %%
x = torch.randn(B, L, E)  # queries' sequence
memory = torch.randn(B, S, E)  # keys' and values' sequence

with torch.no_grad():
    out_t, w_t = theirs(x, memory, memory, average_attn_weights=False)
    out_o, w_o = ours(
        x, memory, memory, need_weights=True, average_attn_weights=False
    )
print(
    "output :",
    tuple(out_o.shape),
    f"max |diff| = {max_diff(out_o, out_t):.1e}",
)
print(
    "weights:", tuple(w_o.shape), f"max |diff| = {max_diff(w_o, w_t):.1e}"
)
torch.testing.assert_close(out_o, out_t)
torch.testing.assert_close(w_o, w_t)

# %% [markdown]
# ## 2. By hand: where each parameter lives
#
# `in_proj_weight` is `torch.cat([W_q, W_k, W_v])` along the first axis:
# rows $0..E-1$ make the queries, rows $E..2E-1$ the keys, rows
# $2E..3E-1$ the values. Each block has the `nn.Linear` layout
# `(out_features, in_features)`, and a linear layer computes
# $x W^\top + b$. Splitting the matrix into three and copying the pieces
# gives exactly the module `from_torch` built:

# %%
W_q, W_k, W_v = theirs.in_proj_weight.detach().chunk(3)  # 3 x (E, E)
b_q, b_k, b_v = theirs.in_proj_bias.detach().chunk(3)  # 3 x (E,)
W_o, b_o = theirs.out_proj.weight.detach(), theirs.out_proj.bias.detach()

by_hand = attention.MultiHeadAttention(E, H)
with torch.no_grad():
    for proj, W, b in (
        (by_hand.q_proj, W_q, b_q),
        (by_hand.k_proj, W_k, b_k),
        (by_hand.v_proj, W_v, b_v),
        (by_hand.out_proj, W_o, b_o),
    ):
        proj.weight.copy_(W)
        proj.bias.copy_(b)
for name, p in by_hand.state_dict().items():
    assert torch.equal(p, ours.state_dict()[name]), name
print("copy by hand == from_torch, bit for bit")

# %% [markdown]
# The forward pass, spelled out with PyTorch's own functions and the
# stacked weights, reproduces `nn.MultiheadAttention`:

# %%
with torch.no_grad():
    q = F.linear(x, W_q, b_q)  # x @ W_q.T + b_q: (B, L, E)
    k = F.linear(memory, W_k, b_k)  # (B, S, E)
    v = F.linear(memory, W_v, b_v)  # (B, S, E)
    q = q.view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
    k = k.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
    v = v.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
    heads = F.scaled_dot_product_attention(q, k, v)  # (B, H, L, D)
    concat = heads.transpose(1, 2).reshape(B, L, E)  # (B, L, E)
    out_hand = F.linear(concat, W_o, b_o)  # (B, L, E)
gap = max_diff(out_hand, out_t)
print(f"max |by hand - nn.MultiheadAttention| = {gap:.1e}")
torch.testing.assert_close(out_hand, out_t)

# %% [markdown]
# A classic porting mistake is to multiply by the stored matrix instead of
# its transpose, `x @ W_q` instead of `x @ W_q.T`. With square
# $E \times E$ blocks no shape complains; only the numbers do:

# %%
wrong = x @ W_q + b_q
right = F.linear(x, W_q, b_q)
print(f"max |x @ W_q - x @ W_q.T| = {max_diff(wrong, right):.2f}")
assert max_diff(wrong, right) > 0.1

# %% [markdown]
# And back: `to_torch` rebuilds PyTorch's module. The round trip
# PyTorch → package → PyTorch returns every parameter unchanged, bit
# for bit, because copying a float is exact.

# %%
back = ours.to_torch()
for name, p in theirs.state_dict().items():
    assert torch.equal(p, back.state_dict()[name]), name
assert back.batch_first == theirs.batch_first
print("round trip: all", len(theirs.state_dict()), "tensors identical")

# %% [markdown]
# ## 3. need_weights and average_attn_weights
#
# The two modules return weights in the same shapes but have different
# defaults. PyTorch's module returns weights unless told not to
# (`need_weights=True`), averaged over heads (`average_attn_weights=True`).
# The package returns `None` unless asked, because keeping the
# $(B, H, L, S)$ tensor around costs memory.

# %%
with torch.no_grad():
    for label, module, kwargs in (
        ("torch, defaults        ", theirs, {}),
        (
            "torch, per head        ",
            theirs,
            {"average_attn_weights": False},
        ),
        ("torch, no weights      ", theirs, {"need_weights": False}),
        ("package, defaults      ", ours, {}),
        ("package, need_weights  ", ours, {"need_weights": True}),
    ):
        _, w = module(x, memory, memory, **kwargs)
        print(label, None if w is None else tuple(w.shape))
    _, w_avg = theirs(x, memory, memory)  # (B, L, S)
torch.testing.assert_close(w_avg, w_t.mean(dim=1))
print("averaged weights = mean of the per-head weights over H")

# %% [markdown]
# ## 4. The batch_first pitfall
#
# `nn.MultiheadAttention` defaults to `batch_first=False`: it expects
# `(L, B, E)`, sequence first. Feed it a batch-first `(B, L, E)` tensor
# and, in self-attention, nothing complains: the output has the right
# shape, but the module read axis 0 as the sequence. With $B = 2$ it
# attended over "sequences" of two tokens, token $i$ of sentence 0 and
# token $i$ of sentence 1, so the sentences of the batch leak into each
# other.

# %%
seq_first = nn.MultiheadAttention(E, H)  # batch_first=False by default
seq_first.load_state_dict(theirs.state_dict())

with torch.no_grad():
    right, _ = theirs(x, x, x)
    wrong, _ = seq_first(x, x, x)  # (B, L, E) read as (L, B, E)
    fixed, _ = seq_first(*(x.transpose(0, 1),) * 3)  # (L, B, E) in
    fixed = fixed.transpose(0, 1)  # back to (B, L, E)

    x_edit = x.clone()
    x_edit[1] = torch.randn(L, E)  # change sentence 1 only
    leak = seq_first(x_edit, x_edit, x_edit)[0][0] - wrong[0]

print("shapes:", tuple(right.shape), tuple(wrong.shape))
print(f"max |wrong layout - right| = {max_diff(wrong, right):.2f}")
print(f"sentence 0 moved by editing sentence 1: {leak.abs().max():.2f}")
assert wrong.shape == right.shape and max_diff(wrong, right) > 0.1
assert leak.abs().max() > 0.1
torch.testing.assert_close(fixed, right)

# %% [markdown]
# In cross-attention with $L \ne S$ the mistake at least fails, with an
# unhelpful message (the reshape inside the module cannot split the
# wrong batch into heads):

# %%
try:
    seq_first(x, memory, memory)
except RuntimeError as error:
    print(f"RuntimeError:\n  {error}")
else:
    raise AssertionError("batch-first inputs with L != S must fail")

# %% [markdown]
# The package defaults to `batch_first=True`, and `from_torch`/`to_torch`
# carry the flag over, so a converted module expects what the original
# expected. When reading someone else's code, check the flag on the module
# (`module.batch_first`) rather than a comment: a line such as "PyTorch
# wants (L, B, E), so we transpose" next to a module built with
# `batch_first=True` and no transpose is the usual sign of confusion.

# %%
print("from_torch(seq_first).batch_first =", end=" ")
print(attention.MultiHeadAttention.from_torch(seq_first).batch_first)
assert not attention.MultiHeadAttention.from_torch(seq_first).batch_first

# %% [markdown]
# ## 5. Mask polarity: True means opposite things
#
# A boolean mask can say "True = may attend" or "True = blocked", and
# PyTorch uses both:
#
# | function or module | argument | True means |
# |---|---|---|
# | `F.scaled_dot_product_attention` | `attn_mask` | may attend |
# | `nn.MultiheadAttention` | `attn_mask` | **blocked** |
# | `nn.MultiheadAttention` | `key_padding_mask` | **padding** |
# | `attention.scaled_dot_product_attention` | `attn_mask` | may attend |
# | `attention.MultiHeadAttention` | `attn_mask` | may attend |
# | `attention.MultiHeadAttention` | `key_padding_mask` | **padding** |
#
# So the conversion between PyTorch's module and SDPA or this package is
# one `~`. A float mask is added to the scores everywhere, so it needs no
# conversion; [`mask_to_bias`](../../reference/masks/#attention.masks.mask_to_bias)
# turns a "may attend" mask into one ($0$ or $-\infty$).

# %%
allowed = torch.rand(L, S) > 0.5  # True = may attend (SDPA convention)
allowed[:, 0] = True  # every query keeps at least one key
print("allowed (True = may attend):")
print(allowed.int())

with torch.no_grad():
    ours_out, ours_w = ours(
        x, memory, memory, attn_mask=allowed, need_weights=True
    )
    t_out, t_w = theirs(x, memory, memory, attn_mask=~allowed)  # flipped
    t_float, _ = theirs(
        x, memory, memory, attn_mask=attention.mask_to_bias(allowed)
    )
    t_same, t_same_w = theirs(x, memory, memory, attn_mask=allowed)

print(
    f"package(mask) vs torch(~mask)    : {max_diff(ours_out, t_out):.1e}"
)
print(
    f"package(mask) vs torch(bias)     : {max_diff(ours_out, t_float):.1e}"
)
print(
    f"package(mask) vs torch(mask) !!  : {max_diff(ours_out, t_same):.2f}"
)
torch.testing.assert_close(ours_out, t_out)
torch.testing.assert_close(ours_w, t_w)
torch.testing.assert_close(ours_out, t_float)
assert torch.all(ours_w[:, ~allowed] == 0)  # blocked pairs: weight 0
assert torch.all(t_same_w[:, allowed] == 0)  # unflipped: the opposite
assert max_diff(ours_out, t_same) > 0.1

# %% [markdown]
# The last line is the bug to remember: passing the unflipped mask to
# `nn.MultiheadAttention` blocks exactly the pairs you meant to keep, and
# nothing raises. At the function level both libraries agree on
# "True = may attend", so the same mask goes to both unchanged:

# %%
with torch.no_grad():
    sdpa_t = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    sdpa_o = attention.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed
    )
print(
    f"SDPA with the same mask: max |diff| = {max_diff(sdpa_o, sdpa_t):.1e}"
)
torch.testing.assert_close(sdpa_o, sdpa_t)

# %% [markdown]
# ## 6. Queries with nothing to attend to
#
# When every key of a query is masked, the softmax has nothing to
# normalise: $e^{-\infty} / \sum e^{-\infty} = 0/0$. Implementations
# disagree on what to return, and here the package's numbers depart from
# `nn.MultiheadAttention` on purpose: a fully masked query
# gets an attention output of **zeros** (so the module returns the output
# projection's bias), never NaN, with or without `need_weights`. Below,
# every key of sentence 1 is padding.

# %%
padded = torch.zeros(B, S, dtype=torch.bool)
padded[1] = True  # True = padding: sentence 1 has no real key at all

with torch.no_grad():
    o_pkg, w_pkg = ours(
        x, memory, memory, key_padding_mask=padded, need_weights=True
    )
    o_nw, _ = theirs(
        x, memory, memory, key_padding_mask=padded, need_weights=False
    )
    o_w, w_w = theirs(x, memory, memory, key_padding_mask=padded)

    # PyTorch's eval-mode fast path (self-attention, no grad, even H)
    self_pad = torch.zeros(B, L, dtype=torch.bool)
    self_pad[1] = True
    theirs.eval()
    o_fast, _ = theirs(
        x, x, x, key_padding_mask=self_pad, need_weights=False
    )
    theirs.train()
    ours.eval()
    o_pkg_eval, _ = ours(x, x, x, key_padding_mask=self_pad)
    ours.train()

bias = theirs.out_proj.bias.detach()
for label, out in (
    ("package, need_weights=True    ", o_pkg),
    ("torch, need_weights=False     ", o_nw),
    ("torch, need_weights=True      ", o_w),
    ("torch eval fast path          ", o_fast),
    ("package eval                  ", o_pkg_eval),
):
    nan = out[1].isnan().any().item()
    is_bias = not nan and torch.allclose(out[1], bias.expand(L, E))
    print(label, "NaN" if nan else "bias only" if is_bias else "?")

assert torch.allclose(o_pkg[1], bias.expand(L, E))  # attention output 0
assert torch.all(w_pkg[1] == 0)  # weights: zeros, not NaN
torch.testing.assert_close(o_pkg, o_nw)
assert o_w[1].isnan().all() and w_w[1].isnan().all()
assert o_fast[1].isnan().all() and not o_pkg_eval.isnan().any()
torch.testing.assert_close(o_pkg[0], o_w[0])  # sentence 0 unaffected

# %% [markdown]
# `F.scaled_dot_product_attention` itself returns zeros for such a row
# (since PyTorch 2.5), and so does the package's function. The textbook
# recipe, `masked_fill(-inf)` then softmax, returns NaN; the common
# "safe" variant with $-10^9$ instead of $-\infty$ returns no NaN but
# silently hands the query the *mean* of all values, as if nothing were
# masked:

# %%
row_mask = allowed.clone()
row_mask[2] = False  # query 2 may attend to nothing
scores = q @ k.transpose(-2, -1) / D**0.5  # (B, H, L, S)


def textbook(fill: float) -> torch.Tensor:
    weights = torch.softmax(scores.masked_fill(~row_mask, fill), dim=-1)
    return weights @ v  # (B, H, L, D)


results = {
    "torch SDPA": F.scaled_dot_product_attention(
        q, k, v, attn_mask=row_mask
    ),
    "package SDPA": attention.scaled_dot_product_attention(
        q, k, v, attn_mask=row_mask
    ),
    "masked_fill(-inf)": textbook(float("-inf")),
    "masked_fill(-1e9)": textbook(-1e9),
}
print("output of the fully masked query 2 (head 0):")
for name, out in results.items():
    print(f"  {name:18s}", [round(x, 3) for x in out[0, 0, 2].tolist()])
fully_masked = [r[:, :, 2] for r in results.values()]
assert torch.all(fully_masked[0] == 0) and torch.all(fully_masked[1] == 0)
assert fully_masked[2].isnan().all()
torch.testing.assert_close(fully_masked[3], v.mean(dim=-2))  # mean of V

# %% [markdown]
# ## 7. The function, case by case
#
# Now the comparison the package promises: the same numbers as
# `F.scaled_dot_product_attention` for every input PyTorch accepts. Each
# case below draws its inputs in float64 and rounds them to the dtype
# under test, runs both functions, and records the largest absolute
# difference. The tolerances are those of `torch.testing.assert_close`,
# which are PyTorch's own per-dtype defaults, except for bfloat16, where we
# use $10^{-2}$ (section 8 explains both).

# %%
TOLERANCES = {  # (rtol, atol)
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.bfloat16: (1e-2, 1e-2),
}
Bf, Hf, Df = 2, 4, 8  # the function's batch, heads and head size


def make(L, S, dtype=torch.float32, Hkv=Hf, Dv=Df, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(Bf, Hf, L, Df), (Bf, Hkv, S, Df), (Bf, Hkv, S, Dv)]
    q, k, v = (
        torch.randn(s, generator=g, dtype=torch.float64) for s in shapes
    )
    return q.to(dtype), k.to(dtype), v.to(dtype)


bool_mask = torch.rand(5, 7) > 0.4
bool_mask[:, 0] = True
float_mask = torch.randn(5, 7)
cases = [  # (name, inputs, keyword arguments)
    ("no mask", make(5, 7), {}),
    ("bool mask", make(5, 7), {"attn_mask": bool_mask}),
    ("float mask", make(5, 7), {"attn_mask": float_mask}),
    ("causal, L = S", make(7, 7), {"is_causal": True}),
    ("causal, L < S", make(5, 7), {"is_causal": True}),
    ("GQA, H=4, Hkv=2", make(5, 7, Hkv=2), {"enable_gqa": True}),
    ("scale=0.2", make(5, 7), {"scale": 0.2}),
    ("Dv = 6 != D", make(5, 7, Dv=6), {}),
    ("float64", make(5, 7, torch.float64), {}),
    ("bfloat16", make(5, 7, torch.bfloat16), {}),
    ("bfloat16, causal", make(5, 7, torch.bfloat16), {"is_causal": True}),
]

print(f"{'case':18s} {'dtype':9s} {'max |diff|':>10s} {'atol':>7s}")
table = []
for name, (q_, k_, v_), kwargs in cases:
    mine = attention.scaled_dot_product_attention(q_, k_, v_, **kwargs)
    ref = F.scaled_dot_product_attention(q_, k_, v_, **kwargs)
    rtol, atol = TOLERANCES[q_.dtype]
    torch.testing.assert_close(mine, ref, rtol=rtol, atol=atol)
    diff = max_diff(mine, ref)
    dtype = str(q_.dtype).removeprefix("torch.")
    table.append((name, q_.dtype, diff))
    print(f"{name:18s} {dtype:9s} {diff:10.1e} {atol:7.0e}")

# %% [markdown]
# Every case passes, and the differences sort by dtype, not by case: about
# $10^{-16}$ in float64, $10^{-7}$ in float32, $10^{-2}$ in bfloat16. On a
# log axis the three groups sit near their dtype's machine epsilon (dashed
# lines), the gap between 1 and the next representable number:

# %% caption="Largest difference between the package and F.scaled_dot_product_attention for each of the 11 test cases (horizontal bars, logarithmic axis), coloured by dtype, with a dashed line at each dtype's machine epsilon. The eight float32 cases sit near eps(float32) ≈ 1.2e-7, the float64 case near eps(float64) ≈ 2.2e-16 and the two bfloat16 cases near eps(bfloat16) ≈ 7.8e-3: the differences sort by dtype, not by case."
colors = {
    torch.float64: "tab:green",
    torch.float32: "tab:blue",
    torch.bfloat16: "tab:orange",
}
floor = 1e-18  # a difference of exactly 0 is drawn here
fig, ax = plt.subplots(figsize=(7, 5), layout="constrained")
names = [name for name, _, _ in table]
ax.barh(
    names,
    [max(diff, floor) for _, _, diff in table],
    color=[colors[dtype] for _, dtype, _ in table],
)
ax.set_xscale("log")
ax.set_xlim(floor, 10)
ax.invert_yaxis()
for dtype, color in colors.items():
    eps = torch.finfo(dtype).eps
    label = f"eps({str(dtype).removeprefix('torch.')}) = {eps:.1e}"
    ax.axvline(eps, color=color, linestyle="--", label=label)
for y, (_, _, diff) in enumerate(table):
    text = "exactly 0" if diff == 0 else f"{diff:.0e}"
    ax.text(max(diff, floor) * 2, y, text, va="center", fontsize=8)
ax.set_xlabel("max |package - F.scaled_dot_product_attention|")
ax.set_title("Package vs PyTorch, per case")
legend = fig.legend(loc="outside lower center", ncols=3, fontsize=8)

# %% [markdown]
# Two of the cases deserve a second look.
#
# **Causal with $L \ne S$.** `is_causal=True` in PyTorch means a
# *top-left* aligned mask: query $i$ sees keys $0..i$, whatever $S$ is. The
# package does the same (query 0 sees only key 0), and provides the
# *bottom-right* alignment needed with a KV cache separately, through
# [`causal_mask`](../../reference/masks/#attention.masks.causal_mask):

# %%
q_, k_, _ = make(5, 7)
w_causal = attention.attention_weights(q_, k_, is_causal=True)
top_left = attention.causal_mask(5, 7)
bottom_right = attention.causal_mask(5, 7, alignment="bottom_right")
print("is_causal=True with L=5, S=7 keeps (top-left):")
print(top_left.int())
assert torch.all(w_causal[..., ~top_left] == 0)
assert torch.all(w_causal[..., 0, 0] == 1)  # query 0 reads key 0 only
torch.testing.assert_close(
    w_causal, attention.attention_weights(q_, k_, top_left)
)
assert not torch.equal(top_left, bottom_right)

# %% [markdown]
# **Grouped-query attention.** With `enable_gqa=True`, 4 query heads share
# 2 key/value heads: heads 0 and 1 use key/value head 0, heads 2 and 3 use
# head 1. It is the same as repeating each key/value head, which is how
# to check it without `enable_gqa`:

# %%
q_, k_, v_ = make(5, 7, Hkv=2)
gqa = attention.scaled_dot_product_attention(q_, k_, v_, enable_gqa=True)
repeated = F.scaled_dot_product_attention(
    q_, k_.repeat_interleave(2, dim=1), v_.repeat_interleave(2, dim=1)
)  # (B, 4, S, D) keys and values: head h serves query heads 2h, 2h+1
print(f"GQA vs repeated heads: max |diff| = {max_diff(gqa, repeated):.1e}")
torch.testing.assert_close(gqa, repeated)

# %% [markdown]
# ## 8. Why the differences are not zero, and which tolerance to use
#
# Floating-point addition is not associative: the result depends on the
# order of the terms. Attention is made of long sums (the dot products of
# $QK^\top$, the softmax's denominator, the weighted sum of values), and
# PyTorch's fused kernel adds them in a different order than the package's
# three matrix products (it works through the keys block by block). The
# smallest example:

# %%
t = torch.tensor([1e8, 1.0, -1e8])  # float32
print("(1e8 + 1) - 1e8 =", ((t[0] + t[1]) + t[2]).item())
print("(1e8 - 1e8) + 1 =", ((t[0] + t[2]) + t[1]).item())
assert (t[0] + t[1]) + t[2] != (t[0] + t[2]) + t[1]

# %% [markdown]
# Neither order is "right"; both are float32 approximations of the exact
# result. The way to judge them is a third computation in float64, whose
# own error ($\approx 10^{-16}$) is negligible: measure each float32
# implementation's distance to it. If the package had a real bug, its
# error would stand out against PyTorch's. We divide by the size of the
# output, because the output (an average over more and more random
# values) shrinks as $S$ grows, and the absolute errors with it. At every
# sequence length the two errors are of the same size:

# %% caption="Relative error against a float64 reference, max |error| / max |output|, of the package, of PyTorch, and between the two, as the number of keys S grows from 16 to 4096 (log–log axes), with a dashed line at eps(float32) ≈ 1.2e-7. All three stay flat at a few 10⁻⁷ and close together at every S: the package and PyTorch are equally accurate."
lengths = [16, 64, 256, 1024, 4096]
errors = {"package": [], "PyTorch": [], "package vs PyTorch": []}
for n in lengths:
    g = torch.Generator().manual_seed(n)
    q64, k64, v64 = (
        torch.randn(1, 4, 64, 64, generator=g, dtype=torch.float64),
        torch.randn(1, 4, n, 64, generator=g, dtype=torch.float64),
        torch.randn(1, 4, n, 64, generator=g, dtype=torch.float64),
    )
    q32, k32, v32 = q64.float(), k64.float(), v64.float()
    mine = attention.scaled_dot_product_attention(q32, k32, v32)
    ref = F.scaled_dot_product_attention(q32, k32, v32)
    # the float64 reference sees the same rounded inputs
    exact = attention.scaled_dot_product_attention(
        q32.double(), k32.double(), v32.double()
    )
    size = exact.abs().max().item()
    errors["package"].append(max_diff(mine, exact) / size)
    errors["PyTorch"].append(max_diff(ref, exact) / size)
    errors["package vs PyTorch"].append(max_diff(mine, ref) / size)

print(f"{'S':>5s} {'package':>9s} {'PyTorch':>9s} {'between':>9s}")
for i, n in enumerate(lengths):
    row = [errors[key][i] for key in errors]
    print(f"{n:5d}", " ".join(f"{e:9.1e}" for e in row))
for mine_err, ref_err in zip(
    errors["package"], errors["PyTorch"], strict=True
):
    assert mine_err < 1e-5 and ref_err < 1e-5
    assert 0.2 < mine_err / ref_err < 5  # same size, either way

fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
for (label, values), marker in zip(errors.items(), "os^", strict=True):
    ax.loglog(lengths, values, marker=marker, label=label)
ax.axhline(
    torch.finfo(torch.float32).eps,
    color="gray",
    linestyle="--",
    label="eps(float32)",
)
ax.set_xlabel("number of keys S")
ax.set_ylabel("max |error| / max |output|")
ax.set_title("float32 against a float64 reference")
legend = ax.legend(fontsize=8)

# %% [markdown]
# The package and PyTorch are each within a few $10^{-7}$ (relative) of
# the exact answer, and within about that of each other: the distance
# between two correct float32 implementations is set by rounding, not by
# either one being wrong. (The flash-attention repository's tests,
# `tests/test_flash_attn.py`, judge their kernels the same way: the error
# against a reference computed in higher precision, float32 for float16
# inputs there, may be at most twice that of a plain implementation in the
# inputs' precision.)
#
# **The tolerances follow from the precision.** float32 keeps 24
# significant bits, so one rounding costs up to
# $2^{-24} \approx 6 \times 10^{-8}$ relative, and a few dozen roundings
# in a row keep the error near $10^{-7}..10^{-6}$: hence PyTorch's float32
# defaults `rtol=1.3e-6, atol=1e-5`. bfloat16 keeps only 8 significant
# bits: one rounding costs up to $2^{-8} \approx 4 \times 10^{-3}$
# relative, so two correct implementations can land one bfloat16 step
# apart, about $10^{-2}$ for values near 1. (PyTorch's own tests compare
# its CPU kernels in bfloat16 at $5 \times 10^{-2}$.) A tolerance much
# looser than this hides bugs; a tighter one fails on rounding.
#
# The same float64 test in bfloat16 shows both implementations with
# errors of the bfloat16 step, and again of the same size:

# %%
q64, k64, v64 = make(5, 7, torch.float64, seed=1)
q16, k16, v16 = q64.bfloat16(), k64.bfloat16(), v64.bfloat16()
exact = attention.scaled_dot_product_attention(
    q16.double(), k16.double(), v16.double()
)
mine_err = max_diff(
    attention.scaled_dot_product_attention(q16, k16, v16), exact
)
ref_err = max_diff(F.scaled_dot_product_attention(q16, k16, v16), exact)
print(f"eps(bfloat16) = {torch.finfo(torch.bfloat16).eps:.1e}")
print(f"bfloat16 error: package {mine_err:.1e}, PyTorch {ref_err:.1e}")
assert mine_err < 1e-2 and ref_err < 1e-2

# %% [markdown]
# ## Summary
#
# - `nn.MultiheadAttention` stacks $W^Q, W^K, W^V$ as the rows of one
#   $(3E, E)$ `in_proj_weight` (and one $3E$ bias); `from_torch` and
#   `to_torch` split and restack them, and a round trip is exact. A linear
#   layer computes $x W^\top + b$: forgetting the transpose raises nothing.
# - Outputs agree to about $10^{-7}$ in float32; per-head weights come
#   with `need_weights=True, average_attn_weights=False`, and the averaged
#   weights are their mean over heads.
# - Check `batch_first`: PyTorch's module defaults to `(L, B, E)`, and a
#   batch-first tensor in self-attention runs without error while mixing
#   the sentences of the batch.
# - Boolean masks: True = may attend in SDPA and in the package,
#   True = blocked in `nn.MultiheadAttention` (convert with `~`); float
#   masks are added to the scores everywhere.
# - A query with no key to attend gets zeros from the package and from
#   `F.scaled_dot_product_attention`, NaN from `nn.MultiheadAttention` with
#   `need_weights=True` (and from its eval fast path), NaN from the
#   textbook $-\infty$ recipe, and the mean of $V$ from the $-10^9$ one.
# - Differences are not zero because sums are taken in different orders;
#   judge them against a float64 reference, with tolerances set by the
#   dtype: about $10^{-6}$ relative in float32, $10^{-2}$ in bfloat16.
#
# ## Exercises
#
# 1. Build `nn.MultiheadAttention(E, H, kdim=6, vdim=6, batch_first=True)`
#    and list its parameters. Where did `in_proj_weight` go, and does
#    `MultiHeadAttention.from_torch` still reproduce its output on keys of
#    width 6?
# 2. Call `theirs(x, x, x, is_causal=True)` without an `attn_mask`. What
#    happens, and how does the package's `ours(x, x, x, is_causal=True)`
#    differ?
# 3. Put `theirs` in eval mode and repeat the fully padded experiment of
#    section 6 as *cross*-attention, `theirs(x, memory, memory, ...)` with
#    `need_weights=False`. Is there a NaN? Why not?
# 4. Change the bfloat16 tolerances in `TOLERANCES` to float32's and rerun
#    section 7. Which cases fail, and by how much?
#
# **Answers**
#
# 1. With `kdim`/`vdim` different from `E`, PyTorch keeps three matrices,
#    `q_proj_weight` $(E, E)$, `k_proj_weight` and `v_proj_weight`
#    $(E, 6)$, and `in_proj_weight` is `None`; `in_proj_bias` is still one
#    vector of length $3E$. `from_torch` handles both layouts, and the
#    outputs agree to float32 precision.
# 2. PyTorch's module raises `RuntimeError: Need attn_mask if specifying
#    the is_causal hint`: for the module, `is_causal` is only a hint that
#    the given mask is causal. The package builds the causal mask itself.
# 3. No NaN: the fast path is taken only for self-attention (query, key and
#    value the same tensor), so cross-attention goes through the ordinary
#    path, which returns the output bias for `need_weights=False`.
# 4. Both bfloat16 cases fail: their differences, a few $10^{-3}$, are
#    several hundred times the float32 `atol` of $10^{-5}$.
#
# **Where next:** the [how-to guide](../../how-to/check-against-pytorch/)
# turns these checks into a short test recipe (including gradients), and
# [Masks](../../concepts/masks/) explains the mask conventions in depth.

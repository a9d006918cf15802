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
# # Causal and padding masks
#
# **You will learn** to build the two masks every transformer needs and to
# check that they do their job. A *causal* mask stops a token from reading
# the tokens after it: you will watch the upper triangle of the attention
# map vanish and prove that changing a future token changes nothing
# earlier. A *padding* mask lets sentences of different lengths share one
# batch: you will pad three sentences, broadcast the mask to the right
# shape, combine it with the causal one, and show that whatever sits in
# the padding cannot leak into real tokens. Then the traps: a query left
# with no key at all (NaN, or a silent average, or zeros, depending on how
# the mask is applied), pooling over padding, a float mask that masks
# nothing, and the two opposite meanings of `True` in PyTorch.
#
# The [concept page on masks](../../concepts/masks/) has the theory; here
# we run it. Runs in a few seconds on a CPU.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# A toy vocabulary with a random embedding for each word stands in for a
# trained model: masks do not care what the numbers mean. One attention
# layer with $H = 2$ heads of size $D = 4$ turns embeddings of width
# $E = 8$ into queries, keys and values.

# %%
VOCAB = [
    "<pad>",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "dog",
    "dogs",
    "bark",
    "birds",
    "sing",
    "at",
    "dawn",
]
PAD = VOCAB.index("<pad>")
E, H, D = 8, 2, 4

embedding = torch.randn(len(VOCAB), E)
embedding[PAD] = 0.0  # a harmless, finite vector for padding
W_q, W_k, W_v = (torch.randn(E, H * D) / E**0.5 for _ in range(3))


def heads(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Project (B, S, E) to (B, H, S, D)."""
    B, S, _ = x.shape
    return (x @ W).view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)


def qkv(x: torch.Tensor):
    return heads(x, W_q), heads(x, W_k), heads(x, W_v)


def embed(sentences: list[list[str]]) -> torch.Tensor:
    """Token lists of equal length -> embeddings (B, S, E)."""
    ids = torch.tensor([[VOCAB.index(t) for t in s] for s in sentences])
    return embedding[ids]


# %% [markdown]
# ## 1. Building a causal mask
#
# In a language model token $i$ predicts token $i+1$, so it may read keys
# $0, \dots, i$ and nothing after. As a boolean matrix with one row per
# query and one column per key, that is the lower triangle, diagonal
# included. [`attention.causal_mask`](../../reference/masks/#attention.masks.causal_mask)
# builds it; it is the same as `torch.tril` of a boolean matrix of ones.
# Both follow the convention of `F.scaled_dot_product_attention`:
# **True means "may attend"**.

# %%
L = 6
mask = attention.causal_mask(L)  # (L, S), bool
print(mask.int())
assert mask.dtype == torch.bool
assert torch.equal(mask, torch.tril(torch.ones(L, L, dtype=torch.bool)))

# %% [markdown]
# Written as an *additive* mask it is $0$ where attention is allowed and
# $-\infty$ where it is not; the scores are added to it before the
# softmax, and $e^{-\infty} = 0$.
# [`mask_to_bias`](../../reference/masks/#attention.masks.mask_to_bias)
# converts one form into the other.

# %%
print(attention.mask_to_bias(mask))

# %% [markdown]
# ## 2. Watching the upper triangle vanish
#
# One sentence, one batch element. Without a mask every token reads the
# whole sentence; with the causal mask the weights above the diagonal
# become exactly 0, and each row still sums to 1 over the keys that are
# left.

# %% caption="Head 0's attention weights for the sentence the cat sat on the mat without a mask (top) and with the causal mask (bottom), each cell labelled with its weight. Without the mask tokens also read later tokens (up to 0.29 above the diagonal); with it the upper triangle is exactly 0, the first token puts all its weight (1.00) on itself, and the last row, which may read every key, is unchanged."
tokens = ["the", "cat", "sat", "on", "the", "mat"]
x = embed([tokens])  # (1, L, E)
q, k, v = qkv(x)  # (1, H, L, D) each

P_full = attention.attention_weights(q, k)  # (1, H, L, L)
P_causal = attention.attention_weights(q, k, attn_mask=mask)

above = ~mask  # the strict upper triangle
print(
    "largest weight above the diagonal, no mask:",
    f"{P_full[..., above].max():.3f}",
)
print(
    "largest weight above the diagonal, causal: ",
    f"{P_causal[..., above].max():.3f}",
)
assert (P_causal[..., above] == 0).all()  # exactly 0, not "small"
torch.testing.assert_close(P_causal.sum(-1), torch.ones(1, H, L))
assert (P_causal[..., 0, 0] == 1).all()  # the first token reads itself

# the same weights by hand, with is_causal, and inside PyTorch's kernel
scores = q @ k.transpose(-2, -1) / D**0.5  # (1, H, L, L)
by_hand = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
torch.testing.assert_close(P_causal, by_hand)
torch.testing.assert_close(
    P_causal, attention.attention_weights(q, k, is_causal=True)
)
out_causal = attention.scaled_dot_product_attention(
    q, k, v, is_causal=True
)
out_torch = F.scaled_dot_product_attention(q, k, v, is_causal=True)
print(
    f"max |package - PyTorch| = {(out_causal - out_torch).abs().max():.1e}"
)
torch.testing.assert_close(out_causal, out_torch)

fig, axes = plt.subplots(2, 1, figsize=(5.5, 8.5), layout="constrained")
attention.plot_attention(
    P_full[0, 0], query_labels=tokens, ax=axes[0], title="no mask (head 0)"
)
ax = attention.plot_attention(
    P_causal[0, 0],
    query_labels=tokens,
    ax=axes[1],
    title="causal mask (head 0)",
)

# %% [markdown]
# ## 3. A common bug: a float mask of ones and zeros
#
# `torch.tril(torch.ones(L, L))` looks like the same mask, but its dtype is
# `float32`. `F.scaled_dot_product_attention` (and this package) *add* a
# float mask to the scores: allowed pairs get $+1$, forbidden pairs $+0$.
# Every score moves by at most 1 and nothing is masked. The future is
# merely down-weighted by a factor $e$, and the model can still read it.

# %%
float_mask = torch.tril(torch.ones(L, L))  # float32 ones and zeros
print("dtype:", float_mask.dtype)
leaky = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
P_leaky = attention.attention_weights(q, k, attn_mask=float_mask)
print("weights of 'the' (head 0) with the float mask:", P_leaky[0, 0, 0])
assert (P_leaky[..., above] > 0).all()  # every future key still read
assert not torch.allclose(leaky, out_causal, atol=1e-3)

# Two correct ways: make it boolean, or turn it into 0 / -inf.
for fixed in (
    float_mask.bool(),
    attention.mask_to_bias(float_mask.bool()),
):
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=fixed), out_torch
    )
print("float_mask.bool() and mask_to_bias(...) both give causal attention")

# %% [markdown]
# A hand-written `scores.masked_fill(mask == 0, ...)` reads the same float
# mask correctly, which is why the bug survives: it appears only when the
# mask is handed to a function that adds it.
#
# ## 4. No peeking: changing the future changes nothing earlier
#
# The real test of a causal mask is behavioural. Replace the last word and
# run again: the outputs of the first five tokens must not move at all. We
# check bit-for-bit equality: a masked weight is exactly 0, so the new
# word's value is multiplied by 0 and added to every earlier output as an
# exact 0.


# %%
def causal_out(sentence_tokens, is_causal=True):
    q, k, v = qkv(embed([sentence_tokens]))
    return attention.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal
    )  # (1, H, L, D)


changed = [*tokens[:-1], "dog"]  # "the cat sat on the dog"
before, after = causal_out(tokens), causal_out(changed)
diff = (before - after).abs().amax(dim=(0, 1, 3))  # per position
print("max change per position:", diff)
assert torch.equal(before[:, :, :-1], after[:, :, :-1])
assert diff[-1] > 0

unmasked = (causal_out(tokens, False) - causal_out(changed, False)).abs()
print("without the mask:       ", unmasked.amax(dim=(0, 1, 3)))
assert (unmasked.amax(dim=(0, 1, 3)) > 0).all()

# %% [markdown]
# The same fact seen through gradients: the output at position 2 does not
# depend on the embeddings at positions 3, 4 and 5, so its gradient with
# respect to them is exactly zero.

# %%
x = embed([tokens]).requires_grad_()
q, k, v = qkv(x)
out = attention.scaled_dot_product_attention(q, k, v, is_causal=True)
out[:, :, 2].sum().backward()
grad_norm = x.grad[0].norm(dim=-1)  # (L,) one number per input position
print("|d out[2] / d x[j]| for j = 0..5:", grad_norm)
assert (grad_norm[3:] == 0).all() and (grad_norm[:3] > 0).all()

# %% [markdown]
# ## 5. A batch of sentences of different lengths
#
# Tensors are rectangular, so sentences of different lengths are padded to
# the longest one with a `<pad>` token. Here they are padded on the right.

# %%
sentences = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["dogs", "bark"],
    ["birds", "sing", "at", "dawn"],
]
lengths = torch.tensor([len(s) for s in sentences])  # (B,)
S = int(lengths.max())
padded = [s + ["<pad>"] * (S - len(s)) for s in sentences]
for row in padded:
    print(" ".join(f"{t:>6s}" for t in row))

ids = torch.tensor([[VOCAB.index(t) for t in s] for s in padded])  # (B, S)
X = embedding[ids]  # (B, S, E)
B = len(sentences)
print("ids:", tuple(ids.shape), " embeddings:", tuple(X.shape))

# %% [markdown]
# [`padding_mask`](../../reference/masks/#attention.masks.padding_mask)
# turns the lengths into a $(B, S)$ mask, True at real tokens. Comparing
# the ids with the pad id gives the same thing here, but building it from
# the lengths is safer: some tokenizers reuse a real token (such as
# end-of-text) as the pad token, and then `ids != PAD` hides real tokens.

# %%
pad_mask = attention.padding_mask(lengths, max_length=S)  # (B, S)
print(pad_mask.int())
assert torch.equal(pad_mask, ids != PAD)

# %% [markdown]
# ## 6. The (B, 1, 1, S) broadcast
#
# The scores of a multi-head layer have shape $(B, H, L, S)$: batch, head,
# query, key. Padding is a property of *keys* (nobody should read a pad),
# the same for every head and every query. So the mask gets two axes of
# size 1 in the middle, `pad_mask[:, None, None, :]`, of shape
# $(B, 1, 1, S)$, and broadcasting copies it across heads and queries.

# %%
q, k, v = qkv(X)  # (B, H, S, D)
scores = q @ k.transpose(-2, -1)
key_mask = pad_mask[:, None, None, :]  # (B, 1, 1, S)
print("scores:", tuple(scores.shape), " key mask:", tuple(key_mask.shape))

P_pad = attention.attention_weights(q, k, attn_mask=key_mask)
pad_keys = ~key_mask.expand_as(P_pad)  # (B, H, S, S), True at pad keys
assert (P_pad[pad_keys] == 0).all()  # nobody reads a pad: exactly 0
print("total weight on pad keys:", P_pad[pad_keys].sum().item())

# The wrong axis: (B, 1, S, 1) masks *queries*, not keys.
wrong = pad_mask[:, None, :, None]
P_wrong = attention.attention_weights(q, k, attn_mask=wrong)
print(
    "with the wrong axis, weight on pad keys:",
    f"{P_wrong[pad_keys].sum():.3f}",
)
assert P_wrong[pad_keys].sum() > 1
pad_queries = ~pad_mask[:, None, :].expand(B, H, S)  # (B, H, S)
assert (P_wrong.sum(dim=-1)[pad_queries] == 0).all()  # empty pad rows

# %% [markdown]
# With the mask on the wrong axis, the real tokens of "dogs bark" read the
# pads, and the pad rows become empty. Both broadcast without an error:
# only the shape comment `(B, 1, 1, S)` and a test catch it.
#
# ## 7. Padding and causal together
#
# A decoder needs both masks: a key is allowed when it is not in the
# future **and** not padding.
# [`combine_masks`](../../reference/masks/#attention.masks.combine_masks)
# takes the logical *and*, broadcasting $(L, S)$ with $(B, 1, 1, S)$ to
# $(B, 1, L, S)$.

# %% caption="Head 0's attention weights under the combined causal and padding mask for three sentences padded to 6 tokens, the cat sat on the mat (no padding), dogs bark (4 pads) and birds sing at dawn (2 pads), each cell labelled with its weight; bottom right, the combined mask of sentence 1 (1 = may attend). In every map the upper triangle and the pad columns are 0, while the pad rows still read the real tokens before them (0.5/0.5 on dogs and bark)."
both = attention.combine_masks(attention.causal_mask(S), key_mask)
print("combined:", tuple(both.shape))
P_both = attention.attention_weights(q, k, attn_mask=both)  # (B, H, S, S)
out_both = attention.scaled_dot_product_attention(q, k, v, attn_mask=both)
torch.testing.assert_close(
    out_both, F.scaled_dot_product_attention(q, k, v, attn_mask=both)
)
assert (P_both[~both.expand_as(P_both)] == 0).all()

fig, axes = plt.subplots(2, 2, figsize=(7, 7), layout="constrained")
for b, ax in enumerate(axes.flat[:B]):
    attention.plot_attention(
        P_both[b, 0],
        query_labels=padded[b],
        ax=ax,
        fmt=".1f",
        colorbar=False,
        title=f"sentence {b} (head 0)",
    )
ax = attention.plot_attention(
    both[1, 0].float(),
    query_labels=padded[1],
    ax=axes[1, 1],
    fmt=".0f",
    cmap="Blues",
    colorbar=False,
    title="mask of sentence 1",
)

# %% [markdown]
# In every map the pad *columns* are 0 and the upper triangle is 0. The
# pad *rows* are not empty: a pad query sits after the real tokens, so the
# causal mask lets it read them. Its output is meaningless but finite, and
# everything downstream (the loss, pooling) must ignore it.
#
# ## 8. Garbage in the padding does not leak
#
# If masking works, the content of the pad positions cannot matter. Fill
# them with huge random vectors: the outputs at real positions stay
# bit-for-bit the same.

# %%
real = pad_mask[:, None, :, None]  # (B, 1, S, 1): real query positions

X_garbage = X.clone()
X_garbage[~pad_mask] = 1000 * torch.randn(int((~pad_mask).sum()), E)
out_garbage = attention.scaled_dot_product_attention(
    *qkv(X_garbage), attn_mask=both
)
same = torch.equal(
    out_garbage.masked_fill(~real, 0), out_both.masked_fill(~real, 0)
)
print("real outputs unchanged:", same)
assert same

# %% [markdown]
# "Any garbage" has one exception: NaN and infinity. A masked weight is 0,
# and $0 \times \text{NaN} = \text{NaN}$, so a NaN in a padded *value*
# poisons every output of its sentence. Pad with a finite embedding
# (zeros, as here), never with uninitialised memory from `torch.empty`.

# %%
X_nan = X.clone()
X_nan[1, 3] = float("nan")  # one pad position of "dogs bark"
out_nan = attention.scaled_dot_product_attention(
    *qkv(X_nan), attn_mask=both
)
print(
    "outputs of 'dogs bark' with a NaN in its padding:",
    out_nan[1, 0, :2, :2],
)
assert out_nan[1][real[1].expand_as(out_nan[1])].isnan().all()

# %% [markdown]
# ## 9. The fully-masked-row pitfall
#
# Models that generate text often pad on the **left**, so that every
# sentence ends at the same position. Combined with the causal mask this
# creates a query with no key at all: a pad at position 0 may only read
# key 0, which is a pad too. Its row of the mask is all False.

# %%
left_pad_mask = torch.arange(S) >= (S - lengths)[:, None]  # (B, S)
left_padded = [["<pad>"] * (S - len(s)) + s for s in sentences]
X_left = embedding[
    torch.tensor([[VOCAB.index(t) for t in s] for s in left_padded])
]
left_both = attention.combine_masks(
    attention.causal_mask(S), left_pad_mask[:, None, None, :]
)  # (B, 1, S, S)
empty = ~left_both.any(dim=-1)  # (B, 1, S): rows with no key
print("left-padded:", " ".join(left_padded[1]))
print("empty rows per sentence:", empty.sum(dim=(1, 2)))
assert empty.sum() == (S - lengths).sum()  # exactly the pad queries

# %% [markdown]
# A row with no key has no correct answer; what matters is what the
# implementation does with it. Three common ways to apply the mask:
#
# 1. The textbook `masked_fill(~mask, -inf)` then softmax: every score of
#    the row is $-\infty$, and the softmax computes $0/0$ = **NaN**.
# 2. `masked_fill(~mask, -1e9)`: every score of the row is $-10^9$, the
#    softmax of equal numbers is uniform, and the query silently gets the
#    **mean of all values**, pads included.
# 3. This package and `F.scaled_dot_product_attention` (PyTorch 2.5 and
#    later) return **zeros** for such a row.

# %%
q, k, v = (t.detach().requires_grad_() for t in qkv(X_left))
scores = q @ k.transpose(-2, -1) / D**0.5  # (B, H, S, S)
P_inf = scores.masked_fill(~left_both, float("-inf")).softmax(-1)
P_1e9 = scores.masked_fill(~left_both, -1e9).softmax(-1)
out_inf, out_1e9 = P_inf @ v, P_1e9 @ v
out_pkg = attention.scaled_dot_product_attention(
    q, k, v, attn_mask=left_both
)
out_sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=left_both)

row = (1, 0, 0)  # sentence 1, head 0, query 0: an empty row
print("-inf   :", out_inf[row].detach())
print("-1e9   :", out_1e9[row].detach())
print("mean V :", v[1, 0].detach().mean(dim=0))
print("package:", out_pkg[row].detach())
print("SDPA   :", out_sdpa[row].detach())

rows = empty.expand(B, H, S)  # (B, H, S)
assert out_inf[rows].isnan().all()
torch.testing.assert_close(
    out_1e9[rows], v.mean(dim=2, keepdim=True).expand_as(v)[rows]
)
assert (out_pkg[rows] == 0).all() and (out_sdpa[rows] == 0).all()
torch.testing.assert_close(out_pkg, out_sdpa)
# the real rows agree in all four
real_rows = ~rows
torch.testing.assert_close(out_inf[real_rows], out_pkg[real_rows])
torch.testing.assert_close(out_1e9[real_rows], out_pkg[real_rows])

# %% [markdown]
# The NaN does not stay in its row. Even with a loss that ignores the pad
# positions, backpropagation computes $\partial V = P^\top \partial O$, and
# the NaN row of $P$ meets the zero gradient of its ignored output:
# $\text{NaN} \times 0 = \text{NaN}$. Every value gradient of every
# sentence with an empty row is ruined; only sentence 0, which has none, is
# spared. The package's zeros keep every gradient finite.

# %%
# a loss on the real positions only: the empty rows are not selected
keep = left_pad_mask[:, None, :].expand(B, H, S)  # (B, H, S)
loss = out_inf[keep].sum()
print(f"loss: {loss:.3f} (finite)")
loss.backward()
nan_share = v.grad.isnan().float().mean(dim=(1, 2, 3))  # per sentence
print("share of NaN value gradients per sentence, -inf:", nan_share)
assert v.grad[0].isfinite().all() and v.grad[1:].isnan().all()

v.grad = None
out_pkg = attention.scaled_dot_product_attention(
    q, k, v, attn_mask=left_both
)
out_pkg[keep].sum().backward()
nan_share = v.grad.isnan().float().mean(dim=(1, 2, 3))
print("share of NaN value gradients per sentence, package:", nan_share)
assert torch.isfinite(v.grad).all()

# %% [markdown]
# `-1e9` avoids the NaN but hides the problem, and it breaks in half
# precision: the largest float16 is 65504, so the fill value does not even
# fit.

# %%
half_scores = scores.detach().half()
try:
    half_scores.masked_fill(~left_both, -1e9)
    raised = False
except RuntimeError as error:
    raised = True
    print("RuntimeError:", error)
assert raised

# %% [markdown]
# Zeros are the safest *default*, not a fix: the real fix is to keep such
# rows out of everything that matters (the loss, pooling, the next
# token's prediction), or to avoid creating them, for instance by padding
# on the right during training.
#
# ## 10. Masked mean pooling
#
# To get one vector per sentence (for a classifier, say), average the
# outputs over the sentence. A plain `.mean(dim=1)` averages the pad
# positions in as well. The masked mean sums over real positions only and
# divides by the true length. Use `masked_fill` rather than multiplying by
# the mask: $0 \times \text{NaN}$ would bring back a NaN from a pad row.

# %%
q, k, v = qkv(X)  # right-padded batch again
out = attention.scaled_dot_product_attention(q, k, v, attn_mask=both)
out = out.transpose(1, 2).reshape(B, S, H * D)  # (B, S, H*D): merge heads

naive = out.mean(dim=1)  # (B, H*D), pads included
summed = out.masked_fill(~pad_mask[..., None], 0.0).sum(dim=1)
pooled = summed / lengths[:, None]  # (B, H*D)

for b in range(B):
    torch.testing.assert_close(pooled[b], out[b, : lengths[b]].mean(dim=0))
error = (naive - pooled).norm(dim=-1)
print("|naive - masked| per sentence:", error)
assert (
    error[0] < 1e-6 and (error[1:] > 0.1).all()
)  # only padded ones differ

# %% [markdown]
# Sentence 0 has no padding, so both means agree; the other two differ.
#
# ## 11. Mask polarity: one True, two meanings
#
# PyTorch has two conventions for a boolean mask, and mixing them up is the
# most common masking bug of all:
#
# | where | `True` means |
# |---|---|
# | `F.scaled_dot_product_attention(attn_mask=...)` | may attend |
# | this package (`attn_mask`, `causal_mask`, `padding_mask`) | may attend |
# | `nn.MultiheadAttention(attn_mask=...)` | **masked out** |
# | `key_padding_mask` (PyTorch's module and this package's) | **padding** |
#
# The conversion is a logical not, `~mask`. Below, PyTorch's module gets
# `~pad_mask` and `~causal_mask(S)` and agrees with this package's
# [`MultiHeadAttention`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention),
# built with the same weights, which takes the causal mask as it is.

# %%
torch_mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
our_mha = attention.MultiHeadAttention.from_torch(torch_mha).eval()
causal = attention.causal_mask(S)

with torch.no_grad():
    theirs, _ = torch_mha(
        X, X, X, key_padding_mask=~pad_mask, attn_mask=~causal
    )
    ours, _ = our_mha(
        X, X, X, key_padding_mask=~pad_mask, attn_mask=causal
    )
print(f"max |torch - package| = {(theirs - ours).abs().max():.1e}")
torch.testing.assert_close(theirs, ours)

# %% [markdown]
# Now the bug: pass the padding mask without `~`. PyTorch's module reads
# True as "padding", so "dogs bark" attends *only* to its pads, and the
# full-length sentence 0, whose keys are now all "padding", gets NaN.

# %%
with torch.no_grad():
    flipped, w = torch_mha(
        X, X, X, key_padding_mask=pad_mask, need_weights=True
    )
print("weights of 'dogs' over the keys:", w[1, 0])
assert (w[1][:, pad_mask[1]] == 0).all()  # real keys ignored
assert flipped[0].isnan().all()
print("sentence 0 output is NaN:", flipped[0].isnan().all().item())

# %% [markdown]
# ## Summary
#
# - A causal mask is the boolean lower triangle, True = may attend
#   (`causal_mask(L)` equals `torch.tril` of a *boolean* matrix). Masked
#   weights are exactly 0, and changing a future token leaves every
#   earlier output bit-for-bit unchanged.
# - A padding mask comes from the lengths (`padding_mask`). For scores of
#   shape $(B, H, L, S)$ it is a mask on keys, `[:, None, None, :]`; it
#   combines with the causal one by a logical *and* (`combine_masks`).
# - Finite garbage in the padding cannot reach real outputs; NaN can. Pad
#   rows still produce outputs, which the loss and pooling must ignore
#   (masked mean: sum real positions, divide by the length).
# - Left padding plus a causal mask leaves queries with no key: textbook
#   `-inf` gives NaN (and NaN gradients everywhere), `-1e9` a silent mean
#   of the values, this package and PyTorch's SDPA zeros.
# - A float 1/0 mask is *added* to the scores and masks nothing; use a
#   boolean mask or `mask_to_bias`. `nn.MultiheadAttention` reads `True`
#   as "masked out": pass `~mask`.
#
# ## Exercises
#
# 1. With a KV cache, 2 new queries attend over 5 keys, the last 2 of
#    which are their own positions. Print `causal_mask(2, 5)` and
#    `causal_mask(2, 5, alignment="bottom_right")`. Which one lets the last
#    query see every key?
# 2. Left padding *without* a causal mask: are there empty rows? Count them
#    with `~mask.any(dim=-1)`.
# 3. Replace the masked mean of section 10 by a masked *max* pooling. What
#    fill value must the pad positions get before `.amax(dim=1)`?
# 4. Combine a `sliding_window_mask(S, window=2)` with the padding mask.
#    How many keys does each real query of sentence 0 read?
#
# **Answers.** (1) The bottom-right one: its last row is all True, while
# the top-left one (what `is_causal=True` means in PyTorch) lets the new
# queries see only the first keys of the cache. (2) None: without the
# causal mask every query sees all real keys. (3) $-\infty$, so that a pad
# never wins the max (with `0` a pad wins whenever every real value is
# negative). (4) One key for the first token, two for every other. The
# cell below checks all four.

# %%
assert attention.causal_mask(2, 5, alignment="bottom_right")[-1].all()
assert not attention.causal_mask(2, 5)[-1].all()

no_causal = left_pad_mask[:, None, None, :].expand(B, 1, S, S)
assert (~no_causal.any(dim=-1)).sum() == 0

maxed = out.masked_fill(~pad_mask[..., None], float("-inf")).amax(dim=1)
for b in range(B):
    torch.testing.assert_close(maxed[b], out[b, : lengths[b]].amax(dim=0))

window = attention.combine_masks(
    attention.sliding_window_mask(S, window=2), key_mask
)
print("keys read per query, sentence 0:", window[0, 0].sum(dim=-1))
assert window[0, 0].sum(dim=-1).tolist() == [1, 2, 2, 2, 2, 2]

# %% [markdown]
# **Where next:** the [concept page on masks](../../concepts/masks/) covers
# sliding-window and block-sparse masks, and
# [Seeing attention on words](../02_seeing_attention_on_words/) shows how
# to read the maps these masks shape.

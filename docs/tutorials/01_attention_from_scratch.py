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
# # Attention from scratch
#
# **You will learn** to compute scaled dot-product attention one step at a time
# (scores, scaling, softmax, weighted sum), to predict the shape of every intermediate
# result, to check that each row of attention weights is a probability distribution,
# and to read a heatmap of those weights. At the end a dozen lines of your own will
# match PyTorch's `F.scaled_dot_product_attention` to float32 precision.
#
# The formula we are going to take apart:
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{D}}\right) V$$
#
# The [concept page](../../concepts/scaled-dot-product-attention/) explains each
# piece; here we run it. Runs in a few seconds on a CPU.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. Queries, keys and values
#
# Attention works on a sequence of vectors. Take a five-token sentence and give each
# token a random 8-dimensional embedding (in a real model these are learned). A
# self-attention layer turns every embedding $x_i$ into three vectors with three
# weight matrices: a **query** $q_i = x_i W^Q$ (what this token is looking for), a
# **key** $k_i = x_i W^K$ (what it offers to be found by) and a **value**
# $v_i = x_i W^V$ (what it hands over when it is found). Stacking the rows gives the
# matrices $Q$, $K$ and $V$.

# %%
tokens = ["the", "cat", "sat", "on", "mats"]
L, E, D = len(tokens), 8, 4  # length, embedding width, head size

X = torch.randn(L, E)  # one embedding per row
W_q, W_k, W_v = (torch.randn(E, D) / E**0.5 for _ in range(3))

Q, K, V = X @ W_q, X @ W_k, X @ W_v
print("X:", tuple(X.shape))
print("Q:", tuple(Q.shape), "K:", tuple(K.shape), "V:", tuple(V.shape))

# %% [markdown]
# ## 2. Scores: every query against every key
#
# The score of query $i$ against key $j$ is the dot product $q_i \cdot k_j$: large
# when the two vectors point the same way. All $L \times L$ of them at once are one
# matrix product, $Q K^\top$. Row $i$ holds query $i$'s scores against every key.

# %%
scores = Q @ K.T  # (L, D) @ (D, L) -> (L, L)
print("scores shape:", tuple(scores.shape))
print(scores)

# entry (1, 3) is literally the dot product of query 1 with key 3
assert torch.isclose(scores[1, 3], torch.dot(Q[1], K[3]))

# %% [markdown]
# ## 3. Scaling by the square root of D
#
# If the components of $q$ and $k$ are independent with variance 1, the dot product
# of two $D$-dimensional vectors is a sum of $D$ such products and has variance $D$.
# Large scores push the softmax towards a one-hot vector whose gradients vanish, so the
# scores are divided by $\sqrt{D}$ to bring their spread back to about 1. Here $D = 4$,
# so every score is halved; with $D = 512$ the factor would be about 22.6. (Our small
# random projections do not give unit-variance components, so the scaled spread below
# is not 1; the loop after it uses unit-variance vectors to show the law itself.)
# [Why scale by the square root of D](../../concepts/why-scale/) derives the law and
# shows what happens to the gradients without it.

# %%
scaled = scores / D**0.5
print(f"std of scores: {scores.std():.3f}")
print(f"std after dividing by sqrt(D): {scaled.std():.3f}")

# The effect is clearest with unit-variance vectors of a realistic size:
for d in (4, 64, 512):
    dots = (torch.randn(10_000, d) * torch.randn(10_000, d)).sum(dim=-1)
    scaled_dots = dots / d**0.5
    print(
        f"D = {d:3d}: var(q.k) = {dots.var():6.1f},",
        f"var(q.k / sqrt(D)) = {scaled_dots.var():.2f}",
    )

# %% [markdown]
# ## 4. Softmax: scores become weights
#
# The softmax turns each row of scores into a probability distribution over the keys:
#
# $$p_{ij} = \frac{e^{z_{ij}}}{\sum_{j'} e^{z_{ij'}}}$$
#
# where $z_{ij} = q_i \cdot k_j / \sqrt{D}$ is the scaled score; the weights
# $p_{ij}$ form the matrix $P$. Every weight is positive and every row sums to 1. We subtract each row's maximum
# before exponentiating: it cancels in the fraction but keeps `exp` from overflowing
# when scores are large ([softmax and numerical stability](../../concepts/softmax-stability/)
# explains when that matters).

# %%
shifted = scaled - scaled.max(dim=-1, keepdim=True).values
exps = shifted.exp()
weights = exps / exps.sum(dim=-1, keepdim=True)  # (L, L)

print("weights shape:", tuple(weights.shape))
print(weights)
print("row sums:", weights.sum(dim=-1))
assert torch.allclose(weights.sum(dim=-1), torch.ones(L))
assert torch.allclose(weights, torch.softmax(scaled, dim=-1))

# %% [markdown]
# ## 5. The weighted sum of values
#
# Output row $i$ is the average of the value rows, weighted by row $i$ of $P$:
# $\text{out}_i = \sum_j p_{ij} v_j$. For all rows at once that is $P V$.

# %%
out = weights @ V  # (L, L) @ (L, D) -> (L, D)
print("output shape:", tuple(out.shape))

# Row 2 ("sat") spelled out as a loop over the keys:
row = sum(weights[2, j] * V[j] for j in range(L))
print("out[2]      :", out[2])
print("loop version:", row)
assert torch.allclose(out[2], row)

# %% [markdown]
# ## 6. The same in NumPy
#
# Nothing here is specific to PyTorch. The steps side by side, with `z` the
# scaled scores and `p` the weights:
#
# | step | NumPy | PyTorch |
# |---|---|---|
# | scores | `Q @ K.T / np.sqrt(D)` | `Q @ K.T / D**0.5` |
# | softmax | `np.exp(z - z_max)`, divided by its row sums | `torch.softmax(z, dim=-1)` |
# | output | `p @ V` | `p @ V` |
#
# NumPy has no softmax, so we write the stable one ourselves; the names of
# the reduction arguments differ too (`axis`, `keepdims` against `dim`,
# `keepdim`).
#
# The NumPy version, on the same numbers:

# %%
Qn, Kn, Vn = Q.numpy(), K.numpy(), V.numpy()

z = Qn @ Kn.T / np.sqrt(D)  # scaled scores: (L, D) @ (D, L) -> (L, L)
z = z - z.max(axis=-1, keepdims=True)  # stable softmax ...
p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)  # ... per row
out_numpy = p @ Vn  # weighted sum: (L, L) @ (L, D) -> (L, D)

print("Q:", Qn.shape, "K:", Kn.shape, "V:", Vn.shape)
print("z:", z.shape, "p:", p.shape, "output:", out_numpy.shape)
assert z.shape == p.shape == (L, L) and out_numpy.shape == (L, D)
print("NumPy row sums:", p.sum(axis=-1).round(6))
diff_p = np.abs(p - weights.numpy()).max()
diff_out = np.abs(out_numpy - out.numpy()).max()
print(f"max |NumPy - PyTorch|, weights: {diff_p:.2e}")
print(f"max |NumPy - PyTorch|, output:  {diff_out:.2e}")
np.testing.assert_allclose(p, weights.numpy(), atol=1e-6)
np.testing.assert_allclose(out_numpy, out.numpy(), atol=1e-6)

# %% [markdown]
# ## 7. Check against the package and against PyTorch
#
# The [`attention.scaled_dot_product_attention`](../../reference/functional/#attention.functional.scaled_dot_product_attention)
# function performs exactly these steps, with masks, batches and heads handled.
# PyTorch's `F.scaled_dot_product_attention` computes the same thing in its own code
# (for unbatched 2-D inputs like ours it picks its plain "math" implementation;
# batched 4-D inputs can get a fused kernel). All three agree to float32 precision,
# which is what `torch.testing.assert_close` checks (a relative tolerance of about
# $10^{-6}$), not to the last bit:

# %%
ours = attention.scaled_dot_product_attention(Q, K, V)
theirs = F.scaled_dot_product_attention(Q, K, V)
print(f"max |from scratch - package| = {(out - ours).abs().max():.2e}")
print(f"max |from scratch - torch|   = {(out - theirs).abs().max():.2e}")
torch.testing.assert_close(out, ours)
torch.testing.assert_close(out, theirs)

# %% [markdown]
# ## 8. Looking at the weights
#
# A heatmap of $P$ shows who reads from whom: row $i$ is the query token, column $j$
# the key token, and each row sums to 1. With random weights the pattern means
# nothing linguistically, but the picture is how you will read every attention map
# from here on.


# %% caption="Self-attention weights P of the five tokens the cat sat on mats with random projections (row = query token, column = key token, each cell labelled with its weight on a 0 to 1 colour scale). Every row sums to 1; with random weights the pattern means nothing, and the largest weight is cat reading itself, 0.44."
fig, ax = plt.subplots(figsize=(5.5, 4.5))
ax = attention.plot_attention(
    weights, query_labels=tokens, ax=ax, title="Self-attention weights P"
)

# %% [markdown]
# [`attention.plot_attention`](../../reference/viz/#attention.viz.plot_attention)
# draws the heatmap: keys along the x axis, queries down the y axis, each cell
# annotated with its weight and the colour scale fixed to $[0, 1]$.
#
# ## 9. A causal mask
#
# A language model predicting the next token must not read tokens that come after
# the current one. A **causal mask** allows query $i$ to attend to keys $0..i$ only:
# the disallowed scores are set to $-\infty$ before the softmax, so their weights
# are exactly 0 and the remaining weights in each row still sum to 1.
#
# In the package (and in `F.scaled_dot_product_attention`) a boolean mask is
# **True where attention is allowed**. The [masks page](../../concepts/masks/) covers
# causal, padding and combined masks, and the opposite convention of
# `nn.MultiheadAttention`.

# %% caption="The same weights without a mask (left) and with the causal mask (right), each cell labelled. Under the mask everything above the diagonal is exactly 0.00, the first token puts all its weight (1.00) on itself, and the last token, mats, keeps the weights it had without the mask, spread over the whole sentence."
mask = attention.causal_mask(L)
print(mask)

masked_scores = scaled.masked_fill(~mask, float("-inf"))
masked_weights = torch.softmax(masked_scores, dim=-1)
print("row sums:", masked_weights.sum(dim=-1))
assert torch.all(masked_weights[~mask] == 0)
torch.testing.assert_close(
    masked_weights, attention.attention_weights(Q, K, is_causal=True)
)

fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
attention.plot_attention(
    weights, query_labels=tokens, ax=axes[0], title="No mask"
)
ax = attention.plot_attention(
    masked_weights, query_labels=tokens, ax=axes[1], title="Causal mask"
)

# %% [markdown]
# The first token can only attend to itself, so its weight is 1; the last token
# spreads its attention over the whole sentence.
#
# ## Summary
#
# - Attention compares every query with every key ($QK^\top$, shape $L \times S$),
#   scales by $1/\sqrt{D}$, turns each row into probabilities with a softmax, and
#   averages the values with those probabilities ($PV$, shape $L \times D_v$).
# - Each row of $P$ sums to 1; a mask removes pairs by sending their scores to
#   $-\infty$, which makes their weights exactly 0.
# - Four lines of NumPy or PyTorch reproduce PyTorch's
#   `F.scaled_dot_product_attention` to float32 precision.
#
# ## Exercises
#
# 1. Remove the division by $\sqrt{D}$ and set $D = 256$. What happens to the largest
#    weight in each row? *Hint:* `attention.attention_weights(Q, K, scale=1.0)` skips
#    the scaling.
# 2. Use 3 queries and 5 keys ($L \ne S$). Which shapes change, and which do not?
# 3. Make $V$ 6-dimensional while $Q$ and $K$ stay 4-dimensional. Does anything break?
# 4. Mask *every* key of the first query (set row 0 of the mask to False). What does
#    the textbook `softmax(masked_fill(-inf))` of section 9 give for that row, and
#    what does `attention.scaled_dot_product_attention` give? *Hint:* what is
#    $0 / 0$?
#
# Try them before reading on. Below, each exercise has a folded answer (click it open
# once you have your own) and a code cell that checks it.

# %% [markdown]
# ### Exercise 1
#
# <details markdown="1"><summary>Answer to exercise 1</summary>
#
# The scores grow like $\sqrt{D}$ (their standard deviation is about 16 for
# $D = 256$), so each row's softmax approaches a one-hot vector: the largest weight
# moves close to 1 and the others, with their gradients, towards 0.
#
# </details>

# %%
q256, k256 = torch.randn(L, 256), torch.randn(L, 256)
w_scaled = attention.attention_weights(q256, k256)
w_unscaled = attention.attention_weights(q256, k256, scale=1.0)
top_scaled = w_scaled.max(dim=-1).values  # largest weight per row
top_unscaled = w_unscaled.max(dim=-1).values
print("largest weights, scaled:  ", top_scaled)
print("largest weights, unscaled:", top_unscaled)
assert top_unscaled.mean() > 0.9 > top_scaled.mean()

# %% [markdown]
# ### Exercise 2
#
# <details markdown="1"><summary>Answer to exercise 2</summary>
#
# Scores and weights become $3 \times 5$ ($L \times S$); the output is
# $3 \times D_v$, one row per query. $D$ and $D_v$ do not change, and every row of
# weights still sums to 1.
#
# </details>

# %%
q3 = torch.randn(3, D)  # L = 3 queries
k5, v5 = torch.randn(5, D), torch.randn(5, D)  # S = 5 keys, values
w35 = attention.attention_weights(q3, k5)
out35 = attention.scaled_dot_product_attention(q3, k5, v5)
print("weights:", tuple(w35.shape))
print("output:", tuple(out35.shape))
assert w35.shape == (3, 5) and out35.shape == (3, D)
torch.testing.assert_close(w35.sum(dim=-1), torch.ones(3))

# %% [markdown]
# ### Exercise 3
#
# <details markdown="1"><summary>Answer to exercise 3</summary>
#
# Nothing breaks: only $Q$ and $K$ must share a size, because only they meet in a dot
# product. The weights stay $L \times L$ and the output becomes $L \times 6$.
#
# </details>

# %%
V6 = torch.randn(L, 6)
out6 = attention.scaled_dot_product_attention(Q, K, V6)
print("output:", tuple(out6.shape))
assert out6.shape == (L, 6)
torch.testing.assert_close(out6, weights @ V6)
ref6 = F.scaled_dot_product_attention(Q, K, V6)
torch.testing.assert_close(out6, ref6)

# %% [markdown]
# ### Exercise 4
#
# <details markdown="1"><summary>Answer to exercise 4</summary>
#
# With every score of the row at $-\infty$, every $e^{z}$ is 0 and the softmax is
# $0 / 0$: the textbook version returns NaN for that row. The package, like
# `F.scaled_dot_product_attention` since PyTorch 2.5, returns a row of zeros instead
# (see [fully masked rows](../../concepts/masks/#fully-masked-rows)).
#
# </details>

# %%
no_keys = mask.clone()
no_keys[0] = False  # query 0 may attend to nothing
blocked = scaled.masked_fill(~no_keys, float("-inf"))
textbook = torch.softmax(blocked, dim=-1)  # section 9's recipe
sdpa = attention.scaled_dot_product_attention
safe = sdpa(Q, K, V, attn_mask=no_keys)
print("textbook weights, row 0:", textbook[0])
print("package output, row 0:  ", safe[0])
assert torch.isnan(textbook[0]).all()
assert torch.all(safe[0] == 0) and not torch.isnan(safe).any()
ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=no_keys)
torch.testing.assert_close(safe, ref)

# %% [markdown]
# **Where next:** the [concept page](../../concepts/scaled-dot-product-attention/)
# works an example by hand, and the
# [how-to guide](../../how-to/check-against-pytorch/) shows how to test your own
# implementation against PyTorch.

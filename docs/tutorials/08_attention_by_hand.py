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
# # Attention by hand (exercise)
#
# **You will learn** to compute scaled dot-product attention with pencil and
# paper on a $2 \times 2$ example: the scores, the scaling by $\sqrt{D}$, the
# softmax with every $e^x$ written out, and the weighted sum of values. Every
# number written on this page by hand is then recomputed by code and checked
# with an `assert`, so a slip in the arithmetic would stop the notebook. Five
# exercises at the end (masks, identical keys, shift invariance, temperature,
# padding) come with answers you can check by running them.
#
# Take a sheet of paper and do each step yourself before you read the next
# cell. The formula:
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{D}}\right) V$$
#
# The [concept page](../../concepts/scaled-dot-product-attention/) explains
# each piece. Runs in a few seconds on a CPU.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

import attention

torch.manual_seed(0)  # for the random queries of exercise 2
torch.set_printoptions(precision=4, sci_mode=False)


def check_hand(name, computed, by_hand, tol=1e-4):
    """Assert that a computed value matches the hand value."""
    by_hand = torch.as_tensor(by_hand, dtype=computed.dtype)
    diff = (computed - by_hand).abs().max().item()
    print(f"{name}: max |code - hand| = {diff:.1e}")
    assert diff <= tol, f"{name}: hand {by_hand}, code {computed}"


# %% [markdown]
# ## 1. The problem
#
# Two queries, two keys, two values, all of size $D = 2$. Rows are numbered
# from 0, as in the code: $q_0$ is the first row of $Q$.
#
# $$
# Q = \begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix},\qquad
# K = \begin{pmatrix} 1 & 1 \\ 1 & 0 \end{pmatrix},\qquad
# V = \begin{pmatrix} 2 & 0 \\ 0 & 3 \end{pmatrix}.
# $$
#
# So $q_0 = (1, 0)$, $q_1 = (0, 1)$, $k_0 = (1, 1)$, $k_1 = (1, 0)$,
# $v_0 = (2, 0)$ and $v_1 = (0, 3)$. The values are chosen so that you can
# read the output at a glance: its first coordinate is twice the weight on
# key 0, its second three times the weight on key 1.

# %%
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (L, D) = (2, 2)
K = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # (S, D) = (2, 2)
V = torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # (S, Dv) = (2, 2)
D = Q.shape[-1]
print("Q:", Q, "K:", K, "V:", V, sep="\n")

# %% [markdown]
# ## 2. Scores: every query against every key
#
# Entry $(i, j)$ is the dot product $q_i \cdot k_j$:
#
# | | key $k_0 = (1, 1)$ | key $k_1 = (1, 0)$ |
# |---|---|---|
# | $q_0 = (1, 0)$ | $1 \cdot 1 + 0 \cdot 1 = 1$ | $1 \cdot 1 + 0 \cdot 0 = 1$ |
# | $q_1 = (0, 1)$ | $0 \cdot 1 + 1 \cdot 1 = 1$ | $0 \cdot 1 + 1 \cdot 0 = 0$ |
#
# $$Q K^\top = \begin{pmatrix} 1 & 1 \\ 1 & 0 \end{pmatrix}$$
#
# Query 0 matches both keys equally well; query 1 matches key 0 better.

# %%
scores = Q @ K.T  # (L, D) @ (D, S) -> (L, S)
print(scores)
check_hand("scores", scores, [[1, 1], [1, 0]])

# %% [markdown]
# ## 3. Scaling by the square root of D
#
# Here $D = 2$, so every score is divided by $\sqrt{2}$, that is multiplied by
# $1/\sqrt{2} \approx 0.7071$:
#
# $$\frac{Q K^\top}{\sqrt{2}} = \begin{pmatrix} 0.7071 & 0.7071 \\ 0.7071 & 0 \end{pmatrix}$$
#
# Do not skip this step. A widespread version of this exercise goes straight
# from $Q K^\top$ to the softmax; its answer is not what
# `F.scaled_dot_product_attention` returns, as section 7 shows. The
# [why-scale page](../../concepts/why-scale/) explains why the factor is
# there: without it, scores grow like $\sqrt{D}$ and the softmax saturates.

# %%
scaled = scores / math.sqrt(D)
print(scaled)
hand = [[0.7071, 0.7071], [0.7071, 0.0]]
check_hand("scaled scores", scaled, hand)

# %% [markdown]
# ## 4. Softmax, row by row
#
# Each row $z$ becomes $p_j = e^{z_j} / \sum_{j'} e^{z_{j'}}$. Exponentiate,
# add up the row, divide:
#
# Two exponentials are needed: $e^{0.7071} = 2.0281$ and $e^0 = 1$.
#
# | | row 0 | row 1 |
# |---|---|---|
# | scaled scores $z$ | $0.7071,\ 0.7071$ | $0.7071,\ 0$ |
# | $e^{z}$ | $2.0281,\ 2.0281$ | $2.0281,\ 1.0000$ |
# | sum of $e^{z}$ | $4.0562$ | $3.0281$ |
# | $p = e^{z} / \text{sum}$ | $0.5000,\ 0.5000$ | $0.6698,\ 0.3302$ |
#
# Row 1 in full: $p_0 = 2.0281 / 3.0281 = 0.6698$ and
# $p_1 = 1 / 3.0281 = 0.3302$. Both rows sum to 1, and
#
# $$P = \begin{pmatrix} 0.5000 & 0.5000 \\ 0.6698 & 0.3302 \end{pmatrix}.$$
#
# The code below computes every entry of the table and compares it with the
# hand value to $10^{-4}$.

# %%
exps = scaled.exp()  # e^z, entry by entry
sums = exps.sum(dim=-1)  # one sum per row
P = exps / sums[:, None]  # (L, S), rows sum to 1

print("e^z:", exps, "row sums of e^z:", sums, "P:", P, sep="\n")
check_hand("e^z", exps, [[2.0281, 2.0281], [2.0281, 1.0]])
check_hand("sums", sums, [4.0562, 3.0281])
check_hand("P", P, [[0.5, 0.5], [0.6698, 0.3302]])
torch.testing.assert_close(P.sum(dim=-1), torch.ones(2))
torch.testing.assert_close(P, torch.softmax(scaled, dim=-1))

# %% [markdown]
# ## 5. The weighted sum of values
#
# Output row $i$ is $o_i = p_{i0}\, v_0 + p_{i1}\, v_1$:
#
# - $o_0 = 0.5\,(2, 0) + 0.5\,(0, 3) = (1.0000, 1.5000)$, the plain average
#   of the two values, because query 0 could not tell the keys apart.
# - $o_1 = 0.6698\,(2, 0) + 0.3302\,(0, 3) = (1.3395, 0.9907)$, pulled
#   towards $v_0$.
#
# (Multiplying the rounded weights gives $1.3396$ and $0.9906$; carry one more
# digit, $2 \times 0.66976$ and $3 \times 0.33024$, to get the last digit
# right. Rounding early is the usual source of small slips by hand.)
#
# $$\operatorname{Attention}(Q, K, V) = P V = \begin{pmatrix} 1.0000 & 1.5000 \\ 1.3395 & 0.9907 \end{pmatrix}$$

# %%
out = P @ V  # (L, S) @ (S, Dv) -> (L, Dv)
print(out)
check_hand("output", out, [[1.0, 1.5], [1.3395, 0.9907]])

# %% [markdown]
# ## 6. Check against the package and PyTorch
#
# [`attention.scaled_dot_product_attention`](../../reference/functional/#attention.functional.scaled_dot_product_attention)
# and PyTorch's `F.scaled_dot_product_attention` run the same four steps;
# [`attention.attention_weights`](../../reference/functional/#attention.functional.attention_weights)
# returns $P$ alone. Short names for the two functions keep the
# lines below readable.

# %%
sdpa = attention.scaled_dot_product_attention  # the package
torch_sdpa = F.scaled_dot_product_attention  # PyTorch

ours, torchs = sdpa(Q, K, V), torch_sdpa(Q, K, V)
print(f"max |hand - package| = {(out - ours).abs().max():.1e}")
print(f"max |hand - torch|   = {(out - torchs).abs().max():.1e}")
torch.testing.assert_close(out, ours)
torch.testing.assert_close(out, torchs)
torch.testing.assert_close(P, attention.attention_weights(Q, K))

# %% [markdown]
# ## 7. The common mistake: forgetting the scaling
#
# Without the scaling, row 0 is unchanged (its two scores are equal, and any
# factor keeps them equal), but row 1 becomes the softmax of $(1, 0)$:
#
# $$e^1 = 2.7183,\quad e^0 = 1,\quad \text{sum } 3.7183,\quad
# p = (0.7311, 0.2689),$$
#
# so $o_1 = (2 \times 0.73106,\ 3 \times 0.26894) = (1.4621, 0.8068)$ instead
# of $(1.3395, 0.9907)$. The softmax is sharper (0.73 instead of 0.67 on key
# 0) and the output is off by about 0.18 in the second coordinate: not a
# rounding issue, a different function. It *is* what you get by passing
# `scale=1.0`, which both the package and PyTorch accept.

# %%
# the mistake: softmax of the raw scores, no division by sqrt(D)
P_raw = torch.softmax(scores, dim=-1)
out_raw = P_raw @ V
print("unscaled P:", P_raw, "unscaled output:", out_raw, sep="\n")
check_hand("unscaled P", P_raw, [[0.5, 0.5], [0.7311, 0.2689]])
hand = [[1.0, 1.5], [1.4621, 0.8068]]
check_hand("unscaled output", out_raw, hand)

gap = (out_raw - torchs).abs().max()
print(f"max |unscaled - torch_sdpa| = {gap:.4f}")
assert gap > 0.1  # far beyond any rounding: a different answer
ref = torch_sdpa(Q, K, V, scale=1.0)
torch.testing.assert_close(out_raw, ref)

# %% [markdown]
# ## 8. A picture of the weights
#
# [`attention.plot_attention`](../../reference/viz/#attention.viz.plot_attention)
# draws $P$ with one row per query (the y axis) and one column per key (the x
# axis, labelled along the bottom). Next to it, the
# weights of the unscaled version: only row 1 changes.

# %% caption="The 2×2 attention weights of the hand-worked example, each cell labelled to four decimals: scaled, P = softmax(QKᵀ/√2) (left), and unscaled, softmax(QKᵀ) (right). Query 0 has a tie and keeps 0.5000/0.5000 in both; only row 1 changes, from 0.6698/0.3302 to the sharper 0.7311/0.2689."
kw = {"query_labels": ["q0", "q1"], "key_labels": ["k0", "k1"]}
kw["fmt"] = ".4f"  # four decimals, as on paper
fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4))
fig.set_layout_engine("constrained")
attention.plot_attention(
    P, ax=axes[0], title="P = softmax(QKᵀ / √2)", **kw
)
ax = attention.plot_attention(
    P_raw, ax=axes[1], title="unscaled: softmax(QKᵀ)", **kw
)

# %% [markdown]
# ## Summary
#
# - By hand, attention is four short steps: dot products, divide by
#   $\sqrt{D}$, exponentiate and normalise each row, average the values.
# - Equal scores in a row give equal weights, whatever the scale: query 0
#   averaged $v_0$ and $v_1$.
# - Dropping the $\sqrt{D}$ gives a sharper softmax and a different answer
#   from `F.scaled_dot_product_attention`; it equals `scale=1.0`.
# - Keep an extra digit in intermediate results; the code checks above
#   caught every hand value to $10^{-4}$.
#
# ## Exercises
#
# Work each one on paper first. Below the list, each exercise has a folded
# answer (click it open once you have your own numbers) and a code cell to run
# that checks the hand values with `assert`.
#
# 1. **Causal mask.** Let query $i$ see only keys $0..i$. Recompute $P$ and
#    the output by hand. *Hint:* a masked score becomes $-\infty$ and
#    $e^{-\infty} = 0$. The [masks page](../../concepts/masks/) has the rule.
# 2. **Two identical keys.** Replace the keys by $k_0 = k_1 = (1, 1)$.
#    What are $P$ and the output, and do they depend on $Q$?
# 3. **Scale and shift.** (a) Multiply $V$ by 10: what happens to $P$ and to
#    the output? (b) Add 5 to both scores of row 1 (after scaling): what
#    happens to row 1 of $P$? *Hint:* $e^{z + c} = e^c e^z$.
# 4. **Temperature.** Multiply the scaled scores by 100. What do the rows of
#    $P$ become? And if you multiply them by 0?
# 5. **Padding, 3 by 3.** Take $Q = I_3$ (the $3 \times 3$ identity),
#    keys $k_0 = (1, 0, 0)$, $k_1 = (0, 1, 0)$, $k_2 = (9, 9, 9)$ and
#    values $v_0 = (3, 0, 0)$, $v_1 = (0, 3, 0)$, $v_2 = (100, 100, 100)$.
#    Position 2 is padding: its key and value are junk. With a padding
#    mask that hides key 2, compute $P$ and the output. *Hint:* $D = 3$
#    and $1/\sqrt{3} \approx 0.5774$.
#
# The answers follow, one exercise at a time, folded so that you can work
# the next one without seeing it.

# %% [markdown]
# ### Exercise 1: causal mask
#
# <details markdown="1"><summary>Answer to exercise 1</summary>
#
# The mask removes only $(0, 1)$: query 0 may not see key 1. Row 0 becomes
# $\operatorname{softmax}(0.7071, -\infty) = (e^{0.7071}, 0) / e^{0.7071}
# = (1, 0)$, so $o_0 = v_0 = (2, 0)$. Row 1 keeps both keys and is unchanged:
# $(0.6698, 0.3302)$ and $o_1 = (1.3395, 0.9907)$.
#
# </details>
#
# Run the next cell to check the answer to exercise 1 against the
# package and PyTorch.

# %%
mask = attention.causal_mask(2)  # True = may attend
P_c = attention.attention_weights(Q, K, attn_mask=mask)
out_c = sdpa(Q, K, V, is_causal=True)
print("mask:", mask, "P:", P_c, "output:", out_c, sep="\n")
check_hand("causal P", P_c, [[1.0, 0.0], [0.6698, 0.3302]])
hand = [[2.0, 0.0], [1.3395, 0.9907]]
check_hand("causal output", out_c, hand)
ref = torch_sdpa(Q, K, V, is_causal=True)
torch.testing.assert_close(out_c, ref)

# %% [markdown]
# ### Exercise 2: two identical keys
#
# <details markdown="1"><summary>Answer to exercise 2</summary>
#
# With $k_0 = k_1 = (1, 1)$, every query gets the same score on both keys
# ($q_0 \cdot k = 1$ and $q_1 \cdot k = 1$), so every row of $P$ is
# $(0.5, 0.5)$ and every output is the mean of the values,
# $(1, 1.5)$, whatever $Q$ is. Attention tells keys apart only by their
# content: two keys with the same vector always get the same weight, so no
# query can pick $v_0$ over $v_1$.
#
# </details>
#
# Run the next cell to check the answer to exercise 2 against the
# package and PyTorch.

# %%
K2 = torch.tensor([[1.0, 1.0], [1.0, 1.0]])  # k0 = k1
P2 = attention.attention_weights(Q, K2)
check_hand("P, twin keys", P2, [[0.5, 0.5], [0.5, 0.5]])
out2 = sdpa(Q, K2, V)
check_hand("output, twin keys", out2, [[1, 1.5], [1, 1.5]])
torch.testing.assert_close(out2, torch_sdpa(Q, K2, V))

# any other four queries get the same output: the mean of V
Q_any = torch.randn(4, 2)
mean_v = V.mean(dim=0).expand(4, 2)
torch.testing.assert_close(sdpa(Q_any, K2, V), mean_v)

# %% [markdown]
# ### Exercise 3: scale and shift
#
# <details markdown="1"><summary>Answer to exercise 3</summary>
#
# (a) $P$ depends only on $Q$ and $K$, so it does not change; the output is
# linear in $V$ and becomes 10 times larger:
# $\begin{pmatrix} 10 & 15 \\ 13.3952 & 9.9072 \end{pmatrix}$.
#
# (b) Row 1 becomes $(5.7071, 5)$: $e^{5.7071} = 300.9990$ and
# $e^{5} = 148.4132$, sum $449.4121$, so $p = (0.6698, 0.3302)$, exactly as
# before. The common factor $e^5$ cancels between numerator and denominator:
# the softmax is invariant to adding a constant to a whole row. That is why
# a stable softmax may subtract each row's maximum before `exp` (see
# [softmax stability](../../concepts/softmax-stability/)). Adding a constant
# to a *column* (one key, for all queries) would change the weights.
#
# The code adds the 5 as a float `attn_mask`, which both functions add to the
# scaled scores.
#
# </details>
#
# Run the next cell to check the answer to exercise 3 against the
# package and PyTorch.

# %%
# (a) ten times the values
out_v10 = sdpa(Q, K, 10 * V)
hand = [[10.0, 15.0], [13.3952, 9.9072]]
check_hand("output with 10 V", out_v10, hand)
torch.testing.assert_close(out_v10, 10 * out)

# (b) row 1 plus 5, by hand; float64, because e^5.7 is about 300
# and float32 cannot hold 4 decimals of it
z1 = torch.tensor([1 / math.sqrt(2), 0.0], dtype=torch.float64)
e1 = (z1 + 5).exp()
check_hand("e^z, shifted row 1", e1, [300.9990, 148.4132])
check_hand("sum, shifted row 1", e1.sum(), 449.4121)
check_hand("P row 1, shifted", e1 / e1.sum(), P[1])

# a float attn_mask is added to the scaled scores
row_shift = torch.tensor([[0.0, 0.0], [5.0, 5.0]])
for f in (sdpa, torch_sdpa):
    torch.testing.assert_close(f(Q, K, V, attn_mask=row_shift), out)

# adding 5 to column 0 (key 0, for every query) is not harmless
col_shift = torch.tensor([[5.0, 0.0], [5.0, 0.0]])
changed = attention.attention_weights(Q, K, attn_mask=col_shift)
print("P with 5 added to column 0:", changed, sep="\n")
assert not torch.allclose(changed, P)

# %% [markdown]
# ### Exercise 4: temperature
#
# <details markdown="1"><summary>Answer to exercise 4</summary>
#
# Multiplying by 100 gives row 1 the scores $(70.71, 0)$: $p_1 = 1 / (1 +
# e^{70.71}) \approx 2 \times 10^{-31}$, so row 1 is one-hot $(1, 0)$ and
# $o_1 = v_0 = (2, 0)$. Row 0 has a tie, $(70.71, 70.71)$, and stays
# $(0.5, 0.5)$: as the temperature goes to 0 the softmax becomes an
# *argmax*, and tied scores share the weight. Multiplying by 0 (infinite
# temperature) makes every score 0 and every row uniform,
# $(0.5, 0.5)$, so both outputs are the mean value $(1, 1.5)$.
#
# The `scale` argument sets the factor in front of $Q K^\top$, so "scaled
# scores times $t$" is `scale = t / sqrt(2)`. The plot follows the weight
# on key 0 as $t$ goes from 0.01 to 100.
#
# </details>
#
# Run the next cell to check the answer to exercise 4 against the
# package and PyTorch.


# %% caption="Weight on key 0 as the scaled scores are multiplied by a factor t from 0.01 to 100 (logarithmic axis; the vertical line marks t = 1, the standard softmax). For query 1 (solid) it rises from 0.5 (uniform) through 0.67 at t = 1 to 1 (an argmax); for query 0 (dashed), whose two scores tie, it stays at 0.5 for every t."
def weights_at(t):
    """P with the scaled scores multiplied by t."""
    return attention.attention_weights(Q, K, scale=t / math.sqrt(D))


hot, cold = weights_at(100.0), weights_at(0.0)
print("scores x 100:", hot, "scores x 0:", cold, sep="\n")
check_hand("P at t = 100", hot, [[0.5, 0.5], [1.0, 0.0]])
check_hand("P at t = 0", cold, [[0.5, 0.5], [0.5, 0.5]])
out_hot = torch_sdpa(Q, K, V, scale=100 / math.sqrt(D))
check_hand("output at t = 100", out_hot, [[1, 1.5], [2, 0]])

t = np.logspace(-2, 2, 81)
w = torch.stack([weights_at(float(ti)) for ti in t])  # (81, L, S)
fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
ax.semilogx(t, w[:, 1, 0].numpy(), label="query 1 (scores 1, 0)")
ax.semilogx(t, w[:, 0, 0].numpy(), "--", label="query 0 (a tie)")
ax.axvline(1, color="grey", lw=0.8)
ax.set_xlabel("factor t on the scaled scores (1 = standard)")
ax.set_ylabel("weight on key 0")
ax.set_ylim(0.4, 1.02)
ax.set_title("Low temperature: softmax becomes argmax")
legend = ax.legend()

# %% [markdown]
# ### Exercise 5: padding, 3 by 3
#
# <details markdown="1"><summary>Answer to exercise 5</summary>
#
# The scores that matter involve keys 0 and 1 only, since the mask sends
# every score on key 2 to $-\infty$. With $Q = I_3$, $q_i \cdot k_j$ is entry
# $i$ of $k_j$:
#
# - query 0: scores $(1, 0)/\sqrt{3} = (0.5774, 0)$; $e^{0.5774} = 1.7813$,
#   sum $2.7813$, $p = (0.6405, 0.3595, 0)$,
#   $o_0 = (3 \times 0.64046,\ 3 \times 0.35954,\ 0) = (1.9214, 1.0786, 0)$;
# - query 1: the mirror image, $p = (0.3595, 0.6405, 0)$,
#   $o_1 = (1.0786, 1.9214, 0)$;
# - query 2: scores $(0, 0)$, $p = (0.5, 0.5, 0)$, $o_2 = (1.5, 1.5, 0)$.
#
# The junk value 100 never reaches the output. Without the mask, key 2 would
# score $9/\sqrt{3} = 5.196$ for every query and swallow almost all of the
# weight. (Query 2 sits at a padding position too; its output is computed
# but a model ignores it, e.g. in the loss.)
# [`attention.padding_mask`](../../reference/masks/#attention.masks.padding_mask)
# builds the mask from the sequence length: True at the two real positions.
#
# </details>
#
# Run the next cell to check the answer to exercise 5 against the
# package and PyTorch.

# %%
Q3 = torch.eye(3)
K3 = torch.tensor([[1.0, 0, 0], [0, 1, 0], [9, 9, 9]])
V3 = torch.tensor([[3.0, 0, 0], [0, 3, 0], [100, 100, 100]])
# one sequence of 2 real tokens, padded to 3: shape (1, S)
keep = attention.padding_mask([2], max_length=3)
print("padding mask:", keep)

P3 = attention.attention_weights(Q3, K3, attn_mask=keep)  # (L, S)
out3 = sdpa(Q3, K3, V3, attn_mask=keep)
print("P:", P3, "output:", out3, sep="\n")
e = math.exp(1 / math.sqrt(3))
check_hand("e^0.5774", torch.tensor(e), 1.7813)
check_hand(
    "P, padded",
    P3,
    [[0.6405, 0.3595, 0], [0.3595, 0.6405, 0], [0.5, 0.5, 0]],
)
check_hand(
    "output, padded",
    out3,
    [[1.9214, 1.0786, 0], [1.0786, 1.9214, 0], [1.5, 1.5, 0]],
)
assert torch.all(P3[:, 2] == 0)  # exactly zero, not just small
out3_torch = torch_sdpa(Q3, K3, V3, attn_mask=keep)
torch.testing.assert_close(out3, out3_torch)

leaky = sdpa(Q3, K3, V3)  # no mask
print("without the mask:", leaky, sep="\n")
assert leaky.min() > 90  # the junk value dominates every output

# %% [markdown]
# **Where next:** [Attention from scratch](../01_attention_from_scratch/)
# does the same steps on a five-token sentence with shapes printed at every
# step, and the [masks page](../../concepts/masks/) covers causal, padding
# and combined masks in depth.

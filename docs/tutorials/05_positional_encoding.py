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
# # Positional encoding
#
# **You will learn** what the sinusoidal position encoding looks like and
# why its dot products depend only on distance; that self-attention
# without positions cannot tell "dog bites man" from "man bites dog", and
# how adding positions fixes that; how rotary embeddings (RoPE) make a
# score depend only on the *offset* between query and key; how ALiBi
# biases the scores by distance, alone and with a causal mask; and what
# happens with an odd model width, where the usual sinusoidal code
# crashes.
#
# The [concept page](../../concepts/positional-information/) derives each
# property; here we run them, using
# [`attention.sinusoidal_encoding`](../../reference/positional/#attention.positional.sinusoidal_encoding),
# [`attention.apply_rotary`](../../reference/rope/#attention.positional.apply_rotary)
# and
# [`attention.alibi_bias`](../../reference/positional/#attention.positional.alibi_bias).
# Runs in a few seconds on a CPU.

# %%
import math

import matplotlib.pyplot as plt
import torch

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. The sinusoidal table
#
# The original Transformer adds to the embedding of the token at position
# $p$ a fixed vector whose column pairs $(2i, 2i+1)$ hold the sine and the
# cosine of one angle:
#
# $$\mathrm{PE}(p, 2i) = \sin(\omega_i p), \qquad
# \mathrm{PE}(p, 2i+1) = \cos(\omega_i p),$$
#
# $$\omega_i = 10000^{-2i/E}, \qquad i = 0, 1, \dots, E/2 - 1.$$
#
# Pair $i$ repeats every $2\pi / \omega_i$ positions: about 6 for the
# first pair, tens of thousands for the last. We build the table for 100
# positions and $E = 128$ straight from the formula and compare it with
# the package.

# %%
L, E = 100, 128
p = torch.arange(L, dtype=torch.float64)[:, None]  # (L, 1)
two_i = torch.arange(0, E, 2, dtype=torch.float64)  # 0, 2, ..., E - 2
omega = 10000.0 ** (-two_i / E)  # (E/2,) angular frequencies
by_hand = torch.empty(L, E, dtype=torch.float64)
by_hand[:, 0::2] = torch.sin(p * omega)  # even columns: sines
by_hand[:, 1::2] = torch.cos(p * omega)  # odd columns: cosines

pe = attention.sinusoidal_encoding(L, E, dtype=torch.float64)  # (L, E)
print("pe:", tuple(pe.shape), " (L, E)")
print("PE(0, :4) =", pe[0, :4].numpy().round(3), "  sin 0, cos 0, ...")
print("PE(1, :4) =", pe[1, :4].numpy().round(3), "  sin 1, cos 1, ...")
gap = (pe - by_hand).abs().max()
print(f"max |formula - package| = {gap:.1e}")
torch.testing.assert_close(pe, by_hand)

# %% [markdown]
# In the heatmap each row is the vector added at one position. The left
# columns flicker from row to row, the right ones barely change over 100
# positions: like the hands of a clock, fast columns tell neighbours
# apart and slow ones tell apart positions far away. The line plot follows
# a few columns down the positions.

# %% caption="Top: the sinusoidal encoding for 100 positions (rows) and 128 dimensions (columns) on a red–blue scale from −1 to 1; the left columns flicker from row to row and the right ones barely change. Bottom: five columns against position: 10 and 11 (period 13, a sine and a cosine a quarter period apart), 30 (period 54), 60 (period 471, a slow arc) and 120 (period about 35,000, nearly constant at 0)."
columns = (10, 11, 30, 60, 120)
fig, (top, bottom) = plt.subplots(
    2, 1, figsize=(9, 8), height_ratios=[1.3, 1], layout="constrained"
)
attention.plot_positional_encoding(
    pe, ax=top, title="Sinusoidal encoding, L = 100, E = 128"
)
for c in columns:
    wavelength = 2 * math.pi / omega[c // 2].item()
    bottom.plot(
        pe[:, c].numpy(), label=f"column {c} (period {wavelength:,.0f})"
    )
bottom.set(xlabel="position p", ylabel="PE(p, column)")
bottom.set_title("Selected columns")
_ = bottom.legend(fontsize=8, loc="center left", bbox_to_anchor=(1, 0.5))

# %% [markdown]
# Columns 10 and 11 are the sine and cosine of the same angle, a quarter
# of a period apart. Column 120 has a period of about 35,000 positions,
# so over these 100 it is nearly constant.
#
# ## 2. Dot products depend on distance only
#
# For one frequency,
# $\sin(\omega p)\sin(\omega q) + \cos(\omega p)\cos(\omega q) =
# \cos(\omega (p - q))$, so the dot product of two encodings is
#
# $$\mathrm{PE}(p) \cdot \mathrm{PE}(q) = \sum_{i} \cos\big(\omega_i
# (p - q)\big),$$
#
# a function of the offset $p - q$ alone, largest ($E/2 = 64$) at offset 0.
# The matrix $\mathrm{PE}\,\mathrm{PE}^\top$ is therefore constant along
# every diagonal:

# %% caption="Left: the 100×100 matrix of dot products PE(p)·PE(q) for E = 128 on a red–blue scale from −64 to 64: constant along every diagonal and largest, 64, on the main one. Right: one row, PE(50)·PE(50 + k) for offsets k from −50 to 49: a peak of 64 at k = 0, then a slow, rippling, symmetric decay to between about 30 and 35 at the ends."
gram = pe @ pe.T  # (L, L): entry (p, q) is PE(p) . PE(q)
for k in range(-(L - 1), L):
    diagonal = gram.diagonal(k)  # all pairs with q - p = k
    expected = torch.cos(k * omega).sum()
    torch.testing.assert_close(diagonal, expected.expand_as(diagonal))
torch.testing.assert_close(
    gram.diagonal(), torch.full((L,), E / 2.0).double()
)

row = gram[0]  # PE(0) . PE(k) for k = 0 .. 99
bands = [(1, 4), (5, 10), (10, 20), (20, 40), (40, 100)]
means = [row[a:b].mean().item() for a, b in bands]
for (a, b), m in zip(bands, means, strict=True):
    print(f"offsets {a:2d}..{b - 1:2d}: mean PE(p) . PE(p + k) = {m:5.1f}")
assert means == sorted(means, reverse=True)  # falls with distance

fig, (left, right) = plt.subplots(
    1, 2, figsize=(11, 4), layout="constrained"
)
image = left.imshow(gram.numpy(), cmap="RdBu_r", vmin=-E / 2, vmax=E / 2)
left.set(xlabel="position q", ylabel="position p")
left.set_title("PE(p) . PE(q)")
fig.colorbar(image, ax=left)
offsets = torch.arange(-50, 50)
right.plot(offsets.numpy(), gram[50, 50 + offsets].numpy())
right.set(xlabel="offset k", ylabel="PE(50) . PE(50 + k)")
_ = right.set_title("One row: a peak at k = 0, ripples, slow decay")

# %% [markdown]
# The similarity falls with distance, but not monotonically (it ripples),
# and it is symmetric: it says how far, not which way. In a model the
# encoding is added to the token embedding *before* the projections, so
# this clean picture is only what is available to $W^Q$ and $W^K$, not
# what the scores will be.
#
# ## 3. Without positions, order is invisible
#
# Self-attention compares every token with every other one; nothing in
# $\operatorname{softmax}(QK^\top/\sqrt{D})V$ says which token came first.
# Shuffle the input and the output is shuffled the same way, with the
# same numbers: the layer is **permutation-equivariant**. We check it on a
# multi-head layer with random weights.

# %%
E_m, H_m = 16, 4
layer = attention.MultiHeadAttention(E_m, H_m).eval()


def self_attend(x):
    """(L, E) -> output (L, E) and head-averaged weights (L, L)."""
    with torch.no_grad():
        return layer(x, x, x, need_weights=True)


x = torch.randn(7, E_m)  # (L, E)
perm = torch.randperm(7)
out_of_shuffled, _ = self_attend(x[perm])
shuffled_out = self_attend(x)[0][perm]
gap = (out_of_shuffled - shuffled_out).abs().max()
print("permutation:", perm.tolist())
print(f"max |layer(shuffled x) - shuffled layer(x)| = {gap:.1e}")
torch.testing.assert_close(out_of_shuffled, shuffled_out)

# %% [markdown]
# For language that is a problem. "dog bites man" and "man bites dog" are
# the same three tokens, so the layer gives *dog* the same output in both
# sentences, and likewise *bites* and *man*: the two sentences produce
# the same **set** of output vectors, only listed in another order.

# %%
vocab = {word: torch.randn(E_m) for word in ("dog", "bites", "man")}


def embed(sentence):
    """One row per word: (L, E)."""
    return torch.stack([vocab[word] for word in sentence.split(" ")])


first, second = "dog bites man", "man bites dog"
x1, x2 = embed(first), embed(second)  # (3, E) each
out1, w1 = self_attend(x1)
out2, w2 = self_attend(x2)
same_order = [2, 1, 0]  # row i of sentence 2 is word same_order[i] of 1
gap_without = (out1 - out2[same_order]).abs().max().item()
print(f"no positions:   max |dog_1 - dog_2| etc. = {gap_without:.1e}")
assert gap_without < 1e-6

# %% [markdown]
# ## 4. Adding positions breaks the tie
#
# Add the sinusoidal encoding to the embeddings, position 0 to the first
# word and so on, and the same word at a different position is a
# different vector. Now the outputs differ, and so do the attention maps:

# %% caption="Attention weights (labelled, 0 to 1 colour scale) of one random layer for dog bites man (left) and man bites dog (right), without positions (top) and with the sinusoidal encoding added (bottom). Without positions the right map is the left one with rows and columns reordered (dog reads man with 0.42 in both); with positions the numbers change (0.65 against 0.53)."
pe_m = attention.sinusoidal_encoding(3, E_m)  # (L, E)
out1_p, w1_p = self_attend(x1 + pe_m)
out2_p, w2_p = self_attend(x2 + pe_m)
gap_with = (out1_p - out2_p[same_order]).abs().max().item()
print(f"with positions: max |dog_1 - dog_2| etc. = {gap_with:.3f}")
assert gap_with > 0.05

fig, axes = plt.subplots(2, 2, figsize=(8, 7), layout="constrained")
for ax, w, sentence, title in (
    (axes[0, 0], w1, first, "no positions"),
    (axes[0, 1], w2, second, "no positions"),
    (axes[1, 0], w1_p, first, "with positions"),
    (axes[1, 1], w2_p, second, "with positions"),
):
    attention.plot_attention(
        w,
        query_labels=sentence.split(" "),
        ax=ax,
        title=f"{sentence}: {title}",
        colorbar=False,
    )

# %% [markdown]
# In the top row the right map is the left one with rows and columns
# reordered: the weight from *dog* to *man* is the same number in both.
# In the bottom row it is not.
#
# ## 5. RoPE: scores that depend only on the offset
#
# Rotary position embedding (RoPE) leaves the input alone. Inside each
# head, after the projections, it rotates every pair of features of a
# query or key at position $p$ by the angle $p\,\theta_i$. A dot product of
# two rotated vectors depends only on the *difference* of their angles:
#
# $$\langle R_m q,\; R_n k\rangle = \langle q,\; R_{n-m}\, k\rangle .$$
#
# A toy makes the effect plain: twelve copies of one token, so every query
# and every key has the same content. Without positions all scores in a
# row are equal and attention is uniform. With RoPE the scores depend on
# the distance between query and key, and identical tokens attend most to
# themselves and their neighbours.

# %%
L_t, D_t = 12, 16
content = 2.0 * torch.ones(L_t, D_t)  # (L, D): the same q and k everywhere

plain = attention.attention_weights(content, content)  # (L, L)
torch.testing.assert_close(plain, torch.full((L_t, L_t), 1 / L_t))

q_rot = attention.apply_rotary(content)  # position p rotated by p * theta
k_rot = attention.apply_rotary(content)
rope = attention.attention_weights(q_rot, k_rot)  # (L, L)
print("RoPE, query 6:", rope[6].numpy().round(2))
assert rope[6].argmax() == 6  # no content difference: the offset decides

# %% [markdown]
# Because only the offset counts, shifting every position by the same
# amount (say the whole sequence starts at position 100, as it would after
# 100 earlier tokens) changes no score. An encoding that is *added* to the
# input does not have this property: the content of one token meets the
# absolute position of the other through $W^Q$ and $W^K$. We compare both
# in float64, with random projections for the additive version:

# %%
c64 = content.double()
start = torch.arange(L_t)  # positions 0 .. 11
later = torch.arange(100, 100 + L_t)  # positions 100 .. 111


def rope_scores(positions):
    q = attention.apply_rotary(c64, positions)
    k = attention.apply_rotary(c64, positions)
    return q @ k.T  # (L, L)


W_q, W_k = torch.randn(2, D_t, D_t, dtype=torch.float64) / D_t**0.5
pe_t = attention.sinusoidal_encoding(100 + L_t, D_t, dtype=torch.float64)


def additive_scores(positions):
    x = c64 + pe_t[positions]  # (L, D): content plus position vector
    return (x @ W_q) @ (x @ W_k).T  # (L, L)


rope_shift = (rope_scores(later) - rope_scores(start)).abs().max()
add_shift = (additive_scores(later) - additive_scores(start)).abs().max()
print("shift every position by 100; max change of a score:")
print(f"  RoPE:     {rope_shift:.1e}")
print(f"  additive: {add_shift:.2f}")
torch.testing.assert_close(rope_scores(later), rope_scores(start))
assert add_shift > 0.1


def assert_constant_diagonals(scores):
    """Each diagonal of scores (L, L) holds one value: a function of j - i."""
    for k in range(-(L_t - 1), L_t):
        diagonal = scores.diagonal(k)
        torch.testing.assert_close(
            diagonal, diagonal[0].expand_as(diagonal)
        )


assert_constant_diagonals(rope_scores(start))

# %% [markdown]
# RoPE can express a *relative* preference directly. Rotate every key by
# one extra step, $k = R_1 q$; then
# $\langle R_m q, R_n R_1 q\rangle = \langle q, R_{n+1-m}\, q\rangle$ is
# largest when $n = m - 1$: each token attends to the token before it,
# wherever it is, from content that is identical everywhere. (A trained
# model can learn such a pair of projections; heads that attend to the
# previous token are found in many trained language models.) With a
# causal mask:

# %% caption="Attention weights of twelve identical tokens (rows = queries, columns = keys): without positions every row is uniform (left), and with RoPE each query weights itself and its near neighbours most, a band along the diagonal (middle). With the keys rotated one extra step and a causal mask (right), each query puts most of its weight on the token just before it, a band just below the diagonal."
one_step = attention.apply_rotary(
    content, torch.ones(L_t, dtype=torch.long)
)
k_prev = attention.apply_rotary(one_step)  # rotated by (p + 1) * theta
previous = attention.attention_weights(q_rot, k_prev, is_causal=True)
print("query 6:", previous[6].numpy().round(2))
assert all(previous[m].argmax() == m - 1 for m in range(1, L_t))
# before the mask, these scores too depend only on the offset (float64)
k_prev64 = attention.apply_rotary(
    attention.apply_rotary(c64, torch.ones(L_t, dtype=torch.long))
)
assert_constant_diagonals(attention.apply_rotary(c64) @ k_prev64.T)

fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), layout="constrained")
for ax, w, title in (
    (axes[0], plain, "No positions: uniform"),
    (axes[1], rope, "RoPE: near positions"),
    (axes[2], previous, "RoPE, k = R_1 q, causal: previous"),
):
    attention.plot_attention(
        w, ax=ax, title=title, annotate=False, colorbar=False
    )

# %% [markdown]
# All three maps come from twelve identical tokens. In the middle and
# right maps the scores are constant along every diagonal (asserted
# above) and the weights nearly so, except near the edges, where a row has
# fewer keys to share its weight with: the pattern moves with the query.
#
# ## 6. ALiBi: a penalty on distance
#
# ALiBi adds no vectors at all. Head $h$ adds $-m_h\,|i - j|$ to the
# scaled score of query $i$ for key $j$, with slopes $m_h$ falling
# geometrically over the heads ($\frac12, \frac14, \dots, \frac1{256}$ for
# 8 heads). It is a float mask: pass it as `attn_mask` and it is *added*
# to the scores. First we check exactly that, on random queries and keys:

# %%
H_a, L_a, D_a = 8, 12, 16
bias = attention.alibi_bias(H_a, L_a)  # (H, L, S), float
slopes = attention.alibi_slopes(H_a)  # (H,)
print("slopes * 256:", (slopes * 256).tolist())
print("bias of head 0, query 3:", bias[0, 3].numpy())

q, k, v = torch.randn(3, 1, H_a, L_a, D_a)  # (B, H, L, D) each
scaled = q @ k.transpose(-2, -1) / D_a**0.5  # (B, H, L, S)
expected = torch.softmax(scaled + bias, dim=-1) @ v
got = attention.scaled_dot_product_attention(q, k, v, attn_mask=bias)
gap = (got - expected).abs().max()
print(f"max |softmax(scores + bias) V - package| = {gap:.1e}")
torch.testing.assert_close(got, expected)

# %% [markdown]
# With identical content (our twelve copies again) the content scores in
# a row are all equal and cancel in the softmax, so what remains is ALiBi
# alone: the steep heads look at the nearest keys, the shallow ones
# spread their weight over the whole sequence. (The colour scale ends at
# the largest weight shown, not at 1, so that the flat heads show any
# pattern at all.)

# %% caption="ALiBi attention of twelve identical tokens for heads 0, 2, 4 and 7 of 8 (slopes mₕ = 1/2, 1/8, 1/32, 1/256), on one colour scale that ends at the largest weight shown (about 0.39), not at 1. The steep head 0 concentrates each row on the diagonal and its neighbours; each shallower head spreads its weight more, and head 7 is almost uniform."
same = content.expand(H_a, L_t, D_t)  # (H, L, D): identical tokens
alibi = attention.attention_weights(
    same, same, attn_mask=bias
)  # (H, L, S)
distance = (torch.arange(L_a)[:, None] - torch.arange(L_a)).abs()  # (L, S)
torch.testing.assert_close(
    alibi, torch.softmax(-slopes[:, None, None] * distance, dim=-1)
)

shown = [0, 2, 4, 7]
# Each head's slope as m₀, m₂...: subscript digits, as the notation writes m_h.
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
titles = [
    f"head {h}: m{str(h).translate(SUB)} = 1/{round(1 / slopes[h].item())}"
    for h in shown
]
fig = attention.plot_attention_heads(
    alibi[shown], titles=titles, ncols=2, vmax=None
)

# %% [markdown]
# ALiBi was designed for causal language models, which must not see later
# tokens anyway. Combine the bias with a causal mask using
# [`attention.combine_masks`](../../reference/masks/#attention.masks.combine_masks):
# it turns the boolean mask into $0$ and $-\infty$ and adds it to the bias.
# Each query now weighs the keys at or before it by
# $e^{-m_h (i - j)}$, the nearest most.

# %% caption="The same four ALiBi heads combined with a causal mask, on a 0 to 1 colour scale: everything above the diagonal is 0, query 0 puts all its weight on itself, and each query weighs the keys at or before it by e^(−mₕ(i − j)). Head 0 (m₀ = 1/2) favours the nearest keys; head 7 (m₇ = 1/256) spreads its weight almost evenly over the prefix."
causal_alibi = attention.combine_masks(bias, attention.causal_mask(L_a))
print("combined, head 0, query 3:", causal_alibi[0, 3].numpy())
weights_c = attention.attention_weights(same, same, attn_mask=causal_alibi)
assert torch.all(weights_c[:, ~attention.causal_mask(L_a)] == 0)
i = 7  # query 7: keys 0..7, weights proportional to exp(-m (7 - j))
manual = torch.exp(-slopes[:, None] * (i - torch.arange(i + 1)))  # (H, 8)
manual = manual / manual.sum(-1, keepdim=True)
torch.testing.assert_close(weights_c[:, i, : i + 1], manual)
fig = attention.plot_attention_heads(
    weights_c[shown], titles=titles, ncols=2
)

# %% [markdown]
# The bias is a formula, not a table, so it exists for any length: models
# trained with ALiBi on short sequences can be run on longer ones, the
# point of the paper's title, "Train Short, Test Long".
#
# ## 7. Odd widths
#
# The sinusoidal code found in many tutorials fills even columns with sines
# and odd columns with cosines, one frequency per pair:

# %%


def common_sinusoidal(length, d_model):
    """The usual implementation; it assumes an even d_model."""
    pe = torch.zeros(length, d_model)
    position = torch.arange(length).unsqueeze(1)  # (L, 1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model)
    )  # (ceil(d_model / 2),)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


even = common_sinusoidal(50, 8)
torch.testing.assert_close(even, attention.sinusoidal_encoding(50, 8))
print("d_model = 8: the common code agrees with the package")
try:
    common_sinusoidal(50, 7)
except RuntimeError as error:
    print("d_model = 7:", type(error).__name__, "-", error)
else:
    raise AssertionError("the common code must fail for d_model = 7")

# %% [markdown]
# With $E = 7$ there are 4 frequencies (columns 0, 2, 4, 6 take sines) but
# only 3 odd columns for the 4 cosines, so the last assignment fails. The
# package evaluates the formula as written, for every column that exists:
# the last column is a sine whose cosine partner would fall outside the
# table, and the exponent keeps $E = 7$. So the result is **not** the
# first 7 columns of the $E = 8$ table.

# %%
odd = attention.sinusoidal_encoding(50, 7, dtype=torch.float64)  # (50, 7)
print("odd table:", tuple(odd.shape))
pos = torch.arange(50, dtype=torch.float64)
for c in range(7):
    angle = pos * 10000.0 ** (-2 * (c // 2) / 7)
    expected = torch.sin(angle) if c % 2 == 0 else torch.cos(angle)
    torch.testing.assert_close(odd[:, c], expected)
cut = attention.sinusoidal_encoding(50, 8, dtype=torch.float64)[:, :7]
gap = (odd - cut).abs().max()
print(f"max |E=7 table - first 7 columns of E=8| = {gap:.3f}")
assert not torch.allclose(odd, cut)

# %% [markdown]
# RoPE, in contrast, rotates *pairs* of features, so an odd head size has
# no meaning; the package says so instead of silently dropping a feature:

# %%
try:
    attention.apply_rotary(torch.randn(4, 7))
except ValueError as error:
    print("ValueError:", error)
else:
    raise AssertionError("apply_rotary must reject an odd head size")

# %% [markdown]
# ## Summary
#
# - The sinusoidal encoding gives position $p$ the sines and cosines of
#   $p\,\omega_i$ for geometrically spaced frequencies; the dot product of
#   two encodings is $\sum_i \cos(\omega_i (p - q))$, a function of the
#   offset only, peaked at 0 and rippling as it falls.
# - Without positions self-attention is permutation-equivariant:
#   "dog bites man" and "man bites dog" give the same set of outputs.
#   Adding position vectors to the input breaks the symmetry.
# - RoPE rotates queries and keys by position-dependent angles; scores
#   then depend only on the offset $m - n$ (shifting every position
#   changes nothing), and it can express "look one token back" with
#   identical content.
# - ALiBi adds $-m_h |i - j|$ to the scores as a float `attn_mask`; with a
#   causal mask (`combine_masks`) each query weighs earlier keys by
#   $e^{-m_h (i - j)}$.
# - The usual sinusoidal code crashes for an odd width; the package
#   evaluates the formula for every column. RoPE needs an even head size.
#
# ## Exercises
#
# 1. Rebuild the similarity matrix of section 2 with
#    `sinusoidal_encoding(200, 128, base=100.0)`. How does the row
#    $\mathrm{PE}(0) \cdot \mathrm{PE}(k)$ change?
# 2. Check that RoPE changes no vector's length:
#    compare `attention.apply_rotary(x).norm(dim=-1)` with
#    `x.norm(dim=-1)` for a random `x` of shape `(12, 16)`.
# 3. With a causal mask and ALiBi, which fraction of its weight does query
#    999 of head 0 ($m_0 = \frac12$) put on the keys more than 20 positions
#    back, for identical content? Work it out, then check with
#    `attention_weights` for $L = 1000$.
# 4. Repeat the permutation check of section 3 with `is_causal=True`. Does
#    it still hold?
#
# **Answers.** (1) It falls much faster: about 22 by $k = 10$, and it
# first turns negative around $k = 60$, because with base 100 even the
# slowest pair, $i = 63$, repeats every
# $2\pi \cdot 100^{126/128} \approx 585$ positions, so no column stays
# nearly constant. (2) They agree to float32 precision: each
# pair is rotated, and rotations keep lengths. (3) The weights are
# proportional to $e^{-d/2}$ for distances $d = 0, 1, \dots$, so the share
# of $d \ge 21$ is $e^{-21/2} \approx 2.8 \times 10^{-5}$: a steep head
# is effectively local. (4) No: the causal mask is itself positional
# (query $i$ sees exactly $i + 1$ keys), so shuffling the input changes
# which tokens each position can see. The
# [concept page](../../concepts/positional-information/) shows how much
# position a causal model can read off this alone.
#
# **Where next:** the [multi-head attention](../04_multi_head_attention/)
# tutorial builds the layer these encodings feed.

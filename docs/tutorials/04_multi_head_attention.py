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
# # Multi-head attention
#
# **You will learn** to build multi-head attention one tensor operation at a
# time on a batch of sequences: project with one $E \times E$ matrix each
# for queries, keys and values, split the result into $H$ heads with a
# `view` and a `transpose`, attend in every head at once, merge the heads
# and mix them with the output projection $W^O$. You will check every step
# against
# [`attention.MultiHeadAttention`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention)
# and `torch.nn.MultiheadAttention`, draw one heatmap per head, hand-build
# four heads that each read different features of a sentence and compare
# them with a single head, and meet the reshape bug that has the right
# shape and the wrong numbers.
#
# The layer we are going to take apart:
#
# $$\operatorname{MultiHead}(X) = \operatorname{Concat}(\text{head}_1,
# \dots, \text{head}_H)\, W^O,$$
#
# $$\text{head}_h = \operatorname{Attention}(X W_h^Q,\; X W_h^K,\;
# X W_h^V), \qquad h = 1, \dots, H.$$
#
# The [concept page](../../concepts/multi-head-attention/) explains why
# heads split the width instead of multiplying it and what they cost; here
# we run it. Vectors are rows, as in the paper: a projection is $X W$.
# Runs in a few seconds on a CPU.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. A batch of sequences and three projections
#
# The input is a batch of $B$ sequences of $L$ vectors of width $E$: a
# tensor of shape $(B, L, E)$. Multi-head attention with $H$ heads gives
# each head $D = E / H$ features. The per-head projections $W_h^Q$ (each
# $E \times D$) sit side by side as the column blocks of **one**
# $E \times E$ matrix $W^Q$, so a single matrix product computes the
# queries of every head at once; likewise $W^K$ and $W^V$. We use sizes
# that are all different ($B = 2$, $L = 5$, $E = 12$, $H = 3$, $D = 4$), so
# that a swapped axis cannot go unnoticed, and random biases so that the
# checks below cover them too.

# %%
B, L, E, H = 2, 5, 12, 3
D = E // H  # 4 features per head

x = torch.randn(B, L, E)
W_q, W_k, W_v, W_o = (torch.randn(E, E) / E**0.5 for _ in range(4))
b_q, b_k, b_v, b_o = (0.1 * torch.randn(E) for _ in range(4))

q = x @ W_q + b_q  # (B, L, E): every head's queries, side by side
k = x @ W_k + b_k  # (B, L, E)
v = x @ W_v + b_v  # (B, L, E)
print("x:", tuple(x.shape), " q, k, v:", tuple(q.shape))
print("parameters: 4 * (E*E + E) =", 4 * (E * E + E), "whatever H is")

# %% [markdown]
# ## 2. Splitting into heads: a view, then a transpose
#
# Head $h$ owns features $hD, \dots, hD + D - 1$ of every projected vector.
# Two steps turn $(B, L, E)$ into one $(L, D)$ attention problem per
# sequence and head:
#
# 1. `view(B, L, H, D)` cuts the last axis into $H$ blocks of $D$. Nothing
#    moves in memory; the shape only says where one head ends.
# 2. `transpose(1, 2)` swaps the sequence and head axes, giving
#    $(B, H, L, D)$: for a fixed batch entry $b$ and head $h$,
#    `q[b, h]` is an ordinary $(L, D)$ matrix of queries.

# %%
print("q                  ", tuple(q.shape), " (B, L, E)")
q_blocks = q.view(B, L, H, D)
print("q.view(B, L, H, D) ", tuple(q_blocks.shape), " (B, L, H, D)")
q_heads = q_blocks.transpose(1, 2)
print(".transpose(1, 2)   ", tuple(q_heads.shape), " (B, H, L, D)")


def split_heads(t):
    """(B, n, E) -> (B, H, n, D); n is the length of *this* tensor."""
    return t.view(B, t.shape[1], H, D).transpose(1, 2)


k_heads, v_heads = split_heads(k), split_heads(v)  # (B, H, L, D) each

# Head h's queries are x times the h-th block of D columns of W^Q.
for h in range(H):
    cols = slice(h * D, (h + 1) * D)
    torch.testing.assert_close(q_heads[:, h], x @ W_q[:, cols] + b_q[cols])
print("head h = x @ W_q[:, h*D:(h+1)*D] + b_q[h*D:(h+1)*D] for every h")

# %% [markdown]
# ## 3. Attention in every head at once
#
# With the head axis in front, the formula of the
# [first tutorial](../01_attention_from_scratch/) applies unchanged: matrix
# products act on the last two axes and treat $(B, H)$ as a batch. Each
# head scales by $1/\sqrt{D}$ with its **own** width $D$, not $E$. The
# scores now have shape $(B, H, L, S)$: one $L \times S$ map per sequence
# and head ($S = L$ here, since it is self-attention).

# %%
scores = q_heads @ k_heads.transpose(-2, -1) / D**0.5  # (B, H, L, S)
weights = torch.softmax(scores, dim=-1)  # (B, H, L, S)
heads = weights @ v_heads  # (B, H, L, D)
print("scores, weights:", tuple(weights.shape), " (B, H, L, S)")
print("heads:          ", tuple(heads.shape), " (B, H, L, D)")
torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, L))

# Each head is plain single-head attention on its own slice:
for h in range(H):
    alone = attention.scaled_dot_product_attention(
        q_heads[:, h], k_heads[:, h], v_heads[:, h]
    )  # (B, L, D)
    torch.testing.assert_close(heads[:, h], alone)
print("every head equals single-head attention on its slice")

# %% [markdown]
# ## 4. Merging the heads and the output projection
#
# Merging undoes the split in reverse order: `transpose(1, 2)` brings the
# sequence axis back in front of the heads, $(B, L, H, D)$, and
# `reshape(B, L, E)` glues each token's $H$ head outputs into one row of
# width $E$: the concatenation. The transposed tensor is no longer laid out
# contiguously in memory, so `view` refuses; `reshape` copies when it has
# to. Finally $W^O$ ($E \times E$) maps the concatenation back to the
# model width.

# %%
merged = heads.transpose(1, 2)  # (B, L, H, D)
print("heads.transpose(1, 2)", tuple(merged.shape), " (B, L, H, D)")
print("contiguous in memory?", merged.is_contiguous())
try:
    merged.view(B, L, E)
except RuntimeError as error:
    print("view refuses:", str(error).split(". ")[0])
else:
    raise AssertionError("view of the transposed heads must fail")
concat = merged.reshape(B, L, E)  # (B, L, E) = Concat(head_1..head_H)
print(".reshape(B, L, E)    ", tuple(concat.shape), " (B, L, E)")

# Token 3 of sequence 1: its row is the three heads' rows end to end.
torch.testing.assert_close(concat[1, 3], torch.cat(list(heads[1, :, 3])))

out = concat @ W_o + b_o  # (B, L, E)
print("out = concat @ W_o   ", tuple(out.shape), " (B, L, E)")

# %% [markdown]
# ## 5. Check against the package and against PyTorch
#
# [`attention.MultiHeadAttention`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention)
# holds the four projections as `nn.Linear` layers named `q_proj`,
# `k_proj`, `v_proj` and `out_proj`. An `nn.Linear` stores its weight as
# (out, in) and computes `x @ weight.T + bias`, so our paper-layout $W^Q$
# goes in transposed. With `need_weights=True` and
# `average_attn_weights=False` the module also returns the per-head weights
# $(B, H, L, S)$; the default `average_attn_weights=True` averages them over
# the heads, as `torch.nn.MultiheadAttention` does.
#
# `to_torch()` builds a `torch.nn.MultiheadAttention` with the same
# weights (PyTorch stacks $W^Q, W^K, W^V$ into one `in_proj_weight` of
# shape $(3E, E)$), and `from_torch()` goes the other way.

# %%
mha = attention.MultiHeadAttention(E, H).eval()
with torch.no_grad():
    for proj, W, b in (
        (mha.q_proj, W_q, b_q),
        (mha.k_proj, W_k, b_k),
        (mha.v_proj, W_v, b_v),
        (mha.out_proj, W_o, b_o),
    ):
        proj.weight.copy_(W.T)  # nn.Linear keeps (out, in)
        proj.bias.copy_(b)

    ours, ours_weights = mha(
        x, x, x, need_weights=True, average_attn_weights=False
    )
    _, mean_weights = mha(x, x, x, need_weights=True)  # averaged

    torch_mha = mha.to_torch()  # a torch.nn.MultiheadAttention
    theirs, theirs_weights = torch_mha(
        x, x, x, need_weights=True, average_attn_weights=False
    )
    back = attention.MultiHeadAttention.from_torch(torch_mha)
    round_trip, _ = back(x, x, x)

print(
    "in_proj_weight of PyTorch's module:",
    tuple(torch_mha.in_proj_weight.shape),
)
print(f"max |from scratch - package|  = {(out - ours).abs().max():.1e}")
print(f"max |from scratch - PyTorch|  = {(out - theirs).abs().max():.1e}")
gap_w = (weights - theirs_weights).abs().max()
print(f"max |weights - PyTorch's|     = {gap_w:.1e}")
torch.testing.assert_close(out, ours)
torch.testing.assert_close(out, theirs)
torch.testing.assert_close(out, round_trip)
torch.testing.assert_close(weights, ours_weights)
torch.testing.assert_close(weights, theirs_weights)
torch.testing.assert_close(mean_weights, weights.mean(dim=1))

# %% [markdown]
# ## 6. A sentence and hand-built features
#
# Random weights give random maps. To see what heads are *for*, we build a
# layer by hand for the sentence "I prefer apple over orange because it is
# less acidic". Each token gets an embedding of $E = 8$ readable features.
# One of them is a stand-in for work that an earlier layer would have done:
# `preferred` marks *apple* as the thing that is preferred.

# %% caption="The embedding table X of the sentence I prefer apple over orange because it is less acidic: one row per token (L = 10), one column per readable feature (E = 8: fruit, preferred, taste, comparison, pronoun, reason, speaker, verb), shaded and labelled where non-zero. apple has fruit and preferred, orange only fruit, less has comparison 1 and taste 0.5, acidic taste 1."
sentence = "I prefer apple over orange because it is less acidic"
tokens = sentence.split(" ")
features = [
    "fruit",
    "preferred",
    "taste",
    "comparison",
    "pronoun",
    "reason",
    "speaker",
    "verb",
]
rows = {  # the non-zero features of each token
    "I": {"speaker": 1},
    "prefer": {"comparison": 1, "verb": 1},
    "apple": {"fruit": 1, "preferred": 1},
    "over": {"comparison": 1},
    "orange": {"fruit": 1},
    "because": {"reason": 1},
    "it": {"pronoun": 1},
    "is": {"verb": 1},
    "less": {"comparison": 1, "taste": 0.5},
    "acidic": {"taste": 1},
}
L_s, E_s = len(tokens), len(features)  # 10 tokens, 8 features
X = torch.zeros(L_s, E_s)  # (L, E)
for i, token in enumerate(tokens):
    for name, value in rows[token].items():
        X[i, features.index(name)] = value

fig, ax = plt.subplots(figsize=(6, 4.2), layout="constrained")
image = ax.imshow(X.numpy(), cmap="Greys", vmin=0, vmax=1.5)
ax.set_xticks(range(E_s), features, rotation=45, ha="right")
ax.set_yticks(range(L_s), tokens)
ax.set_title("Embeddings X: one row per token (L = 10, E = 8)")
for (i, j), value in np.ndenumerate(X.numpy()):
    if value:
        # white on dark grey cells, black on light ones (0.5 is a light grey)
        r, g, b, _ = image.to_rgba(value)
        dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5
        ax.text(
            j,
            i,
            f"{value:g}",
            ha="center",
            va="center",
            color="w" if dark else "k",
        )

# %% [markdown]
# ## 7. Four hand-built heads
#
# With $H = 4$ heads of equal width $D = E / H = 2$, each head's $W_h^Q$,
# $W_h^K$ and $W_h^V$ are $8 \times 2$ matrices. We fill them so that each
# head **reads a few features**: the query side says what a token looks
# for, the key side what it offers, the value side what it hands over.
#
# | head | queries read | keys read | values carry |
# |---|---|---|---|
# | fruit | fruit, taste | fruit | fruit, preferred |
# | comparison | comparison | comparison | comparison, taste |
# | pronoun | pronoun | fruit, preferred | fruit, preferred |
# | reason | reason | taste | taste, comparison |
#
# So fruits and taste words look at fruits; *prefer*, *over* and *less*
# look at each other; *it* looks for the preferred fruit; *because* looks
# at the property.
#
# The output block $W_h^O$ ($D \times E$) of each head writes its two value
# features back into the same two features of the output, so we can read
# the result by name. A gain of 6 on the queries makes the softmax sharp
# enough to see.
#
# Hand-built demos often give each head a different number of features
# (one for this head, three for that) and stop at the concatenation.
# That is not multi-head attention as a model computes it: the heads
# would not split $E$ into equal slices, so no `view(B, L, H, D)` could
# produce them, and without $W^O$ the concatenated features sit in an
# order decided by the heads rather than in the model's $E$ features,
# where the next layer (and the residual connection) expect them.

# %% caption="The four hand-built heads' attention weights over the 10 tokens (rows = queries, columns = keys, one 0 to 1 colour scale): in fruit, apple, orange, less and acidic read the two fruits; in comparison, prefer, over and less share their weight; in pronoun, it puts almost all its weight on apple; in reason, because reads acidic (and a little less). Every row whose query is zero in a head, such as I in all four, is uniform."
H_s = 4
D_s = E_s // H_s  # 2: all heads have the same width
gain = 6.0


def block(entries):
    """An (E, D) block with 1 at each (feature name, head dim) pair."""
    W = torch.zeros(E_s, D_s)
    for name, dim in entries:
        W[features.index(name), dim] = 1.0
    return W


spec = {  # head name: query, key and value entries (feature, dim)
    "fruit": (
        [("fruit", 0), ("taste", 0)],
        [("fruit", 0)],
        [("fruit", 0), ("preferred", 1)],
    ),
    "comparison": (
        [("comparison", 0)],
        [("comparison", 0)],
        [("comparison", 0), ("taste", 1)],
    ),
    "pronoun": (
        [("pronoun", 0), ("pronoun", 1)],
        [("fruit", 0), ("preferred", 1)],
        [("fruit", 0), ("preferred", 1)],
    ),
    "reason": (
        [("reason", 0)],
        [("taste", 0)],
        [("taste", 0), ("comparison", 1)],
    ),
}
head_names = list(spec)
Wq_s = gain * torch.cat([block(s[0]) for s in spec.values()], dim=1)
Wk_s = torch.cat([block(s[1]) for s in spec.values()], dim=1)
Wv_s = torch.cat([block(s[2]) for s in spec.values()], dim=1)
# W^O: head h's D rows write its value features back where they came from.
Wo_s = torch.cat([block(s[2]).T for s in spec.values()], dim=0)
print("W^Q, W^K, W^V, W^O:", tuple(Wq_s.shape), " (E, H * D) = (E, E)")


def load(module, W_q, W_k, W_v, W_o):
    """Copy paper-layout (x @ W) matrices into a MultiHeadAttention."""
    with torch.no_grad():
        module.q_proj.weight.copy_(W_q.T)
        module.k_proj.weight.copy_(W_k.T)
        module.v_proj.weight.copy_(W_v.T)
        module.out_proj.weight.copy_(W_o.T)
    return module.eval()


multi = load(
    attention.MultiHeadAttention(E_s, H_s, bias=False),
    Wq_s,
    Wk_s,
    Wv_s,
    Wo_s,
)
with torch.no_grad():
    out_multi, w_multi = multi(
        X, X, X, need_weights=True, average_attn_weights=False
    )  # (L, E), (H, L, S): an unbatched input gives unbatched results
print("per-head weights:", tuple(w_multi.shape), " (H, L, S)")

fig = attention.plot_attention_heads(
    w_multi, query_labels=tokens, ncols=2, titles=head_names
)

# %% [markdown]
# Read each panel by rows. In the **pronoun** head, the row of *it* puts
# almost all its weight on *apple*: its query matches the fruit *and* the
# preferred feature of apple's key, but only the fruit feature of orange's.
# In the **reason** head *because* looks at *acidic* (and a little at
# *less*). In the **comparison** head the three comparison words share
# their weight among themselves. A token whose query is zero in a head
# (say *I* in every head) has all scores equal and spreads its weight
# evenly: a head cannot abstain, it always returns *some* average. Trained
# models often park such attention on one fixed token, such as the first.

# %%
it, because = tokens.index("it"), tokens.index("because")
apple, acidic = tokens.index("apple"), tokens.index("acidic")
w_it = w_multi[head_names.index("pronoun"), it]
w_because = w_multi[head_names.index("reason"), because]
print("pronoun head, row 'it':     ", w_it)
print("reason head, row 'because': ", w_because)
assert w_it.argmax() == apple and w_it[apple] > 0.9
assert w_because.argmax() == acidic and w_because[acidic] > 0.7
# a zero query attends uniformly
torch.testing.assert_close(
    w_multi[:, tokens.index("I")], torch.full((H_s, L_s), 1 / L_s)
)

# %% [markdown]
# ## 8. One head over all features
#
# For comparison, a single head ($H = 1$, $D = E = 8$) that reads **all**
# features with identity projections (and the same query gain): each
# token's score against another is the overlap of their whole embeddings.
# It has the same number of parameters as the four heads together.

# %% caption="Attention weights (rows = queries, columns = keys, 0 to 1 colour scale) of one head over all 8 features with identity projections (left) and of the pronoun head (right). The single head is mostly a diagonal, every token reading itself and the tokens that share its features (apple and orange, prefer and over), and its row for it is itself plus an even haze; in the pronoun head, it reads apple with almost all its weight."
eye = torch.eye(E_s)
single = load(
    attention.MultiHeadAttention(E_s, 1, bias=False),
    gain * eye,
    eye,
    eye,
    eye,
)
with torch.no_grad():
    out_single, w_single = single(
        X, X, X, need_weights=True
    )  # (L, E), (L, S)

fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
attention.plot_attention(
    w_single,
    query_labels=tokens,
    ax=axes[0],
    title="One head over all 8 features",
    annotate=False,
)
ax = attention.plot_attention(
    w_multi[head_names.index("pronoun")],
    query_labels=tokens,
    ax=axes[1],
    title="The pronoun head",
    annotate=False,
)

# %% [markdown]
# The single head is mostly a diagonal: every token looks most at itself
# and at tokens that share its features (*apple* and *orange*, *prefer*
# and *over*). *It* has nothing in common with *apple*, so its row is
# itself plus an even haze. One head gives each query **one**
# distribution, so it can follow one notion of relevance; four heads give
# four distributions, each free to follow a different one.
#
# ## 9. What arrives in the output
#
# The attention weights only say where a head looks; the output says what
# the next layer receives. Both layers' outputs have one row per token and
# one column per feature:

# %% caption="The output rows of both layers in grey (white 0, black 1.5), one row per token and one column per feature, one head (left) against four heads (right): with one head, it mostly gets its own pronoun feature back (0.48); through the four heads' pronoun head it carries apple's fruit (1.20) and preferred (1.08). The four heads write only into fruit, preferred, taste and comparison, with a grey haze in those columns for every token."
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
for ax, result, title in (
    (axes[0], out_single, "One head: output rows"),
    (axes[1], out_multi, "Four heads: output rows"),
):
    image = ax.imshow(result.numpy(), cmap="Greys", vmin=0, vmax=1.5)
    ax.set_xticks(range(E_s), features, rotation=45, ha="right")
    ax.set_yticks(range(L_s), tokens)
    ax.set_title(title)
fig.colorbar(image, ax=axes, label="feature value")

fruit, preferred = features.index("fruit"), features.index("preferred")
taste = features.index("taste")
print("output of 'it'", *(f"{f[:5]:>5s}" for f in features))
print("  one head    ", *(f"{v:5.2f}" for v in out_single[it]))
print("  four heads  ", *(f"{v:5.2f}" for v in out_multi[it]))
assert out_multi[it, fruit] > 1.0 and out_multi[it, preferred] > 1.0
assert out_single[it, fruit] < 0.2 and out_single[it, preferred] < 0.1
assert out_multi[because, taste] > 2 * out_single[because, taste]

# %% [markdown]
# Through the pronoun head, *it* now carries apple's `fruit` and
# `preferred` features: the next layer can treat it as "the preferred
# fruit". With one head, *it* mostly gets itself back. (In a transformer
# block the layer's output is *added* to its input, the residual
# connection, so *it* also keeps its own `pronoun` feature.) The grey haze
# in the right panel is the uniform rows of section 7: a head with nothing
# to look for still hands over the sentence's average.
#
# **These heads are hand-built; trained heads are learned.** Nobody writes
# $W_h^Q$ by hand in a real model: all four projections are trained by
# gradient descent, and whatever specialisation the heads end up with is
# whatever lowered the loss. Studies of trained models find some heads
# that track recognisable relations (the previous token, syntactic
# dependents, coreference) and many whose pattern has no simple name, and
# several heads can often be removed with little loss (Voita et al., 2019;
# Michel et al., 2019; see the references of the
# [concept page](../../concepts/multi-head-attention/)). The mechanism,
# though, is exactly the one above: each head is free to compare different
# features because it has its own projections.
#
# ## 10. The output projection mixes the heads
#
# $W^O$ is $E \times E$, but it acts on the concatenation, so it splits
# into $H$ row blocks $W_h^O$ of $D$ rows each. A product with a
# concatenation is a sum of block products:
#
# $$\operatorname{Concat}(\text{head}_1, \dots, \text{head}_H)\, W^O =
# \sum_{h=1}^{H} \text{head}_h\, W_h^O .$$
#
# Each head writes its contribution into the full width $E$, and the layer
# adds them up. Our hand-built $W^O$ is sparse: each head writes into two
# named features, and the fruit and pronoun heads write into the *same*
# two, so their contributions add. A learned $W^O$ has no reason to be
# sparse; a randomly initialised one, shown for contrast, mixes every head
# into every output feature.

# %% caption="The output projection W^O (absolute values in grey, white = 0) in four row blocks of two rows, one per head (fruit, comparison, pronoun, reason), against the 8 output features. The hand-built W^O (left) has one black cell per row, each head writing its two value features back into the same two features (fruit and pronoun both into fruit and preferred), while a randomly initialised W^O (right) has every block write into every feature."
with torch.no_grad():
    q_s = multi.q_proj(X).view(L_s, H_s, D_s).transpose(0, 1)  # (H, L, D)
    k_s = multi.k_proj(X).view(L_s, H_s, D_s).transpose(0, 1)  # (H, S, D)
    v_s = multi.v_proj(X).view(L_s, H_s, D_s).transpose(0, 1)  # (H, S, D)
head_out = attention.scaled_dot_product_attention(
    q_s, k_s, v_s
)  # (H, L, D)
concat_s = head_out.transpose(0, 1).reshape(L_s, E_s)  # (L, H * D)

contributions = torch.stack(
    [head_out[h] @ Wo_s[h * D_s : (h + 1) * D_s] for h in range(H_s)]
)  # (H, L, E): head h's share of the output
torch.testing.assert_close(concat_s @ Wo_s, contributions.sum(0))
torch.testing.assert_close(contributions.sum(0), out_multi)
print("Concat(heads) @ W_O == sum over h of head_h @ W_O[h*D:(h+1)*D]")
gap = (concat_s @ Wo_s - contributions.sum(0)).abs().max()
print(f"max difference: {gap:.1e}")

fig, axes = plt.subplots(1, 2, figsize=(8, 3.8), layout="constrained")
Wo_random = torch.nn.init.xavier_uniform_(torch.empty(E_s, E_s))
for ax, W, title in (
    (axes[0], Wo_s, "hand-built Wᴼ"),
    (axes[1], Wo_random, "a randomly initialised Wᴼ"),
):
    ax.imshow(W.abs().numpy(), cmap="Greys")
    for h in range(1, H_s):
        ax.axhline(h * D_s - 0.5, color="C3", linewidth=2)
    ax.set_yticks(
        [h * D_s + 0.5 for h in range(H_s)],
        head_names,
        fontsize=8,
        va="center",
    )
    ax.set_xticks(range(E_s), features, rotation=45, ha="right")
    ax.set_title(f"|{title}|")
_ = fig.suptitle("Wᴼ in row blocks, one per head: what each head writes")

# %% [markdown]
# How much each head writes into each token's output, as the length of
# $\text{head}_h W_h^O$ per token, stacked. Each token's largest share
# comes from the head that looks for something on its behalf (the pronoun
# head for *it*, the reason head for *because*); the thin slices are the
# haze of the idle heads:

# %% caption="Stacked bars of the length of each head's contribution ‖head_h W_h^O‖ to each token's output (fruit blue, comparison orange, pronoun green, reason red). The largest share comes from the head that looks for something on the token's behalf: pronoun for it, reason for because, comparison for prefer, over and less, fruit for apple, orange and acidic; the thin slices are the haze of the idle heads."
norms = contributions.norm(dim=-1)  # (H, L)
fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
bottom = torch.zeros(L_s)
for h, name in enumerate(head_names):
    ax.bar(range(L_s), norms[h].numpy(), bottom=bottom.numpy(), label=name)
    bottom += norms[h]
ax.set_xticks(range(L_s), tokens, rotation=45, ha="right")
ax.set_ylabel("‖headₕ Wₕᴼ‖ per token")
ax.set_title("Who writes into each token's output")
_ = ax.legend(fontsize=8, ncols=2)
assert head_names[norms[:, it].argmax()] == "pronoun"
assert head_names[norms[:, because].argmax()] == "reason"

# %% [markdown]
# Because the output is a sum over heads, removing a head is as simple as
# zeroing its rows of $W^O$. Without the pronoun head, *it* no longer
# receives apple's features (what remains is the fruit head's haze):

# %%
pronoun = head_names.index("pronoun")
Wo_pruned = Wo_s.clone()
Wo_pruned[pronoun * D_s : (pronoun + 1) * D_s] = 0
pruned = concat_s @ Wo_pruned  # (L, E)
torch.testing.assert_close(pruned, out_multi - contributions[pronoun])
print("'it'.preferred")
print(f"  with the pronoun head:    {out_multi[it, preferred]:.2f}")
print(f"  without the pronoun head: {pruned[it, preferred]:.2f}")
assert pruned[it, preferred] < 0.2

# %% [markdown]
# ## 11. The classic bug: a reshape without the transpose
#
# `q.view(B, H, L, D)` straight from $(B, L, E)$ has exactly the shape of
# the correct split, so every shape check passes. But `view` only
# re-reads the numbers in memory order: row by row, token 0's $E$ features
# come first. The wrong "head 0" is filled with token 0's head-0, head-1,
# head-2 slices and then token 1's..., so each "head" mixes features from
# different tokens and heads. Back to the random batch of section 1:

# %%
right = q.view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
wrong = q.view(B, H, L, D)  # (B, H, L, D) as well
print("shapes:", tuple(right.shape), tuple(wrong.shape))
assert right.shape == wrong.shape
assert not torch.equal(right, wrong)
# "head 0, position 1" of the wrong split is token 0's head-1 slice
assert torch.equal(wrong[0, 0, 1], q[0, 0, D : 2 * D])
assert torch.equal(right[0, 0, 1], q[0, 1, :D])  # token 1, head 0


def layer_without_transpose(x):
    """The buggy version: every shape is right, every number is wrong."""
    q_, k_, v_ = (
        (x @ W + b).view(B, H, L, D)  # (B, H, L, D), the wrong contents
        for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v))
    )
    heads_ = attention.scaled_dot_product_attention(q_, k_, v_)
    return heads_.reshape(B, L, E) @ W_o + b_o  # (B, L, E)


buggy = layer_without_transpose(x)
print("output shape:", tuple(buggy.shape), "  (same as the correct one)")
print(f"max |buggy - correct| = {(buggy - out).abs().max():.2f}")
assert buggy.shape == out.shape and not torch.allclose(buggy, out)

# %% [markdown]
# No shape check can catch this bug; only a comparison of values with a
# trusted implementation (section 5) does, and only with $L > 1$.
#
# ## 12. Fewer key and value heads: grouped-query attention
#
# In grouped-query attention (GQA) only $H_{kv} < H$ key and value heads
# are computed, each shared by a group of $H / H_{kv}$ consecutive query
# heads; $H_{kv} = 1$ is multi-query attention. The key and value
# projections shrink to $E \times H_{kv} D$, and so does the cache of keys
# and values kept during generation. In the package it is the argument
# `num_kv_heads`:

# %%
E_g, H_g, Hkv = 12, 4, 2
D_g, group = E_g // H_g, H_g // Hkv  # D = 3, two query heads per K/V head
gqa = attention.MultiHeadAttention(E_g, H_g, num_kv_heads=Hkv).eval()
for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
    shape = tuple(getattr(gqa, name).weight.shape)
    print(f"{name:8s} weight {shape}")


def split(t, n_heads):
    """(B, L, n_heads * D) -> (B, n_heads, L, D)"""
    return t.view(B, L, n_heads, D_g).transpose(1, 2)


x_g = torch.randn(B, L, E_g)
with torch.no_grad():
    out_g, w_g = gqa(
        x_g, x_g, x_g, need_weights=True, average_attn_weights=False
    )
    q_g = split(gqa.q_proj(x_g), H_g)  # (B, H, L, D)
    k_g = split(gqa.k_proj(x_g), Hkv)  # (B, Hkv, S, D)
    v_g = split(gqa.v_proj(x_g), Hkv)  # (B, Hkv, S, D)
    # query head h reads key/value head h // group
    k_rep = k_g.repeat_interleave(group, dim=1)  # (B, H, S, D)
    v_rep = v_g.repeat_interleave(group, dim=1)  # (B, H, S, D)
    heads_g = attention.scaled_dot_product_attention(q_g, k_rep, v_rep)
    merged_g = heads_g.transpose(1, 2).reshape(B, L, E_g)  # (B, L, E)
    by_hand = gqa.out_proj(merged_g)
print("per-head weights:", tuple(w_g.shape), " one map per query head")
print(f"max |by hand - module| = {(by_hand - out_g).abs().max():.1e}")
torch.testing.assert_close(by_hand, out_g)

# %% [markdown]
# There are still $H = 4$ attention maps (the queries differ), but only two
# sets of keys and values to store. The
# [concept page](../../concepts/multi-head-attention/) measures what this
# saves for a 7B-class model.
#
# ## Summary
#
# - One $E \times E$ matrix per projection computes every head at once;
#   `view(B, L, H, D)` then `transpose(1, 2)` gives $(B, H, L, D)$, and
#   attention runs per head with scale $1/\sqrt{D}$.
# - Merging is `transpose(1, 2)` then `reshape(B, L, E)`; the output
#   projection satisfies
#   $\operatorname{Concat}(\text{head}_h) W^O = \sum_h \text{head}_h W_h^O$:
#   each head writes into the full width and the contributions add.
# - The from-scratch layer matches `attention.MultiHeadAttention` and
#   `torch.nn.MultiheadAttention` to float32 precision; per-head weights
#   come from `need_weights=True, average_attn_weights=False`.
# - Heads with their own projections can look for different things at the
#   same time (a pronoun's antecedent, a reason's property); one head gives
#   each query only one distribution. Real heads learn their projections.
# - `view(B, H, L, D)` without the transpose has the right shape and the
#   wrong contents; only a value check catches it.
# - `num_kv_heads` shares each key/value head among a group of query heads.
#
# ## Exercises
#
# 1. In section 7, give *orange* the `preferred` feature too. What does the
#    pronoun head's row for *it* look like now, and what arrives in *it*'s
#    output?
# 2. Build **one** head of width $D = E$ whose score matrix is the sum of
#    the four heads' score matrices: $W^Q$ is `Wq_s` and $W^K$ is `Wk_s`,
#    as one head. Plot its weights. Which rows look like a single head of
#    section 7, and which blur two heads together?
# 3. Call `multi` with `need_weights=True` and the default
#    `average_attn_weights=True`. How much weight does the averaged row of
#    *it* put on *apple*? What does the averaged map hide?
# 4. Run the buggy `layer_without_transpose` with $L = 1$. Is the result
#    still wrong? Why?
#
# **Answers.** (1) *It* splits its weight evenly, 0.5 and 0.5, between
# *apple* and *orange*; both carry `fruit` and `preferred` now, so the
# output of *it* looks the same as before but no longer points at one
# fruit: the head cannot tell them apart. (2) The rows of *it* and
# *because*, whose queries are active in one head only, keep that head's
# pattern, only softer (the one wide head scales by $1/\sqrt{8}$ instead of
# $1/\sqrt{2}$). The row of *less*, whose query is active in the fruit and
# the comparison head, becomes one distribution over both heads' targets
# (about 0.23 on each comparison word, 0.08 on each fruit), and its output
# is one blended average instead of two separate ones. (3) About 0.32:
# the pronoun head's 0.98 averaged with three uniform rows of 0.1. The
# average hides that one head is certain and three are idle; no head
# computed that map, and the output is built from the per-head maps.
# (4) With $L = 1$ both views read the single token's features in the same
# order, so the bug is invisible: one more reason to test with $L > 1$ and
# sizes that all differ.
#
# **Where next:** [positional encoding](../05_positional_encoding/) gives
# the heads something they cannot see yet: where each token sits.

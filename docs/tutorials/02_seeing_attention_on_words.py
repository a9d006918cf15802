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
# # Seeing attention on words
#
# **You will learn** to build word embeddings whose every dimension has a
# name ("noun", "fruit", "acidity", ...), to run self-attention on two
# sentences, *The cat sat down* and *I prefer apple over orange because it
# is less acidic*, and to read what comes out: annotated heatmaps of the
# weights, the length of each output row drawn as bars, and the entropy of
# each row. You will see why attention with identity projections only ever
# finds a token's look-alikes, then choose projections by hand that make
# "it" look for a fruit and a verb look for a noun. Finally you will see how
# the $1/\sqrt{D}$ scale and a temperature decide how peaked a row is.
#
# Nothing here is learned: every weight is chosen by hand so that every
# number can be explained. The
# [concept page on similarity](../../concepts/similarity-to-attention/)
# gives the theory. Runs in a few seconds on a CPU.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

import attention

torch.manual_seed(0)  # nothing below is random; set for good measure
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. Embeddings you can read
#
# A learned embedding has hundreds of dimensions and none of them means
# anything on its own. Ours has nine, and each is a feature we can name. A
# word gets a 1 for each feature it has (and a fraction for a matter of
# degree: an orange is more acidic than an apple).

# %%
FEATURES = [
    "article",
    "pronoun",
    "noun",
    "verb",
    "modifier",
    "connective",
    "animal",
    "fruit",
    "acidity",
]
E = len(FEATURES)  # embedding width


def embed(**features: float) -> torch.Tensor:
    """A vector with the named features set, every other one 0."""
    x = torch.zeros(E)
    for name, value in features.items():
        x[FEATURES.index(name)] = value
    return x


LEXICON = {
    "The": embed(article=1),
    "cat": embed(noun=1, animal=1),
    "sat": embed(verb=1),
    "down": embed(modifier=1),
    "I": embed(pronoun=1),
    "prefer": embed(verb=1),
    "apple": embed(noun=1, fruit=1, acidity=0.3),
    "over": embed(connective=1),
    "orange": embed(noun=1, fruit=1, acidity=0.8),
    "because": embed(connective=1),
    "it": embed(pronoun=1),
    "is": embed(verb=1),
    "less": embed(modifier=1),
    "acidic": embed(modifier=1, acidity=1),
}


def sentence(text: str) -> tuple[list[str], torch.Tensor]:
    """Split on spaces; return the tokens and their embeddings (L, E)."""
    tokens = text.split()
    return tokens, torch.stack([LEXICON[t] for t in tokens])


cat_tokens, X_cat = sentence("The cat sat down")
fruit_tokens, X_fruit = sentence(
    "I prefer apple over orange because it is less acidic"
)
print("cat sentence:  ", tuple(X_cat.shape), "(L, E)")
print("fruit sentence:", tuple(X_fruit.shape), "(L, E)")

# %% [markdown]
# `plot_attention` draws any annotated matrix, not only attention weights.
# A small wrapper relabels its axes so that we can show the embedding table
# and, later, the projection matrices with it.


# %% caption="The embedding table of the fruit sentence: one row per token (I prefer apple over orange because it is less acidic), one column per hand-made feature, each cell labelled with its value. Every token has a 1 for its word class; apple and orange also have fruit = 1 and an acidity of 0.3 and 0.8, and acidic has acidity 1.0."
def show_table(matrix, rows, columns, ax, title, xlabel, ylabel):
    """An annotated heatmap of any matrix with named rows and columns."""
    attention.plot_attention(
        matrix,
        query_labels=rows,
        key_labels=columns,
        ax=ax,
        vmin=None,
        vmax=None,
        fmt=".1f",
        cmap="Blues",
        colorbar=False,
        title=title,
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


fig, ax = plt.subplots(figsize=(6.5, 5), layout="constrained")
show_table(
    X_fruit,
    fruit_tokens,
    FEATURES,
    ax,
    "Embeddings of the fruit sentence",
    "feature",
    "token",
)

# %% [markdown]
# One more helper draws the attention maps of both sentences, one above
# the other, with the same colour scale.


# %%
def plot_both(P_cat, P_fruit, how):
    """Attention maps of the two sentences, stacked."""
    fig, axes = plt.subplots(
        2,
        1,
        figsize=(6.5, 9.5),
        layout="constrained",
        height_ratios=[4, 10],
    )
    attention.plot_attention(
        P_cat,
        query_labels=cat_tokens,
        ax=axes[0],
        title=f"The cat sat down, {how}",
    )
    attention.plot_attention(
        P_fruit,
        query_labels=fruit_tokens,
        ax=axes[1],
        title=f"The fruit sentence, {how}",
    )
    return fig


# %% [markdown]
# Some rows are identical on purpose: "I" and "it" are both just pronouns,
# "prefer" and "is" both just verbs, "over" and "because" both connectives.
# Our features do not tell them apart, and neither will attention.
#
# ## 2. Identity projections: attention as similarity
#
# The simplest self-attention takes $W^Q = W^K = W^V = I$, so that
# $Q = K = V = X$ and the score of token $i$ against token $j$ is the
# similarity of their embeddings, $x_i \cdot x_j / \sqrt{E}$. Here
# $E = 9$, so every dot product is divided by 3.

# %% caption="Attention weights with identity projections (W = I) for The cat sat down (top) and the fruit sentence (bottom), on one 0 to 1 colour scale, each cell labelled with its weight. Both maps are nearly flat: every weight lies between 0.08 and 0.39, close to uniform, with a slightly brighter diagonal."
for name, X in [("cat", X_cat), ("fruit", X_fruit)]:
    scores = X @ X.T / math.sqrt(E)  # (L, L)
    print(
        f"{name:5s}: scores between {scores.min():.2f} "
        f"and {scores.max():.2f}"
    )
    assert scores.max() < 1.0

P_cat_id = attention.attention_weights(X_cat, X_cat)  # (L, L)
P_fruit_id = attention.attention_weights(X_fruit, X_fruit)
out_fruit_id = attention.scaled_dot_product_attention(
    X_fruit, X_fruit, X_fruit
)  # (L, E)

fig = plot_both(P_cat_id, P_fruit_id, "W = I")

# %% [markdown]
# Both maps are almost flat. The scores all lie between 0 and 1, and the
# softmax of numbers that close to each other is close to uniform: every
# row is near $1/L$ everywhere, with a slightly brighter diagonal. Section 9
# shows that small scores act exactly like a high temperature.
#
# ## 3. Why identity projections are only a teaching device
#
# With $W^Q = W^K = I$ the score is the plain dot product of embeddings. By
# the Cauchy-Schwarz inequality $x_i \cdot x_j \le \lVert x_i \rVert
# \lVert x_j \rVert$, so a token's highest score is with itself, with an
# exact duplicate, or with a longer vector that points almost the same way.
# Multiplying $W$ by 3 multiplies every score by 9: the rows get peaked
# enough to see who wins, and the winners stay the same.

# %% caption="Attention weights of the fruit sentence with W_Q = W_K = 3I, each cell labelled with its weight. Every token reads its look-alikes: I and it split 0.42/0.42 between the two pronouns, prefer and is between the two verbs, over and because between the connectives, and apple puts more weight on orange (0.61) than on itself (0.39)."
W_loud = 3.0 * torch.eye(E)
Q_loud, K_loud = X_fruit @ W_loud, X_fruit @ W_loud
S_loud = Q_loud @ K_loud.T  # (L, L) scores
# symmetric up to rounding: a matrix product need not sum (i, j) and (j, i)
# in the same order, so exact equality is not guaranteed
torch.testing.assert_close(S_loud, S_loud.T)
P_loud = attention.attention_weights(Q_loud, K_loud)

unit = F.normalize(X_fruit, dim=-1)
cosine = unit @ unit.T  # (L, L) cosine similarity of embeddings
print(f"{'query':>8s} -> {'top key':8s} weight  cosine(query, key)")
for i, token in enumerate(fruit_tokens):
    j = int(P_loud[i].argmax())
    print(
        f"{token:>8s} -> {fruit_tokens[j]:8s} {P_loud[i, j]:.2f}"
        f"    {cosine[i, j]:.2f}"
    )
    # the winner is always the token itself or a near-copy of it
    assert cosine[i, j] > 0.95
    # and scaling W never changes who wins
    assert P_fruit_id[i, j] == P_fruit_id[i].max()

fig, ax = plt.subplots(figsize=(6.5, 5.6), layout="constrained")
ax = attention.plot_attention(
    P_loud,
    query_labels=fruit_tokens,
    ax=ax,
    title="W_Q = W_K = 3I: every token finds its look-alikes",
)

# %% [markdown]
# Read the map row by row. "I" and "it" split their attention between the
# two pronouns, "prefer" and "is" between the two verbs; "apple" looks at
# "orange" *more* than at itself, because the orange vector is longer and
# points almost the same way (cosine 0.95).
#
# A shared projection other than a multiple of $I$ can do more. Map the
# pronoun feature and the fruit feature onto one shared direction, the
# fruit three times as long, and "it" reads the two fruits, not itself:

# %%
W_shared = torch.zeros(E, 1)  # one dimension, for queries and keys
W_shared[FEATURES.index("pronoun"), 0] = 1.0
W_shared[FEATURES.index("fruit"), 0] = 3.0
Q_shared = K_shared = X_fruit @ W_shared  # (L, 1)
S_shared = Q_shared @ K_shared.T  # (L, L) scores
P_shared = attention.attention_weights(Q_shared, K_shared, scale=3.0)
it, apple, orange = (
    fruit_tokens.index(t) for t in ("it", "apple", "orange")
)
print(
    f"'it' reads: apple {P_shared[it, apple]:.2f},"
    f" orange {P_shared[it, orange]:.2f}, itself {P_shared[it, it]:.3f}"
)
assert P_shared[it, apple] > 0.45 and P_shared[it, orange] > 0.45
assert P_shared[it, it] < 0.01
# ...but the scores still form a Gram matrix, X W Wᵀ Xᵀ: symmetric.
print(
    f"score(it -> apple) = {S_shared[it, apple]:.0f}"
    f" = score(apple -> it) = {S_shared[apple, it]:.0f}"
)
assert torch.equal(S_shared, S_shared.T)

# %% [markdown]
# What a single $W$ cannot do is make a relation one-way. With
# $W^Q = W^K = W$ the score matrix $X W W^\top X^\top$ is symmetric,
# $z_{ij} = z_{ji}$: if "it" scores the fruits high, the fruits score "it"
# just as high, and a verb cannot look for its subject without the subject
# looking back as hard. It is also a Gram matrix, so
# $z_{ij} \le \sqrt{z_{ii} z_{jj}}$: a token can prefer another one only if
# that one is longer along the shared directions, as the fruits are here.
# Real models learn two different matrices: the score
#
# $$z_{ij} = \frac{(x_i W^Q) \cdot (x_j W^K)}{\sqrt{D}}
#   = \frac{x_i \, W^Q (W^K)^\top x_j^\top}{\sqrt{D}}$$
#
# uses a matrix $W^Q (W^K)^\top$ that need not be symmetric: what a token
# *asks for* (its query) can differ from what it *offers* (its key).
#
# ## 4. Projections that look for something else
#
# We build $W^Q$ and $W^K$ by hand, mapping the nine features to $D = 4$
# query/key dimensions. Each of the four is a question; a token's query
# says which questions it asks, its key which ones it answers:
#
# | dimension | asked by (query) | answered by (key) |
# |---|---|---|
# | `fruit?` | pronoun | fruit |
# | `nominal?` | verb | noun, pronoun |
# | `noun?` | article | noun |
# | `verb?` | modifier | verb |
#
# The query entries are 6 rather than 1: the size of the scores sets how
# sharply a row picks its key (section 9 explains this). $W^V$ stays the
# identity so that outputs remain in feature space, where we can read them.

# %% caption="The hand-chosen projections as tables of nine features (rows) by the four query/key dimensions fruit?, nominal?, noun? and verb? (columns). W_Q (left) has a 6 where a feature asks a question (pronoun asks fruit?, verb nominal?, article noun?, modifier verb?) and W_K (right) a 1 where a feature answers one (fruit answers fruit?, noun and pronoun nominal?, noun noun?, verb verb?)."
QUESTIONS = ["fruit?", "nominal?", "noun?", "verb?"]
D = len(QUESTIONS)  # query/key size
ASKS = {
    "fruit?": "pronoun",
    "nominal?": "verb",
    "noun?": "article",
    "verb?": "modifier",
}
ANSWERS = {
    "fruit?": ["fruit"],
    "nominal?": ["noun", "pronoun"],
    "noun?": ["noun"],
    "verb?": ["verb"],
}
STRENGTH = 6.0

W_q = torch.zeros(E, D)
W_k = torch.zeros(E, D)
for d, question in enumerate(QUESTIONS):
    W_q[FEATURES.index(ASKS[question]), d] = STRENGTH
    for feature in ANSWERS[question]:
        W_k[FEATURES.index(feature), d] = 1.0
W_v = torch.eye(E)

fig, axes = plt.subplots(1, 2, figsize=(6.5, 4.4), layout="constrained")
for ax, W, name in [
    (axes[0], W_q, "W_Q (asks)"),
    (axes[1], W_k, "W_K (offers)"),
]:
    show_table(
        W, FEATURES, QUESTIONS, ax, name, "query/key dimension", "feature"
    )

# %% [markdown]
# Now the same two sentences, with these projections:


# %% caption="Attention weights with the hand-chosen W_Q and W_K, each cell labelled: in The cat sat down (top) The reads cat, sat reads cat and down reads sat (0.87 each), while cat asks nothing and spreads 0.25 over all four. In the fruit sentence (bottom) I and it split 0.42/0.42 between apple and orange, prefer and is spread over the four nominal tokens, less and acidic read the two verbs, and the tokens that ask nothing have uniform rows of 0.10."
def self_attention(X, W_q, W_k, W_v):
    """Weights (L, L) and outputs (L, Dv) of one self-attention head."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    weights = attention.attention_weights(Q, K)
    out = attention.scaled_dot_product_attention(Q, K, V)
    return weights, out


P_cat, out_cat = self_attention(X_cat, W_q, W_k, W_v)
P_fruit, out_fruit = self_attention(X_fruit, W_q, W_k, W_v)

fig = plot_both(P_cat, P_fruit, "hand-chosen W_Q, W_K")


# %%
def top(P, tokens, query):
    """The key the query token attends to most."""
    return tokens[int(P[tokens.index(query)].argmax())]


for query in ["The", "sat", "down"]:
    print(
        f"{query!r:7s} attends most to {top(P_cat, cat_tokens, query)!r}"
    )
assert top(P_cat, cat_tokens, "The") == "cat"  # article -> its noun
assert top(P_cat, cat_tokens, "sat") == "cat"  # verb -> its subject
assert top(P_cat, cat_tokens, "down") == "sat"  # modifier -> the verb

it = fruit_tokens.index("it")
on_fruits = P_fruit[
    it, [fruit_tokens.index(w) for w in ("apple", "orange")]
]
print(
    f"'it' puts {on_fruits.sum():.3f} of its attention on the fruits:",
    on_fruits,
)
assert on_fruits.sum() > 0.8

scores = (X_fruit @ W_q) @ (X_fruit @ W_k).T
print("score matrix symmetric?", torch.equal(scores, scores.T))
assert not torch.equal(scores, scores.T)

# %% [markdown]
# The pattern has changed completely. In the cat sentence, "The" reads its
# noun, "sat" its subject and "down" the verb it modifies. In the fruit
# sentence "it" reads the two fruits. Three more things in these maps are
# worth a sentence each, because they hold for real models too:
#
# - **"cat" asks nothing**, so its scores are all 0 and its row is uniform
#   ($1/4$ each). A uniform row is not "no attention": the token still
#   receives the average of all the values.
# - **A head reacts to features, not to words.** "I" is a pronoun too, so
#   it asks the same question as "it" and also reads the fruits.
# - **Attention alone does not know word order.** "prefer" asks for
#   something nominal and finds "I", "apple", "orange" and "it" equally
#   good: nothing in the embeddings says which one comes before the verb.
#   That is the job of [positional information](../../concepts/positional-information/).
#
# ## 5. What "it" carries away
#
# The output of a query is the weighted average of the value rows,
# $\text{out}_i = \sum_j p_{ij} v_j$. Because $W^V = I$, it is still a
# vector of our nine features, and we can read it.

# %% caption="Bar chart of the nine features of it before attention (its embedding, blue: pronoun = 1 and nothing else) and after (its attention output, orange): the output has almost lost the pronoun (0.04) and carries noun 0.83, fruit 0.83 and acidity 0.48, the average of apple's and orange's."
print(f"{'feature':>10s}  embedding of 'it'  output of 'it'")
for f, name in enumerate(FEATURES):
    print(f"{name:>10s}  {X_fruit[it, f]:17.2f}  {out_fruit[it, f]:14.2f}")
assert out_fruit[it, FEATURES.index("fruit")] > 0.8
assert out_fruit[it, FEATURES.index("pronoun")] < 0.1

fig, ax = plt.subplots(figsize=(6.5, 3.4), layout="constrained")
positions = np.arange(E)
ax.bar(
    positions - 0.2, X_fruit[it].numpy(), 0.4, label="embedding of 'it'"
)
ax.bar(
    positions + 0.2,
    out_fruit[it].detach().numpy(),
    0.4,
    label="attention output of 'it'",
)
ax.set_xticks(
    positions, FEATURES, rotation=45, ha="right", rotation_mode="anchor"
)
ax.set_ylabel("value")
ax.legend()
title = ax.set_title("'it' goes in a pronoun and comes out a fruit")

# %% [markdown]
# "it" came in as a bare pronoun and leaves carrying "noun", "fruit" and
# an acidity of about 0.5: the *average* of apple (0.3) and orange (0.8),
# because it read both fruits equally. The head blended the candidates; it
# did not decide between them. Deciding that "it" is the apple (the fruit
# that is *less* acidic) needs information this head does not look at.
#
# ## 6. One row by hand
#
# Take the row of "it". Its query is $q = x_{\text{it}} W^Q
# = (6, 0, 0, 0)$: it asks only `fruit?`. The keys of "apple" and "orange"
# answer it with a 1, every other key with 0. So, with $\sqrt{D} = 2$, its
# scores are $6 \cdot 1 / 2 = 3$ for the two fruits and $0$ for the other
# eight tokens, and
#
# $$p_{\text{it}, \text{apple}} = \frac{e^3}{2e^3 + 8 e^0} \approx 0.417,
# \qquad p_{\text{it}, \text{other}} = \frac{1}{2e^3 + 8} \approx 0.021 .$$

# %%
q_it = X_fruit[it] @ W_q
print("query of 'it':", q_it)
fruit_mask = torch.tensor([t in ("apple", "orange") for t in fruit_tokens])
by_hand = torch.where(
    fruit_mask,
    math.exp(3) / (2 * math.exp(3) + 8),
    1 / (2 * math.exp(3) + 8),
)
print("by hand:   ", by_hand)
print("package:   ", P_fruit[it])
print(f"max |hand - package| = {(by_hand - P_fruit[it]).abs().max():.2e}")
torch.testing.assert_close(P_fruit[it], by_hand)

# the output row by hand: the weighted average of the value rows
out_by_hand = sum(
    by_hand[j] * X_fruit[j] for j in range(len(fruit_tokens))
)
torch_out = F.scaled_dot_product_attention(
    X_fruit @ W_q, X_fruit @ W_k, X_fruit @ W_v
)
print(
    f"max |hand - package| (output) = "
    f"{(out_by_hand - out_fruit[it]).abs().max():.2e}"
)
print(
    f"max |package - PyTorch| (all outputs) = "
    f"{(out_fruit - torch_out).abs().max():.2e}"
)
torch.testing.assert_close(out_fruit[it], out_by_hand)
torch.testing.assert_close(out_fruit, torch_out)

# %% [markdown]
# ## 7. Activation strength: the length of each output row
#
# A common summary of an attention layer is one number per token, the
# Euclidean length (L2 norm) of its output row, $\lVert \text{out}_i
# \rVert_2$, sometimes called its "activation strength".
# [`plot_activation_norms`](../../reference/viz/#attention.viz.plot_activation_norms)
# draws it as bars. Here it is for the fruit sentence, with identity
# projections and with ours:

# %% caption="L2 norm of each token's output row for the fruit sentence, with identity projections (top: every bar between about 0.5 and 0.67) and with the hand-chosen projections (bottom, same axis): I and it, which read the two fruits, reach 1.28, and the tokens that ask nothing (apple, over, orange, because) have the shortest bars, 0.53."
fig, axes = plt.subplots(
    2, 1, figsize=(6.5, 6.4), layout="constrained", sharey=True
)
attention.plot_activation_norms(
    out_fruit_id, labels=fruit_tokens, ax=axes[0], title="W = I"
)
ax = attention.plot_activation_norms(
    out_fruit,
    labels=fruit_tokens,
    ax=axes[1],
    title="hand-chosen W_Q, W_K",
)

norms = out_fruit.norm(dim=-1)  # (L,)
for token, n in zip(fruit_tokens, norms, strict=True):
    print(f"{token:>8s}: {n:.3f}")

# %% [markdown]
# What the bars measure: each output row is an average of value rows with
# weights that sum to 1, so its length can never exceed the longest value
# row, and it is close to that only when the query reads one key, or keys
# whose values agree. A row that spreads over many *different* values gets
# a short average: "apple", "over", "orange" and "because" ask nothing,
# read everything uniformly and get the shortest bars. "it" and "I" read
# two similar fruits and get long ones. With identity projections every row
# is a near-uniform average, so all bars are about the same.
#
# What they do not tell you:
#
# - **Not importance.** A long bar does not mean the token matters more to
#   the model's prediction, nor which key the token read: "less" (reads
#   the verbs) and "apple" (reads everything) differ in length for reasons
#   that have nothing to do with meaning.
# - **Not attention.** The bars depend on the size of the values as much
#   as on the weights. Multiply $V$ by 10 and every bar grows tenfold while
#   the attention weights do not move:

# %%
V = X_fruit @ W_v
longest_value = V.norm(dim=-1).max()
assert (norms <= longest_value + 1e-6).all()  # an average is never longer

out_big = attention.scaled_dot_product_attention(
    X_fruit @ W_q, X_fruit @ W_k, 10 * V
)
torch.testing.assert_close(out_big.norm(dim=-1), 10 * norms)
print("bars after V * 10:", out_big.norm(dim=-1))

# %% [markdown]
# - **Not comparable across layers or heads.** Different heads write into
#   different value spaces with different scales; comparing their bar
#   heights compares those scales, not what the heads do. In a transformer
#   the output is also projected by $W^O$, added to the residual stream and
#   normalised before anyone reads it.
#
# ## 8. How spread out is each row? Attention entropy
#
# The entropy of row $i$, $\mathcal{H}_i = -\sum_j p_{ij} \log p_{ij}$ (in
# nats), summarises how many keys a query reads: 0 for one key, $\log 2$
# for two equal keys, $\log S$ for all $S$ keys evenly.
# [`plot_attention_entropy`](../../reference/viz/#attention.viz.plot_attention_entropy)
# draws it with a dashed line at $\log S$.

# %% caption="Entropy of each query's row of weights (bars, in nats) for the fruit sentence with identity projections (top) and the hand-chosen ones (bottom), with the dashed line at log S = log 10 ≈ 2.30 for a uniform row. With W = I every bar sits just under the line; with the hand-chosen projections apple, over, orange and because sit exactly on it, prefer and is are at 1.67, and I, it, less and acidic at 1.37."
fig, axes = plt.subplots(
    2, 1, figsize=(6.5, 6.4), layout="constrained", sharey=True
)
attention.plot_attention_entropy(
    P_fruit_id, query_labels=fruit_tokens, ax=axes[0], title="W = I"
)
ax = attention.plot_attention_entropy(
    P_fruit,
    query_labels=fruit_tokens,
    ax=axes[1],
    title="hand-chosen W_Q, W_K",
)

ent_id = attention.attention_entropy(P_fruit_id)
ent = attention.attention_entropy(P_fruit)
L = len(fruit_tokens)
print(f"log S = {math.log(L):.3f}")
print("entropy, W = I:       ", ent_id)
print("entropy, hand-chosen: ", ent)
assert (ent_id > 0.97 * math.log(L)).all()  # identity: almost uniform
apple = fruit_tokens.index("apple")
torch.testing.assert_close(ent[apple], torch.tensor(math.log(L)))
# "it": two weights p on the fruits, eight small weights r elsewhere
p, r = by_hand[fruit_tokens.index("apple")], by_hand[0]
torch.testing.assert_close(ent[it], -(2 * p * p.log() + 8 * r * r.log()))
print(
    f"'it': two keys give {-2 * p * p.log():.3f} nats, the eight "
    f"small weights {-8 * r * r.log():.3f}"
)
torch.testing.assert_close(
    ent[fruit_tokens.index("I")], ent[fruit_tokens.index("less")]
)

# %% [markdown]
# With identity projections every bar sits just under the uniform line.
# With ours, the four tokens that ask nothing sit exactly on it, and the
# rest are lower. "it" is at about 1.37 nats, twice $\log 2 = 0.69$,
# although it visibly reads two keys: the eight small weights of 0.02 add
# almost as much entropy as the two large ones. Entropy is sensitive to long
# tails of small weights, which real attention rows always have.
# Entropy says how spread a row is, not *where* it looks: "I" and "less"
# have the same entropy and read completely different tokens.
#
# ## 9. The scale factor and a temperature
#
# How peaked a row is depends only on how far apart its scores are. Two
# knobs set that: the $1/\sqrt{D}$ factor, and a temperature $\tau$ that
# some models and samplers divide by as well:
#
# $$P = \operatorname{softmax}\!\left(\frac{Q K^\top}{\tau \sqrt{D}}\right).$$
#
# A small $\tau$ stretches the scores apart (the row approaches a one-hot
# on the best key); a large $\tau$ squeezes them together (the row
# approaches uniform). Leaving out the $1/\sqrt{D}$ factor is the same as
# $\tau = 1/\sqrt{D}$, here $0.5$. The
# [concept page on scaling](../../concepts/why-scale/) explains why
# $\sqrt{D}$ is the right default for learned, random-looking vectors. The
# `scale` argument of the package sets the factor directly.

# %% caption="Entropy of the rows of it, prefer and apple as the temperature τ goes from 0.05 to 20 (logarithmic axis), with the dashed line at log S ≈ 2.30 and dotted lines at τ = 1 (the default) and τ = 0.5 (no 1/√D). At low temperature it settles at log 2 ≈ 0.69 (two tied fruits) and prefer at log 4 ≈ 1.39 (four tied nominals); both rise to log S as τ grows, while apple, whose scores are all equal, stays on log S at every temperature."
Q_f, K_f = X_fruit @ W_q, X_fruit @ W_k
taus = np.logspace(-1.3, 1.3, 60)
watch = ["it", "prefer", "apple"]
ties = {"it": 2, "prefer": 4, "apple": 10}  # keys sharing the top score
entropies = {w: [] for w in watch}
for tau in taus:
    P_tau = attention.attention_weights(
        Q_f, K_f, scale=1 / (tau * math.sqrt(D))
    )
    ent_tau = attention.attention_entropy(P_tau)
    for w in watch:
        entropies[w].append(float(ent_tau[fruit_tokens.index(w)]))

for w in watch:
    assert np.all(np.diff(entropies[w]) >= -1e-6)  # hotter = flatter
    assert abs(entropies[w][0] - math.log(ties[w])) < 1e-3  # cold
    assert entropies[w][-1] > 0.99 * math.log(L)  # hot

# no 1/sqrt(D) at all is the same as tau = 1/sqrt(D)
torch.testing.assert_close(
    attention.attention_weights(Q_f, K_f, scale=1.0),
    torch.softmax(Q_f @ K_f.T / (0.5 * math.sqrt(D)), dim=-1),
)

fig, ax = plt.subplots(figsize=(6.5, 3.6), layout="constrained")
for w in watch:
    ax.plot(taus, entropies[w], label=f"query '{w}'")
ax.axhline(math.log(L), color="0.3", linestyle="--", label="log S")
ax.axvline(1.0, color="C3", linestyle=":", label="τ = 1 (default)")
ax.axvline(
    1 / math.sqrt(D), color="C4", linestyle=":", label="no 1/√D (τ = 1/√D)"
)
ax.set_xscale("log")
ax.set_xlabel("temperature τ")
ax.set_ylabel("entropy (nats)")
ax.legend(fontsize=8, loc="center right")
title = ax.set_title("Temperature sets how peaked a row is")

# %% [markdown]
# At low temperature each curve settles on the log of the number of keys
# that tie for the top score: $\log 2$ for "it" (two fruits), $\log 4$ for
# "prefer" (four nominals). At high temperature both reach $\log S$.
# "apple" asks nothing: its scores are all equal, and no temperature can
# make a row of equal scores anything but uniform. The identity-projection maps of
# section 2 were flat for the same reason: their scores were small, which
# is a high temperature in disguise.
#
# ## Summary
#
# - Self-attention with $W^Q = W^K = I$ scores tokens by the similarity of
#   their embeddings, so every token attends most to itself or a near-copy.
#   Any shared $W^Q = W^K$ keeps the scores symmetric, $z_{ij} = z_{ji}$:
#   no one-way relations. It is a teaching device, not a model.
# - With different $W^Q$ and $W^K$, a query asks for something other than
#   itself: "it" reads the fruits, "sat" reads "cat". A head reacts to
#   features, not to words, and knows nothing of word order.
# - The output of a query is an average of values; with $W^V = I$ you can
#   read what it picked up ("it" leaves as a fruit).
# - The L2 norm of an output row is bounded by the longest value row and
#   shrinks when a query averages many different values; it is not a
#   measure of importance and scales with $V$.
# - Entropy per row says how many keys a query reads, from 0 to $\log S$;
#   the $1/\sqrt{D}$ factor and a temperature move rows between one-hot
#   and uniform.
#
# ## Exercises
#
# 1. Only "it" should look for a fruit, not "I". Add a feature
#    `third_person` to `FEATURES`, give it to "it", and let `W_q` read the
#    `fruit?` question from it instead of from `pronoun`. What happens to
#    the row of "I"?
# 2. Make "it" prefer the *less acidic* fruit by putting $-1$ in `W_k` at
#    (`acidity`, `fruit?`). Compute the two new fruit scores by hand
#    before running it. Who resolved the reference, the head or you?
# 3. Find the temperature at which "sat" puts a weight of exactly 0.99 on
#    "cat" (hint: its scores are 3 for "cat" and 0 for three other keys).
# 4. Reverse the word order of the fruit sentence. How do the weights
#    change? (Hint: compare with `P_fruit.flip(0, 1)`.)
#
# **Answers.** (1) "I" then asks nothing and its row becomes uniform, like
# "cat". (2) The fruit scores become $6 \cdot (1 - 0.3)/2 = 2.1$ for apple
# and $6 \cdot (1 - 0.8)/2 = 0.6$ for orange, so "it" prefers the apple;
# but we wrote the answer into the weights ourselves. (3)
# $e^{3/\tau} / (e^{3/\tau} + 3) = 0.99$ gives $3/\tau = \ln 297$, so
# $\tau = 3 / \ln 297 \approx 0.527$. (4) The map is the same one read in
# reverse: self-attention without positions is *permutation equivariant*.
# The cell below checks (3) and (4).

# %%
tau = 3 / math.log(297)
P_sat = attention.attention_weights(
    X_cat @ W_q, X_cat @ W_k, scale=1 / (tau * math.sqrt(D))
)
weight = P_sat[cat_tokens.index("sat"), cat_tokens.index("cat")]
print(f"tau = {tau:.3f}: weight of 'sat' on 'cat' = {weight:.4f}")
torch.testing.assert_close(weight, torch.tensor(0.99))

P_reversed, _ = self_attention(X_fruit.flip(0), W_q, W_k, W_v)
torch.testing.assert_close(P_reversed, P_fruit.flip(0, 1))
print("reversed sentence: same weights, read backwards")

# %% [markdown]
# **Where next:** the next tutorial, [Causal and padding masks](../03_causal_and_padding_masks/),
# takes keys away from queries on purpose, and the
# [concept page on multi-head attention](../../concepts/multi-head-attention/)
# shows how several heads like ours run side by side.

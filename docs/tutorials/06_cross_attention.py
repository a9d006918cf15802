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
# # Cross-attention
#
# **You will learn** how a decoder reads an encoder: queries from one
# sequence of length $L$, keys and values from another of length $S$.
# You will build a toy translation pair whose correct alignment is known,
# compute cross-attention by hand and with
# [`attention.CrossAttention`](../../reference/multi_head/#attention.multi_head.CrossAttention),
# predict the shape of every intermediate tensor, read a non-square
# attention map, mask the padding of a batch of source sentences,
# assemble a decoder block, check the result against
# `torch.nn.MultiheadAttention`, and recognise the reshape bug that only
# shows up when $L \ne S$.
#
# In self-attention queries, keys and values are three projections of one
# sequence. Cross-attention changes only where they come from:
#
# $$\operatorname{CrossAttention}(Y, X) = \operatorname{softmax}\!\left(
# \frac{(Y W^Q)(X W^K)^\top}{\sqrt{D}}\right) X W^V$$
#
# with $Y \in \mathbb{R}^{L \times E}$ and
# $X \in \mathbb{R}^{S \times E_{\text{ctx}}}$. $Y$ holds the decoder states
# (the target sentence so far) and $X$ the encoder output (the source
# sentence), of width $E_{\text{ctx}}$; the concept pages write them $X_q$
# and $X_{kv}$. The
# [concept page](../../concepts/self-cross-causal/) places this layer in
# the encoder-decoder architecture; here we run it. Runs in a few seconds
# on a CPU.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import attention

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. A toy translation with a known answer
#
# A trained model learns which source word each target word should read.
# To have a picture we can check, we skip the training and make the
# vectors by hand. Every word gets a *meaning*, one of eight concepts, and
# two French sentences are paired with their English translations:
#
# | French (source) | English (target) |
# |---|---|
# | je ne mange pas de pommes . | I don't eat apples |
# | tu manges une pomme . | you eat an apple |
#
# "don't" has two correct sources, *ne* and *pas*; *de* and "." have no
# English counterpart. The first source has $S = 7$ tokens, the second 5
# (padded to 7), and both targets have $L = 4$.
#
# The stand-in **encoder output** $x_j$ for a source token is the one-hot
# vector of its concept plus a little noise, width $E_{\text{ctx}} = 8$.
# The stand-in **decoder state** $y_i$ for a target token has width
# $E = 16$: the concept's one-hot vector in the first 8 features and noise
# in the other 8 (everything else a decoder knows: position, grammar of the
# target language). The encoder and decoder widths differ on purpose.

# %%
concepts = ["I", "you", "not", "eat", "apple", "some", "a", "."]
# (words, the concept of each word)
source_text = [
    ("je ne mange pas de pommes .", "I not eat not some apple ."),
    ("tu manges une pomme .", "you eat a apple ."),
]
target_text = [
    ("I don't eat apples", "I not eat apple"),
    ("you eat an apple", "you eat a apple"),
]
sources = [
    list(zip(w.split(), c.split(), strict=True)) for w, c in source_text
]
targets = [
    list(zip(w.split(), c.split(), strict=True)) for w, c in target_text
]
B = len(sources)
S = max(len(s) for s in sources)  # padded source length: 7
L = len(targets[0])  # target length: 4
E_ctx = len(concepts)  # encoder width: 8
E = 16  # decoder width


def one_hot(concept: str) -> torch.Tensor:
    return F.one_hot(torch.tensor(concepts.index(concept)), E_ctx).float()


# Encoder output: concept + noise. Padding slots hold whatever the encoder
# happened to compute there, here random vectors.
X = torch.randn(B, S, E_ctx)  # (B, S, E_ctx)
for b, sentence in enumerate(sources):
    for j, (_, concept) in enumerate(sentence):
        X[b, j] = one_hot(concept) + 0.1 * torch.randn(E_ctx)

# Decoder states: concept in features 0..7, unrelated noise in 8..15.
Y = torch.zeros(B, L, E)  # (B, L, E)
for b, sentence in enumerate(targets):
    for i, (_, concept) in enumerate(sentence):
        Y[b, i, :E_ctx] = one_hot(concept)
        Y[b, i, E_ctx:] = 0.5 * torch.randn(E - E_ctx)

lengths = [len(s) for s in sources]
source_words = [
    [w for w, _ in s] + ["<pad>"] * (S - len(s)) for s in sources
]
target_words = [[w for w, _ in t] for t in targets]
print("encoder output X:", tuple(X.shape), " source lengths:", lengths)
print("decoder states Y:", tuple(Y.shape))
for b in range(B):
    source, target = " ".join(source_words[b]), " ".join(target_words[b])
    print(f"  {source:33s} -> {target}")

# %% [markdown]
# ## 2. One head, by hand
#
# Take the first sentence pair and a single head of size $D = 8$. The
# three projections are chosen so that matching meanings score high:
#
# - $W^Q$ ($E \times D$) keeps the concept features of the decoder state,
#   times a gain, and drops the rest: the query says "I am looking for the
#   concept *not*".
# - $W^K = I$ ($E_{\text{ctx}} \times D$): the key of a source token is
#   its concept, "I carry the concept *not*".
# - $W^V = I$: what a source token hands over is its concept too, so we can
#   read off what each target token received.
#
# The gain is $5 \sqrt{D}$, so after the division by $\sqrt{D}$ a matching
# pair scores about 5 and a non-matching pair about 0.

# %%
D = 8
sharpness = 5.0
W_q = torch.zeros(E, D)
W_q[:E_ctx] = sharpness * D**0.5 * torch.eye(E_ctx)  # concept part only
W_k = torch.eye(E_ctx, D)  # (E_ctx, D)
W_v = torch.eye(E_ctx, D)  # (E_ctx, D)

y, x = Y[0], X[0]  # (L, E), (S, E_ctx)
q = y @ W_q  # (L, D) = (4, 8): one query per target token
k = x @ W_k  # (S, D) = (7, 8): one key per source token
v = x @ W_v  # (S, D) = (7, 8): one value per source token
scores = q @ k.T / D**0.5  # (L, S) = (4, 7): not square
w = torch.softmax(scores, dim=-1)  # (L, S)
out = w @ v  # (L, D) = (4, 8): one output per *query*

for name, t in dict(q=q, k=k, v=v, scores=scores, w=w, out=out).items():
    print(f"{name:>6}: {tuple(t.shape)}")

# The same with the package's functions and with PyTorch's kernel:
out_pkg = attention.scaled_dot_product_attention(q, k, v)
w_pkg = attention.attention_weights(q, k)
out_torch = F.scaled_dot_product_attention(q, k, v)
print(f"max |by hand - package| = {(out - out_pkg).abs().max():.1e}")
print(f"max |by hand - torch|   = {(out - out_torch).abs().max():.1e}")
torch.testing.assert_close(w, w_pkg)
torch.testing.assert_close(out, out_pkg)
torch.testing.assert_close(out, out_torch)

# %% [markdown]
# The output has one row per **target** token ($L = 4$), whatever the
# source length: cross-attention brings information *to* the queries.
#
# Does each target token read the right source? The correct sources are the
# ones with the same concept. Their total weight should be close to 1, and
# the output row, the weighted average of the source concepts, should point
# at the target's own concept.

# %%
for i, (word, concept) in enumerate(targets[0]):
    right = [j for j, (_, c) in enumerate(sources[0]) if c == concept]
    mass = w[i, right].sum().item()
    received = concepts[out[i].argmax()]
    read = [source_words[0][j] for j in right]
    print(f"{word:>6} reads {read!s:15s} {mass:.3f} -> {received!r}")
    assert mass > 0.9 and received == concept

# "don't" splits its attention between the two parts of "ne ... pas"
# (not evenly: the noise in the encoder vectors tips the balance).
ne, pas = source_words[0].index("ne"), source_words[0].index("pas")
print(f"don't -> ne {w[1, ne]:.3f}, pas {w[1, pas]:.3f}")
assert w[1, ne] > 0.25 and w[1, pas] > 0.25
print("row sums   :", [round(x, 2) for x in w.sum(dim=-1).tolist()])
column_sums = w.sum(dim=0)  # (S,)
print("column sums:", [round(x, 2) for x in column_sums.tolist()])
torch.testing.assert_close(w.sum(dim=-1), torch.ones(L))
de, dot = source_words[0].index("de"), source_words[0].index(".")
assert column_sums[de] < 0.1 and column_sums[dot] < 0.1  # read by nobody
# ne and pas share one query's weight: neither column reaches 1
assert column_sums[ne] < 0.9 and column_sums[pas] < 0.9

# %% [markdown]
# Rows sum to 1 (each target token distributes one unit of attention), but
# columns need not: *ne* and *pas* share the weight of the one query that
# reads them, so neither column sums to 1, and *de* and "." are read by
# practically nobody. The heatmap shows the alignment: target tokens down
# the side, source tokens along the bottom, a $4 \times 7$ rectangle.

# %% caption="Cross-attention weights of the 4 target words I don't eat apples (rows) over the 7 source words je ne mange pas de pommes . (columns), each cell labelled with its weight. I reads je (0.94), eat reads mange (0.96) and apples reads pommes (0.98); don't splits its weight between ne (0.35) and pas (0.62), while de and the period are read by almost nobody."
fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
ax = attention.plot_attention(
    w,
    query_labels=target_words[0],
    key_labels=source_words[0],
    ax=ax,
    title="Cross-attention: which source word each target word reads",
)

# %% [markdown]
# ## 3. The same as a layer, every shape on the way
#
# [`attention.CrossAttention`](../../reference/multi_head/#attention.multi_head.CrossAttention)
# wraps this in a layer with $H$ heads and an output projection.
# `context_dim` is the encoder's width $E_{\text{ctx}}$; it sets the input
# width of $W^K$ and $W^V$ (PyTorch calls these `kdim` and `vdim`), which
# map it to the same head size $D$ as the queries. With $E = 16$ and $H = 2$ heads,
# $D = E / H = 8$.
#
# We plant the hand-made projections in head 0 and leave head 1 at its
# random initialisation. In a linear layer's `weight` (shape
# `(out_features, in_features)`) head 0 owns the first $D$ rows, so it gets
# the *transposes* of our matrices. Then we run the whole batch, both
# sentence pairs, through the layer's own parts, printing every shape.

# %%
H = 2
layer = attention.CrossAttention(
    embed_dim=E, num_heads=H, context_dim=E_ctx
)
mha = layer.attention  # the MultiHeadAttention inside
assert mha.head_dim == D
with torch.no_grad():
    mha.q_proj.weight[:D] = W_q.T  # head 0 of the (E, E) query projection
    mha.k_proj.weight[:D] = W_k.T  # head 0 of the (E, E_ctx) keys
    mha.v_proj.weight[:D] = W_v.T  # head 0 of the (E, E_ctx) values
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        proj.bias.zero_()
print("q_proj.weight", tuple(mha.q_proj.weight.shape), "(E, E)")
print("k_proj.weight", tuple(mha.k_proj.weight.shape), "(E, E_ctx)")

with torch.no_grad():
    steps = {"Y (decoder)": Y, "X (encoder)": X}
    q = mha.q_proj(Y)  # (B, L, E)
    q = q.view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
    k = mha.k_proj(X)  # (B, S, E): E_ctx features in, E out
    k = k.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D): S, not L
    v = mha.v_proj(X).view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
    weights = attention.attention_weights(q, k)  # (B, H, L, S)
    heads = weights @ v  # (B, H, L, D): back to the decoder's length
    concat = heads.transpose(1, 2).reshape(B, L, E)  # (B, L, E)
    out = mha.out_proj(concat)  # (B, L, E)
    steps |= dict(q=q, k=k, v=v, weights=weights, heads=heads)
    steps |= {"concat heads": concat, "output": out}

for name, t in steps.items():
    print(f"{name:>12}: {tuple(t.shape)}")

with torch.no_grad():
    out_layer = layer(Y, X)
    _, w_layer = mha(
        Y, X, X, need_weights=True, average_attn_weights=False
    )  # (B, H, L, S)
torch.testing.assert_close(out, out_layer)
torch.testing.assert_close(weights, w_layer)
# head 0 of the first sentence is exactly the single head of section 2
torch.testing.assert_close(weights[0, 0], w)
print(f"max |head 0 - section 2| = {(weights[0, 0] - w).abs().max():.1e}")

# %% [markdown]
# Only two shapes carry $S$: the keys and values, and the weights
# $(B, H, L, S)$. Everything after the weighted sum has the decoder's
# length $L$. Head 0 reproduces the hand-made alignment; head 1, with
# random projections, spreads its attention without any reason. In a
# trained model every head learns its own kind of alignment.

# %% caption="The layer's two heads on the same sentence pair, each cell labelled with its weight. Head 0 (planted projections, top) reproduces the alignment (I→je, don't→ne and pas, eat→mange, apples→pommes); head 1 (random projections, bottom) spreads every row almost evenly, 0.11 to 0.17 per key."
fig = attention.plot_attention_heads(
    weights[0],
    ncols=1,
    query_labels=target_words[0],
    key_labels=source_words[0],
    annotate=True,
    titles=["head 0 (planted)", "head 1 (random)"],
)

# %% [markdown]
# ## 4. Masking the padding of the encoder
#
# The second source sentence has 5 real tokens and 2 padding slots. Without
# a mask its queries also score the padding keys, whose vectors are
# arbitrary, and some of the attention leaks onto them. The padding is on
# the **key** side (the encoder's positions), so the mask has shape
# $(B, S)$ and is broadcast over heads and queries.
#
# `CrossAttention` takes it as `context_padding_mask`, which keeps
# PyTorch's `key_padding_mask` meaning: **True marks padding**.
# [`attention.padding_mask`](../../reference/masks/#attention.masks.padding_mask)
# returns the opposite (True at real tokens, the package's "may attend"
# convention), hence the `~`.

# %%
real = attention.padding_mask(lengths, max_length=S)  # (B, S), True = real
print("padding_mask(lengths), True = real token:")
print(real.int())

with torch.no_grad():
    _, w_plain = mha(
        Y, X, X, need_weights=True, average_attn_weights=False
    )
    _, w_masked = mha(
        Y,
        X,
        X,
        key_padding_mask=~real,
        need_weights=True,
        average_attn_weights=False,
    )  # (B, H, L, S)
    out_masked = layer(Y, X, context_padding_mask=~real)

leak = w_plain[1, :, :, 5:].sum(dim=-1)  # (H, L) weight on the pads
print("weight on <pad> without the mask, per head and query:")
print(leak)
print("... and with it:", w_masked[1, :, :, 5:].abs().max().item())
assert leak.max() > 0.05
assert torch.all(w_masked[1, :, :, 5:] == 0)  # exactly 0, not just small
torch.testing.assert_close(w_masked.sum(dim=-1), torch.ones(B, H, L))

# %% [markdown]
# With the mask the padded sentence gives exactly what it gives on its own,
# unpadded ($S = 5$), and nothing written into the padding slots can change
# it:

# %% caption="Head 0's weights for the padded second sentence pair, you eat an apple over tu manges une pomme . and two <pad> keys, each cell labelled with its weight. Without a mask (top) some weight leaks onto the padding, 0.25 of the row of an on the last <pad>; with context_padding_mask (bottom) both <pad> columns are exactly 0 and each word reads its source word with 0.95 to 0.98."
with torch.no_grad():
    alone = layer(Y[1:], X[1:, :5])  # (1, L, E): no padding at all
    X_garbage = X.clone()
    X_garbage[1, 5:] = 1e3 * torch.randn(S - 5, E_ctx)
    out_garbage = layer(Y, X_garbage, context_padding_mask=~real)
gap = (out_masked[1] - alone[0]).abs().max()
print(f"max |padded + mask - unpadded| = {gap:.1e}")
torch.testing.assert_close(out_masked[1:], alone)
torch.testing.assert_close(out_garbage, out_masked)

fig, axes = plt.subplots(2, 1, figsize=(7, 6.6), layout="constrained")
for ax, ws, title in zip(
    axes,
    (w_plain, w_masked),
    ("no mask: padding leaks", "context_padding_mask: pads get 0"),
    strict=True,
):
    attention.plot_attention(
        ws[1, 0],  # second sentence, head 0
        query_labels=target_words[1],
        key_labels=source_words[1],
        ax=ax,
        title=title,
    )

# %% [markdown]
# The function-level equivalent uses the package's convention directly: an
# `attn_mask` that is True where a query may attend, shaped to broadcast
# against the $(B, H, L, S)$ scores. PyTorch's
# `F.scaled_dot_product_attention` reads a boolean mask the same way.

# %%
keep = real[:, None, None, :]  # (B, 1, 1, S): same for every head, query
with torch.no_grad():
    heads_pkg = attention.scaled_dot_product_attention(
        q, k, v, attn_mask=keep
    )  # (B, H, L, D)
    heads_torch = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    via_layer = mha.out_proj(heads_pkg.transpose(1, 2).reshape(B, L, E))
print(
    f"max |package - torch| = {(heads_pkg - heads_torch).abs().max():.1e}"
)
torch.testing.assert_close(heads_pkg, heads_torch)
torch.testing.assert_close(via_layer, out_masked)

# %% [markdown]
# ## 5. A decoder block: causal self-attention, then cross-attention
#
# In an encoder-decoder transformer each decoder block first lets the
# target tokens read *each other* through causal self-attention (a token
# sees itself and earlier tokens, never later ones), then reads the source
# through cross-attention, then applies a position-wise feed-forward
# network. Each sub-layer is wrapped in a residual connection with a layer
# norm in front (the "pre-norm" arrangement used by most recent models).
# The cross-attention takes no causal mask: the whole source is known
# before decoding starts.


# %%
class DecoderBlock(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, context_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        self.self_attn = attention.CausalSelfAttention(
            embed_dim, num_heads
        )
        self.norm2 = nn.LayerNorm(embed_dim)
        self.cross_attn = attention.CrossAttention(
            embed_dim, num_heads, context_dim=context_dim
        )
        self.norm3 = nn.LayerNorm(embed_dim)
        self.ffn = nn.Sequential(
            nn.Linear(embed_dim, 4 * embed_dim),
            nn.GELU(),
            nn.Linear(4 * embed_dim, embed_dim),
        )

    def forward(self, y, x, context_padding_mask=None):
        y = y + self.self_attn(self.norm1(y))  # (B, L, E): reads y[:i+1]
        y = y + self.cross_attn(
            self.norm2(y), x, context_padding_mask=context_padding_mask
        )  # (B, L, E): reads all real tokens of x
        return y + self.ffn(self.norm3(y))  # (B, L, E)


block = DecoderBlock(E, H, E_ctx)
with torch.no_grad():
    a = block.self_attn(block.norm1(Y))
    b = block.cross_attn(block.norm2(Y + a), X, context_padding_mask=~real)
    result = block(Y, X, context_padding_mask=~real)
print("target in          :", tuple(Y.shape), "(B, L, E)")
print("source in          :", tuple(X.shape), "(B, S, E_ctx)")
print("causal self-attn   :", tuple(a.shape), "(B, L, E)")
print("cross-attention    :", tuple(b.shape), "(B, L, E)")
print("block output       :", tuple(result.shape), "(B, L, E)")
assert result.shape == Y.shape

# %% [markdown]
# Two properties a correct block must have, checked by editing the inputs:
# changing target token 2 may change only outputs 2 and 3 (the causal mask
# protects 0 and 1, and cross-attention does not reopen the leak because it
# reads only the source); changing a source token changes every target
# position.

# %%
Y_edit = Y.clone()
Y_edit[:, 2] = torch.randn(B, E)
X_edit = X.clone()
X_edit[:, 0] = torch.randn(B, E_ctx)
with torch.no_grad():
    by_target = block(Y_edit, X, context_padding_mask=~real) - result
    by_source = block(Y, X_edit, context_padding_mask=~real) - result
change_t = by_target.abs().amax(dim=(0, 2))  # (L,)
change_s = by_source.abs().amax(dim=(0, 2))  # (L,)
print("change per position after editing")
print("  target token 2:", [round(c, 3) for c in change_t.tolist()])
print("  source token 0:", [round(c, 3) for c in change_s.tolist()])
assert torch.all(change_t[:2] == 0) and torch.all(change_t[2:] > 0)
assert torch.all(change_s > 0)

# %% [markdown]
# ## 6. Check against PyTorch's MultiheadAttention
#
# PyTorch's module does cross-attention with different widths through its
# `kdim` and `vdim` arguments. It then keeps three separate projection
# matrices (`q_proj_weight`, `k_proj_weight`, `v_proj_weight`) instead of
# the single stacked `in_proj_weight` it uses when all widths are equal.
# [`MultiHeadAttention.to_torch`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention.to_torch)
# builds that module with our weights, and
# [`from_torch`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention.from_torch)
# goes the other way. Note PyTorch's defaults: `batch_first=False` and
# `need_weights=True`; `to_torch` carries `batch_first=True` over.

# %%
reference = mha.to_torch()  # nn.MultiheadAttention(16, 2, kdim=8, vdim=8)
for name, p in reference.named_parameters():
    print(f"  {name:16s} {tuple(p.shape)}")
assert reference.kdim == reference.vdim == E_ctx and reference.batch_first

with torch.no_grad():
    out_ref, w_ref = reference(
        Y, X, X, key_padding_mask=~real, average_attn_weights=False
    )
print(f"max |output  - torch| = {(out_masked - out_ref).abs().max():.1e}")
print(f"max |weights - torch| = {(w_masked - w_ref).abs().max():.1e}")
torch.testing.assert_close(out_masked, out_ref)
torch.testing.assert_close(w_masked, w_ref)

# And back: a fresh PyTorch module, ported into a CrossAttention.
theirs = nn.MultiheadAttention(
    E, H, kdim=E_ctx, vdim=E_ctx, batch_first=True
)
ours = attention.CrossAttention(E, H, context_dim=E_ctx)
ported = attention.MultiHeadAttention.from_torch(theirs)
ours.attention.load_state_dict(ported.state_dict())
with torch.no_grad():
    expected, _ = theirs(Y, X, X, key_padding_mask=~real)
    got = ours(Y, X, context_padding_mask=~real)
print(f"max |ported - torch|  = {(got - expected).abs().max():.1e}")
torch.testing.assert_close(got, expected)

# %% [markdown]
# ## 7. The classic bug: reshaping keys with the query's length
#
# Splitting heads needs the sequence length, and a multi-head layer written
# for self-attention often takes it from the query, once, and uses it for
# all three tensors. With $L = S$ that is harmless, so every self-attention
# test passes. In cross-attention the keys and values have $S$
# positions, and `view(B, L, H, D)` asks for a shape with the wrong number
# of elements:


# %%
def split_heads_wrong(x, B, L, H, D):
    return x.view(B, L, H, D).transpose(1, 2)  # L: the *query's* length


with torch.no_grad():
    k_proj = mha.k_proj(X)  # (B, S, E) = (2, 7, 16)
try:
    split_heads_wrong(k_proj, B, L, H, D)
except RuntimeError as error:
    print(f"RuntimeError:\n  {error}")
else:
    raise AssertionError("reshaping S = 7 positions as L = 4 must fail")

# %% [markdown]
# The fix is to take the length from the tensor being reshaped, so that
# queries get $L$ and keys and values get $S$. With equal lengths both
# versions agree, which is exactly why the bug survives until the first
# translation model:


# %%
def split_heads(x, H):
    B, T, _ = x.shape  # T = L for queries, S for keys and values
    return x.view(B, T, H, -1).transpose(1, 2)  # (B, H, T, D)


with torch.no_grad():
    k_right = split_heads(k_proj, H)  # (B, H, S, D)
    k_square = mha.k_proj(X[:, :L])  # a source that happens to have S = L
    same = split_heads_wrong(k_square, B, L, H, D)
print("keys, split correctly:", tuple(k_right.shape))
torch.testing.assert_close(k_right, k)
torch.testing.assert_close(same, split_heads(k_square, H))

# %% [markdown]
# A quieter cousin never raises at all: reshaping straight to
# `(B, H, S, D)` without the transpose. The element count is right for any
# lengths, so the code runs, but each "head" now holds slices of several
# positions' features instead of one slice of every position. Only a
# comparison with a trusted implementation catches it:


# %%
def split_heads_silent(x, H):
    B, T, _ = x.shape
    return x.view(B, H, T, -1)  # runs, but mixes positions and features


with torch.no_grad():
    qs = split_heads_silent(mha.q_proj(Y), H)
    ks = split_heads_silent(mha.k_proj(X), H)
    vs = split_heads_silent(mha.v_proj(X), H)
    heads_silent = attention.scaled_dot_product_attention(qs, ks, vs)
    out_silent = mha.out_proj(
        heads_silent.transpose(1, 2).reshape(B, L, E)
    )
gap = (out_silent - out_layer).abs().max()
print(f"max |silent bug - CrossAttention| = {gap:.2f}")
assert gap > 0.1

# %% [markdown]
# ## Summary
#
# - Cross-attention takes queries from the decoder ($L$ positions, width
#   $E$) and keys and values from the encoder ($S$ positions, width
#   $E_{\text{ctx}}$).
#   `CrossAttention(embed_dim=E, num_heads=H, context_dim=E_ctx)` maps
#   both to heads of size $D = E / H$.
# - The weights are $(B, H, L, S)$, a non-square map whose rows sum to 1;
#   the output is $(B, L, E)$, one row per *query*. Only keys, values and
#   weights carry $S$.
# - Padding in a batch of sources is masked on the key side with a
#   $(B, S)$ mask: True = padding for `context_padding_mask` and PyTorch's
#   `key_padding_mask`, True = may attend for `attn_mask` in the functions.
#   Masked keys get weight exactly 0, and the padded result equals the
#   unpadded one.
# - A decoder block is causal self-attention, then cross-attention, then a
#   feed-forward network; cross-attention does not break causality.
# - With the same weights the layer matches `nn.MultiheadAttention` with
#   `kdim`/`vdim`. Split heads with each tensor's own length: the query's
#   length raises as soon as $S \ne L$.
#
# ## Exercises
#
# 1. Set `sharpness` to 0.5, then to 20, and redraw the heatmap of
#    section 2. What happens to the rows? *Hint:* the scores are about
#    `sharpness` for a match and 0 otherwise.
# 2. Pass `context_padding_mask=real` (without the `~`) in section 4. What
#    do the two sentences' outputs become? *Hint:* which keys are left for
#    the first sentence, which has no padding?
# 3. Run `layer` on the first two target tokens only,
#    `layer(Y[:, :2], X, context_padding_mask=~real)`, and compare with
#    `out_masked[:, :2]`. Then do the same with the decoder block against
#    `result[:, :2]`, and with the block on the *last* three tokens,
#    `block(Y[:, 1:], ...)` against `result[:, 1:]`. Which pairs agree?
# 4. Build `attention.CrossAttention(E, H)` (no `context_dim`) and call it
#    on `X`. Read the error message. Then print the parameters of
#    `to_torch()` for a layer whose `context_dim` equals `E`.
#
# <details markdown="1"><summary>Answers (try the exercises first)</summary>
#
# 1. At 0.5 every row is close to uniform (the largest weight is about
#    0.2, against $1/7 \approx 0.14$ for a uniform row), and the output can
#    name the wrong concept ("I" receives *not*). At 20 each row is nearly
#    one-hot, and "don't" gives most of its weight to one of *ne* and *pas*
#    (0.9 to *pas* with this page's seed): between two almost equal scores
#    the noise decides, and a large gain amplifies the difference.
# 2. The mask is inverted. The first sentence has no key left, so its
#    attention output is zero and the layer returns the output
#    projection's bias (zero at initialisation); the second sentence may
#    read only its two padding slots.
# 3. The cross-attention rows agree: there is no mask between queries, so
#    each output row depends only on its own query. The block's first two
#    rows agree too, because causal self-attention lets rows 0 and 1 see
#    only tokens 0 and 1. The block on the last three tokens does not
#    agree: those rows had read token 0 through the self-attention.
# 4. `ValueError: key must have kdim=16 features (last dimension); got key
#    (2, 7, 8)`. With equal widths PyTorch stores one stacked
#    `in_proj_weight` of shape $(3E, E)$ instead of three matrices.
#
# </details>
#
# **Where next:** the [concept page](../../concepts/self-cross-causal/)
# compares self-, cross- and causal attention,
# [Masks](../../concepts/masks/) covers padding and causal masks in detail,
# and [a complete encoder-decoder Transformer](../13_encoder_decoder_transformer/)
# trains cross-attention end to end and measures the alignment it learns.

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
# # A Hugging Face model on this package's attention
#
# **You will learn** to run a Hugging Face Transformers model with every
# attention layer computed by this package: you will build a small Llama
# from a config, switch its attention with
# [`register`](../../reference/integrations/#attention.integrations.huggingface.register),
# check that its logits and its generated words are those of Transformers'
# own `"eager"` attention, look at the weights of all its heads in a
# [`HeadView`](../../reference/viz/#attention.viz.HeadView), and then swap
# in [`flash_attention`](../../reference/efficient/#attention.efficient.flash_attention)
# for a 2048-token input and measure how much memory that saves.
#
# Nothing is downloaded: the model has random weights, so what it writes
# is nonsense, but every number it computes can be checked. The
# [how-to guide](../../how-to/run-a-hugging-face-model/) is the short
# recipe; here we run it and look inside. You need Transformers 5 or
# later: the package's `hf` extra installs it, and the downloaded
# notebook's first cell installs the package with it (the line is on
# the [Install](../../install/) page). Runs in about 9 seconds on a CPU.

# %%
import contextlib
import os
import warnings

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

# Transformers loads tqdm's notebook progress bars, which warn in a Jupyter
# kernel without ipywidgets; nothing on this page shows a progress bar.
warnings.filterwarnings("ignore", message="IProgress not found")
from transformers import AutoModelForCausalLM, LlamaConfig

import attention
from attention.integrations.huggingface import register

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. A small Llama, on two kinds of attention
#
# Transformers looks up a model's attention by name: `"eager"` is its
# own plain PyTorch code, and `register()` adds this package's under the
# name it returns. A model built with `attn_implementation=` that name
# calls the package's function in every attention layer, with the
# queries, keys and values the layer has computed.
#
# The model: two layers, model width $E = 64$, $H = 4$ query heads of
# $D = 16$ and $H_{kv} = 2$ key/value heads (grouped-query attention: each
# key/value head serves two query heads), and a vocabulary of 32 made-up
# words, so that inputs and outputs can be read. Build it twice from the
# same seed, so that both copies have the same random weights. Each copy
# gets a config object of its own: Transformers writes the chosen
# attention into the config it is given, and two models sharing one
# config would both run whichever was chosen last.

# %%
VOCABULARY = (
    "the a cat dog bird fish sat ran sang swam on in under near mat "
    "tree box pond red big small old and then it he she saw ate slept "
    "here ."
)
WORDS = VOCABULARY.split()  # token id i is WORDS[i]
word_id = {w: i for i, w in enumerate(WORDS)}


def encode(text):
    """Words to a (1, L) tensor of token ids."""
    return torch.tensor([[word_id[w] for w in text.split()]])


def decode(ids):
    return " ".join(WORDS[i] for i in ids.tolist())


SIZES = dict(
    vocab_size=len(WORDS),
    hidden_size=64,  # E = H * D
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,  # H
    num_key_value_heads=2,  # Hkv
    max_position_embeddings=2048,
)
ours = register()  # the name to pass: "attention-by-running"


def build(attn_implementation):
    torch.manual_seed(0)  # the same random weights every time
    config = LlamaConfig(**SIZES)  # a config of its own for each model
    return AutoModelForCausalLM.from_config(
        config, attn_implementation=attn_implementation
    ).eval()


models = {name: build(name) for name in ("eager", ours)}
model = models[ours]
n_params = sum(p.numel() for p in model.parameters())
print(f"vocabulary of {len(WORDS)} words; registered as {ours!r}")
print(f"{type(model).__name__}, {n_params:,} parameters")
for name, m in models.items():
    print(f"  {name:<22} runs {m.config._attn_implementation!r}")
assert len(WORDS) == 32 and len(set(WORDS)) == 32
assert model.config._attn_implementation == ours
assert models["eager"].config._attn_implementation == "eager"

# %% [markdown]
# `config._attn_implementation` is where Transformers keeps the name it
# will look up on every forward pass. It is a private attribute (the
# leading underscore), so a later version may move it; here it only
# confirms what each model runs. The two models hold the same weights
# to the last bit:

# %%
eager_state = models["eager"].state_dict()
assert all(
    torch.equal(t, eager_state[k]) for k, t in model.state_dict().items()
)
print(f"{len(eager_state)} tensors, all equal")

# %% [markdown]
# ## 2. The same logits as eager
#
# Feed both models a batch of two sentences of different lengths. A
# batch must be rectangular, so the shorter one is padded on the left
# (as decoders are padded for generation), and the attention mask, 1 for
# a real token and 0 for padding, tells the model which keys to ignore.
# Transformers turns that mask into the boolean mask the attention
# function receives. A padding position predicts nothing, so we compare
# the logits of the real positions only.

# %%
sentences = ["the cat sat on the mat and then it slept", "a dog ran here"]
lengths = [len(s.split()) for s in sentences]
L = max(lengths)
ids = torch.zeros(2, L, dtype=torch.long)  # padding: any id will do
mask = torch.zeros(2, L, dtype=torch.long)
for b, (text, n) in enumerate(zip(sentences, lengths, strict=True)):
    ids[b, L - n :] = encode(text)[0]  # left padding
    mask[b, L - n :] = 1
print(mask)

with torch.no_grad():
    logits = {
        name: m(input_ids=ids, attention_mask=mask).logits
        for name, m in models.items()
    }
real = mask.bool()  # (B, L)
diff = (logits[ours][real] - logits["eager"][real]).abs().max().item()
print(f"logits {tuple(logits[ours].shape)} (B, L, vocabulary)")
print(
    f"max |ours - eager| over the real positions below 1e-5: {diff < 1e-5}"
)
assert diff < 1e-5

# %% [markdown]
# The logits are the end of a chain of two layers, each with attention,
# a feed-forward block and normalisations, and they agree to float32
# rounding (the two attention functions add the same numbers in a
# different order).
#
# Would the check catch a real error? The logits of this untrained model
# are small (the largest is printed below), so the question is how far
# above the tolerance of $10^{-5}$ an error lands. To see, register the
# package's function three more times, each with one deliberate bug: the
# key/value heads shared with `repeat` instead of `repeat_interleave`
# (query head 1 then reads key/value head 1 instead of 0), a scale of 1
# instead of $1/\sqrt{D}$, and the mask transposed (each word sees itself
# and the words after it instead of those before it). `register(name)`
# adds a name with the package's attention and mask functions;
# `AttentionInterface.register` then replaces the attention function
# under that name with the broken one.

# %%
from transformers import AttentionInterface

from attention.integrations.huggingface import attention_forward

TOLERANCE = 1e-5  # the check above
BUGS = [
    "K/V heads grouped with repeat",
    "scale 1, not 1/sqrt(D)",
    "mask transposed",
]


def with_bug(bug):
    """The package's attention function for Transformers, with one bug."""

    def forward(module, query, key, value, attention_mask, **kwargs):
        if bug == BUGS[0]:
            groups = query.shape[1] // key.shape[1]  # H / Hkv
            # heads 0, 1, 0, 1 for the query heads; right is 0, 0, 1, 1
            key = key.repeat(1, groups, 1, 1)
            value = value.repeat(1, groups, 1, 1)
        elif bug == BUGS[1]:
            kwargs["scaling"] = 1.0
        elif bug == BUGS[2]:
            attention_mask = attention_mask.transpose(-2, -1)
        return attention_forward(
            module, query, key, value, attention_mask, **kwargs
        )

    return forward


largest = logits["eager"][real].abs().max().item()
print(f"largest |logit| of eager: {largest:.1f}")
print(f"{'bug':<30} {'max |broken - eager|':>21} {'/ tolerance':>12}")
errors = {}
for i, bug in enumerate(BUGS):
    name = register(f"attention-by-running-bug-{i}")
    AttentionInterface.register(name, with_bug(bug))
    with torch.no_grad():
        broken = build(name)(input_ids=ids, attention_mask=mask).logits
    error = (broken[real] - logits["eager"][real]).abs().max().item()
    times = float(f"{error / TOLERANCE:.2g}")  # two significant digits
    print(f"{bug:<30} {error:>21.2g} {times:>12,.0f}")
    errors[bug] = error
# Across seeds: 0.36-0.52, 0.015-0.027 and 0.37-0.60 for seeds 0 to 5
assert min(errors.values()) > 1000 * TOLERANCE  # the check catches each
# Across seeds: the wrong scale moves them least for seeds 0 to 5 (below)
assert errors[BUGS[1]] < min(errors[BUGS[0]], errors[BUGS[2]])

# %% [markdown]
# Every bug moves the logits by more than a thousand times the
# tolerance: the check of section 2 would catch any of them. The wrong
# scale moves them least: the scores of this untrained model are so close
# to 0 that four times larger ones (1 instead of $1/\sqrt{16}$) still
# give nearly uniform weights. The wrong heads and the transposed mask
# change which values are read, and move the logits most.
#
# ## 3. The same generated words
#
# Greedy generation picks the most likely next word, appends it and runs
# the model again, with Transformers' own KV cache: after the prompt, each
# step is a single query attending to every cached key, a different shape
# from the one just checked. Both models write the same eight words:

# %%
prompt = encode("the cat sat on the")
settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
with torch.no_grad():
    generated = {
        name: m.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            **settings,
        )
        for name, m in models.items()
    }
for name, tokens in generated.items():
    print(f"{name}:\n  {decode(tokens[0])}")
new = generated[ours][0, prompt.shape[1] :]
assert len(new) == 8
assert torch.equal(generated[ours], generated["eager"])

# %% [markdown]
# Random weights write random words; what matters is that the two
# attentions choose the same ones at every step. A difference at the
# level of rounding could in principle flip a near tie between two words;
# here none did.
#
# ## 4. Inside the model: every head's weights
#
# Ask for `output_attentions=True` and the package computes each layer's
# attention weights with
# [`attention_weights`](../../reference/functional/#attention.functional.attention_weights):
# one tensor $(B, H, L, S)$ per layer, here for one sentence of twelve
# words. They equal eager's, each row is a probability distribution over
# the keys, and no query attends to a later word (the model is causal):

# %%
sentence = "the old dog saw a red bird in the tree near the"
tokens = sentence.split()
x = encode(sentence)  # (1, L)
with torch.no_grad():
    maps = model(input_ids=x, output_attentions=True).attentions
    maps_eager = models["eager"](input_ids=x, output_attentions=True)
    maps_eager = maps_eager.attentions
print(f"{len(maps)} layers, each {tuple(maps[0].shape)} (B, H, L, S)")
L = len(tokens)
future = torch.ones(L, L, dtype=torch.bool).triu(1)  # key after query
for w, w_eager in zip(maps, maps_eager, strict=True):
    torch.testing.assert_close(w, w_eager)
    assert torch.allclose(w.sum(-1), torch.ones(1, 4, L))
    assert torch.all(w[..., future] == 0)
print("equal to eager's; rows sum to 1; no weight on a later word")

# %% [markdown]
# Every layer and head, to explore: choose a layer and two heads side by
# side, then hover over a word on the left (or Tab to it and use the
# arrow keys) to see the lines to the words it reads, each as opaque as
# its weight. `HeadView` takes one tensor $(N_{\text{layers}}, H, L, S)$
# for one input; in Jupyter it shows below the cell, and
# `view.save("heads.html")` writes it to a page that opens offline.

# %%
weights = torch.stack([w[0] for w in maps])  # (layers, H, L, S)
view = attention.HeadView(weights, tokens)
view

# %% [markdown]
# The weights of one layer as heatmaps, with
# [`plot_attention_heads`](../../reference/viz/#attention.viz.plot_attention_heads):

# %% caption="The attention weights of layer 1's four heads of the untrained Llama for the twelve words 'the old dog saw a red bird in the tree near the', queries down, keys across, on one colour scale from 0 to 1. Everything above the diagonal is 0 (causal). The first word puts all its weight on itself, the second about half on each of the first two, and every later row spreads its weight almost evenly over the words it may see, in all four heads alike."
fig = attention.plot_attention_heads(
    weights[1].numpy(), query_labels=tokens, key_labels=tokens, ncols=2
)
fig.suptitle("layer 1 of the untrained model")

# uniform causal attention: query i gives 1 / (i + 1) to each of keys 0..i
uniform = torch.ones(L, L).tril() / torch.arange(1, L + 1)[:, None]
spread = (weights - uniform).abs().max().item()
print(f"largest difference from uniform causal attention: {spread:.3f}")
# Across seeds: below 0.021 for seeds 0 to 5
assert spread < 0.05
assert model.config.initializer_range == 0.02  # see below

# %% [markdown]
# An untrained Llama barely looks at its input: every head of both layers
# is within a few hundredths of attending evenly to all the words it may
# see. Transformers initialises the weights with a standard deviation of
# 0.02 (`config.initializer_range`), so the queries and keys are small,
# their dot products are close to 0, and a softmax of near-equal scores is
# near-uniform. Patterns appear only with training. The same calls work
# on a trained checkpoint, loaded with
# `from_pretrained(..., attn_implementation=ours)`, where the heads have
# patterns worth finding ([tutorial 12](../12_induction_heads/) finds an
# induction head in a model it trains).
#
# ## 5. A long input, on the tiled kernel
#
# The package's `scaled_dot_product_attention`, the function behind
# `register()`, is written to be read: it computes all $L \times S$ scores
# of every head, as the formula does. For each layer that is
# $B \cdot H \cdot L \cdot S$ numbers of 4 bytes; at $L = S = 2048$ and
# four heads, 64 MiB, for a model whose weights take 0.3 MiB.
# `register(name, kernel="flash")` runs every layer through
# `flash_attention` instead, which visits the keys in tiles of 256 and
# keeps a running softmax, so no $L \times S$ tensor ever exists. Register
# it under a name of its own (Transformers routes names containing
# `"flash"` to its own kernels, so `register` refuses them) and build a
# third copy of the model:

# %%
tiled = register("attention-by-running-tiled", kernel="flash")
models[tiled] = build(tiled)
print(f"registered {tiled!r}")

# %% [markdown]
# Flash attention never holds the whole weight matrix, so it cannot
# return one: asked for `output_attentions`, the package says so rather
# than returning something else (and this shows that the model really
# calls the package's function):

# %%
try:
    with torch.no_grad():
        models[tiled](input_ids=x, output_attentions=True)
except NotImplementedError as error:
    print("NotImplementedError:", error)
else:
    raise AssertionError("flash attention returned attention weights")

# %% [markdown]
# To measure memory on a CPU, `torch.profiler` with `profile_memory=True`
# records every allocation and free with a timestamp; walking them in
# order and keeping a running total gives the most memory held at once
# during the call, on top of what was allocated before it (the method of
# [Measure the memory attention needs](../../how-to/measure-attention-memory/)
# and of the [complexity page](../../concepts/complexity/#measured-peak-memory-against-sequence-length)).
# Each model runs one forward pass over 2048 random words, once on a
# short input first, so that nothing allocated once and kept (a thread
# pool, say) is counted. The profiler's C++ backend writes two log lines
# to the process's standard error each time it starts and stops;
# `quiet_stderr` keeps them out of this page.


# %%
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


def peak_extra_bytes(fn):
    """Most bytes allocated during fn() and not yet freed, and fn()."""
    with (
        quiet_stderr(),
        profile(
            activities=[ProfilerActivity.CPU], profile_memory=True
        ) as prof,
    ):
        result = fn()
    allocations = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag.name == "Allocation":  # a free: a negative size
            allocations.append(
                (event.start_time_ns, event.extra_fields.alloc_size)
            )
    running = np.cumsum([size for _, size in sorted(allocations)])
    return int(running.max()), result


B, n = 1, 2048
long_ids = torch.randint(len(WORDS), (B, n))
peak, long_logits = {}, {}
with torch.no_grad():
    for name in (ours, tiled):
        models[name](input_ids=long_ids[:, :64])  # warm-up
        peak[name], long_logits[name] = peak_extra_bytes(
            lambda m=models[name]: m(input_ids=long_ids).logits
        )

MiB = 2**20
H = SIZES["num_attention_heads"]
scores = B * H * n * n * 4  # one layer's float32 scores, all heads
tile = B * H * 256 * 256 * 4  # one tile of flash_attention, all heads
print(f"one layer's scores, B·H·L·S·4 bytes: {scores / MiB:.0f} MiB")
print(f"one 256 × 256 tile of every head:    {tile / MiB:.0f} MiB")
for name, kernel in ((ours, "sdpa"), (tiled, "flash")):
    print(
        f"{kernel:>5} ({name}): peak {peak[name] / MiB:6.1f} MiB"
        f" = {peak[name] / scores:.2f} × the scores"
    )
ratio = peak[ours] / peak[tiled]
print(f"flash needs {ratio:.0f} times less memory at L = {n}")
gap = (long_logits[tiled] - long_logits[ours]).abs().max().item()
print(
    f"max |flash - sdpa| over all {n} positions below 1e-4: {gap < 1e-4}"
)

# %% [markdown]
# Both peaks count everything the forward pass allocated, the model's own
# activations included; those grow only linearly with $L$, so the
# difference between the two is the attention's. What the assertions
# below rest on is the shapes, not this machine:
#
# - The readable kernel computes a layer's scores as one tensor, so its
#   peak is at least one score matrix: 64 MiB. It is in fact about three,
#   as printed: it writes each step (scaling, causal mask, softmax) as a
#   new tensor, and a step's input is still alive while its output is
#   written.
# - A tile of `flash_attention` is $(L / 256)^2 = 64$ times smaller than
#   the scores. Its peak is a few tiles and the model's linear
#   activations. We assert it stays below a quarter of one score matrix,
#   16 MiB: room for a dozen tiles and a few MiB of activations, more
#   than enough, yet still at least four times below the readable
#   kernel.
#
# The logits agree to float32 rounding: the tiles add the same terms in
# another order.

# %%
assert scores == 64 * MiB and scores == (n // 256) ** 2 * tile
assert round(n_params * 4 / MiB, 1) == 0.3  # the weights, float32
assert peak[ours] >= scores  # the scores of one layer, at least
assert peak[tiled] < scores / 4  # a few tiles, no L × S tensor
assert gap < 1e-4
assert H * 32768**2 * 4 == 16 * 2**30  # the scores at L = 32 768

# %% [markdown]
# Time is not measured here: `flash_attention` is written in plain
# PyTorch, one tile at a time, to be read, and the
# [Performance](../../performance/) page compares the implementations'
# speed. What carries over to longer inputs is the shape of the saving:
# the scores grow as $L^2$ (double the input, four times the memory),
# flash attention's tiles not at all, and the rest only as $L$; the
# [complexity page](../../concepts/complexity/#measured-peak-memory-against-sequence-length)
# measures both peaks against $L$. At $L = 32\,768$ the scores of these
# four heads would take 16 GiB per layer.
#
# ## Summary
#
# - `register()` adds the package's attention to Transformers under a
#   name; pass it as `attn_implementation` to `from_config` or
#   `from_pretrained`, with a config object of its own for each model.
# - The model then gives eager's logits to float32 rounding and the same
#   greedy generation, with padding, grouped-query heads and
#   Transformers' KV cache (asserted above); a deliberate bug in the
#   heads, the scale or the mask lands thousands of times further off.
# - `output_attentions=True` returns each layer's weights $(B, H, L, S)$,
#   equal to eager's; stacked for one input they make a `HeadView`, and
#   one layer's heads a `plot_attention_heads` figure.
# - `register(name, kernel="flash")` computes every layer with
#   `flash_attention`: the same logits, and at 2048 tokens a forward pass
#   that never holds an $L \times S$ tensor, far below the readable
#   kernel's peak of about three score matrices. It cannot return weights,
#   and says so.
#
# ## Exercises
#
# 1. Build both models from one config object (`config = LlamaConfig(...)`
#    once, passed to both `from_config` calls). What does
#    `config._attn_implementation` say afterwards, and what would the
#    comparison of section 2 then compare?
# 2. Set `n = 1024` in section 5. By how much should each peak change?
#
# **Answers.**
# 1. The name passed last: both models read it from the one config on
#    every call, so both run the same attention, and the comparison
#    compares a model with itself. It passes, and proves nothing.
# 2. The scores shrink four times, to 16 MiB, and the readable kernel's
#    peak with them (to about 50 MiB); flash attention's falls by less
#    than half, since its tiles keep their size and only the linear part
#    halves. The first assertion, written for 2048 tokens, then fails;
#    and the bound on flash attention, a quarter of the scores, becomes
#    tight: at 1024 tokens a score matrix is only 16 tiles.
#
# **Where next:** the
# [how-to guide](../../how-to/run-a-hugging-face-model/) for the recipe
# and what is not supported;
# [Efficient attention from scratch](../11_efficient_attention_from_scratch/)
# to build the tiles and the online softmax yourself;
# [Measure the memory attention needs](../../how-to/measure-attention-memory/)
# for the memory of training and of the KV cache; and the
# [`attention.integrations` reference](../../reference/integrations/).

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
# # A complete encoder-decoder Transformer, trained end to end
#
# **You will learn** to build the model of *Attention Is All You Need*
# (Vaswani et al., 2017) from the package's attention layers: token
# embeddings scaled by $\sqrt{E}$, sinusoidal positions, an encoder and a
# decoder of two layers each, the decoder reading the encoder through
# **cross-attention**. You will train it with everything the paper used
# (targets shifted right for teacher forcing, label smoothing, the warm-up
# learning-rate schedule), decode with **greedy** and **beam search**
# using a KV cache for both the decoder's self-attention and its
# cross-attention, check that the cache changes nothing, find in the
# cross-attention maps the alignment the task implies, and see why the
# Pre-LN variant trains without a warm-up and the original Post-LN does
# not.
#
# The task is a small translation: English number words to digits,
# "four thousand two hundred seventeen" → `4217`. It needs
# cross-attention (the output is a different sequence, of a different
# length, in a different vocabulary), it has a known answer for every
# input, and the word that produced each digit is known, so the
# alignment can be checked. Everything runs on a CPU in well under a
# minute.

# %%
import math
import os
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import attention

# Every random draw of the training below follows from SEED: another seed
# (ATTENTION_SEED=3 python docs/tutorials/13_encoder_decoder_transformer.py)
# trains another model. The thresholds were set from seeds 0-19 (section
# 7's from seeds 0-19 and 22-41), run on ATen's portable kernels
# (ATEN_CPU_CAPABILITY=default) with one thread; each "Across seeds"
# comment gives the range they measured. The tests run seeds 20 and 21,
# which no threshold was tuned on.
SEED = int(os.environ.get("ATTENTION_SEED", "0"))
torch.manual_seed(SEED)
torch.set_printoptions(precision=3, sci_mode=False)
# Small tensors: one thread is faster than two here (no hand-offs).
torch.set_num_threads(1)

# %% [markdown]
# ## 1. The data: number words to digits
#
# Every number from 0 to 9999 is written out in words, without "and":
# at most six words, at most four digits. The source vocabulary has the
# 30 number words plus a padding token; the target vocabulary has the ten
# digits plus three special tokens: padding, `<s>` (start) and `</s>`
# (end).

# %%
ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
]
TEENS = [
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = [
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
]


def number_words(n):
    """0 <= n <= 9999 in words: 4217 -> four thousand two hundred seventeen."""
    if n == 0:
        return ["zero"]
    words = []
    thousands, n = divmod(n, 1000)
    hundreds, n = divmod(n, 100)
    if thousands:
        words += [ONES[thousands], "thousand"]
    if hundreds:
        words += [ONES[hundreds], "hundred"]
    if n >= 20:
        words.append(TENS[n // 10 - 2])
        if n % 10:
            words.append(ONES[n % 10])
    elif n >= 10:
        words.append(TEENS[n - 10])
    elif n:
        words.append(ONES[n])
    return words


PAD, BOS, EOS = 0, 1, 2  # in both vocabularies, PAD = 0
SOURCE = ["<pad>", *ONES, *TEENS, *TENS, "hundred", "thousand"]
TARGET = ["<pad>", "<s>", "</s>", *"0123456789"]
WORD_ID = {word: i for i, word in enumerate(SOURCE)}


def encode(numbers):
    """Source (n, S) word ids and target (n, T) digit ids, padded."""
    sources = [[WORD_ID[w] for w in number_words(n)] for n in numbers]
    targets = [[BOS, *(3 + int(d) for d in str(n)), EOS] for n in numbers]

    def pad(rows):
        width = max(map(len, rows))
        return torch.tensor(
            [row + [PAD] * (width - len(row)) for row in rows]
        )

    return pad(sources), pad(targets)


def digits(row):
    """Target ids -> the digits between <s> and </s>, as a string."""
    text = ""
    for t in row.tolist():
        if t == EOS:
            break
        if t > EOS:
            text += TARGET[t]
    return text


for n in (0, 13, 40, 705, 4217, 9999):
    print(f"{' '.join(number_words(n)):<42} -> {n}")
print(f"source vocabulary {len(SOURCE)}, target vocabulary {len(TARGET)}")

# %% [markdown]
# A random fifth of the 10,000 numbers is held out for testing: the model
# never sees them in training, so getting them right means it learned
# the rules (the words of the thousands, the hundreds, the tens and teens)
# rather than a table.

# %%
# The same split for every SEED.
order = torch.randperm(10_000, generator=torch.Generator().manual_seed(0))
test_numbers, train_numbers = order[:2000].tolist(), order[2000:].tolist()
train_src, train_tgt = encode(train_numbers)
test_src, test_tgt = encode(test_numbers)
print("train:", tuple(train_src.shape), tuple(train_tgt.shape))
print("test: ", tuple(test_src.shape), tuple(test_tgt.shape))
assert not set(test_numbers) & set(train_numbers)

# %% [markdown]
# ## 2. The model
#
# The pieces, in the order data flows through them:
#
# 1. **Embeddings.** Each token becomes a learned vector of width
#    $E = 32$, multiplied by $\sqrt{E}$, plus
#    [`attention.sinusoidal_encoding`](../../reference/positional/#attention.positional.sinusoidal_encoding).
#    The factor is the paper's. The tables are initialised here with
#    standard deviation $E^{-1/2}$, so with variance $1/E$; only after the
#    $\times\sqrt{E}$ do their entries have variance 1, comparable with
#    the sinusoidal positions, whose entries lie in $[-1, 1]$ with a mean
#    square of exactly $\tfrac{1}{2}$ (each sine is paired with a
#    cosine). Without the factor, the positions' entries would be
#    $\sqrt{E / 2} = 4$ times larger than the tokens' (root mean square).
# 2. **Encoder layers**: self-attention over the source, with a
#    **padding mask** (short sentences are padded to the longest of the
#    batch), then a feed-forward block.
# 3. **Decoder layers**: **causal** self-attention over the digits so far,
#    then **cross-attention** whose queries come from the decoder and whose
#    keys and values are the encoder's outputs (with the same padding
#    mask), then a feed-forward block.
# 4. A linear layer gives a logit per target token.
#
# Each sub-layer sits in a residual connection with a LayerNorm. The
# original Transformer normalises *after* the addition (**Post-LN**:
# $x \leftarrow \operatorname{LN}(x + f(x))$); most models since normalise
# the sub-layer's input (**Pre-LN**:
# $x \leftarrow x + f(\operatorname{LN}(x))$, with a final LayerNorm).
# `pre_norm` switches between the two; section 7 compares them.
#
# All attention is the package's
# [`attention.MultiHeadAttention`](../../reference/multi_head/#attention.multi_head.MultiHeadAttention),
# with $H = 4$ heads of size $D = 8$. The decoder layer takes an optional
# `cache`, a pair of
# [`attention.KVCache`](../../reference/kv_cache/#attention.kv_cache.KVCache)
# objects, for decoding one token at a time (sections 4 and 5).


# %%
class Residual(nn.Module):
    """x + f(LN(x)) (Pre-LN) or LN(x + f(x)) (Post-LN) around sub-layer f."""

    def __init__(self, width, pre_norm):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.pre_norm = pre_norm

    def forward(self, x, sublayer):
        if self.pre_norm:
            return x + sublayer(self.norm(x))
        return self.norm(x + sublayer(x))


def feed_forward(width):
    return nn.Sequential(
        nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width)
    )


class EncoderLayer(nn.Module):
    def __init__(self, width, heads, pre_norm):
        super().__init__()
        self.attn = attention.MultiHeadAttention(width, heads)
        self.ff = feed_forward(width)
        self.res1, self.res2 = (
            Residual(width, pre_norm) for _ in range(2)
        )

    def forward(self, x, padding):  # x: (B, S, E), padding: (B, S)
        x = self.res1(
            x, lambda h: self.attn(h, h, h, key_padding_mask=padding)[0]
        )
        return self.res2(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, width, heads, pre_norm):
        super().__init__()
        self.self_attn = attention.MultiHeadAttention(width, heads)
        self.cross_attn = attention.MultiHeadAttention(width, heads)
        self.ff = feed_forward(width)
        self.res = nn.ModuleList(
            Residual(width, pre_norm) for _ in range(3)
        )

    def forward(self, y, memory, padding, cache=None):
        """y: (B, T, E) decoder side; memory: (B, S, E) encoder outputs.

        With cache = (self-attention KVCache, cross-attention KVCache), y
        holds only the new positions. Returns y and the cross-attention
        weights (B, H, T, S).
        """
        self_cache, cross_cache = cache or (None, None)
        # The encoder's keys and values are projected once: after the
        # first step the cross-attention cache holds them, and we pass
        # no new ones (an empty sequence) but the same padding mask.
        if cross_cache is not None and len(cross_cache) > 0:
            memory = memory[:, :0]
        y = self.res[0](
            y,
            lambda h: self.self_attn(
                h, h, h, is_causal=True, kv_cache=self_cache
            )[0],
        )
        weights = []

        def cross(h):
            out, w = self.cross_attn(
                h,
                memory,
                memory,
                key_padding_mask=padding,
                need_weights=True,
                average_attn_weights=False,
                kv_cache=cross_cache,
            )
            weights.append(w)
            return out

        y = self.res[1](y, cross)
        return self.res[2](y, self.ff), weights[0]


class Transformer(nn.Module):
    def __init__(self, width=32, heads=4, layers=2, pre_norm=True):
        super().__init__()
        self.width = width
        self.src_embed = nn.Embedding(len(SOURCE), width)
        self.tgt_embed = nn.Embedding(len(TARGET), width)
        self.register_buffer(
            "positions", attention.sinusoidal_encoding(16, width)
        )
        self.encoder = nn.ModuleList(
            EncoderLayer(width, heads, pre_norm) for _ in range(layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(width, heads, pre_norm) for _ in range(layers)
        )
        # Pre-LN leaves the residual stream unnormalised: one LN at the end.
        self.enc_norm, self.dec_norm = (
            nn.LayerNorm(width) if pre_norm else nn.Identity()
            for _ in "ed"
        )
        self.generator = nn.Linear(width, len(TARGET))
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, std=width**-0.5)

    def embed(self, table, tokens, offset=0):
        positions = self.positions[offset : offset + tokens.shape[1]]
        return table(tokens) * math.sqrt(self.width) + positions

    def encode(self, src):
        """Encoder outputs (B, S, E) and the padding mask (B, S)."""
        padding = src == PAD
        x = self.embed(self.src_embed, src)
        for layer in self.encoder:
            x = layer(x, padding)
        return self.enc_norm(x), padding

    def decode(self, tgt_in, memory, padding, caches=None, offset=0):
        """Logits (B, T, V) and cross-attention maps (layers, B, H, T, S)."""
        y = self.embed(self.tgt_embed, tgt_in, offset)
        maps = []
        for i, layer in enumerate(self.decoder):
            y, w = layer(y, memory, padding, caches[i] if caches else None)
            maps.append(w)
        return self.generator(self.dec_norm(y)), torch.stack(maps)

    def forward(self, src, tgt_in):
        memory, padding = self.encode(src)
        return self.decode(tgt_in, memory, padding)


torch.manual_seed(SEED)
model = Transformer()
logits, maps = model(test_src[:3], test_tgt[:3, :-1])
n_params = sum(p.numel() for p in model.parameters())
print(f"parameters: {n_params:,}")
print(
    "logits:", tuple(logits.shape), " cross-attention:", tuple(maps.shape)
)

# %% [markdown]
# ## 3. Training: teacher forcing, label smoothing, warm-up
#
# **Teacher forcing.** The decoder is trained on all positions at once.
# Its input is the target **shifted right**: `<s> 4 2 1 7` predicts
# `4 2 1 7 </s>`, position by position; the causal mask keeps each
# position from seeing the digit it must predict. Padding positions are
# left out of the loss (`ignore_index`).
#
# **Label smoothing** (Szegedy et al., 2016; the paper used
# $\varepsilon = 0.1$): the target distribution puts $1 - \varepsilon$ on
# the right token and spreads $\varepsilon$ over all of them, so the model
# is never pushed towards infinitely confident logits. Its loss can then
# not reach 0: with $N_{\text{vocab}} = 13$ target tokens (`V` in the
# code), the best possible loss is the entropy of the smoothed target,
#
# $$\mathcal{H}_\varepsilon
# = -\left(1 - \varepsilon + \tfrac{\varepsilon}{N_{\text{vocab}}}\right)
# \ln\left(1 - \varepsilon + \tfrac{\varepsilon}{N_{\text{vocab}}}\right)
# - (N_{\text{vocab}} - 1)\,\tfrac{\varepsilon}{N_{\text{vocab}}}
# \ln \tfrac{\varepsilon}{N_{\text{vocab}}}.$$
#
# **Warm-up.** The paper's learning rate grows linearly for
# $w$ warm-up steps, then decays as the inverse square root of the step:
#
# $$\text{lr}(s) = E^{-1/2} \min\left(s^{-1/2},\; s \cdot w^{-3/2}\right),$$
#
# with Adam ($\beta_2 = 0.98$, $\epsilon = 10^{-9}$). We use $w = 60$ and
# 350 steps of 128 sentences drawn from the training numbers. Fewer steps
# are not enough for every seed: after 250 steps one of the seeds 0-19
# (on ATen's portable kernels) got 0.871 of the held-out sentences right,
# after 300 steps another 0.886, and after 350 every one of them got more
# than 0.98.

# %%
SMOOTHING, WARMUP, STEPS, BATCH = 0.1, 60, 350, 128
V = len(TARGET)


def noam(step, width=32, warmup=WARMUP):
    step = max(step, 1)
    return width**-0.5 * min(step**-0.5, step * warmup**-1.5)


def loss_fn(logits, target):
    return F.cross_entropy(
        logits.transpose(1, 2),
        target,
        ignore_index=PAD,
        label_smoothing=SMOOTHING,
    )


def batch(generator, size=BATCH):
    rows = torch.randint(
        0, len(train_numbers), (size,), generator=generator
    )
    src, tgt = train_src[rows], train_tgt[rows]
    # Trim the columns that are padding in every row of this batch.
    src = src[:, : int((src != PAD).sum(1).max())]
    tgt = tgt[:, : int((tgt != PAD).sum(1).max())]
    return src, tgt


def train(model, steps=STEPS, warmup=WARMUP, seed=SEED):
    """Train with Adam on the schedule above (warmup=0: the peak rate from
    step 1). Returns the training loss per step."""
    peak = noam(WARMUP, model.width)

    def schedule(step):
        return noam(step, model.width, warmup) if warmup else peak

    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9
    )
    lr = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        src, tgt = batch(generator)
        logits, _ = model(src, tgt[:, :-1])  # shifted right
        loss = loss_fn(logits, tgt[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        lr.step()
        losses.append(loss.item())
    return losses


def teacher_forced_accuracy(model, src=test_src, tgt=test_tgt):
    """Share of test sentences whose every target token is predicted right."""
    model.eval()
    with torch.no_grad():
        logits, _ = model(src, tgt[:, :-1])
    model.train()
    right = (logits.argmax(-1) == tgt[:, 1:]) | (tgt[:, 1:] == PAD)
    return right.all(-1).float().mean().item()


start = time.thread_time()
losses = train(model)
print(
    f"trained {STEPS} steps in {time.thread_time() - start:.1f} s of CPU"
)
floor = -(1 - SMOOTHING + SMOOTHING / V) * math.log(
    1 - SMOOTHING + SMOOTHING / V
) - (V - 1) * SMOOTHING / V * math.log(SMOOTHING / V)
last = sum(losses[-20:]) / 20
print(f"loss over the last 20 steps {last:.3f}; floor ℋ_ε = {floor:.3f}")
accuracy = teacher_forced_accuracy(model)
print(f"held-out sentences right, teacher-forced: {accuracy:.3f}")
# (The ranges quoted in these comments are of seeds 0-19.)
# Across seeds: first loss 2.65-2.90, last 0.001-0.042 above the floor
assert losses[0] > 2 and last < floor + 0.1
# Across seeds: 0.981-1.000 of the held-out sentences right
assert accuracy > 0.9

# %% caption="Left: the learning rate of the warm-up schedule, rising linearly for 60 steps and then decaying as one over the square root of the step. Right: the training loss (label-smoothed cross-entropy) per step, falling from more than 2 nats to just above the floor that label smoothing sets (dashed), which it cannot go below."
fig, (ax_lr, ax_loss) = plt.subplots(
    1, 2, figsize=(8.5, 3.2), layout="constrained"
)
steps = range(1, STEPS + 1)
ax_lr.plot(steps, [noam(s) for s in steps])
ax_lr.axvline(WARMUP, color="grey", ls=":", label=f"w = {WARMUP}")
ax_lr.set(xlabel="step", ylabel="learning rate", title="Warm-up schedule")
ax_lr.legend()
ax_loss.plot(steps, losses)
ax_loss.axhline(
    floor, color="grey", ls="--", label="floor set by label smoothing"
)
ax_loss.set(
    xlabel="step",
    ylabel="training loss (nats)",
    title="Label-smoothed loss",
)
legend = ax_loss.legend()

# %% [markdown]
# ## 4. Greedy decoding, with and without a cache
#
# At test time there is no target to shift: the decoder starts from
# `<s>`, predicts the most likely next digit, appends it, and repeats
# until it emits `</s>`. The **greedy** decoder below does this for a whole
# batch at once, in one of two ways:
#
# - **without a cache**, it re-runs the decoder on the whole prefix at
#   every step, as in training;
# - **with a cache**, each decoder layer keeps two
#   [`KVCache`](../../reference/kv_cache/#attention.kv_cache.KVCache)s:
#   one for its self-attention, to which each step appends the new
#   token's key and value, and one for its cross-attention, filled at the
#   first step with the encoder's keys and values, projected once and
#   reused at every later step. Each step then feeds only the newest
#   token, at its position `offset`.
#
# The two must give the same digits and, up to rounding, the same logits.


# %%
def new_caches(model):
    return [
        (attention.KVCache(), attention.KVCache()) for _ in model.decoder
    ]


def greedy(model, src, max_len=6, use_cache=True):
    """Greedy decoding: (B, <= max_len + 1) tokens and the logits used."""
    model.eval()
    with torch.no_grad():
        memory, padding = model.encode(src)
        out = torch.full((len(src), 1), BOS)
        caches = new_caches(model) if use_cache else None
        all_logits = []
        for step in range(max_len):
            if use_cache:  # only the newest token, at its position
                logits, _ = model.decode(
                    out[:, -1:], memory, padding, caches, offset=step
                )
            else:  # the whole prefix again
                logits, _ = model.decode(out, memory, padding)
            all_logits.append(logits[:, -1])
            out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
            if (out == EOS).any(dim=1).all():
                break
    model.train()
    return out, torch.stack(all_logits, dim=1)


start = time.thread_time()
cached, cached_logits = greedy(model, test_src)
cached_s = time.thread_time() - start
start = time.thread_time()
uncached, uncached_logits = greedy(model, test_src, use_cache=False)
uncached_s = time.thread_time() - start
assert torch.equal(cached, uncached)
torch.testing.assert_close(cached_logits, uncached_logits)
print(
    f"same {tuple(cached.shape)} tokens with and without the cache;"
    f" largest logit difference"
    f" {(cached_logits - uncached_logits).abs().max():.1e}"
)
print(
    f"CPU time: {cached_s:.2f} s with the cache, {uncached_s:.2f} s without"
)

greedy_digits = [digits(row) for row in cached]
greedy_right = [
    d == str(n) for d, n in zip(greedy_digits, test_numbers, strict=True)
]
greedy_accuracy = sum(greedy_right) / len(greedy_right)
print(
    f"greedy: {greedy_accuracy:.3f} of the held-out numbers exactly right"
)
for n, d in list(zip(test_numbers, greedy_digits, strict=True))[:4]:
    print(f"  {' '.join(number_words(n)):<42} -> {d}")
# Across seeds: 0.981-1.000 exactly right (seeds 0-19)
assert greedy_accuracy > 0.9

# %% [markdown]
# The printed CPU times are of this build's machine, for outputs of at
# most five tokens; the tutorial on
# [generating with a KV cache](../10_generating_with_a_kv_cache/) measures
# where it pays. What matters here is that it is exact.
#
# ## 5. Beam search
#
# Greedy decoding commits to the best token at each step; a sequence whose
# first token is second-best may still be the most likely overall. **Beam
# search** keeps the $k$ best partial outputs (the *beam*) by total
# log-probability: at each step it extends every one of them by every
# token, and keeps the $k$ best of the $k \cdot N_{\text{vocab}}$
# candidates. A finished output (one that has emitted `</s>`) stays in the
# beam with its score frozen.
#
# Each beam is a row of the batch, so the caches hold $B \cdot k$ rows.
# When the best candidates of a step come from different parents, the
# rows of every cache must be **reordered** to follow them: the cached
# keys and values of a row belong to the prefix it extends.


# %%
def reorder(caches, rows):
    """Keep (and duplicate) the cached rows `rows` of every cache."""
    for self_cache, cross_cache in caches:
        for cache in (self_cache, cross_cache):
            cache.key = cache.key[rows]
            cache.value = cache.value[rows]


def beam_search(model, src, k=4, max_len=6):
    """k beams per sentence, best first: tokens (B, k, <= max_len + 1) and
    their total log-probabilities (B, k)."""
    B = len(src)
    model.eval()
    with torch.no_grad():
        memory, padding = model.encode(src)
        # Every sentence k times: rows b*k .. b*k + k - 1 are its beams.
        memory = memory.repeat_interleave(k, dim=0)
        padding = padding.repeat_interleave(k, dim=0)
        out = torch.full((B * k, 1), BOS)
        score = torch.zeros(B, k)
        score[:, 1:] = -math.inf  # at first, only one distinct beam
        caches = new_caches(model)
        for step in range(max_len):
            logits, _ = model.decode(
                out[:, -1:], memory, padding, caches, offset=step
            )
            logp = logits[:, -1].log_softmax(-1)  # (B*k, V)
            done = (out == EOS).any(dim=1)
            # A finished beam may only "emit" padding, at no cost.
            logp[done] = -math.inf
            logp[done, PAD] = 0.0
            candidates = score.view(B * k, 1) + logp  # (B*k, V)
            score, best = candidates.view(B, k * V).topk(k, dim=1)
            parent = best // V + torch.arange(B).unsqueeze(1) * k
            rows = parent.flatten()
            out = torch.cat([out[rows], (best % V).view(B * k, 1)], dim=1)
            reorder(caches, rows)
            if (out == EOS).any(dim=1).all():
                break
    model.train()
    return out.view(B, k, -1), score  # best first


def sequence_log_prob(model, src, tokens):
    """Total log-probability the model gives tokens (one per sentence)."""
    tgt = tokens.clone()
    # Everything after </s> is padding, which the sum leaves out.
    after = (tgt == EOS).long().cumsum(1) - (tgt == EOS).long() > 0
    tgt[after] = PAD
    model.eval()
    with torch.no_grad():
        logits, _ = model(src, tgt[:, :-1])
    model.train()
    logp = logits.log_softmax(-1).gather(-1, tgt[:, 1:, None])[..., 0]
    return (logp * (tgt[:, 1:] != PAD)).sum(1)


all_beams, all_scores = beam_search(model, test_src)
beams, beam_score = all_beams[:, 0], all_scores[:, 0]  # the best beam
beam_digits = [digits(row) for row in beams]
beam_right = [
    d == str(n) for d, n in zip(beam_digits, test_numbers, strict=True)
]
beam_accuracy = sum(beam_right) / len(beam_right)
greedy_score = sequence_log_prob(model, test_src, cached)
# The scores beam search kept are the model's own log-probabilities.
torch.testing.assert_close(
    sequence_log_prob(model, test_src, beams), beam_score
)
changed = sum(
    g != b for g, b in zip(greedy_digits, beam_digits, strict=True)
)
print(f"beam search (k = 4): {beam_accuracy:.3f} exactly right")
print(f"outputs that differ from greedy: {changed} of {len(test_numbers)}")
# The beams of the least certain sentence: where the model hesitates.
unsure = int(all_scores[:, 0].argmin())
print(
    f"the four beams for '{' '.join(number_words(test_numbers[unsure]))}':"
)
for row, score in zip(all_beams[unsure], all_scores[unsure], strict=True):
    print(
        f"  {digits(row):>5}  log p = {score:7.3f}  p = {score.exp():.3f}"
    )
# Beam search never returns a less likely output than greedy here (it
# could: greedy's prefix can drop out of the beam) ...
# Across seeds: on all 2000 sentences for seeds 0-19
assert (beam_score >= greedy_score - 1e-5).all()
# ... and the two mostly agree on a task this regular.
# Across seeds: 0 to 4 of 2000 differ (seeds 0-19), at most 1 %
assert changed <= 0.01 * len(test_numbers)
assert (all_scores.diff(dim=1) <= 1e-6).all()  # beams come best first

# %% [markdown]
# On every held-out sentence, beam search returns an output at least as
# likely as greedy's (asserted). Whether it is also the *right* one is a
# separate question, since the model's most likely output can be wrong:
# both accuracies are printed. On a task this regular the model is rarely
# unsure, so beam and greedy agree on all but a handful of sentences at
# most (asserted: under 1 %); the beams of the sentence the model is least
# sure of show the runners-up it considered, with their probabilities. On
# real translation, where many outputs are plausible, beam search (with a
# length penalty, since every extra token lowers a log-probability) is
# the standard decoder.
#
# ## 6. Where the decoder looks: cross-attention as alignment
#
# Each digit of the output comes from one word of the input: in "four
# thousand two hundred seventeen" → `4217`, the `4` comes from "four",
# the `2` from "two", and both `1` and `7` from "seventeen". (A `0` that
# no word names, as in "four thousand seventeen" → `4017`, comes from no
# word and is left out.) If the model has learned the task as a
# translation, its cross-attention should show this **alignment**: the
# decoder position that *predicts* a digit should read the word it comes
# from.
#
# The function below gives, for each digit of a number, the index of its
# word. For every cross-attention head we then measure, over the held-out
# numbers, how often the position predicting a digit puts its largest
# weight on that word.


# %%
def source_word(n):
    """For each digit of n, the index of the word it comes from (or None)."""
    words = number_words(n)
    origin = [None] * len(str(n))
    for place, multiplier in ((4, "thousand"), (3, "hundred")):
        if multiplier in words:  # "four thousand": 4 <- "four"
            origin[-place] = words.index(multiplier) - 1
    last = len(words) - 1
    if words[last] in TEENS or words[last] in TENS:
        origin[-2:] = [last, last]  # "seventeen" -> 17, "ninety" -> 90
    elif words[last] in ONES:
        origin[-1] = last
        if last > 0 and words[last - 1] in TENS:
            origin[-2] = last - 1  # "twenty one" -> 21
    return origin


for n in (4217, 4017, 90, 300, 0):
    words = number_words(n)
    pairs = [
        f"{d}<-{words[o] if o is not None else '-'}"
        for d, o in zip(str(n), source_word(n), strict=True)
    ]
    print(f"{n:>5}: {' '.join(pairs)}")
assert source_word(4217) == [0, 2, 4, 4]
assert source_word(4017) == [0, None, 2, 2]
assert source_word(90) == [0, 0] and source_word(300) == [0, None, None]
assert source_word(0) == [0] and source_word(21) == [0, 1]

# %% [markdown]
# Now the maps. The decoder position that predicts digit $j$ is position
# $j$ of its input (`<s>` predicts the first digit).

# %%
model.eval()
with torch.no_grad():
    _, maps = model(test_src, test_tgt[:, :-1])  # (layers, B, H, T, S)
model.train()
looks_at = maps.argmax(-1)  # (layers, B, H, T): each query's top word
hits = torch.zeros(maps.shape[0], maps.shape[2])
total = 0
for b, n in enumerate(test_numbers):
    for j, word in enumerate(source_word(n)):
        if word is not None:
            hits += looks_at[:, b, :, j] == word
            total += 1
alignment = hits / total  # (layers, H)
for layer in range(alignment.shape[0]):
    row = ", ".join(f"{a:.2f}" for a in alignment[layer])
    print(f"decoder layer {layer}, heads 0-3: {row}")
best = divmod(int(alignment.argmax()), alignment.shape[1])
print(
    f"best aligned head: layer {best[0]}, head {best[1]},"
    f" {alignment[best]:.3f} of {total} digits"
)
# Which head aligns best differs from seed to seed; that one does not.
# Across seeds: 0.938-0.994 of the digits (seeds 0-19)
assert alignment[best] > 0.85

# %% caption="Cross-attention weights of the best-aligned head (the cell above names it) for four held-out numbers, one of each shape: rows are the decoder positions (labelled with the digit each predicts, and </s>), columns the source words, colour from 0 to 1. Over all held-out numbers, this head puts its largest weight on the word a digit comes from for more than 85 % of the digits (asserted above); the cell prints how the digits of these four fare. A 0 that no word names has no word to read."
kinds = [  # one held-out number of each shape
    lambda n: len(number_words(n)) == 6,  # thousands, hundreds, tens, ones
    lambda n: n >= 1000 and 10 <= n % 100 < 20 and n // 100 % 10 == 0,
    lambda n: 100 <= n < 1000 and n % 10 == 0 and n % 100 >= 20,
    lambda n: 20 <= n < 100 and n % 10,
]
examples = [next(n for n in test_numbers if kind(n)) for kind in kinds]
# These four in this run, counted and not asserted: another seed, or
# another processor, trains a model that may miss one of them.
aligned, exceptions = 0, []
for n in examples:
    b = test_numbers.index(n)
    words = number_words(n)
    for j, word in enumerate(source_word(n)):
        if word is None:
            continue
        top = int(looks_at[best[0], b, best[1], j])
        if top == word:
            aligned += 1
        else:
            exceptions.append(
                f"digit {j + 1} of {n} reads '{words[top]}',"
                f" not '{words[word]}'"
            )
shown = aligned + len(exceptions)
print(
    f"In this run, {'all ' if not exceptions else ''}{aligned}"
    f"{'' if not exceptions else f' of the {shown}'} digits of these"
    " four numbers that come from a word put their largest weight on it"
    + (
        f" (the exceptions: {'; '.join(exceptions)})."
        if exceptions
        else "."
    )
)
fig, axes = plt.subplots(
    1, len(examples), figsize=(10, 3.2), layout="constrained"
)
for ax, n in zip(axes, examples, strict=True):
    b = test_numbers.index(n)
    words = number_words(n)
    predicted = [*str(n), "</s>"]
    weights = maps[
        best[0], b, best[1], : len(predicted), : len(words)
    ].numpy()
    image = ax.imshow(weights, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(words)), words, rotation=60, ha="right")
    ax.set_yticks(range(len(predicted)), predicted)
    ax.set_title(str(n))
axes[0].set_ylabel("predicts")
colorbar = fig.colorbar(image, ax=axes, label="weight", shrink=0.8)

# %% [markdown]
# Every cross-attention head of both decoder layers for the first of these
# numbers, to explore: the digits the decoder predicts on the left, the
# source words on the right (the head view of
# [`attention.HeadView`](../../reference/viz/#attention.viz.HeadView), given
# the words as `key_tokens`). Put the best-aligned head beside the others
# and hover over (or Tab to) a digit.

# %%
n = examples[0]
b = test_numbers.index(n)
words, predicted = number_words(n), [*str(n), "</s>"]
attention.HeadView(
    maps[:, b, :, : len(predicted), : len(words)],  # (layers, H, T, S)
    predicted,
    key_tokens=words,
    layer_names=[f"decoder layer {i}" for i in range(maps.shape[0])],
)

# %% [markdown]
# ## 7. Pre-LN and Post-LN, with and without warm-up
#
# Why did the paper need a warm-up at all? Xiong et al. (2020) showed
# that in the Post-LN arrangement the gradients of the parameters near
# the output are large at initialisation, so a full learning rate from
# the first step can throw training off; Pre-LN keeps an identity path
# through every layer and its gradients well-behaved, and trains without
# a warm-up. We compare four runs of 100 steps, Pre-LN and Post-LN, with
# the schedule above and with its peak rate from step 1, by their
# training loss over the last 20 of those steps. The first 100 steps of
# section 3's model are one of them (same seeds, same schedule), so three
# runs are new.

# %%
SHORT = 100


def recent_loss(trace):
    return sum(trace[SHORT - 20 : SHORT]) / 20


results = {"Pre-LN, warm-up": recent_loss(losses)}  # section 3's run
start = time.thread_time()
for pre_norm, warmup in ((True, 0), (False, WARMUP), (False, 0)):
    torch.manual_seed(SEED)
    candidate = Transformer(pre_norm=pre_norm)
    name = ("Pre-LN" if pre_norm else "Post-LN") + (
        ", warm-up" if warmup else ", no warm-up"
    )
    results[name] = recent_loss(
        train(candidate, steps=SHORT, warmup=warmup)
    )
cpu_seconds = time.thread_time() - start
print(f"three models of {SHORT} steps in {cpu_seconds:.1f} s of CPU")
print(f"training loss over steps {SHORT - 19}-{SHORT}:")
for name, loss in results.items():
    print(f"  {name:<20} {loss:.3f}")
print(
    f"(floor {floor:.3f}; a uniform guess scores ln {V} = {math.log(V):.3f})"
)
# The three others train; Post-LN at the full rate from step 1 lags far
# behind them. (Ranges of seeds 0-19 and 22-41.)
trained = ("Pre-LN, warm-up", "Pre-LN, no warm-up", "Post-LN, warm-up")
for name in trained:
    # Across seeds: 0.56-0.87 nats
    assert results[name] < 1.0, name
behind = results["Post-LN, no warm-up"] - max(results[n] for n in trained)
print(
    f"Post-LN without warm-up is {behind:.2f} nats behind the worst of them"
)
# Across seeds: 0.36-1.79 nats behind, at 1.01-2.41 nats
assert behind > 0.2

# %% [markdown]
# Three of the four runs are within half a nat of the floor after 100
# steps (asserted: below 1 nat); Post-LN at the full rate from the first
# step is far behind them (asserted: more than 0.2 nats above each). Over
# seeds 0-19 and 22-41, on ATen's portable kernels, it stayed at 1.5
# nats or above in all runs but one, where it had begun to train and was
# still 0.36 nats behind the slowest of the others (seed 19: 1.01 nats). The
# warm-up is what makes the original arrangement trainable; Pre-LN trains
# without it, which is one reason most models since GPT-2 normalise before
# each sub-layer. (How close Pre-LN gets without the warm-up in 100 steps
# varies with the seed; that it trains does not.)
#
# ## Summary
#
# - An encoder-decoder Transformer is a few dozen lines around the
#   package's `MultiHeadAttention`: self-attention with a padding mask in
#   the encoder; causal self-attention and cross-attention in the decoder.
# - Teacher forcing trains every position at once on the target shifted
#   right; label smoothing puts a floor under the loss; the warm-up
#   schedule ramps the learning rate up before decaying it.
# - Decoding one token at a time with a KV cache for self- and
#   cross-attention gives exactly the tokens of re-running the whole
#   prefix; beam search reorders the caches to follow its beams and never
#   returned a less likely output than greedy.
# - One cross-attention head (which one varies with the seed) aligns more
#   than 85% of the digits with the word they come from, measured over
#   the held-out numbers, not read off one picture.
# - Post-LN needs the warm-up; Pre-LN trains without it.
#
# ## References
#
# - Vaswani et al., *Attention Is All You Need*, NeurIPS 2017.
# - Rush, *The Annotated Transformer*, 2018 (and its 2022 update).
# - Szegedy et al., *Rethinking the Inception Architecture for Computer
#   Vision*, CVPR 2016 (label smoothing).
# - Xiong et al., *On Layer Normalization in the Transformer
#   Architecture*, ICML 2020.
#
# **Where next:** [cross-attention](../06_cross_attention/) on its own,
# the [KV cache](../10_generating_with_a_kv_cache/) measured, and
# [self-, cross- and causal attention](../../concepts/self-cross-causal/)
# side by side.

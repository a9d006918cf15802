r"""Multi-head latent attention (MLA): a KV cache of one small latent per token.

Multi-head attention caches a key and a value per head: $2 H D$ numbers per token and
layer. Grouped-query and multi-query attention shrink that by sharing heads
($2 H_{kv} D$). DeepSeek-V2's MLA (DeepSeek-AI 2024) keeps every head distinct and
caches a *compressed latent* instead, from which all heads' keys and values are
up-projected.

**Latent keys and values.** Token $j$ with hidden state $x_j \in \mathbb{R}^E$ is
compressed into a latent of $d_c \ll H D$ numbers, normalised by RMSNorm, and each head
$h$ reads its key and value from it with its own up-projection:

$$
c_j = \operatorname{RMSNorm}(W^{DKV} x_j) \in \mathbb{R}^{d_c}, \qquad
k^C_{j,h} = W^{UK}_h c_j \in \mathbb{R}^{D_n}, \qquad
v_{j,h} = W^{UV}_h c_j \in \mathbb{R}^{D_v}.
$$

The query may be compressed the same way (a smaller activation in training, no effect
on the cache): $c^Q_i = \operatorname{RMSNorm}(W^{DQ} x_i)$,
$q^C_{i,h} = W^{UQ}_h c^Q_i$; or projected directly, $q^C_{i,h} = W^{Q}_h x_i$.

**Decoupled RoPE.** The score of query $i$ for key $j$ in head $h$ is
$q^C_{i,h} \cdot k^C_{j,h} = (q^C_{i,h})^\top W^{UK}_h c_j
= \bigl((W^{UK}_h)^\top q^C_{i,h}\bigr)^\top c_j$: the up-projection of the key can be
moved onto the query (*absorbed*), and the scores taken against the cached latents
directly. Rotating the keys with RoPE would break this: with $k_{j,h} = R_j W^{UK}_h
c_j$ the score is $(q^C_{i,h})^\top R_i^\top R_j W^{UK}_h c_j = (q^C_{i,h})^\top
R_{j-i} W^{UK}_h c_j$, and the matrix between the query and $c_j$ now depends on the
distance $j - i$: no single matrix can be folded into the query, and the keys of every
cached token would have to be rebuilt at every step. MLA therefore carries the position
in a few extra dimensions of its own, $D_r$ per head for the query and one key shared by
all heads:

$$
q^R_{i,h} = \operatorname{RoPE}_i(W^{QR}_h c^Q_i) \in \mathbb{R}^{D_r}, \qquad
k^R_j = \operatorname{RoPE}_j(W^{KR} x_j) \in \mathbb{R}^{D_r},
$$

$$
z_{ij,h} = \frac{q^C_{i,h} \cdot k^C_{j,h} + q^R_{i,h} \cdot k^R_j}{\sqrt{D_n + D_r}},
\qquad
o_{i,h} = \sum_j \operatorname{softmax}_j(z_{ij,h})\, v_{j,h}, \qquad
u_i = W^O [o_{i,1}; \dots; o_{i,H}].
$$

The cache holds $c_j$ and $k^R_j$ only: $d_c + D_r$ numbers per token and layer
(DeepSeek-V2: $512 + 64 = 576$, against $2 \cdot 128 \cdot 128 = 32768$ for multi-head
attention with its 128 heads of size 128).

**Absorbed projections.** With $\bar q_{i,h} = (W^{UK}_h)^\top q^C_{i,h} \in
\mathbb{R}^{d_c}$, the scores are $(\bar q_{i,h} \cdot c_j + q^R_{i,h} \cdot k^R_j) /
\sqrt{D_n + D_r}$, and since the values are linear in $c_j$,
$o_{i,h} = W^{UV}_h \sum_j p_{ij,h}\, c_j$: the weighted sum runs over the latents and
$W^{UV}_h$ is applied once per query, after it (a deployment folds it into $W^O$).
Keys and values are never expanded. This is multi-query attention with one shared key
head $[c_j; k^R_j]$ of size $d_c + D_r$ and one shared value head $c_j$ of size $d_c$,
scaled by $1/\sqrt{D_n + D_r}$ rather than $1/\sqrt{d_c + D_r}$: the form a decoding
kernel for MLA computes.
[`MultiHeadLatentAttention`][attention.latent.MultiHeadLatentAttention] computes both
forms (``absorbed=False`` or ``True``), and they agree to rounding.

References:
    - DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts
      Language Model", 2024 (section 2.1). [arXiv:2405.04434](https://arxiv.org/abs/2405.04434)
    - DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024.
      [arXiv:2412.19437](https://arxiv.org/abs/2412.19437)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from attention._checks import (
    check_base,
    check_choice,
    check_flag,
    check_positions,
    check_rope_scaling,
    check_same_dtype_and_device,
    check_size,
    check_tensor,
    shape_str,
)
from attention.functional import scaled_dot_product_attention
from attention.kv_cache import extend_sequence
from attention.masks import causal_mask
from attention.normalization import rms_norm
from attention.positional import RotaryPairing, apply_rotary

__all__ = ["LatentCache", "MultiHeadLatentAttention", "kv_cache_numbers_per_token"]


class LatentCache:
    r"""What MLA caches per token: the latent $c_j$ and the shared RoPE key $k^R_j$.

    Stores ``latent`` of shape ``(B, S, d_c)`` (after its RMSNorm) and ``rope_key`` of
    shape ``(B, S, D_r)`` (after RoPE), and grows along ``S``: $d_c + D_r$ numbers per
    token, whatever the number of heads. Pass one instance per layer to
    [`MultiHeadLatentAttention.forward`][attention.latent.MultiHeadLatentAttention.forward]
    (``cache=``). Transformers' DeepSeek-V3 caches the same two tensors, as
    ``(B, 1, S, d_c)`` and ``(B, 1, S, D_r)``.

    Appending concatenates, as [`KVCache`][attention.kv_cache.KVCache] does.

    Examples:
        >>> import torch
        >>> from attention import LatentCache
        >>> cache = LatentCache()
        >>> c, k_rope = cache.append(torch.zeros(2, 3, 16), torch.zeros(2, 3, 4))
        >>> c, k_rope = cache.append(torch.ones(2, 1, 16), torch.ones(2, 1, 4))
        >>> len(cache), tuple(c.shape), tuple(k_rope.shape)
        (4, (2, 4, 16), (2, 4, 4))
        >>> cache.numbers_per_token, cache.nbytes  # 16 + 4; 2 * 4 * 20 float32 numbers
        (20, 640)
    """

    def __init__(self) -> None:
        self.latent: Tensor | None = None
        self.rope_key: Tensor | None = None

    def __len__(self) -> int:
        """Number of cached positions ``S``."""
        return 0 if self.latent is None else self.latent.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tensors (0 when empty)."""
        return sum(t.nbytes for t in (self.latent, self.rope_key) if t is not None)

    @property
    def numbers_per_token(self) -> int:
        r"""Numbers cached per token and sequence, $d_c + D_r$ (0 when empty)."""
        if self.latent is None or self.rope_key is None:
            return 0
        return self.latent.shape[-1] + self.rope_key.shape[-1]

    def append(self, latent: Tensor, rope_key: Tensor) -> tuple[Tensor, Tensor]:
        """Append new latents and RoPE keys along the sequence axis and return all of them.

        [`extended`][attention.latent.LatentCache.extended], then storing its result.

        Args:
            latent: The new positions' latents, as for ``extended``.
            rope_key: The new positions' RoPE keys, as for ``extended``.

        Returns:
            ``(latent, rope_key)`` of every position now cached.

        Raises:
            TypeError: On a dtype mismatch, as ``extended`` raises it.
            ValueError: On a shape mismatch, as ``extended`` raises it.
        """
        self.latent, self.rope_key = self.extended(latent, rope_key)
        return self.latent, self.rope_key

    def extended(self, latent: Tensor, rope_key: Tensor) -> tuple[Tensor, Tensor]:
        """The cached latents and RoPE keys with the new ones appended, without storing them.

        A layer that may still fail after reading the cache calls this first and stores
        the result once it has succeeded, so that a failed call leaves the cache as it
        was.

        Args:
            latent: ``(B, L_new, d_c)`` normalised latents of the new positions.
            rope_key: ``(B, L_new, D_r)`` rotated RoPE keys of the new positions.

        Returns:
            ``(latent, rope_key)`` of every cached position: ``(B, S, d_c)`` and
                ``(B, S, D_r)`` with ``S`` the total length so far.

        Raises:
            TypeError: If the inputs are not floating tensors of one dtype, or do not
                match the dtype of what is cached.
            ValueError: If shapes disagree with each other or with the cache.
        """
        latent = check_tensor("latent", latent, min_ndim=3)
        rope_key = check_tensor("rope_key", rope_key, min_ndim=3)
        check_same_dtype_and_device(latent=latent, rope_key=rope_key)
        if latent.ndim != 3 or rope_key.ndim != 3 or latent.shape[:-1] != rope_key.shape[:-1]:
            raise ValueError(
                "latent and rope_key must be (B, L_new, d_c) and (B, L_new, D_r); "
                f"got latent {shape_str(latent)}, rope_key {shape_str(rope_key)}"
            )
        return (
            extend_sequence("latent", "(B, S, d_c)", self.latent, latent),
            extend_sequence("rope_key", "(B, S, D_r)", self.rope_key, rope_key),
        )

    def reset(self) -> None:
        """Forget every cached position (start a new sequence)."""
        self.latent = None
        self.rope_key = None


def kv_cache_numbers_per_token(
    *,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    value_head_dim: int | None = None,
    kv_latent_dim: int | None = None,
    rope_head_dim: int | None = None,
) -> int:
    r"""Numbers a KV cache holds per token and layer, for MHA, GQA, MQA or MLA.

    - Multi-head, grouped-query and multi-query attention cache a key and a value for
      each of their $H_{kv}$ key/value heads: $2 H_{kv} D$ numbers, or
      $H_{kv} (D + D_v)$ when values have their own size. $H_{kv} = H$ for multi-head,
      $1 < H_{kv} < H$ for grouped-query, $H_{kv} = 1$ for multi-query attention. Pass
      ``num_kv_heads`` and ``head_dim`` (and ``value_head_dim``).
    - Multi-head latent attention caches its latent and the shared RoPE key:
      $d_c + D_r$ numbers, independent of the number of heads. Pass ``kv_latent_dim``
      and ``rope_head_dim``.

    Multiply by the bytes per number and the number of layers for the bytes per token
    of a model: DeepSeek-V2 (60 layers, bfloat16) caches $576 \cdot 2 \cdot 60$ bytes,
    67.5 KiB, per token, where multi-head attention with its 128 heads of size 128
    would cache 3840 KiB.

    Args:
        num_kv_heads: $H_{kv}$, the number of key/value heads (MHA, GQA, MQA).
        head_dim: $D$, the key size per head (MHA, GQA, MQA).
        value_head_dim: $D_v$, the value size per head; defaults to ``head_dim``.
        kv_latent_dim: $d_c$, MLA's latent size (``kv_lora_rank``).
        rope_head_dim: $D_r$, MLA's RoPE key size (``qk_rope_head_dim``); may be 0.

    Returns:
        The number of cached numbers per token and layer.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is negative (or 0 where it cannot be), or the arguments
            mix the two kinds of cache or leave one incomplete.

    Examples:
        >>> from attention import kv_cache_numbers_per_token
        >>> kv_cache_numbers_per_token(num_kv_heads=128, head_dim=128)  # MHA
        32768
        >>> kv_cache_numbers_per_token(num_kv_heads=8, head_dim=128)  # GQA, 8 groups
        2048
        >>> kv_cache_numbers_per_token(num_kv_heads=1, head_dim=128)  # MQA
        256
        >>> kv_cache_numbers_per_token(kv_latent_dim=512, rope_head_dim=64)  # MLA
        576
    """
    heads_given = {
        name: value
        for name, value in (
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("value_head_dim", value_head_dim),
        )
        if value is not None
    }
    if kv_latent_dim is not None or rope_head_dim is not None:
        if heads_given:
            raise ValueError(
                "pass either num_kv_heads and head_dim (MHA, GQA, MQA) or kv_latent_dim "
                f"and rope_head_dim (MLA), not both; got {sorted(heads_given)} with "
                f"kv_latent_dim={kv_latent_dim}, rope_head_dim={rope_head_dim}"
            )
        if kv_latent_dim is None or rope_head_dim is None:
            raise ValueError(
                "MLA needs both kv_latent_dim and rope_head_dim; got "
                f"kv_latent_dim={kv_latent_dim}, rope_head_dim={rope_head_dim}"
            )
        return check_size("kv_latent_dim", kv_latent_dim, minimum=1) + check_size(
            "rope_head_dim", rope_head_dim
        )
    if num_kv_heads is None or head_dim is None:
        raise ValueError(
            "pass num_kv_heads and head_dim (MHA, GQA, MQA) or kv_latent_dim and "
            f"rope_head_dim (MLA); got num_kv_heads={num_kv_heads}, head_dim={head_dim}"
        )
    heads = check_size("num_kv_heads", num_kv_heads, minimum=1)
    key_size = check_size("head_dim", head_dim, minimum=1)
    value_size = (
        key_size if value_head_dim is None else check_size("value_head_dim", value_head_dim)
    )
    return heads * (key_size + value_size)


class MultiHeadLatentAttention(nn.Module):
    r"""Multi-head latent attention (DeepSeek-V2, V3): causal self-attention, latent KV cache.

    The equations are in the [module's description][attention.latent]. With the
    weights of a Transformers ``DeepseekV3Attention`` (table below) it returns that
    module's output, to float32 rounding, for either RoPE layout; see
    ``tests/test_latent.py``.

    Sizes, in the notation of the module's description and of Transformers'
    ``DeepseekV3Config``:

    | argument | symbol | ``DeepseekV3Config`` | DeepSeek-V2 |
    |---|---|---|---|
    | ``embed_dim`` | $E$ | ``hidden_size`` | 5120 |
    | ``num_heads`` | $H$ | ``num_attention_heads`` | 128 |
    | ``kv_latent_dim`` | $d_c$ | ``kv_lora_rank`` | 512 |
    | ``q_latent_dim`` | $d_c'$ | ``q_lora_rank`` (``None``: no compression) | 1536 |
    | ``nope_head_dim`` | $D_n$ | ``qk_nope_head_dim`` | 128 |
    | ``rope_head_dim`` | $D_r$ | ``qk_rope_head_dim`` | 64 |
    | ``value_head_dim`` | $D_v$ | ``v_head_dim`` | 128 |
    | ``rope_base`` | | ``rope_parameters["rope_theta"]`` | 10000 |
    | ``rope_pairing`` | | ``rope_interleave``: True is ``"interleaved"`` | |
    | ``rope_scaling`` | | the rest of ``rope_parameters`` | YaRN |
    | ``bias`` | | ``attention_bias`` | False |

    Parameters, and the Transformers ``DeepseekV3Attention`` names they load from:

    | parameter | shape | paper | Transformers |
    |---|---|---|---|
    | ``q_proj`` | $E \to H (D_n + D_r)$ | $W^Q$, $W^{QR}$ | ``q_proj`` |
    | ``q_down_proj`` | $E \to d_c'$ | $W^{DQ}$ | ``q_a_proj`` |
    | ``q_norm_weight`` | $(d_c',)$ | RMSNorm gain | ``q_a_layernorm.weight`` |
    | ``q_up_proj`` | $d_c' \to H (D_n + D_r)$ | $W^{UQ}$, $W^{QR}$ | ``q_b_proj`` |
    | ``kv_down_proj`` | $E \to d_c + D_r$ | $W^{DKV}$, $W^{KR}$ | ``kv_a_proj_with_mqa`` |
    | ``kv_norm_weight`` | $(d_c,)$ | RMSNorm gain | ``kv_a_layernorm.weight`` |
    | ``kv_up_proj`` | $d_c \to H (D_n + D_v)$ | $W^{UK}$, $W^{UV}$ | ``kv_b_proj`` |
    | ``out_proj`` | $H D_v \to E$ | $W^O$ | ``o_proj`` |

    ``q_proj`` exists when ``q_latent_dim`` is ``None``, the three ``q_*`` others
    otherwise. The outputs of the query projections hold, per head, the $D_n$
    non-rotated features then the $D_r$ rotated ones; ``kv_down_proj``'s hold $c$
    (before its norm) then $k^R$ (before RoPE); ``kv_up_proj``'s hold, per head, the
    key's $D_n$ features then the value's $D_v$. ``bias`` adds biases to
    ``q_down_proj``, ``kv_down_proj`` and ``out_proj``, as ``attention_bias`` does
    in Transformers; the up-projections never have one (they are the ones absorbed).

    The softmax scale is $1/\sqrt{D_n + D_r}$, multiplied, as in Transformers, by
    $(0.1\, m_\text{all} \ln \gamma + 1)^2$ when ``rope_scaling`` is a YaRN rule with
    ``mscale_all_dim`` $m_\text{all}$ and ``factor`` $\gamma > 1$ (DeepSeek-V3's long
    context; $\gamma$ is the context-extension factor of
    [RoPE, derived](../concepts/rope.md#stretching-the-context)); RoPE itself then
    scales $q^R$ and $k^R$ by YaRN's attention factor, as
    [`apply_rotary`][attention.positional.apply_rotary] does.

    Args:
        embed_dim: Model width $E$.
        num_heads: Number of heads $H$.
        kv_latent_dim: Size $d_c$ of the cached latent.
        q_latent_dim: Size $d_c'$ of the query's latent; ``None`` projects the query
            directly from $x$.
        nope_head_dim: Size $D_n$ of each head's non-rotated query and key part.
        rope_head_dim: Size $D_r$ (even) of each head's rotated query part and of the
            shared rotated key.
        value_head_dim: Size $D_v$ of each head's value.
        rope_base: RoPE's base (``rope_theta``).
        rope_pairing: ``"interleaved"`` (adjacent features, DeepSeek's checkpoints,
            ``rope_interleave=True``) or ``"half"`` (feature $i$ with $i + D_r/2$).
        rope_scaling: A context-extension rule for RoPE, as in
            [`rope_frequencies`][attention.positional.rope_frequencies]; ``None`` for
            plain RoPE.
        eps: The RMSNorms' epsilon (Transformers leaves them at their default,
            1e-6, whatever ``rms_norm_eps`` says).
        bias: Whether ``q_down_proj``, ``kv_down_proj`` and ``out_proj`` have biases.
        device: Device of the parameters.
        dtype: Dtype of the parameters.

    Raises:
        TypeError: If a size is not an int, ``bias`` is not a bool, or ``rope_base``
            or ``eps`` is not a number.
        ValueError: If a size is not positive (``nope_head_dim`` may be 0),
            ``rope_head_dim`` is odd, ``rope_pairing`` is unknown, ``rope_scaling``
            is invalid, or ``eps`` is negative.

    Examples:
        >>> import torch
        >>> from attention import LatentCache, MultiHeadLatentAttention
        >>> _ = torch.manual_seed(0)
        >>> mla = MultiHeadLatentAttention(
        ...     embed_dim=48, num_heads=3, kv_latent_dim=16, q_latent_dim=12,
        ...     nope_head_dim=8, rope_head_dim=4, value_head_dim=6,
        ... )
        >>> x = torch.randn(2, 5, 48)  # (B, L, E)
        >>> out = mla(x)
        >>> tuple(out.shape)
        (2, 5, 48)
        >>> torch.allclose(mla(x, absorbed=True), out, atol=1e-6)
        True
        >>> # Decoding token by token with a cache gives the same outputs, and the
        >>> # cache holds d_c + D_r = 20 numbers per token.
        >>> cache = LatentCache()
        >>> steps = [mla(x[:, :3], cache=cache)]  # prefill 3 tokens
        >>> steps += [mla(x[:, t : t + 1], cache=cache) for t in (3, 4)]
        >>> torch.allclose(torch.cat(steps, dim=1), out, atol=1e-6)
        True
        >>> len(cache), cache.numbers_per_token
        (5, 20)
        >>> # A per-head cache of the keys and values it expands to: H (D_n + D_r + D_v)
        >>> from attention import kv_cache_numbers_per_token
        >>> kv_cache_numbers_per_token(num_kv_heads=3, head_dim=8 + 4, value_head_dim=6)
        54
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_latent_dim: int,
        q_latent_dim: int | None = None,
        nope_head_dim: int,
        rope_head_dim: int,
        value_head_dim: int,
        rope_base: float = 10000.0,
        rope_pairing: RotaryPairing = "interleaved",
        rope_scaling: dict[str, Any] | None = None,
        eps: float = 1e-6,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.embed_dim = check_size("embed_dim", embed_dim, minimum=1)
        self.num_heads = check_size("num_heads", num_heads, minimum=1)
        self.kv_latent_dim = check_size("kv_latent_dim", kv_latent_dim, minimum=1)
        self.q_latent_dim = (
            None if q_latent_dim is None else check_size("q_latent_dim", q_latent_dim, minimum=1)
        )
        self.nope_head_dim = check_size("nope_head_dim", nope_head_dim)
        self.rope_head_dim = check_size("rope_head_dim", rope_head_dim, minimum=2)
        if self.rope_head_dim % 2:
            raise ValueError(
                f"rope_head_dim must be even (RoPE rotates pairs of features); got {rope_head_dim}"
            )
        self.value_head_dim = check_size("value_head_dim", value_head_dim, minimum=1)
        self.rope_base = check_base(rope_base)
        check_choice("rope_pairing", rope_pairing, ("interleaved", "half"))
        self.rope_pairing: RotaryPairing = rope_pairing
        check_rope_scaling(rope_scaling, self.rope_head_dim)
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise TypeError(f"eps must be a float; got {type(eps).__name__}")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0; got {eps}")
        self.eps = float(eps)
        check_flag("bias", bias)

        H, Dn, Dr, Dv = self.num_heads, self.nope_head_dim, self.rope_head_dim, self.value_head_dim
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.q_proj: nn.Linear | None = None
        self.q_down_proj: nn.Linear | None = None
        self.q_norm_weight: nn.Parameter | None = None
        self.q_up_proj: nn.Linear | None = None
        if self.q_latent_dim is None:
            self.q_proj = nn.Linear(embed_dim, H * (Dn + Dr), bias=False, **factory)
        else:
            self.q_down_proj = nn.Linear(embed_dim, self.q_latent_dim, bias=bias, **factory)
            self.q_norm_weight = nn.Parameter(torch.ones(self.q_latent_dim, **factory))
            self.q_up_proj = nn.Linear(self.q_latent_dim, H * (Dn + Dr), bias=False, **factory)
        self.kv_down_proj = nn.Linear(embed_dim, self.kv_latent_dim + Dr, bias=bias, **factory)
        self.kv_norm_weight = nn.Parameter(torch.ones(self.kv_latent_dim, **factory))
        self.kv_up_proj = nn.Linear(self.kv_latent_dim, H * (Dn + Dv), bias=False, **factory)
        self.out_proj = nn.Linear(H * Dv, embed_dim, bias=bias, **factory)

    @property
    def scale(self) -> float:
        r"""The softmax scale: $1/\sqrt{D_n + D_r}$, times YaRN's ``mscale_all_dim`` term."""
        scale = 1.0 / math.sqrt(self.nope_head_dim + self.rope_head_dim)
        scaling = self.rope_scaling or {}
        # As Transformers' yarn_apply_mscale: any rule but "default" with mscale_all_dim.
        if scaling.get("rope_type", "default") != "default" and scaling.get("mscale_all_dim"):
            factor = float(scaling["factor"])
            if factor > 1:
                mscale = 0.1 * float(scaling["mscale_all_dim"]) * math.log(factor) + 1.0
                scale *= mscale * mscale
        return scale

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        cache: LatentCache | None = None,
        absorbed: bool = False,
    ) -> Tensor:
        r"""Causal self-attention over ``x``, after whatever ``cache`` holds.

        The $L$ new tokens are the last positions of the sequence: query $i$ sees the
        ``len(cache)`` cached tokens and the new ones up to itself (a causal mask
        aligned bottom-right). Their latents and RoPE keys are appended to ``cache``
        once the call has succeeded.

        - ``absorbed=False``: the cached latents are up-projected into every head's
          keys and values, $k_{j,h} = [W^{UK}_h c_j; k^R_j]$ and
          $v_{j,h} = W^{UV}_h c_j$, then ordinary attention.
        - ``absorbed=True``: $W^{UK}_h$ is folded into the query,
          $\bar q_{i,h} = (W^{UK}_h)^\top q^C_{i,h}$, the scores are
          $\bar q_{i,h} \cdot c_j + q^R_{i,h} \cdot k^R_j$, and $W^{UV}_h$ is
          applied after the weighted sum of latents. Same result, no expanded keys
          or values.

        Args:
            x: ``(B, L, E)``, the new tokens' hidden states, in the parameters' dtype.
            positions: Integer positions of the new tokens for RoPE, ``(L,)`` or
                ``(B, L)``; defaults to ``len(cache), ..., len(cache) + L - 1``. They
                set the rotations only, not the mask.
            cache: A [`LatentCache`][attention.latent.LatentCache] of the earlier
                tokens, or ``None``.
            absorbed: Compute the absorbed form (see above).

        Returns:
            ``(B, L, E)``.

        Raises:
            TypeError: If ``x`` is not a floating tensor of the parameters' dtype,
                ``positions`` is not an integer tensor, ``cache`` is not a
                ``LatentCache``, or ``absorbed`` is not a bool.
            ValueError: If ``x`` is not ``(B, L, E)`` with this module's $E$,
                ``positions`` does not broadcast to ``(B, L)``, or the cache holds
                another batch size or other sizes.
        """
        x = check_tensor("x", x, min_ndim=0)  # the (B, L, E) check below says more
        weight = self.kv_down_proj.weight
        if x.ndim != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x must be (B, L, E) with E = embed_dim = {self.embed_dim}; got {shape_str(x)}"
            )
        if x.dtype != weight.dtype:
            raise TypeError(f"x must have the parameters' dtype {weight.dtype}; got x {x.dtype}")
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"cache must be a LatentCache or None; got {type(cache).__name__}")
        check_flag("absorbed", absorbed)
        B, L, _ = x.shape
        past = 0 if cache is None else len(cache)
        if positions is None:
            positions = torch.arange(past, past + L, device=x.device)  # (L,)
        positions = check_positions(positions, x)  # broadcasts to (B, L)
        H, Dn, Dr = self.num_heads, self.nope_head_dim, self.rope_head_dim

        if self.q_proj is not None:
            q = self.q_proj(x)  # (B, L, H (Dn + Dr))
        else:
            assert self.q_down_proj is not None and self.q_up_proj is not None
            q_latent = rms_norm(self.q_down_proj(x), self.q_norm_weight, eps=self.eps)
            q = self.q_up_proj(q_latent)  # (B, L, H (Dn + Dr))
        q = q.view(B, L, H, Dn + Dr).transpose(1, 2)  # (B, H, L, Dn + Dr)
        q_nope, q_rope = q.split([Dn, Dr], dim=-1)  # (B, H, L, Dn), (B, H, L, Dr)
        head_positions = positions.unsqueeze(-2) if positions.ndim == 2 else positions
        q_rope = self._rotate(q_rope, head_positions)  # (B, H, L, Dr)

        latent, rope_key = self.kv_down_proj(x).split([self.kv_latent_dim, Dr], dim=-1)
        latent = rms_norm(latent, self.kv_norm_weight, eps=self.eps)  # (B, L, d_c)
        rope_key = self._rotate(rope_key, positions)  # (B, L, Dr)
        if cache is not None:
            # Not stored yet: a call that fails below must leave the cache as it was.
            latent, rope_key = cache.extended(latent, rope_key)  # (B, S, d_c), (B, S, Dr)
        S = latent.shape[-2]
        mask = causal_mask(L, S, alignment="bottom_right", device=x.device)  # (L, S)

        if absorbed:
            up = self.kv_up_proj.weight.view(H, Dn + self.value_head_dim, self.kv_latent_dim)
            w_uk, w_uv = torch.split(up, [Dn, self.value_head_dim], dim=1)  # (H, Dn | Dv, d_c)
            q_absorbed = torch.einsum("bhln,hnc->bhlc", q_nope, w_uk)  # (B, H, L, d_c)
            query = torch.cat([q_absorbed, q_rope], dim=-1)  # (B, H, L, d_c + Dr)
            key = torch.cat([latent, rope_key], dim=-1).unsqueeze(1)  # (B, 1, S, d_c + Dr)
            value = latent.unsqueeze(1)  # (B, 1, S, d_c): one head, shared by all
            mixed = scaled_dot_product_attention(
                query, key, value, attn_mask=mask, scale=self.scale
            )  # (B, H, L, d_c)
            heads = torch.einsum("bhlc,hvc->bhlv", mixed, w_uv)  # (B, H, L, Dv)
        else:
            kv = self.kv_up_proj(latent).view(B, S, H, Dn + self.value_head_dim)
            kv = kv.transpose(1, 2)  # (B, H, S, Dn + Dv)
            k_nope, value = kv.split([Dn, self.value_head_dim], dim=-1)  # (B, H, S, Dn | Dv)
            k_rope = rope_key.unsqueeze(1).expand(B, H, S, Dr)  # (B, H, S, Dr), shared
            query = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, L, Dn + Dr)
            key = torch.cat([k_nope, k_rope], dim=-1)  # (B, H, S, Dn + Dr)
            heads = scaled_dot_product_attention(
                query, key, value, attn_mask=mask, scale=self.scale
            )  # (B, H, L, Dv)
        out: Tensor = self.out_proj(heads.transpose(1, 2).reshape(B, L, H * self.value_head_dim))
        if cache is not None:
            cache.latent, cache.rope_key = latent, rope_key  # the call succeeded: keep them
        return out  # (B, L, E)

    def _rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE with this module's base, pairing and scaling."""
        return apply_rotary(
            x, positions, base=self.rope_base, pairing=self.rope_pairing, scaling=self.rope_scaling
        )

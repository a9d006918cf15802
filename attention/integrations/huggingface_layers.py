r"""Transformers' token mixers beyond one softmax, computed by this package.

[`register`][attention.integrations.huggingface.register] reaches every layer that looks
its attention up in `transformers.AttentionInterface`: each softmax it computes. A hybrid
model's other token mixers compute their recurrence in code of their own, which no
registered name reaches, and a differential-attention layer combines two softmax maps
in code of its own. [`patch`][attention.integrations.huggingface_layers.patch]
replaces the `forward` of each such layer that this package computes with one written
on the package's functions, reading the layer's own weights and keeping its state in
the model's own cache, so that prefill, decoding and `generate` run through it:

| layer | model | what it computes |
|---|---|---|
| `Qwen3NextGatedDeltaNet` | Qwen3-Next | the gated delta rule, a gate per head |
| `Qwen3_5GatedDeltaNet`, `Qwen3_5MoeGatedDeltaNet` | Qwen3.5 | the same, a projection each |
| `KimiLinearDeltaAttention` | Kimi Linear | the same, a gate per key channel |
| `MiniMaxLightningAttention` | MiniMax-Text-01 | linear attention, a decay per head |
| `Mamba2Mixer` | Mamba-2 | the state-space scan (SSD), a decay per step and head |
| `DiffLlamaAttention` | DiffLlama | differential attention: two softmax maps, one subtracted |

The gated delta rule is
[`delta_rule_attention`][attention.delta_rule.delta_rule_attention], linear attention
with decay [`decayed_linear_attention`][attention.linear_decay.decayed_linear_attention],
the scan [`ssd`][attention.state_space.ssd], differential attention
[`differential_attention`][attention.differential.differential_attention].

A delta-rule layer computes, from its input $x_t$: the projections, a depthwise causal
convolution over time with SiLU (its last ``K`` inputs are the cache's "conv state"),
L2-normalised queries and keys, the gated delta rule (its state $S$ is the cache's
"recurrent state"), an RMS norm of the output gated by a projection of $x_t$, and the
output projection. Lightning attention computes SiLU of one projection as query, key
and value, linear attention with a fixed decay $e^{-s_h}$ per head and scale 1 (its
state is the cache's "linear cache"), then an RMS norm, a sigmoid gate and the output
projection. Mamba-2's mixer computes one projection into the gate, $x$, $B$, $C$ and
$\Delta$, the same short convolution over $(x, B, C)$, the SSD scan from the cache's
"recurrent state", then the gated RMS norm and the output projection. DiffLlama's
attention computes RoPE ([`apply_rotary`][attention.positional.apply_rotary], at the
positions the model passes), appends to the model's KV cache, and computes
differential attention under the model's mask, its $\lambda$ from the layer's four
vectors ([`differential_lambda`][attention.differential.differential_lambda]).

Every layer of another token-mixing kind that the package does not compute here is
refused by name before anything is replaced: no layer is left on Transformers' code
while the model is said to run on the package.

Requires Transformers 5 or later, as `register` does.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention.delta_rule import delta_rule_attention
from attention.differential import differential_attention, differential_lambda
from attention.functional import attention_weights
from attention.integrations._masks import causality, eager_mask
from attention.linear_decay import decayed_linear_attention
from attention.normalization import rms_norm
from attention.positional import apply_rotary
from attention.state_space import ssd

__all__ = ["patch"]

# The layer classes `patch` replaces, by name, and the kind each is counted as.
KINDS = {
    "Qwen3NextGatedDeltaNet": "gated_delta_net",
    "Qwen3_5GatedDeltaNet": "gated_delta_net",
    "Qwen3_5MoeGatedDeltaNet": "gated_delta_net",
    "KimiLinearDeltaAttention": "kimi_delta_attention",
    "MiniMaxLightningAttention": "lightning_attention",
    "Mamba2Mixer": "mamba2",
    "DiffLlamaAttention": "differential_attention",
}
# The other token mixers of Transformers 5.23's models that compute without
# AttentionInterface, which `patch` refuses: Mamba-1's and the hybrids' Mamba mixers
# (MambaMixer, BambaMixer, NemotronHMamba2Mixer, ...), other Gated DeltaNets (OLMo
# Hybrid's), LFM's short convolutions, RWKV's and GLM-5-Next's linear attention. By the
# end of the class name, or the whole name.
_OTHER_MIXERS = ("GatedDeltaNet", "DeltaAttention", "Mixer", "ShortConv", "LightningAttention")
_OTHER_MIXER_NAMES = frozenset({"RwkvLinearAttention", "Glm5NextTextLinearAttention"})

# exp(g) of a gate's log below about -103 rounds to 0 in float32, which the delta rule
# refuses; e^-80 (1e-35) is as good as 0 next to the update (see delta_rule_attention).
_LOG_GATE_FLOOR = -80.0


def patch(model: nn.Module) -> dict[str, int]:
    """Compute every linear-attention and differential-attention layer of ``model`` here.

    Replaces, on each layer instance, the `forward` of every Qwen3-Next and Qwen3.5
    (dense or MoE) Gated DeltaNet layer, every Kimi Linear delta-attention layer,
    every MiniMax lightning-attention layer, every Mamba-2 mixer and every DiffLlama
    attention layer with one written on the package's functions (see the module
    docstring). The layer's weights, its cache entries and its call signature stay the
    same. The softmax layers are not touched: select this package for them with
    `register`, as ``attn_implementation``.

    Args:
        model: A Transformers model (or any module holding such layers).

    Returns:
        How many layers of each kind were replaced, e.g. ``{"gated_delta_net": 3}``;
            empty when the model has none.

    Raises:
        NotImplementedError: If the model holds a token mixer of another kind (a
            Mamba mixer, an LFM short convolution, ...), named with its class;
            nothing is replaced then.

    Examples:
        >>> import torch
        >>> from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
        >>> from attention.integrations.huggingface import patch
        >>> config = Qwen3NextConfig(
        ...     vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        ...     layer_types=["linear_attention", "full_attention"], num_attention_heads=2,
        ...     num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
        ...     linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
        ...     num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
        ...     shared_expert_intermediate_size=16)
        >>> patch(Qwen3NextForCausalLM(config))
        {'gated_delta_net': 1}
    """
    replaced: dict[str, list[nn.Module]] = {}
    refused: set[str] = set()
    for module in model.modules():
        name = type(module).__name__
        if name in KINDS:
            replaced.setdefault(KINDS[name], []).append(module)
        elif type(module).__module__.startswith("transformers.") and (
            name.endswith(_OTHER_MIXERS) or name in _OTHER_MIXER_NAMES
        ):
            refused.add(name)
    if refused:
        raise NotImplementedError(
            f"attention.integrations.huggingface.patch does not compute "
            f"{', '.join(sorted(refused))}; it computes {', '.join(sorted(KINDS))}. "
            "Nothing was replaced."
        )
    for kind, layers in replaced.items():
        forward = _FORWARDS[kind]
        for layer in layers:
            # Bound to this instance: other models of the class keep Transformers' code.
            layer.forward = types.MethodType(forward, layer)
    return {kind: len(layers) for kind, layers in replaced.items()}


def _called_with_cache_params(
    compute: Callable[[Any, Tensor, Any, Tensor | None], Tensor],
) -> Callable[..., Tensor]:
    """A layer's forward, called as Transformers calls these layers.

    ``compute(layer, x, cache, attention_mask)`` gets the input with its padding
    positions zeroed, as the models zero them first.
    """

    def forward(
        layer: Any,
        hidden_states: Tensor,
        cache_params: Any = None,
        attention_mask: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        x = _zero_padding(hidden_states, attention_mask)
        return compute(layer, x, cache_params, attention_mask)

    return forward


def _gated_delta_net(layer: Any, x: Tensor, cache: Any, attention_mask: Tensor | None) -> Tensor:
    """Qwen3-Next's and Qwen3.5's Gated DeltaNet layer: a gate per step and value head."""
    B, L, _ = x.shape
    Hk, Hv, Dk, Dv = layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    group = Hv // Hk  # value heads per key head
    if hasattr(layer, "in_proj_qkv"):  # Qwen3.5: one projection per tensor, heads in order
        q, k, v = layer.in_proj_qkv(x).split([Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
        z, b, a = layer.in_proj_z(x), layer.in_proj_b(x), layer.in_proj_a(x)
    else:  # Qwen3-Next: per key head, [q | k | its group's v | its group's z], then [b | a]
        qkvz = layer.in_proj_qkvz(x).view(B, L, Hk, 2 * Dk + 2 * group * Dv)
        q, k, v, z = qkvz.split([Dk, Dk, group * Dv, group * Dv], dim=-1)
        b, a = layer.in_proj_ba(x).view(B, L, Hk, 2 * group).split([group, group], dim=-1)
        q, k, v, z, b, a = (t.reshape(B, L, -1) for t in (q, k, v, z, b, a))
    mixed = _short_convolution(layer, torch.cat([q, k, v], dim=-1), cache)
    q, k, v = torch.split(mixed, [Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    # Each key head serves `group` consecutive value heads: (B, Hv, L, Dk)
    q, k = (
        _unit(t.view(B, L, Hk, Dk)).repeat_interleave(group, dim=2).transpose(1, 2) for t in (q, k)
    )
    v = v.view(B, L, Hv, Dv).transpose(1, 2)  # (B, Hv, L, Dv)
    beta = b.sigmoid().transpose(1, 2)  # (B, Hv, L)
    log_gate = -layer.A_log.float().exp() * F.softplus(a.float() + layer.dt_bias)
    core = _delta_rule(layer, q, k, v, beta, log_gate.transpose(1, 2), cache)  # (B, L, Hv, Dv)
    gated = rms_norm(core, layer.norm.weight, eps=layer.norm.variance_epsilon)
    gated = gated * F.silu(z.view(B, L, Hv, Dv).float()).to(gated.dtype)
    out: Tensor = layer.out_proj(gated.reshape(B, L, Hv * Dv))
    return out


def _kimi_delta_attention(
    layer: Any, x: Tensor, cache: Any, attention_mask: Tensor | None
) -> Tensor:
    """Kimi Linear's delta attention: the gated delta rule with a gate per key channel."""
    B, L, _ = x.shape
    H, D = layer.num_heads, layer.head_dim
    mixed = torch.cat([layer.q_proj(x), layer.k_proj(x), layer.v_proj(x)], dim=-1)
    q, k, v = _short_convolution(layer, mixed, cache).view(B, L, 3, H, D).unbind(2)
    q, k = (_unit(t).transpose(1, 2) for t in (q, k))  # (B, H, L, D)
    gate = layer.forget_gate
    g = gate.f_b_proj(gate.f_a_proj(x)).float() + gate.dt_bias.float()  # (B, L, H D)
    log_gate = -gate.A_log.float().exp() * F.softplus(g.view(B, L, H, D))  # per channel
    beta = layer.b_proj(x).sigmoid().transpose(1, 2)  # (B, H, L)
    core = _delta_rule(layer, q, k, v.transpose(1, 2), beta, log_gate.transpose(1, 2), cache)
    out_gate = layer.g_b_proj(layer.g_a_proj(x)).view(B, L, H, D)
    normed = rms_norm(core, layer.o_norm.weight, eps=layer.o_norm.variance_epsilon)
    out: Tensor = layer.o_proj((normed * out_gate.sigmoid()).reshape(B, L, H * D))
    return out


def _lightning_attention(
    layer: Any,
    hidden_states: Tensor,
    position_embeddings: Any = None,
    attention_mask: Tensor | None = None,
    past_key_values: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor]:
    """MiniMax-Text-01's lightning attention: linear attention, a fixed decay per head.

    Returns the output and the final state, as the layer does.
    """
    B, L, _ = hidden_states.shape
    H, D = layer.num_attention_heads, layer.head_dim
    qkv = _zero_padding(layer.act_fn(layer.qkv_proj(hidden_states)), attention_mask)
    q, k, v = (t.transpose(1, 2) for t in torch.split(qkv.view(B, L, H, 3 * D), D, dim=-1))
    state = None if past_key_values is None else past_key_values.get_linear_cache(layer.layer_idx)
    if not isinstance(state, Tensor):  # the cache holds nothing for this layer yet
        state = None
    core, state = decayed_linear_attention(
        q,
        k,
        v,
        torch.exp(-layer.slope_rate.view(H)).to(q.dtype),  # e^{-s_h}: the decay per step
        form="recurrent" if L == 1 else "chunked",
        chunk_size=layer.block_size,
        scale=1.0,
        initial_state=state,
        return_state=True,
    )
    core = core.transpose(1, 2).reshape(B, L, H * D)
    out = layer.out_proj(torch.sigmoid(layer.output_gate(hidden_states)) * layer.norm(core))
    if past_key_values is not None:
        past_key_values.set_linear_cache(layer.layer_idx, state)
    return out, state


def _differential_attention(
    layer: Any,
    hidden_states: Tensor,
    position_embeddings: Any = None,
    attention_mask: Tensor | None = None,
    past_key_values: Any = None,
    position_ids: Tensor | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """DiffLlama's attention: RoPE, the KV cache, then differential attention.

    Its two softmax maps share the keys' positions; the first subtracts the second with
    weight lambda, and each head's output is RMS-normalised (`differential_attention`).
    DiffLlama pairs query heads ``i`` and ``i + H/2`` (keys likewise) and gives key head
    ``j`` the value heads ``j`` and ``j + Hkv/2`` side by side. Returns the output and,
    as DiffLlama does, the first call's attention weights when they are asked for:
    those of every query head, the second map's heads after the first's.
    """
    B, L, _ = hidden_states.shape
    D = layer.head_dim
    q, k, v = (
        proj(hidden_states).view(B, L, -1, D).transpose(1, 2)  # (B, heads, L, D)
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj)
    )
    if position_ids is None:  # the model passes them; else they follow the cache
        start = 0 if past_key_values is None else past_key_values.get_seq_length(layer.layer_idx)
        position_ids = torch.arange(start, start + L, device=q.device)[None]
    rope = dict(layer.config.rope_parameters)
    base = rope.pop("rope_theta")
    scaling = None if rope.get("rope_type", "default") == "default" else rope
    q, k = (
        apply_rotary(t, position_ids[:, None, :], base=base, pairing="half", scaling=scaling)
        for t in (q, k)
    )
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, layer.layer_idx)
    is_causal, keys = causality(layer, attention_mask, kwargs.get("is_causal"), L, k.shape[-2])
    k, v = k[..., :keys, :], v[..., :keys, :]
    mask = eager_mask(attention_mask, q.dtype)
    q1, q2 = q.chunk(2, dim=1)  # (B, H/2, L, D) each
    k1, k2 = k.chunk(2, dim=1)  # (B, Hkv/2, S, D) each
    value = torch.cat(v.chunk(2, dim=1), dim=-1)  # (B, Hkv/2, S, 2D)
    lam = differential_lambda(
        layer.lambda_q1, layer.lambda_k1, layer.lambda_q2, layer.lambda_k2, layer.lambda_init
    )
    out = differential_attention(
        q1,
        k1,
        q2,
        k2,
        value,
        lam.to(q.dtype),
        attn_mask=mask,
        is_causal=is_causal,
        scale=layer.scaling,
        enable_gqa=k1.shape[1] != q1.shape[1],
        lambda_init=layer.lambda_init,
        eps=layer.groupnorm.eps,
    )  # (B, H/2, L, 2D)
    weights = None
    if kwargs.get("output_attentions"):
        weights = attention_weights(
            q, k, mask, is_causal=is_causal, scale=layer.scaling, enable_gqa=True
        )  # (B, H, L, S)
    return layer.o_proj(out.transpose(1, 2).reshape(B, L, -1)), weights


def _mamba2(layer: Any, x0: Tensor, cache: Any, attention_mask: Tensor | None) -> Tensor:
    """Mamba-2's mixer: the SSD scan between a short convolution and a gated norm."""
    B, L, _ = x0.shape
    H, P, G, N = layer.num_heads, layer.head_dim, layer.n_groups, layer.ssm_state_size
    inner = layer.intermediate_size  # H P
    projected = layer.in_proj(x0)
    gate, xBC, dt = projected.split([inner, layer.conv_dim, H], dim=-1)
    xBC = _zero_padding(_short_convolution(layer, xBC, cache), attention_mask)
    x, Bm, Cm = torch.split(xBC, [inner, G * N, G * N], dim=-1)
    state = None if cache is None else cache.get_recurrent_state(layer.layer_idx, state_idx=0)
    y, final = ssd(
        x.view(B, L, H, P),
        F.softplus(dt + layer.dt_bias).clamp(*layer.time_step_limit),  # the step sizes
        -torch.exp(layer.A_log.float()),  # A < 0, in float32 as the mixer makes it
        Bm.view(B, L, G, N),
        Cm.view(B, L, G, N),
        layer.D,
        form="recurrent" if L == 1 else "chunked",
        chunk_size=layer.chunk_size,
        initial_state=state,
        return_state=True,
    )
    if cache is not None:
        cache.update_recurrent_state(final, layer_idx=layer.layer_idx)
    gated = layer.norm(y.reshape(B, L, inner), gate)  # RMS norm of y times SiLU(gate)
    out: Tensor = layer.out_proj(gated.to(x0.dtype))
    return out


_FORWARDS: dict[str, Callable[..., Any]] = {
    "gated_delta_net": _called_with_cache_params(_gated_delta_net),
    "kimi_delta_attention": _called_with_cache_params(_kimi_delta_attention),
    "lightning_attention": _lightning_attention,
    "mamba2": _called_with_cache_params(_mamba2),
    "differential_attention": _differential_attention,
}


def _zero_padding(x: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Zero the hidden states of padding positions, as these models do before mixing.

    The model passes the 2-D padding mask (1 = token) to these layers, or ``None``.
    """
    if attention_mask is None:
        return x
    return (x * attention_mask[:, :, None]).to(x.dtype)


def _short_convolution(layer: Any, x: Tensor, cache: Any) -> Tensor:
    """The depthwise causal convolution over time, then SiLU: ``(B, L, C) -> (B, L, C)``.

    With a cache, the layer's last ``K`` inputs are kept there (Transformers' conv
    state, ``(B, C, K)``) and the convolution continues from them.
    """
    L = x.shape[1]
    inputs = x.transpose(1, 2)  # (B, C, L)
    if cache is not None:
        # The cache prepends what it kept (zeros before the first call) and keeps the
        # last K inputs for the next call.
        inputs = cache.update_conv_state(
            inputs, layer.layer_idx, conv_kernel_size=layer.conv_kernel_size
        )
    weight = layer.conv1d.weight  # (C, 1, K)
    channels, _, width = weight.shape
    y = F.conv1d(inputs, weight, layer.conv1d.bias, padding=width - 1, groups=channels)
    y = y[..., : inputs.shape[-1]][..., -L:]  # the causal outputs of this call's positions
    return F.silu(y).transpose(1, 2)


def _unit(x: Tensor, eps: float = 1e-6) -> Tensor:
    """L2-normalise the last dimension, as the models do (``l2norm``, eps inside the root)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _delta_rule(
    layer: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    cache: Any,
) -> Tensor:
    """The gated delta rule from the cache's state, the new state written back to it.

    Inputs ``(B, H, L, ·)``; returns ``(B, L, H, Dv)`` in the query's dtype. One step
    (decoding) runs the recurrent form, more the chunked form, as the models do. The
    gate is in the query's dtype or float32 (the models compute it in float32), as the
    state the cache keeps: both are what ``delta_rule_attention`` takes.
    """
    state = None if cache is None else cache.get_recurrent_state(layer.layer_idx, state_idx=0)
    out, final = delta_rule_attention(
        q,
        k,
        v,
        beta,
        log_gate.clamp(min=_LOG_GATE_FLOOR).exp(),
        form="recurrent" if q.shape[2] == 1 else "chunked",
        initial_state=state,
        return_state=True,
    )
    if cache is not None:
        cache.update_recurrent_state(final, layer.layer_idx)
    return out.transpose(1, 2)

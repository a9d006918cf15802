r"""Run a Hugging Face Transformers model on this package's attention.

Transformers looks its attention up by name (`config._attn_implementation`), in
`transformers.AttentionInterface`, and builds the attention masks with the function of
the same name in `transformers.masking_utils.AttentionMaskInterface`.
[`register`][attention.integrations.huggingface.register] adds one of each, so that

```python
from transformers import AutoModelForCausalLM, LlamaConfig

from attention.integrations.huggingface import register

config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
model = AutoModelForCausalLM.from_config(config, attn_implementation=register())
```

runs every attention layer of the model through
[`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention]
(or [`flash_attention`][attention.efficient.flash_attention]), and gives the same
logits as Transformers' own `"eager"` attention:

$$
O = \operatorname{softmax}\!\left(s\,Q K^\top + b + M\right) V
$$

with the model's scale $s$ (`scaling`), an optional float bias $b$ (`position_bias`,
T5's relative positions) and the mask $M$ ($0$ where a query may attend, the dtype's
most negative number where it may not, as Transformers' eager mask has it). Queries
arrive as $(B, H, L, D)$, keys and values as $(B, H_{kv}, S, D)$, and the output
leaves as $(B, L, H, D_v)$, as Transformers expects.

What the function handles, each as the eager path does it: grouped-query and
multi-query heads ($H_{kv} < H$), padding masks (left padding included), causal
layers without a mask, sliding-window layers (their mask holds the window),
cross-attention, T5's `position_bias`, dropout while training (`module.training`),
attention weights for `output_attentions=True`, and gpt-oss's learned sinks (`s_aux`).
Gemma 2's logit soft-capping (`softcap`, $c \tanh(\cdot / c)$ of the scaled scores,
before the mask) goes in as a `score_mod`. Any other keyword argument that would
change the mathematics and that this function does not know raises
`NotImplementedError`.

Requires `pip install "attention-by-running[hf]"` (Transformers 5 or later).

References:
    - Wolf et al., "Transformers: State-of-the-Art Natural Language Processing", 2020.
      [arXiv:1910.03771](https://arxiv.org/abs/1910.03771)
    - Xiao et al., "Efficient Streaming Language Models with Attention Sinks", 2023.
      [arXiv:2309.17453](https://arxiv.org/abs/2309.17453)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention import efficient, functional
from attention.softcap import softcap_score_mod

__all__ = ["attention_forward", "register"]

KERNELS = ("sdpa", "flash")
# Transformers routes any attention implementation whose name contains one of these to
# its own code (transformers.modeling_utils, 5.23), whatever is registered under it.
_RESERVED_IN_NAMES = ("flash", "flex_attention", "sdpa")

# Keyword arguments that Transformers' layers pass along and that the eager path
# ignores: they do not change the mathematics here. `sliding_window` is in this list
# because the mask that the registered mask function builds already holds the window.
_IGNORED_KWARGS = frozenset(
    {
        "sliding_window",
        "output_attentions",
        "output_router_logits",
        "position_ids",
        "cache_position",
        "past_key_values",
        "past_key_value",
        "use_cache",
        "return_dict",
        "output_hidden_states",
        "layer_idx",
    }
)


def register(name: str = "attention-by-running", *, kernel: str = "sdpa") -> str:
    """Register this package's attention with Transformers, under ``name``.

    Adds ``name`` to `transformers.AttentionInterface` (the attention function) and to
    `transformers.masking_utils.AttentionMaskInterface` (Transformers' `sdpa_mask`:
    boolean masks, `True` where a query may attend). Models then select it with
    ``attn_implementation=name`` in `from_config` / `from_pretrained`, or with
    ``model.set_attn_implementation(name)``. Registering a name again replaces it.

    Args:
        name: The name to register under.
        kernel: ``"sdpa"`` computes each layer with
            [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention];
            ``"flash"`` with [`flash_attention`][attention.efficient.flash_attention]
            (tiled, online softmax), which cannot return attention weights or apply
            dropout.

    Returns:
        ``name``, to pass as ``attn_implementation``.

    Raises:
        ImportError: If Transformers is not installed.
        ValueError: If ``kernel`` is not ``"sdpa"`` or ``"flash"``, or if ``name``
            contains ``"flash"``, ``"sdpa"`` or ``"flex_attention"`` or starts with
            ``"paged|"``: Transformers routes such names to its own kernels.

    Examples:
        >>> from transformers import AttentionInterface
        >>> from attention.integrations.huggingface import register
        >>> register("readable-tiled", kernel="flash")
        'readable-tiled'
        >>> "readable-tiled" in AttentionInterface._global_mapping
        True
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got {kernel!r}")
    reserved = [word for word in _RESERVED_IN_NAMES if word in name]
    if reserved or name.startswith("paged|"):
        raise ValueError(
            f"Transformers gives names containing {reserved or ['paged|']} a meaning of "
            f"their own (e.g. any name with 'flash' goes to a flash-attention kernel); "
            f"choose another name than {name!r}"
        )
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as error:
        raise ImportError(
            "attention.integrations.huggingface needs Hugging Face Transformers: "
            'pip install "attention-by-running[hf]"'
        ) from error
    AttentionInterface.register(name, functools.partial(attention_forward, kernel=kernel))
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    *,
    kernel: str = "sdpa",
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """One attention layer of a Transformers model, computed by this package.

    The signature is the one Transformers calls its attention functions with;
    [`register`][attention.integrations.huggingface.register] binds ``kernel``.

    Args:
        module: The calling attention layer. Read: ``training`` (dropout only while
            training) and ``is_causal`` (when the call does not say).
        query: Shape ``(B, H, L, D)``.
        key: Shape ``(B, Hkv, S, D)``; ``H`` a multiple of ``Hkv``.
        value: Shape ``(B, Hkv, S, Dv)``.
        attention_mask: ``None``, a boolean mask (``True`` = attend) or an additive
            float mask, broadcastable to ``(B, H, L, S)``.
        scaling: The scale of the scores; ``None`` for ``1/sqrt(D)``.
        dropout: Dropout probability on the attention weights, applied only while
            ``module.training``, as Transformers' eager path applies it.
        kernel: ``"sdpa"`` or ``"flash"``.
        **kwargs: What the layer passes along. Used: ``is_causal``, ``softcap``
            (Gemma 2's cap on the scaled scores), ``position_bias`` (a float bias
            added to the scores, broadcastable to ``(B, H, L, S)``), ``s_aux`` (one
            sink logit per head, shape ``(H,)``), ``output_attentions``. Ignored:
            flags such as ``use_cache`` and ``sliding_window`` (the mask holds the
            window), and any ``None`` value.

    Returns:
        ``(out, weights)``: the output ``(B, L, H, Dv)``, and the attention weights
            ``(B, H, L, S)`` when ``output_attentions`` is true or dropout is active
            (else ``None``).

    Raises:
        NotImplementedError: For a keyword argument this function does not know
            (and whose value is not ``None``), and for what
            ``kernel="flash"`` cannot do (attention weights, dropout).
    """
    is_causal_arg = kwargs.pop("is_causal", None)
    position_bias: Tensor | None = kwargs.pop("position_bias", None)
    sinks: Tensor | None = kwargs.pop("s_aux", None)
    softcap: float | None = kwargs.pop("softcap", None)
    output_attentions = bool(kwargs.get("output_attentions", False))
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in _IGNORED_KWARGS)
    if unknown:
        raise NotImplementedError(
            f"attention.integrations.huggingface does not support the keyword "
            f"argument(s) {', '.join(unknown)}; use attn_implementation='eager'"
        )

    p = dropout if module.training else 0.0
    need_weights = output_attentions or p > 0.0
    if kernel == "flash" and need_weights:
        what = "attention weights (output_attentions)" if output_attentions else "dropout"
        raise NotImplementedError(
            f"kernel='flash' cannot compute {what}; register(kernel='sdpa') can"
        )

    L, S = query.shape[-2], key.shape[-2]
    enable_gqa = query.shape[1] != key.shape[1]
    # Transformers' rule: causality from the call, else from the layer, and only when
    # there is no mask and more than one query (one query may see every cached key).
    if is_causal_arg is None:
        is_causal_arg = getattr(module, "is_causal", True)
    is_causal = bool(is_causal_arg) and attention_mask is None and L > 1
    if is_causal and S > L:
        # Only an empty static cache gives S > L without a mask: the keys past L are
        # the cache's unused slots, as transformers' sdpa path assumes.
        key, value = key[..., :L, :], value[..., :L, :]
        if position_bias is not None:
            position_bias = position_bias[..., :L]
        S = L

    # The eager path adds a float mask: 0 where a query may attend, the dtype's most
    # negative number where it may not (so a query that sees no key attends to all
    # keys equally rather than returning zero, as in eager).
    mask: Tensor | None = attention_mask
    if mask is not None and mask.dtype == torch.bool:
        mask = _additive(mask, query.dtype)
    if (position_bias is not None or sinks is not None) and is_causal:
        causal = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        mask = _additive(causal, query.dtype)
        is_causal = False
    if position_bias is not None:
        mask = position_bias if mask is None else position_bias + mask

    value_for_weights = value
    if sinks is not None:
        # A sink is one more logit per head in every row of the scores, dropped after
        # the softmax (gpt-oss). Here it is a key of zeros, so its score is 0, with
        # the sink as its bias, and a value of zeros, so it adds nothing to the output.
        B, H = query.shape[0], query.shape[1]
        if mask is None:
            mask = torch.zeros(1, 1, L, S, dtype=query.dtype, device=query.device)
        mask = mask.expand(B, H, L, S)
        sink = sinks.to(query.dtype).reshape(1, H, 1, 1).expand(B, H, L, 1)
        mask = torch.cat([mask, sink], dim=-1)  # (B, H, L, S + 1)
        key = torch.cat([key, key.new_zeros(*key.shape[:-2], 1, key.shape[-1])], dim=-2)
        value = torch.cat([value, value.new_zeros(*value.shape[:-2], 1, value.shape[-1])], dim=-2)

    score_mod = None if softcap is None else _softcap_mod(softcap, keys=S)
    if need_weights:
        weights = functional.attention_weights(
            query,
            key,
            mask,
            is_causal=is_causal,
            scale=scaling,
            enable_gqa=enable_gqa,
            score_mod=score_mod,
        )  # (B, H, L, S) or (B, H, L, S + 1) with a sink
        if sinks is not None:
            weights = weights[..., :S]
        # Dropout on the weights, after dropping the sink, as eager does: the same
        # random numbers are drawn for the same seed.
        weights = F.dropout(weights, p=p, training=p > 0.0)
        groups = query.shape[1] // value_for_weights.shape[1]
        out = weights @ value_for_weights.repeat_interleave(groups, dim=1)  # (B, H, L, Dv)
        return out.transpose(1, 2).contiguous(), weights  # (B, L, H, Dv)

    run: Callable[..., Tensor] = functional.scaled_dot_product_attention
    if kernel == "flash":
        run = efficient.flash_attention
    out = run(
        query,
        key,
        value,
        mask,
        is_causal=is_causal,
        scale=scaling,
        enable_gqa=enable_gqa,
        score_mod=score_mod,
    )
    return out.transpose(1, 2).contiguous(), None  # (B, L, H, Dv)


def _softcap_mod(softcap: float, keys: int) -> Callable[..., Tensor]:
    """Gemma 2's soft-capping (`attention.softcap_score_mod`) of the first ``keys`` columns.

    A sink column after them keeps its logit.
    """
    cap = softcap_score_mod(softcap)

    def score_mod(s: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        return torch.where(k < keys, cap(s, b, h, q, k), s)

    return score_mod


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True = attend) as eager's float mask: 0 or the dtype's minimum."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, torch.finfo(dtype).min
    )

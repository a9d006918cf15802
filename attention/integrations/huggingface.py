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
O = \operatorname{softmax}\!\left(Q K^\top \cdot \text{scale} + b + M\right) V
$$

with the model's $\text{scale}$ (`scaling`), an optional float bias $b$ (`position_bias`,
T5's relative positions) and the mask $M$ ($0$ where a query may attend, the dtype's
most negative number where it may not, as Transformers' eager mask has it). Queries
arrive as $(B, H, L, D)$, keys and values as $(B, H_{kv}, S, D)$, and the output
leaves as $(B, L, H, D_v)$, as Transformers expects.

What the function handles, each as the eager path does it: grouped-query and
multi-query heads ($H_{kv} < H$), padding masks (left padding included), causal and
sliding-window layers (their mask holds the causality and the window), cross-attention,
T5's `position_bias`, dropout while training (`module.training`), attention weights for
`output_attentions=True`, and learned sinks: gpt-oss's one logit per head (`s_aux`) and
inkling2's one per query (`sinks`). Gemma 2's logit soft-capping (`softcap`,
$c \tanh(\cdot / c)$ of the scaled scores, before the mask) goes in as a `score_mod`.
DeepSeek sparse attention (DeepSeek-V3.2, GLM-MoE-DSA, ...) passes the keys its indexer
chose for each query (`indices`); each query then attends to those alone, through the
mask ([`topk_mask`][attention.indexer.topk_mask]), as the eager path does it.
Any other keyword argument that would change the mathematics and that this function
does not know raises `NotImplementedError`.

Each model gets the masks of the attention it was written for. A model that declares
SDPA support gets SDPA's: boolean, and none for a causal batch without padding, where
causality comes from the call's `is_causal` or the layer's, as in Transformers' own
SDPA path. A model written for eager only (`_supports_sdpa = False`: nllb-moe,
pegasus_x, bigbird_pegasus, deepseek_v4, gpt-oss, ...) gets eager's, always written
out: its layers' `is_causal` flags are not to be trusted, and some of these models
edit the mask as a float tensor.

Requires Transformers 5 or later: the package's `hf` extra, or `pip install
"transformers>=5"` beside it.

References:
    - Wolf et al., "Transformers: State-of-the-Art Natural Language Processing", 2020.
      [arXiv:1910.03771](https://arxiv.org/abs/1910.03771)
    - Xiao et al., "Efficient Streaming Language Models with Attention Sinks", 2023.
      [arXiv:2309.17453](https://arxiv.org/abs/2309.17453)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention import efficient, functional
from attention.indexer import topk_mask
from attention.integrations._masks import additive, causality, eager_mask
from attention.integrations.huggingface_layers import patch
from attention.softcap import softcap_score_mod

__all__ = ["attention_forward", "patch", "register"]

KERNELS = ("sdpa", "flash")

# What Transformers 5.23 (`PreTrainedModel._check_and_adjust_attn_implementation` in
# `modeling_utils`) does with some names, whatever is registered under them. Three never
# reach the registered function:
_REROUTED = (
    # `is_flash_attention_requested`: it loads a flash-attention kernel of that name.
    (
        lambda name: "flash" in name,
        "Transformers takes a name containing 'flash' for a flash-attention kernel and "
        "loads that kernel, not the registered function",
    ),
    # The prefix is deprecated: it is removed, and the rest of the name looked up.
    (
        lambda name: name.startswith("paged|"),
        "Transformers strips the prefix 'paged|' and looks up the rest of the name",
    ),
    # `hub_kernels.is_kernel`: it downloads a kernel of that name from the Hub.
    (
        re.compile(r"^[^/:]+/[^/:]+(?:@[^/:]+)?(?::[^/:]+)?$").match,
        "Transformers takes a name of the form 'owner/repo' for a kernel on the Hugging "
        "Face Hub and downloads it",
    ),
)
# Two do reach it, but only after Transformers has checked that the model supports its
# own kernel of that name (`_sdpa_can_dispatch`, `_flex_attn_can_dispatch`), refusing
# every model that does not: a name with "sdpa" in it cannot load nllb-moe, pegasus_x,
# bigbird_pegasus or deepseek_v4 (`_supports_sdpa = False`), which this package's
# attention computes exactly under any other name.
_CHECKED_IN_NAMES = ("sdpa", "flex_attention")

# Keyword arguments that Transformers' layers pass along and that the eager path
# ignores, each because it cannot change the output here:
# - `sliding_window`: the mask that the registered mask function builds holds the window;
# - `deterministic` (modernbert): flash-attention's switch for a reproducible backward
#   pass; the forward result is the same either way;
# - `logits_to_keep`: which positions the language-model head computes logits for;
# - the rest are cache and output bookkeeping of the model around the attention.
_IGNORED_KWARGS = frozenset(
    {
        "sliding_window",
        "deterministic",
        "logits_to_keep",
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
    `transformers.masking_utils.AttentionMaskInterface` (the mask function). Each model
    gets the masks of the attention it was written for: a model that declares SDPA
    support gets `sdpa_mask`'s (boolean, `True` where a query may attend, and none for a
    causal batch without padding, as Transformers' own `"sdpa"` gets them); a model
    written for eager attention only (`_supports_sdpa = False`) gets `eager_mask`'s
    (float, 0 or the dtype's most negative number), always written out. Models then
    select it with ``attn_implementation=name`` in `from_config` / `from_pretrained`, or
    with ``model.set_attn_implementation(name)``. Registering a name again replaces it.

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
        ValueError: If ``kernel`` is not ``"sdpa"`` or ``"flash"``; if ``name``
            contains ``"flash"``, starts with ``"paged|"`` or reads ``"owner/repo"``
            (Transformers sends such names to a kernel of its own, or to another
            name); or if it contains ``"sdpa"`` or ``"flex_attention"`` (Transformers
            then refuses every model that lacks its own kernel of that name).

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
    _check_name(name)
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as error:
        # The missing piece, by a line that resolves wherever pip does (the package
        # itself is not on PyPI: its hf extra is installed from the site's wheel).
        raise ImportError(
            "attention.integrations.huggingface needs Hugging Face Transformers 5 or "
            'later, which is not installed: pip install "transformers>=5"'
        ) from error
    AttentionInterface.register(name, functools.partial(attention_forward, kernel=kernel))
    AttentionMaskInterface.register(name, _mask_for_the_model)
    return name


def _mask_for_the_model(*, config: Any = None, **kwargs: Any) -> Tensor | None:
    """The mask Transformers' own attention would get for this model (see `register`).

    Called by Transformers' `create_causal_mask` and its siblings, with the model's
    ``config`` and the arguments of `sdpa_mask` / `eager_mask`.

    `sdpa_mask` leaves the mask out of a causal batch without padding, and SDPA (like
    this package's attention) then takes causality from the layer's ``is_causal``. Only
    a model that declares SDPA support promises that flag is right. The models written
    for eager only do not: the decoders of nllb-moe, pegasus_x and bigbird_pegasus say
    ``is_causal = False``, and deepseek_v4 appends float columns to the mask with
    ``.to(attention_mask.dtype)``, which turns a boolean mask's visible slots into
    hidden ones. They get eager's mask, always written out, so that the attention never
    has to say what is causal.
    """
    from transformers.masking_utils import eager_mask, sdpa_mask

    if _declares_sdpa(getattr(config, "model_type", None)):
        return sdpa_mask(config=config, **kwargs)
    # Not even an encoder's mask is left out (`eager_mask` would leave one out where
    # nothing is padded): the attention then never sees None from such a model.
    kwargs["allow_is_bidirectional_skip"] = False
    return eager_mask(config=config, **kwargs)


@functools.cache
def _declares_sdpa(model_type: str | None) -> bool:
    """Whether Transformers' model of this type declares SDPA support (`_supports_sdpa`).

    A type Transformers does not know (custom code) counts as written for eager only.
    """
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    names = MODEL_MAPPING_NAMES.get(model_type or "", ())
    name = names if isinstance(names, str) else next(iter(names), None)
    model = getattr(transformers, name, None) if name else None
    return bool(getattr(model, "_supports_sdpa", False))


def _check_name(name: str) -> None:
    """Refuse the names that Transformers would not run as registered (see above)."""
    for applies, why in _REROUTED:
        if applies(name):
            raise ValueError(f"{why}; choose another name than {name!r}")
    for word in _CHECKED_IN_NAMES:
        if word in name:
            raise ValueError(
                f"Transformers runs a name containing {word!r} only for models that "
                f"support its own {word} kernel, and refuses the others (nllb-moe, "
                f"pegasus_x, ...); choose another name than {name!r}"
            )


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
            training) and ``is_causal`` (when there is no mask and the call does not say).
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
            sink logit per head, shape ``(H,)``, gpt-oss) or ``sinks`` (the same, or
            one per query, broadcastable to ``(B, H, L, 1)``, inkling2),
            ``output_attentions``, ``indices`` (DeepSeek sparse attention's chosen keys,
            ``(B, L, k)``: each query attends to those keys only). Ignored: what cannot
            change the output, such as ``use_cache``, ``sliding_window`` (the mask
            holds the window) and ``deterministic`` (a flash-attention flag for the
            backward pass), and any ``None`` value.

    Returns:
        ``(out, weights)``: the output ``(B, L, H, Dv)``, and the attention weights
            ``(B, H, L, S)`` when ``output_attentions`` is true or dropout is active
            (else ``None``).

    Raises:
        NotImplementedError: For a keyword argument this function does not know
            (and whose value is not ``None``), and for what
            ``kernel="flash"`` cannot do (attention weights, dropout).
        ValueError: For sinks of a shape that fits neither form, or both ``s_aux``
            and ``sinks``.
    """
    is_causal_arg = kwargs.pop("is_causal", None)
    position_bias: Tensor | None = kwargs.pop("position_bias", None)
    sinks = _sinks(kwargs.pop("s_aux", None), kwargs.pop("sinks", None), query)
    softcap: float | None = kwargs.pop("softcap", None)
    indices: Tensor | None = kwargs.pop("indices", None)
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

    B, H, L, S = query.shape[0], query.shape[1], query.shape[-2], key.shape[-2]
    enable_gqa = key.shape[1] != H
    is_causal, keys = causality(module, attention_mask, is_causal_arg, L, S)
    if keys < S:
        key, value = key[..., :keys, :], value[..., :keys, :]
        if position_bias is not None:
            position_bias = position_bias[..., :keys]
        S = keys

    # The eager path adds a float mask: 0 where a query may attend, the dtype's most
    # negative number where it may not (so a query that sees no key attends to all
    # keys equally rather than returning zero, as in eager).
    mask = eager_mask(attention_mask, query.dtype)
    if (position_bias is not None or sinks is not None or indices is not None) and is_causal:
        # Something else goes into the mask: causality is written out in it too.
        causal = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        mask = additive(causal, query.dtype)
        is_causal = False
    if position_bias is not None:
        mask = position_bias if mask is None else position_bias + mask
    if indices is not None:
        # DeepSeek sparse attention: each query attends only to the keys its indexer
        # chose, as Transformers' eager path folds them into the mask.
        chosen = topk_mask(indices, S).unsqueeze(1)  # (B, 1, L, S)
        if mask is None:
            mask = additive(chosen, query.dtype)
        else:
            mask = mask.masked_fill(~chosen, torch.finfo(query.dtype).min)

    value_for_weights = value
    if sinks is not None:
        # A sink is one more logit in every row of the scores, dropped after the
        # softmax (gpt-oss, inkling2). Here it is a key of zeros, so its score is 0,
        # with the sink as its bias, and a value of zeros, so it adds nothing to the
        # output.
        if mask is None:
            mask = torch.zeros(1, 1, L, S, dtype=query.dtype, device=query.device)
        mask = mask.expand(B, H, L, S)
        mask = torch.cat([mask, sinks.to(mask.dtype)], dim=-1)  # (B, H, L, S + 1)
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
        groups = H // value_for_weights.shape[1]
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


def _sinks(s_aux: Tensor | None, sinks: Tensor | None, query: Tensor) -> Tensor | None:
    """The sink logits as one column of the scores, ``(B, H, L, 1)``, or ``None``.

    gpt-oss passes one logit per head as ``s_aux``, ``(H,)``; inkling2 computes one per
    query from the hidden states and passes ``sinks``, ``(B, H, L, 1)``. The mathematics
    is the same: one more logit in the row.
    """
    if s_aux is not None and sinks is not None:
        raise ValueError(
            f"s_aux and sinks are two names for the sink logits; got both, s_aux "
            f"{tuple(s_aux.shape)} and sinks {tuple(sinks.shape)}"
        )
    given, name = (s_aux, "s_aux") if s_aux is not None else (sinks, "sinks")
    if given is None:
        return None
    B, H, L = query.shape[0], query.shape[1], query.shape[-2]
    if given.shape == (H,):
        return given.reshape(1, H, 1, 1).expand(B, H, L, 1)  # one logit per head
    per_query = (B, H, L, 1)
    if given.ndim == 4 and all(n in (1, m) for n, m in zip(given.shape, per_query, strict=True)):
        return given.expand(per_query)
    raise ValueError(
        f"{name} must hold one sink logit per head, shape ({H},), or per query, "
        f"broadcastable to (B, H, L, 1) = {per_query}; got {tuple(given.shape)}"
    )


def _softcap_mod(softcap: float, keys: int) -> Callable[..., Tensor]:
    """Gemma 2's soft-capping (`attention.softcap_score_mod`) of the first ``keys`` columns.

    A sink column after them keeps its logit.
    """
    cap = softcap_score_mod(softcap)

    def score_mod(s: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        return torch.where(k < keys, cap(s, b, h, q, k), s)

    return score_mod

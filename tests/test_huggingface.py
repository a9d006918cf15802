"""attention.integrations.huggingface: Transformers models on the package's attention.

Every model is built twice from one tiny config with random weights (nothing is
downloaded): once with Transformers' own ``"eager"`` attention, once with the registered
name, with the same state dict. Logits, generated tokens and attention weights must agree,
and a spy on the package's functions shows that the package computed them.
"""

from __future__ import annotations

import copy
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
pytest.importorskip("transformers")

from transformers import (
    AttentionInterface,
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.masking_utils import AttentionMaskInterface, bidirectional_mask_function

from attention import efficient, functional
from attention.integrations import huggingface
from attention.integrations.huggingface import attention_forward, register

NAME = register("attention-by-running-test")
TILED = register("attention-by-running-test-tiled", kernel="flash")
VOCAB = 100
DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
SEQ2SEQ_SIZES = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    max_position_embeddings=32,
)
# The init of the families added for issue 34: with Transformers' default (std 0.02) an
# error in the attention can move some families' logits by less than the tolerance;
# with 0.1 it shows.
WIDE = 0.1

# family: (auto class, config arguments, what it shows)
FAMILIES: dict[str, tuple[type, dict[str, object]]] = {
    # grouped-query attention: 4 query heads share 2 key/value heads
    "llama": (
        AutoModelForCausalLM,
        dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2, **DECODER),
    ),
    # every layer slides a window of 4 keys over 7 tokens
    "mistral": (
        AutoModelForCausalLM,
        dict(
            model_type="mistral",
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=4,
            **DECODER,
        ),
    ),
    # logit soft-capping (softcap), alternating sliding and full layers
    "gemma2": (
        AutoModelForCausalLM,
        dict(
            model_type="gemma2",
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=4,
            # Large weights and a small cap, so that the cap bends the scores.
            initializer_range=0.5,
            attn_logit_softcapping=1.0,
            **DECODER,
        ),
    ),
    # learned sinks (s_aux), a mixture of experts, sliding layers
    "gpt_oss": (
        AutoModelForCausalLM,
        dict(
            model_type="gpt_oss",
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,
            **{**DECODER, "intermediate_size": 32},
        ),
    ),
    # multi-query attention (one key/value head) with QK-norm
    "qwen3": (
        AutoModelForCausalLM,
        dict(
            model_type="qwen3",
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=8,
            **DECODER,
        ),
    ),
    # bidirectional encoder with a padding mask
    "bert": (
        AutoModel,
        dict(model_type="bert", num_attention_heads=4, **DECODER),
    ),
    # relative position bias (position_bias), encoder and decoder
    "t5": (
        AutoModelForSeq2SeqLM,
        dict(
            model_type="t5",
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
        ),
    ),
    # cross-attention over a padded encoder output
    "bart": (
        AutoModelForSeq2SeqLM,
        dict(model_type="bart", **SEQ2SEQ_SIZES),
    ),
    # The four below are the eager-only families (`_supports_sdpa = False`) that gave
    # wrong logits with no error while the package used SDPA's masks (issue 34, item
    # 16): the three decoders' layers say `is_causal = False`, and deepseek_v4 appends
    # float columns to the mask.
    "nllb-moe": (
        AutoModelForSeq2SeqLM,
        dict(model_type="nllb-moe", num_experts=4, init_std=WIDE, **SEQ2SEQ_SIZES),
    ),
    "pegasus_x": (
        AutoModelForSeq2SeqLM,
        # Blocks of 4 with 2 global tokens, so that the encoder's local attention is in play.
        dict(
            model_type="pegasus_x",
            block_size=4,
            num_global_tokens=2,
            init_std=WIDE,
            **SEQ2SEQ_SIZES,
        ),
    ),
    "bigbird_pegasus": (
        AutoModelForSeq2SeqLM,
        # Full attention in the encoder: its block-sparse attention is the model's own code.
        dict(
            model_type="bigbird_pegasus",
            attention_type="original_full",
            init_std=WIDE,
            **SEQ2SEQ_SIZES,
        ),
    ),
    # compressed key slots (a float block bias appended to the mask), one key/value head
    "deepseek_v4": (
        AutoModelForCausalLM,
        dict(
            model_type="deepseek_v4",
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            qk_rope_head_dim=8,
            q_lora_rank=16,
            o_lora_rank=16,
            o_groups=2,
            moe_intermediate_size=32,
            n_routed_experts=4,
            num_experts_per_tok=2,
            index_n_heads=2,
            index_head_dim=16,
            index_topk=4,
            layer_types=["heavily_compressed_attention", "compressed_sparse_attention"],
            mlp_layer_types=["hash_moe", "moe"],
            initializer_range=WIDE,
            **{k: v for k, v in DECODER.items() if k != "intermediate_size"},
        ),
    ),
    # per-query sinks (`sinks`, (B, H, L, 1)) and a relative position bias (item 17)
    "inkling2_text": (
        AutoModelForCausalLM,
        dict(
            model_type="inkling2_text",
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            swa_num_attention_heads=4,
            swa_num_key_value_heads=2,
            swa_head_dim=8,
            sliding_window_size=4,
            moe_intermediate_size=32,
            n_routed_experts=4,
            num_experts_per_tok=2,
            layer_types=["hybrid_sliding", "hybrid"],
            eos_token_id=2,
            initializer_range=WIDE,
            **{k: v for k, v in DECODER.items() if k != "intermediate_size"},
        ),
    ),
    # passes `deterministic=`, a flash-attention flag that eager ignores (item 18)
    "modernbert": (
        AutoModelForMaskedLM,
        dict(
            model_type="modernbert",
            num_attention_heads=4,
            local_attention=4,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            sep_token_id=3,
            cls_token_id=3,
            initializer_range=WIDE,
            **DECODER,
        ),
    ),
}
DECODERS = ["llama", "mistral", "gemma2", "gpt_oss", "qwen3", "deepseek_v4", "inkling2_text"]
SEQ2SEQ = ["t5", "bart", "nllb-moe", "pegasus_x", "bigbird_pegasus"]
# Written for eager attention only; wrong logits with no error once (issue 34, item 16).
EAGER_ONLY = ["nllb-moe", "pegasus_x", "bigbird_pegasus", "deepseek_v4"]
# Passing keyword arguments the package once refused (items 17 and 18).
NEWER = ["inkling2_text", "modernbert"]
# Transformers' "sdpa" is PyTorch's kernel: a float64 reference where the family has it
# (eager computes its softmax in float32 in most decoders, so it is not one).
WITH_SDPA = ["llama", "mistral", "qwen3", "bert", "t5", "bart"]


# MPT computes its attention with its own code, but takes the mask registered under the
# model's attention name.
MPT = dict(model_type="mpt", d_model=32, n_heads=4, n_layers=2, vocab_size=VOCAB, max_seq_len=32)


def config(family: str, **changes: object) -> PretrainedConfig:
    arguments = MPT if family == "mpt" else FAMILIES[family][1]
    return AutoConfig.for_model(**{**arguments, **changes})


def build(
    family: str, attn: str, dtype: torch.dtype = torch.float32, **changes: object
) -> PreTrainedModel:
    """The family's model, with weights from seed 0: the same for every ``attn``."""
    # A config of its own: a model reads its attention implementation from its config.
    cfg = copy.deepcopy(config(family, **changes))
    torch.manual_seed(0)
    cls = FAMILIES[family][0]
    model: PreTrainedModel = cls.from_config(cfg, attn_implementation=attn, dtype=dtype)
    return model.eval()


def pair(family: str, attn: str = NAME, **kwargs: object) -> tuple[PreTrainedModel, ...]:
    """Eager and ``attn`` models of one family with identical weights."""
    eager, ours = build(family, "eager", **kwargs), build(family, attn, **kwargs)
    ours.load_state_dict(eager.state_dict())
    return eager, ours


def batch(family: str) -> dict[str, torch.Tensor]:
    """Two sequences of 7 tokens; the second has 3 padding tokens (left for decoders)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 7), generator=generator)
    mask = torch.ones(2, 7, dtype=torch.long)
    if family in DECODERS:
        mask[1, :3] = 0  # left padding
    else:
        mask[1, 4:] = 0  # right padding of the encoder input
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family in SEQ2SEQ:
        inputs["decoder_input_ids"] = torch.randint(3, VOCAB, (2, 5), generator=generator)
    return inputs


def output(model: PreTrainedModel, inputs: dict[str, torch.Tensor], **kwargs: object):
    with torch.no_grad():
        return model(**inputs, **kwargs)


def real(family: str, result: object, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits (or hidden states) at real positions: padded queries are not compared."""
    values = getattr(result, "logits", None)
    if values is None:
        values = result.last_hidden_state  # type: ignore[attr-defined]
    if family in SEQ2SEQ:
        return values  # the decoder's queries are all real
    return values[inputs["attention_mask"].bool()]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count calls of the package's attention functions made by the integration."""
    calls: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def wrapper(*args: object, **kwargs: object) -> torch.Tensor:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for module, name in [
        (functional, "scaled_dot_product_attention"),
        (functional, "attention_weights"),
        (efficient, "flash_attention"),
    ]:
        monkeypatch.setattr(module, name, counting(name, getattr(module, name)))
    yield calls


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> float:
    """Assert agreement relative to the size of ``expected``; return the max |diff|."""
    diff = (actual - expected).abs().max().item()
    assert diff <= rtol * expected.abs().max().item(), diff
    return diff


# --- exact to eager ----------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_match_eager(family: str, spy: Counter[str]) -> None:
    eager, ours = pair(family)
    inputs = batch(family)
    expected = real(family, output(eager, inputs), inputs)
    assert spy["scaled_dot_product_attention"] == 0
    actual = real(family, output(ours, inputs), inputs)
    assert spy["scaled_dot_product_attention"] > 0
    close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt_oss", "t5", "bert", "bart", *EAGER_ONLY, *NEWER])
def test_unpadded_batch_matches_eager(family: str, spy: Counter[str]) -> None:
    """Without padding, a model that declares SDPA support gets no mask: causality comes
    from the layer (``module.is_causal``), and sinks and T5's bias need a causal mask
    built here. A model written for eager only gets eager's mask written out: its
    layers' ``is_causal`` cannot be trusted (False in the seq2seq decoders)."""
    eager, ours = pair(family)
    inputs = batch(family)
    inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])
    close(
        real(family, output(ours, inputs), inputs),
        real(family, output(eager, inputs), inputs),
        1e-5,
    )
    assert spy["scaled_dot_product_attention"] > 0


def test_gradients_match_eager() -> None:
    eager, ours = pair("llama")
    inputs = batch("llama")
    for model in (eager, ours):
        model(**inputs, labels=inputs["input_ids"]).loss.backward()
    grads = dict(eager.named_parameters())
    for name, parameter in ours.named_parameters():
        assert parameter.grad is not None
        close(parameter.grad, grads[name].grad, rtol=1e-5)


@pytest.mark.parametrize("family", WITH_SDPA)
def test_float64_matches_pytorch_sdpa(family: str, spy: Counter[str]) -> None:
    sdpa, ours = pair(family, dtype=torch.float64)
    sdpa.set_attn_implementation("sdpa")
    inputs = batch(family)
    expected = real(family, output(sdpa, inputs), inputs)
    actual = real(family, output(ours, inputs), inputs)
    assert spy["scaled_dot_product_attention"] > 0
    close(actual, expected, rtol=1e-12)


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_oss", "t5", "inkling2_text"])
def test_flash_kernel_matches_eager(family: str, spy: Counter[str]) -> None:
    eager, ours = pair(family, attn=TILED)
    inputs = batch(family)
    close(
        real(family, output(ours, inputs), inputs),
        real(family, output(eager, inputs), inputs),
        1e-5,
    )
    assert spy["flash_attention"] > 0
    assert spy["scaled_dot_product_attention"] == 0


def test_sliding_window_is_in_effect() -> None:
    """The window (4 keys of 7) changes mistral's logits, so the test above tests it."""
    inputs = batch("mistral")
    windowed = output(build("mistral", NAME), inputs).logits
    full = output(build("mistral", NAME, sliding_window=None), inputs).logits
    assert (windowed - full).abs().max() > 1e-3


def test_softcap_is_in_effect() -> None:
    inputs = batch("gemma2")
    capped = output(build("gemma2", NAME), inputs).logits
    uncapped = output(build("gemma2", NAME, attn_logit_softcapping=None), inputs).logits
    assert (capped - uncapped).abs().max() > 1e-4


@pytest.mark.parametrize("family", ["llama", "gpt_oss", "t5"])
def test_output_attentions_equal_eager(family: str, spy: Counter[str]) -> None:
    eager, ours = pair(family)
    inputs = batch(family)
    expected = output(eager, inputs, output_attentions=True)
    actual = output(ours, inputs, output_attentions=True)
    assert spy["attention_weights"] > 0
    names = ["encoder_attentions", "decoder_attentions", "cross_attentions"]
    names = names if family in SEQ2SEQ else ["attentions"]
    rows = inputs["attention_mask"].bool()[:, None, :, None]  # (B, 1, L, 1): real queries
    for name in names:
        assert len(getattr(actual, name)) == len(getattr(expected, name)) > 0
        for a, e in zip(getattr(actual, name), getattr(expected, name), strict=True):
            assert a is not None and a.shape == e.shape
            keep = rows if name == "attentions" else torch.ones_like(a, dtype=torch.bool)
            close(a.masked_fill(~keep, 0), e.masked_fill(~keep, 0), rtol=1e-5)


def test_dropout_in_training_matches_eager(spy: Counter[str]) -> None:
    eager, ours = pair("llama", attention_dropout=0.5)
    eager.train()
    ours.train()
    inputs = batch("llama")
    torch.manual_seed(2)
    expected = real("llama", output(eager, inputs), inputs)
    torch.manual_seed(2)
    actual = real("llama", output(ours, inputs), inputs)
    assert spy["attention_weights"] > 0
    close(actual, expected, rtol=1e-5)


# --- generation with Transformers' KV cache ------------------------------------------


@pytest.mark.parametrize("family", DECODERS + SEQ2SEQ)
def test_greedy_generate_gives_the_same_tokens(family: str, spy: Counter[str]) -> None:
    eager, ours = pair(family)
    inputs = batch(family)
    inputs.pop("decoder_input_ids", None)
    settings = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    expected = eager.generate(**inputs, **settings)
    calls = spy["scaled_dot_product_attention"]
    actual = ours.generate(**inputs, **settings)
    assert spy["scaled_dot_product_attention"] > calls
    assert torch.equal(actual, expected)


def test_beam_search_gives_the_same_tokens() -> None:
    eager, ours = pair("llama")
    inputs = batch("llama")
    settings = dict(max_new_tokens=4, num_beams=3, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(**inputs, **settings), eager.generate(**inputs, **settings))


# --- what it refuses -----------------------------------------------------------------


def test_a_model_with_attention_of_its_own_reads_the_registered_mask(
    spy: Counter[str],
) -> None:
    """MPT computes its attention itself, with the mask built under the registered name,
    which it reads as eager's (`.to(torch.bool)`: True where a key is hidden). A boolean
    SDPA mask (True where a key is visible) inverted every padded row."""
    models = {}
    for attn in ("eager", NAME):
        torch.manual_seed(0)
        models[attn] = AutoModelForCausalLM.from_config(
            config("mpt", initializer_range=WIDE), attn_implementation=attn
        ).eval()
    models[NAME].load_state_dict(models["eager"].state_dict())
    inputs = batch("llama")  # left padding, as for every decoder here
    close(
        real("mpt", output(models[NAME], inputs), inputs),
        real("mpt", output(models["eager"], inputs), inputs),
        1e-5,
    )
    assert spy["scaled_dot_product_attention"] == 0  # its own attention, as said


class _Layer(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 1  # read by Transformers' eager functions


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)


def test_is_causal_from_the_call_is_a_causal_mask() -> None:
    q, k, v = _qkv()
    out, _ = attention_forward(_Layer(), q, k, v, None, is_causal=True)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected.transpose(1, 2))


# --- the masks: those of the attention each model was written for --------------------


def _mask_of(family: str, **kwargs: object) -> torch.Tensor | None:
    """The registered mask function's causal mask of 3 queries for ``family``."""
    mask_function = AttentionMaskInterface._global_mapping[NAME]
    return mask_function(batch_size=1, q_length=3, kv_length=3, config=config(family), **kwargs)


def test_a_model_that_declares_sdpa_gets_sdpas_masks() -> None:
    """None for a causal batch without padding (the layer's ``is_causal`` then says it,
    as in Transformers' SDPA path), boolean with padding."""
    assert _mask_of("llama") is None
    padded = _mask_of("llama", attention_mask=torch.tensor([[False, True, True]]))
    assert padded is not None and padded.dtype == torch.bool


@pytest.mark.parametrize("family", [*EAGER_ONLY, "gpt_oss", "inkling2_text", "mpt"])
def test_a_model_written_for_eager_only_gets_eagers_masks_written_out(family: str) -> None:
    """Its layers' ``is_causal`` is not to be trusted, and some of these models edit
    the mask as a float tensor: the causal mask is there, in eager's float format, even
    without padding, and so is an encoder's (all zeros)."""
    neg = torch.finfo(torch.float32).min
    expected = torch.tensor([[0.0, neg, neg], [0.0, 0.0, neg], [0.0, 0.0, 0.0]])
    mask = _mask_of(family)
    assert mask is not None and torch.equal(mask, expected.expand(1, 1, 3, 3))
    everything = _mask_of(family, mask_function=bidirectional_mask_function)
    assert everything is not None and torch.equal(everything, torch.zeros(1, 1, 3, 3))


# --- sinks: one logit per head (gpt-oss, `s_aux`) or per query (inkling2, `sinks`) -----


def test_per_query_sinks_equal_inkling2s_eager() -> None:
    from transformers.models.inkling2.modeling_inkling2 import eager_attention_forward

    B, H, Hkv, L, D = 2, 6, 3, 5, 7
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, D, generator=generator)
    k, v = torch.randn(2, B, Hkv, L, D, generator=generator)
    layer = _Layer()
    layer.num_key_value_groups = H // Hkv
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = torch.zeros(B, 1, L, L).masked_fill(~causal, torch.finfo(torch.float32).min)
    extra = dict(
        scaling=0.3,
        position_bias=torch.randn(1, H, L, L, generator=generator),
        sinks=torch.randn(B, H, L, 1, generator=generator) * 3,
    )
    eager = eager_attention_forward(layer, q, k, v, mask, **extra)
    ours = attention_forward(layer, q, k, v, mask, output_attentions=True, **extra)
    torch.testing.assert_close(ours[0], eager[0])  # (B, L, H, D)
    torch.testing.assert_close(ours[1], eager[1])  # (B, H, L, S): rows sum below 1
    assert (ours[1].sum(-1) < 1).all()


def test_a_sink_per_head_is_a_sink_per_query_repeated() -> None:
    q, k, v = _qkv()  # H = 2, L = 3
    per_head = torch.tensor([0.5, -1.0])
    per_query = per_head.view(1, 2, 1, 1).expand(1, 2, 3, 1)
    head, _ = attention_forward(_Layer(), q, k, v, None, s_aux=per_head)
    query, _ = attention_forward(_Layer(), q, k, v, None, sinks=per_query)
    plain, _ = attention_forward(_Layer(), q, k, v, None)
    torch.testing.assert_close(head, query)
    assert not torch.allclose(head, plain)  # the sinks take weight


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sinks": torch.zeros(1, 2, 3)}, r"sinks must hold.*\(1, 2, 3\)"),
        ({"sinks": torch.zeros(1, 2, 4, 1)}, r"sinks must hold.*\(1, 2, 4, 1\)"),
        ({"s_aux": torch.zeros(3)}, r"s_aux must hold.*\(3,\)"),
        ({"s_aux": torch.zeros(2), "sinks": torch.zeros(1, 2, 3, 1)}, "got both"),
    ],
)
def test_sinks_of_another_shape_raise(kwargs: dict[str, torch.Tensor], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        attention_forward(_Layer(), *_qkv(), None, **kwargs)


# --- DeepSeek sparse attention: the keys each query's indexer chose (`indices`) --------


@pytest.mark.parametrize(
    ("masked", "causal_layer"),
    [(True, False), (False, False), (False, True)],
    ids=["causal-mask", "no-mask", "no-mask-causal-layer"],
)
def test_chosen_keys_equal_deepseeks_eager_with_them_folded_into_the_mask(
    masked: bool, causal_layer: bool
) -> None:
    """Transformers' eager path folds the indexer's choice into the mask (DeepSeek-V3.2's
    attention, `index_mask`); every other name gets `indices` and must apply them."""
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import eager_attention_forward

    B, H, Hkv, L, D, k = 2, 4, 2, 6, 5, 3
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, D, generator=generator)
    key, v = torch.randn(2, B, Hkv, L, D, generator=generator)
    layer = _Layer()
    layer.num_key_value_groups = H // Hkv
    indices = torch.rand(B, L, L, generator=generator).argsort(-1)[..., :k].int()  # (B, L, k)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    minimum = torch.finfo(torch.float32).min
    written = torch.zeros(B, 1, L, L).masked_fill(~causal, minimum)  # eager's causal mask
    mask = written if masked else None
    # What eager gets: the causal mask, also when only the layer says it is causal.
    base = written if masked or causal_layer else torch.zeros(B, 1, L, L)
    index_mask = torch.ones(B, L, L, dtype=torch.bool).scatter(-1, indices.long(), False)
    folded = base.masked_fill(index_mask[:, None], minimum)
    layer.is_causal = causal_layer  # with no mask, this package takes causality from it
    eager, _ = eager_attention_forward(layer, q, key, v, folded, scaling=0.4)
    ours, _ = attention_forward(layer, q, key, v, mask, scaling=0.4, indices=indices)
    dense, _ = attention_forward(layer, q, key, v, mask, scaling=0.4)
    torch.testing.assert_close(ours, eager)
    assert not torch.allclose(ours, dense)  # the choice matters


# --- keyword arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("deterministic", False), ("deterministic", True), ("logits_to_keep", 1)],
)
def test_flags_that_cannot_change_the_result_are_accepted(keyword: str, value: object) -> None:
    q, k, v = _qkv()
    plain, _ = attention_forward(_Layer(), q, k, v, None)
    flagged, _ = attention_forward(_Layer(), q, k, v, None, **{keyword: value})
    assert torch.equal(flagged, plain)


# Each would change the result: ALiBi's slopes, packed sequences' boundaries, MiniMax's
# blocks.
@pytest.mark.parametrize("keyword", ["alibi_slopes", "cu_seq_lens_q", "block_indices"])
def test_keywords_that_could_change_the_result_are_refused_by_name(keyword: str) -> None:
    with pytest.raises(NotImplementedError, match=keyword):
        attention_forward(_Layer(), *_qkv(), None, **{keyword: torch.ones(2, dtype=torch.long)})


def test_none_and_known_keywords_are_accepted() -> None:
    out, weights = attention_forward(
        _Layer(), *_qkv(), None, alibi_slopes=None, sliding_window=4, use_cache=True
    )
    assert out.shape == (1, 3, 2, 4) and weights is None


@pytest.mark.parametrize(
    ("kwargs", "training", "match"),
    [({"output_attentions": True}, False, "output_attentions"), ({}, True, "dropout")],
)
def test_flash_kernel_refuses_weights_and_dropout(
    kwargs: dict[str, object], training: bool, match: str
) -> None:
    layer = _Layer().train(training)
    with pytest.raises(NotImplementedError, match=match):
        attention_forward(layer, *_qkv(), None, dropout=0.1, kernel="flash", **kwargs)


def test_register_rejects_an_unknown_kernel() -> None:
    with pytest.raises(ValueError, match="kernel must be one of"):
        register("x", kernel="xformers")


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("my-flash", "loads that kernel"),
        ("paged|mine", r"strips the prefix 'paged\|'"),
        ("me/my-attention", "kernel on the Hugging Face Hub"),
    ],
)
def test_register_refuses_names_transformers_sends_elsewhere(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        register(name)


@pytest.mark.parametrize("name", ["my-sdpa", "sdpa-readable", "flex_attention-mine"])
def test_register_refuses_names_transformers_checks_a_kernel_for(name: str) -> None:
    with pytest.raises(ValueError, match="only for models that support its own"):
        register(name)


def _register_bypassing_checks(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The package's functions under ``name``, as `register` would add them if it let
    the name through; undone after the test."""
    monkeypatch.setitem(AttentionInterface._global_mapping, name, attention_forward)
    mask_function = huggingface._mask_for_the_model
    monkeypatch.setitem(AttentionMaskInterface._global_mapping, name, mask_function)


def test_a_name_with_sdpa_runs_the_function_but_refuses_eager_only_models(
    monkeypatch: pytest.MonkeyPatch, spy: Counter[str]
) -> None:
    """The reason `register` gives for refusing "sdpa" in a name, checked: Transformers
    does not reroute the name (llama runs the registered function), but it refuses to
    build nllb-moe under it."""
    name = "attention-by-running-sdpa-check"
    _register_bypassing_checks(monkeypatch, name)
    eager, ours = pair("llama", attn=name)
    inputs = batch("llama")
    close(
        real("llama", output(ours, inputs), inputs),
        real("llama", output(eager, inputs), inputs),
        1e-5,
    )
    assert spy["scaled_dot_product_attention"] > 0
    with pytest.raises(ValueError, match="does not support an attention implementation"):
        build("nllb-moe", name)


@pytest.mark.parametrize(
    "name", ["attention-by-running-flash-check", "paged|attention-by-running-check", "me/check"]
)
@pytest.mark.filterwarnings("ignore::FutureWarning")  # Transformers' note on "paged|"
def test_names_transformers_sends_elsewhere_never_reach_the_function(
    name: str, monkeypatch: pytest.MonkeyPatch, spy: Counter[str]
) -> None:
    """The reasons `register` gives for refusing these names, checked: registered all
    the same, the function is never called (the model does not even build)."""
    _register_bypassing_checks(monkeypatch, name)
    with pytest.raises((ValueError, ImportError, OSError)):
        output(build("llama", name), batch("llama"))
    assert sum(spy.values()) == 0


def test_register_without_transformers_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "transformers.masking_utils", None)
    missing = r'which is not installed: pip install "transformers>=5"$'
    with pytest.raises(ImportError, match=missing):
        huggingface.register("unavailable")

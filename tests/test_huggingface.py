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
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    PretrainedConfig,
    PreTrainedModel,
)

from attention import efficient, functional
from attention.integrations import huggingface
from attention.integrations.huggingface import attention_forward, register

NAME = register("attention-by-running-test")
TILED = register("attention-by-running-test-tiled", kernel="flash")
VOCAB = 100
DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2)

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
        dict(
            model_type="bart",
            vocab_size=VOCAB,
            d_model=32,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            max_position_embeddings=32,
        ),
    ),
}
DECODERS = ["llama", "mistral", "gemma2", "gpt_oss", "qwen3"]
SEQ2SEQ = ["t5", "bart"]
# Transformers' "sdpa" is PyTorch's kernel: a float64 reference where the family has it
# (eager computes its softmax in float32 in most decoders, so it is not one).
WITH_SDPA = ["llama", "mistral", "qwen3", "bert", "t5", "bart"]


def config(family: str, **changes: object) -> PretrainedConfig:
    return AutoConfig.for_model(**{**FAMILIES[family][1], **changes})


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


@pytest.mark.parametrize("family", ["llama", "gpt_oss", "t5", "bert", "bart"])
def test_unpadded_batch_matches_eager(family: str, spy: Counter[str]) -> None:
    """Without padding Transformers passes no mask: causality comes from the layer
    (``module.is_causal``), and sinks and T5's bias need a causal mask built here."""
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


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_oss", "t5"])
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


class _Layer(torch.nn.Module):
    is_causal = True


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)


def test_unknown_keyword_raises_naming_it() -> None:
    with pytest.raises(NotImplementedError, match="alibi_slopes"):
        attention_forward(_Layer(), *_qkv(), None, alibi_slopes=torch.ones(2))


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


@pytest.mark.parametrize("name", ["my-flash", "sdpa-readable", "paged|mine"])
def test_register_rejects_names_transformers_reroutes(name: str) -> None:
    with pytest.raises(ValueError, match="choose another name"):
        register(name)


def test_register_without_transformers_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "transformers.masking_utils", None)
    with pytest.raises(ImportError, match=r'pip install "attention-by-running\[hf\]"'):
        huggingface.register("unavailable")

"""attention.integrations.huggingface.patch: whole hybrid models on the package.

Each family below is a tiny random model (nothing downloaded) with one linear-attention
layer and one softmax layer (Mamba-2: one mixer alone; DiffLlama: two differential
attention layers). Its softmax layer runs on `register()`, its other layers on
`patch()`; against the same weights on Transformers' eager code:

- the logits agree within 1e-5 of their size in float32, without and with left padding;
- greedy generation gives the same tokens;
- decoding token by token from the model's cache (the convolution's and the delta
  rule's states) gives the logits of the full forward pass;
- a spy counts the package's calls (delta rule, decayed linear attention, SSD,
  differential attention), so the comparison cannot pass on Transformers' own code.

A model with a token mixer `patch` does not compute is refused by name, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attention.integrations import huggingface_layers  # noqa: E402
from attention.integrations.huggingface import patch, register  # noqa: E402
from tests.test_hf_families import SMALL, build, tiny_config  # noqa: E402

NAME = register("attention-by-running-patched")

# The model classes, each with its layer types: one linear-attention layer, then one
# softmax layer, so that both paths and the cache of each run.
FAMILIES = {
    "Qwen3NextForCausalLM": "gated_delta_net",
    "Qwen3_5ForCausalLM": "gated_delta_net",
    "Qwen3_5MoeForCausalLM": "gated_delta_net",
    "KimiLinearForCausalLM": "kimi_delta_attention",
    "MiniMaxForCausalLM": "lightning_attention",
    "Mamba2ForCausalLM": "mamba2",
    "DiffLlamaForCausalLM": "differential_attention",
}
# How many layers `patch` replaces in each: the linear one, or DiffLlama's two.
PATCHED = {name: 2 if name == "DiffLlamaForCausalLM" else 1 for name in FAMILIES}
LAYER_TYPES = ["linear_attention", "full_attention"]
RTOL = 1e-5  # of the largest |logit|, as in tests/test_hf_families.py
L, PAD = 9, 3


@pytest.fixture
def recurrence_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many positions the package's functions computed, call by call."""
    calls: list[int] = []
    # Each function's first argument, and where its length is: (B, H, L, D) or, for
    # ssd, Mamba's (B, L, H, P).
    spied = (
        ("delta_rule_attention", 2),
        ("decayed_linear_attention", 2),
        ("ssd", 1),
        ("differential_attention", 2),
    )
    for name, length in spied:
        original = getattr(huggingface_layers, name)

        def counting(*args: Any, _f: Any = original, _at: int = length, **kwargs: Any) -> Any:
            calls.append(args[0].shape[_at])
            return _f(*args, **kwargs)

        monkeypatch.setattr(huggingface_layers, name, counting)
    yield calls


def models(name: str) -> tuple[Any, Any]:
    """Eager, and the same weights with register() and patch()."""
    cls = getattr(transformers, name)
    if name == "Mamba2ForCausalLM":  # one mixer, no softmax layer; chunks shorter than L
        config = transformers.Mamba2Config(
            vocab_size=SMALL["vocab_size"], hidden_size=32, num_hidden_layers=1, num_heads=4,
            head_dim=16, n_groups=2, state_size=8, chunk_size=4, conv_kernel=3,
        )  # fmt: skip
    else:
        config = tiny_config(cls.config_class)
        if name != "DiffLlamaForCausalLM":  # DiffLlama: every layer differential, two
            text = config.get_text_config()
            text.layer_types = LAYER_TYPES
            text.num_hidden_layers = len(LAYER_TYPES)
    eager = build(cls, config, "eager")
    with torch.no_grad():
        for module in eager.modules():
            # Larger lambda vectors: lambda moves well away from lambda_init.
            for vector in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                if hasattr(module, vector):
                    getattr(module, vector).mul_(4)
            # Gates with a long memory (decay in (0.5, 1)) and biases that are not zero,
            # so that the state carries over many positions.
            for holder in (module, getattr(module, "forget_gate", None)):
                if hasattr(holder, "A_log") and hasattr(holder, "dt_bias"):
                    holder.A_log.uniform_(-3.0, 0.0)
                    holder.dt_bias.normal_()
    ours = build(cls, config, NAME)
    ours.load_state_dict(eager.state_dict())
    assert patch(ours) == {FAMILIES[name]: PATCHED[name]}
    return eager, ours


def inputs(vocab: int, padded: bool) -> dict[str, torch.Tensor]:
    ids = torch.randint(
        3, min(vocab, SMALL["vocab_size"]), (2, L), generator=torch.Generator().manual_seed(1)
    )
    mask = torch.ones(2, L, dtype=torch.long)
    if padded:
        mask[1, :PAD] = 0
    return {"input_ids": ids, "attention_mask": mask}


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    scale = expected.abs().max().item()
    diff = (actual - expected).abs().max().item()
    assert diff <= RTOL * scale, f"max |ours - eager| {diff:.3g}, |eager| {scale:.3g}"


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
@pytest.mark.parametrize("name", FAMILIES)
def test_patched_model_gives_eagers_logits(
    name: str, padded: bool, recurrence_calls: list[int]
) -> None:
    eager, ours = models(name)
    batch = inputs(eager.config.get_text_config().vocab_size, padded)
    with torch.no_grad():
        expected = eager(**batch).logits
        actual = ours(**batch).logits
    keep = batch["attention_mask"].bool()  # padded queries are not compared
    close(actual[keep], expected[keep])
    assert recurrence_calls == [L] * PATCHED[name]  # each patched layer, on the package


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_generation_gives_eagers_tokens(name: str, recurrence_calls: list[int]) -> None:
    eager, ours = models(name)
    batch = inputs(eager.config.get_text_config().vocab_size, padded=True)
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = eager.generate(**batch, **settings)
        actual = ours.generate(**batch, **settings)
    assert torch.equal(actual, expected)
    n = PATCHED[name]
    assert recurrence_calls == [L] * n + [1] * 5 * n  # prefill, then steps


@pytest.mark.parametrize("name", FAMILIES)
def test_decoding_from_the_cache_equals_the_full_forward(
    name: str, recurrence_calls: list[int]
) -> None:
    """The convolution's and the delta rule's states carry the prefix: a prefill of 4
    positions, then one position at a time, gives the full pass's logits."""
    _, ours = models(name)
    ids = inputs(ours.config.get_text_config().vocab_size, padded=False)["input_ids"]
    prefix = 4
    with torch.no_grad():
        full = ours(input_ids=ids).logits
        step = ours(input_ids=ids[:, :prefix], use_cache=True)
        pieces = [step.logits]
        for t in range(prefix, L):
            # Positions given: MiniMax (Transformers 5.23) counts the cache's length on
            # layer 0, a linear-attention layer with no keys, and would restart them at 0.
            # Mamba-2 names its cache cache_params, and has no positions.
            cache = getattr(step, "past_key_values", None) or step.cache_params
            given = (
                {"cache_params": cache}
                if name == "Mamba2ForCausalLM"
                else {"past_key_values": cache, "position_ids": torch.full((ids.shape[0], 1), t)}
            )
            step = ours(input_ids=ids[:, t : t + 1], use_cache=True, **given)
            pieces.append(step.logits)
    close(torch.cat(pieces, dim=1), full)
    n = PATCHED[name]
    assert recurrence_calls == [L] * n + [prefix] * n + [1] * (L - prefix) * n


def test_a_mixer_the_package_does_not_compute_is_refused_by_name() -> None:
    config = transformers.MambaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1)
    model = transformers.MambaForCausalLM(config)
    forwards = [m.forward for m in model.modules()]
    with pytest.raises(NotImplementedError, match=r"does not compute MambaMixer.*Nothing was"):
        patch(model)
    assert [m.forward for m in model.modules()] == forwards  # nothing replaced


def test_a_model_without_linear_layers_is_left_as_it_is() -> None:
    model = build(transformers.LlamaForCausalLM, tiny_config(transformers.LlamaConfig), "eager")
    assert patch(model) == {}


def test_the_differential_layer_gives_eagers_attention_weights() -> None:
    """Asked for them, DiffLlama returns the weights of its first softmax call, every
    query head's (the second map's heads after the first's); so does the patched layer."""
    eager, ours = models("DiffLlamaForCausalLM")
    batch = inputs(eager.config.vocab_size, padded=True)
    with torch.no_grad():
        expected = eager(**batch, output_attentions=True).attentions
        actual = ours(**batch, output_attentions=True).attentions
    assert len(actual) == len(expected) == PATCHED["DiffLlamaForCausalLM"]
    for ours_layer, eager_layer in zip(actual, expected, strict=True):
        torch.testing.assert_close(ours_layer, eager_layer, atol=1e-6, rtol=0)


def test_the_differential_layer_without_positions_counts_them_from_its_cache() -> None:
    """Called without ``position_ids`` (the model always passes them), the patched layer
    places its queries after the keys its cache holds, as the model would."""
    _, ours = models("DiffLlamaForCausalLM")
    layer = ours.model.layers[0].self_attn
    x = torch.randn(2, L, ours.config.hidden_size, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(L)[None]
    with torch.no_grad():
        given, _ = layer(x, position_ids=positions)
        counted, _ = layer(x)
        cache = transformers.DynamicCache(config=ours.config)
        layer(x[:, :4], past_key_values=cache)  # a prefix of 4 in the cache
        # The rest at once: a mask, as the model passes one (no mask means top-left).
        sees = torch.ones(L, L, dtype=torch.bool).tril()[4:]  # (L - 4, L): queries 4...
        step, _ = layer(x[:, 4:], attention_mask=sees, past_key_values=cache)
    torch.testing.assert_close(counted, given, atol=0, rtol=0)
    torch.testing.assert_close(step, given[:, 4:], atol=1e-6, rtol=0)

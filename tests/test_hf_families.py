"""Every text family of Transformers on register(), exactly as on eager (issue 35).

The families are read at collection time from Transformers' own auto mappings
(`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, `MODEL_FOR_MASKED_LM_MAPPING_NAMES`,
`MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`), one test per model class, so a newer
Transformers brings its new families in by itself. Each is built tiny from its config
(nothing is downloaded), in float32, twice: with ``attn_implementation="eager"`` and with
the name `register()` returns, the same weights in both. Their logits must agree, on a
batch without padding and on one with a left-padded row, and a spy must see the
package's attention called.

A family is skipped only for a reason of a fixed set (`Reason`), counted and listed per
reason at the end of the run (and in ``build/hf_families.txt``); anything else that goes
wrong is a failure, an unexplained miss.
"""

from __future__ import annotations

import copy
import enum
import inspect
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
transformers = pytest.importorskip("transformers")

from transformers.models.auto import modeling_auto  # noqa: E402

from attention import efficient, functional  # noqa: E402
from attention.integrations.huggingface import register  # noqa: E402
from tests.conftest import BUILD  # noqa: E402

NAME = register("attention-by-running-families")
MAPPINGS = (
    modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
)
# One test per model class: several model types can name the same class (qwen3_5 and
# qwen3_5_text), and one type can name two (BertLMHeadModel, BertForMaskedLM).
CLASSES = sorted({name for mapping in MAPPINGS for name in mapping.values()})


class Reason(str, enum.Enum):
    """Why a family is not compared: the only reasons a test here may skip for."""

    NOT_TEXT = "not a text model: multimodal, with an encoder of another modality"
    OWN_CODE = (
        "attention not through AttentionInterface: the modeling code never looks up "
        "ALL_ATTENTION_FUNCTIONS (its own attention, or none: SSM, linear attention)"
    )
    SPARSE = "DeepSeek sparse attention passes indices= (issue 35's sparse attention)"


# The keyword arguments `attention_forward` refuses by name (NotImplementedError) that a
# family may pass, each with its reason. Any other refusal is a failure.
REFUSED = {"indices": Reason.SPARSE}

# --- tiny configs -----------------------------------------------------------------------

VOCAB = 128
# Set on a config wherever it has the attribute (its families' many names for one size).
SMALL: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    head_dim=16,
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    d_kv=16,
    d_ff=128,
    n_embd=64,
    n_layer=2,
    n_head=4,
    n_positions=64,
    max_position_embeddings=64,
    ffn_dim=128,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    n_group=1,
    topk_group=1,
    kv_lora_rank=16,
    q_lora_rank=24,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    qk_head_dim=16,
    # Weights wide enough that an error in the attention moves the logits well past the
    # tolerance (with the usual 0.02 some families' logits barely depend on attention).
    initializer_range=0.1,
    init_std=0.1,
)
# A window shorter than the sequence, so that sliding layers slide.
WINDOW = 4
TOKEN_IDS = {
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
}
# What the generic shrinking above cannot do, by the config's model type.
OVERRIDES: dict[str, dict[str, Any]] = {
    "jamba": dict(
        attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1
    ),
    "bamba": dict(attn_layer_indices=[1]),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"]),
    "esmc": dict(num_key_value_heads=4),
    "zaya": dict(num_experts_per_tok=1),
    # The defaults do not build either: DbrxAttention reads a rope_theta its config lacks,
    # and cohere_compass's rotary embedding wants its parameters per layer type.
    "dbrx": dict(attn_config=dict(rope_theta=10000.0, kv_n_heads=2)),
    "cohere_compass_text": dict(
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    ),
    "esm": dict(pad_token_id=0),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"]),
    "xmod": dict(default_language="en_XX"),
    "mobilebert": dict(embedding_size=32, intra_bottleneck_size=32),
    "musicgen_decoder": dict(num_codebooks=1),
    "musicgen_melody_decoder": dict(num_codebooks=1),
    "longcat_flash": dict(head_dim=8),  # its rope part (qk_rope_head_dim)
    "dots3_note_text": dict(num_key_value_heads=4),
    "gemma3n_text": dict(num_kv_shared_layers=0),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
}


def _small(config_class: type) -> dict[str, Any]:
    """The arguments that make a config of this class tiny.

    The defaults are read from ``to_dict()``: it holds the fields a config can be given
    (not its properties) and, unlike attributes, reads a per-layer config (gemma4's).
    """
    default = config_class()
    fields = default.to_dict()
    aliases = getattr(default, "attribute_map", {})

    def field(key: str) -> str | None:
        key = aliases.get(key, key)
        return key if key in fields else None

    kw = {field(k): v for k, v in SMALL.items() if field(k)}
    if "qk_rope_head_dim" in kw:
        kw.pop("head_dim", None)  # multi-head latent attention: head_dim is the rope part
    if "kv_lora_rank" in kw:
        kw["num_key_value_heads"] = kw.get("num_attention_heads", 4)
    if isinstance(fields.get("rotary_dim"), int):
        kw["rotary_dim"] = 8
    window = field("sliding_window")
    if window and isinstance(fields[window], int):
        kw[window] = WINDOW
    # Two layers, or one of each kind where the family has kinds of layers
    # (`layer_types`), and every per-layer list cut to the layers kept.
    layers = field("num_hidden_layers")
    count = fields.get(layers) if layers else None
    types = fields.get(field("layer_types") or "")
    kept = [0, 1]
    if isinstance(types, list) and len(set(types)) > 1:
        kept = sorted({types.index(kind) for kind in types})
    if layers and isinstance(count, int):
        kw[layers] = len(kept)
        for key, value in fields.items():
            if isinstance(value, list) and len(value) == count:
                small = SMALL.get(key)
                kw[key] = [small if small and isinstance(value[i], int) else value[i] for i in kept]
        if fields.get("per_layer_config"):
            kw["per_layer_config"] = _per_layer(fields["per_layer_config"], kept)
    for key, value in TOKEN_IDS.items():
        given = fields.get(key)
        if isinstance(given, int) and given >= VOCAB:
            kw[key] = value
        elif isinstance(given, list):
            kw[key] = [i if i < VOCAB else value for i in given]
    return kw


def _per_layer(overrides: dict[str, dict[str, Any]], kept: list[int]) -> dict[int, Any]:
    """A per-layer config (gemma4's) for the layers kept, its sizes made small: twice the
    global size, to stay different from it, and a window of its own."""
    given = {int(index): values for index, values in overrides.items()}
    out = {}
    for index, original in enumerate(kept):
        values = given.get(original) or {}
        out[index] = {
            key: (2 * SMALL[key] if key in SMALL else WINDOW + 1)
            if isinstance(value, int) and (key in SMALL or key == "sliding_window")
            else value
            for key, value in values.items()
        }
    return {index: values for index, values in out.items() if values}


def tiny_config(config_class: type) -> Any:
    kw = _small(config_class)
    default = config_class()
    for name in getattr(config_class, "sub_configs", None) or {}:
        sub = getattr(default, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            kw[name] = {**sub.to_dict(), **_small(type(sub))}
    for key, value in OVERRIDES.get(default.model_type, {}).items():
        kw[key] = {**kw[key], **value} if isinstance(kw.get(key), dict) else value
    return config_class(**kw)


# --- what is skipped before building --------------------------------------------------

# A forward argument of another modality than text.
_MODALITY = re.compile(r"pixel|image|video|audio|speech|input_features|input_values")


def reason_not_to_build(cls: type) -> tuple[Reason, str] | None:
    parameters = inspect.signature(cls.forward).parameters
    other = sorted(p for p in parameters if _MODALITY.search(p))
    subs = sorted(getattr(cls.config_class, "sub_configs", None) or {})
    if other and subs:
        return Reason.NOT_TEXT, f"takes {', '.join(other)}; sub-configs {', '.join(subs)}"
    if "ALL_ATTENTION_FUNCTIONS" not in inspect.getsource(sys.modules[cls.__module__]):
        return Reason.OWN_CODE, cls.__module__.rsplit(".", 1)[-1]
    return None


# --- running ----------------------------------------------------------------------------

CALLS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def spy() -> Iterator[Counter[str]]:
    """Count the calls of the package's attention kernels (what `register()` runs)."""

    def counting(name: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
            CALLS[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    with pytest.MonkeyPatch.context() as patch:
        for module, name in [
            (functional, "scaled_dot_product_attention"),
            (functional, "attention_weights"),
            (efficient, "flash_attention"),
        ]:
            patch.setattr(module, name, counting(name, getattr(module, name)))
        yield CALLS


def build(cls: type, config: Any, attn: str) -> Any:
    torch.manual_seed(0)
    return cls._from_config(copy.deepcopy(config), attn_implementation=attn).eval()


SEQ, DECODER_SEQ, PAD = 7, 5, 2


def batches(cls: type, vocab: int) -> Iterator[dict[str, torch.Tensor]]:
    """Two sequences without padding; then the same with 2 left-padding tokens in the
    second, where the family takes an attention mask."""
    generator = torch.Generator().manual_seed(1)
    high = min(vocab, VOCAB)
    inputs = {"input_ids": torch.randint(3, high, (2, SEQ), generator=generator)}
    parameters = inspect.signature(cls.forward).parameters
    if "decoder_input_ids" in parameters:
        inputs["decoder_input_ids"] = torch.randint(3, high, (2, DECODER_SEQ), generator=generator)
    yield inputs
    if "attention_mask" in parameters:
        mask = torch.ones(2, SEQ, dtype=torch.long)
        mask[1, :PAD] = 0
        yield {**inputs, "attention_mask": mask}


def logits(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        result = model(**inputs)
    values = getattr(result, "logits", None)
    if values is None:
        values = result[0]
    if isinstance(values, tuple | list):
        values = values[0]
    if "attention_mask" in inputs and "decoder_input_ids" not in inputs:
        values = values[inputs["attention_mask"].bool()]  # padded queries are not compared
    return values


# Relative to the largest |logit| of eager. Both sides compute in float32, and the
# package's attention follows eager's arithmetic, so the logits agree to rounding (the
# families here agree bit for bit on CPU); a float32 model of two layers rounds to
# ~1e-7 relative, and an error in the attention (a mask, a scale, a head grouping)
# moves the logits by 1e-3 or more of their size with these weights.
RTOL = 1e-5


# --- the record and its summary ---------------------------------------------------------

RECORD: dict[str, tuple[str, str]] = {}  # class name: (outcome, detail)
EXACT, BITWISE = "exact", "exact, bit for bit"


def summary() -> str:
    by: dict[str, list[str]] = defaultdict(list)
    for name, (outcome, detail) in sorted(RECORD.items()):
        by[outcome].append(f"{name} ({detail})" if detail else name)
    passed = len(by[EXACT]) + len(by[BITWISE])
    lines = [
        f"Transformers {transformers.__version__}: {len(RECORD)} text families (model "
        f"classes) of the causal, masked and seq2seq mappings; {passed} exact on "
        f"register() ({len(by[BITWISE])} bit for bit), "
        f"{sum(len(v) for k, v in by.items() if k not in (EXACT, BITWISE))} skipped"
    ]
    for outcome, names in sorted(by.items(), key=lambda item: -len(item[1])):
        if outcome in (EXACT, BITWISE):
            continue
        lines.append(f"  skipped, {outcome} [{len(names)}]:")
        lines.extend(f"    {name}" for name in names)
    return "\n".join(lines)


class _Summary:
    """Prints the record at the end of the run (a plugin registered by the fixture)."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if RECORD:
            terminalreporter.write_sep("=", "Transformers families on register()")
            terminalreporter.write_line(summary())


@pytest.fixture(scope="module", autouse=True)
def record(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.config.pluginmanager.has_plugin("hf-families-summary"):
        request.config.pluginmanager.register(_Summary(), "hf-families-summary")
    yield
    BUILD.mkdir(exist_ok=True)
    (BUILD / "hf_families.txt").write_text(summary() + "\n")


def skip(name: str, reason: Reason, detail: str) -> None:
    RECORD[name] = (reason.value, detail)
    pytest.skip(f"{reason.value} ({detail})")


@pytest.mark.parametrize("name", CLASSES)
def test_family_runs_exactly_on_register(name: str) -> None:
    RECORD[name] = ("failed", "")
    cls = getattr(transformers, name)
    before = reason_not_to_build(cls)
    if before is not None:
        skip(name, *before)
    config = tiny_config(cls.config_class)
    eager = build(cls, config, "eager")
    ours = build(cls, config, NAME)
    ours.load_state_dict(eager.state_dict())
    vocab = getattr(config.get_text_config(), "vocab_size", None) or VOCAB
    diffs = []
    for inputs in batches(cls, vocab):
        expected = logits(eager, inputs)
        CALLS.clear()
        try:
            actual = logits(ours, inputs)
        except NotImplementedError as error:
            refused = re.search(r"keyword argument\(s\) ([\w, ]+);", str(error))
            keywords = refused.group(1).split(", ") if refused else []
            if keywords and all(k in REFUSED for k in keywords):
                skip(name, REFUSED[keywords[0]], f"refused by register() by name: {error}")
            raise
        assert sum(CALLS.values()) > 0, f"{name} ran without the package's attention"
        assert torch.isfinite(expected).all()
        diff = (actual - expected).abs().max().item()
        assert diff <= RTOL * expected.abs().max().item(), (diff, expected.abs().max().item())
        diffs.append(diff)
    RECORD[name] = (BITWISE if max(diffs) == 0 else EXACT, "")

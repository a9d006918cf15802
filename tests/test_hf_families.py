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
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
pytest.importorskip("transformers")

import transformers
from transformers.models.auto import modeling_auto

from attention import efficient, functional
from attention.integrations.huggingface import register
from tests.conftest import BUILD

# Hundreds of tiny models: one intra-op thread (see `one_thread` in conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")

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
    NEEDS_INPUTS = "needs inputs beyond input_ids"


# By config model type: what the family needs besides input_ids.
NEEDS_INPUTS = {
    # Draft models for speculative decoding: every layer attends to the keys and values
    # of the model they draft for (their configs refuse a layer of their own).
    "gemma4_assistant": "shared_kv_states, the keys and values of the model it drafts for",
    "gemma4_unified_assistant": "shared_kv_states, the keys and values of the model it drafts for",
}

# The keyword arguments `attention_forward` refuses by name (NotImplementedError) that a
# family may pass, each with its reason. Any other refusal is a failure. (DeepSeek sparse
# attention's `indices` was one; it runs now.)
REFUSED: dict[str, Reason] = {}

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
    # DeepSeek sparse attention: fewer keys per query than the sequence has, so that the
    # indexer's choice matters.
    index_topk=3,
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
    # Hybrids: at least one attention layer among the two (or four) kept.
    "jamba": dict(
        attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1
    ),
    "bamba": dict(attn_layer_indices=[1]),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"]),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"]),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    # Its attention block is shared by the hybrid layers, tied across them: two of them.
    "zamba": dict(
        num_hidden_layers=4,
        layers_block_type=["linear_attention", "hybrid", "linear_attention", "hybrid"],
    ),
    "gemma3n_text": dict(num_kv_shared_layers=0),  # of 2 layers, none share another's keys
    # Sizes tied together otherwise than the generic ones.
    "esmc": dict(num_key_value_heads=4),  # no grouped-query attention
    "zaya": dict(num_experts_per_tok=1),
    "mobilebert": dict(embedding_size=32, intra_bottleneck_size=32),
    "musicgen_decoder": dict(num_codebooks=1),  # input_ids of (batch x codebooks) rows
    "musicgen_melody_decoder": dict(num_codebooks=1),
    "longcat_flash": dict(head_dim=8),  # its rope part (qk_rope_head_dim)
    # The sliding layers' head_dim: their qk_nope_head_dim (16, per layer) + 8 of rope.
    "dots3_note_text": dict(head_dim=24),
    # Byte n-gram hash embeddings of 500,002 rows; the local models' view of the global
    # one; and no cache (its DynamicCache(config=...) asks BltConfig for num_hidden_layers).
    "blt": dict(
        use_cache=False,
        encoder_hash_byte_group_vocab=64,
        encoder_config=dict(hidden_size_global=64),
        decoder_config=dict(hidden_size_global=64),
    ),
    # Inputs and settings the defaults leave out.
    "xmod": dict(default_language="en_XX"),  # else it needs lang_ids
    "esm": dict(pad_token_id=0),  # its position ids count the non-padding tokens
    # Transformers 5.23's defaults do not build these models: DbrxAttention reads a
    # rope_theta that DbrxAttentionConfig lacks (and clamps to clip_qkv, None by
    # default: clamp(None, None) raises); cohere_compass wants rope parameters per layer
    # type; qwen4_exp leaves its indexer's sizes None.
    "dbrx": dict(attn_config=dict(rope_theta=10000.0, kv_n_heads=2, clip_qkv=8.0)),
    "cohere_compass_text": dict(
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    ),
    "qwen4_exp_text": dict(
        indexer_n_heads=2,
        indexer_kv_heads=1,
        indexer_head_dim=16,
        indexer_budget=4,
        indexer_compress_ratio=2,
        hc_lowrank=8,
    ),
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
            kw["per_layer_config"] = _per_layer(fields["per_layer_config"], kept, fields, kw)
    for key, value in TOKEN_IDS.items():
        given = fields.get(key)
        if isinstance(given, int) and given >= VOCAB:
            kw[key] = value
        elif isinstance(given, list):
            kw[key] = [i if i < VOCAB else value for i in given]
    return {**kw, **copy.deepcopy(OVERRIDES.get(config_class.model_type, {}))}


def _per_layer(
    overrides: dict[str, dict[str, Any]], kept: list[int], fields: dict[str, Any], kw: Any
) -> dict[int, Any]:
    """A per-layer config (gemma4's, dots3_note's) for the layers kept, each size as it
    stands to the global one: equal, twice or half the small global size."""
    given = {int(index): values for index, values in overrides.items()}

    def small(key: str, value: Any) -> Any:
        glob, tiny = fields.get(key), kw.get(key)
        if not (isinstance(value, int) and isinstance(glob, int) and isinstance(tiny, int)):
            return value
        return tiny if value == glob else 2 * tiny if value > glob else max(1, tiny // 2)

    out = {i: given.get(original) for i, original in enumerate(kept)}
    return {i: {k: small(k, v) for k, v in values.items()} for i, values in out.items() if values}


def tiny_config(config_class: type) -> Any:
    default = config_class()
    kw = _small(config_class)
    for name in getattr(config_class, "sub_configs", None) or {}:
        sub = getattr(default, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            kw[name] = {**sub.to_dict(), **_small(type(sub)), **kw.get(name, {})}
    return config_class(**kw)


# --- what is skipped before building --------------------------------------------------

# A forward argument of another modality than text.
_MODALITY = re.compile(r"pixel|image|video|audio|speech|input_features|input_values")


def reason_not_to_build(cls: type) -> tuple[Reason, str] | None:
    if cls.config_class.model_type in NEEDS_INPUTS:
        return Reason.NEEDS_INPUTS, NEEDS_INPUTS[cls.config_class.model_type]
    parameters = inspect.signature(cls.forward).parameters
    other = sorted(p for p in parameters if _MODALITY.search(p))
    subs = sorted(getattr(cls.config_class, "sub_configs", None) or {})
    if other and subs:
        return Reason.NOT_TEXT, f"takes {', '.join(other)}; sub-configs {', '.join(subs)}"
    if not _looks_up_attention_functions(cls):
        return Reason.OWN_CODE, cls.__module__.rsplit(".", 1)[-1]
    return None


def _looks_up_attention_functions(cls: type) -> bool:
    """Whether the model's modeling code, or that of the layers it takes from another
    family, looks up ``ALL_ATTENTION_FUNCTIONS``, where Transformers keeps the functions
    of `AttentionInterface`; a model that builds its parts with ``AutoModel`` (the
    encoder-decoder, gemma4_assistant) is run, and the spy tells."""
    module = sys.modules[cls.__module__]
    modules = {module} | {
        sys.modules[value.__module__]
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, torch.nn.Module)
        and value.__module__.startswith("transformers.models.")
    }
    sources = [inspect.getsource(m) for m in modules]
    return any("ALL_ATTENTION_FUNCTIONS" in s or "AutoModel" in s for s in sources)


# --- running ----------------------------------------------------------------------------

CALLS: Counter[str] = Counter()
# How much of the next query's result the spy adds to each query's (rows of the
# package's results, rolled by one): none, but for the check that an error in the
# attention would show in the logits. (Not a scaling of the results: a norm after the
# attention, as in Gemma 2 or OLMo 2, would undo it.)
SHIFT = [0.0]


@pytest.fixture(scope="module", autouse=True)
def spy() -> Iterator[Counter[str]]:
    """Count the calls of the package's attention kernels (what `register()` runs)."""

    def counting(name: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
            CALLS[name] += 1
            out = fn(*args, **kwargs)
            return out + SHIFT[0] * out.roll(1, dims=-2) if SHIFT[0] else out

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
    model = cls._from_config(copy.deepcopy(config), attn_implementation=attn).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            # Weights that start at zero (NeoMME's attention output projection, gates,
            # biases) would hide the attention from the logits: random ones do not.
            if not parameter.any():
                parameter.normal_(0.0, SMALL["initializer_range"])
    return model


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


# Relative to the largest |logit| of eager. Both sides compute in float32 and the
# package's attention follows eager's arithmetic: most families agree bit for bit, the
# others (sinks, an appended key) to rounding, below 1e-6; an error in the attention (a
# mask, a scale, a head grouping) moves these logits by 1e-3 or more of their size.
RTOL = 1e-5


# --- the record and its summary ---------------------------------------------------------

RECORD: dict[str, tuple[str, str]] = {}  # class name: (outcome, detail)
EXACT, BITWISE, FAILED = "exact", "exact, bit for bit", "failed"


def summary(details: bool = False) -> str:
    """The record: counts and families per outcome, with each one's details if asked."""
    by: dict[str, list[str]] = defaultdict(list)
    for name, (outcome, detail) in sorted(RECORD.items()):
        by[outcome].append(f"{name} ({detail})" if details and detail else name)
    skipped = {k: v for k, v in by.items() if k in {r.value for r in Reason}}

    def listed(title: str, names: list[str]) -> list[str]:
        if details:
            return [f"  {title} [{len(names)}]:", *(f"    {name}" for name in names)]
        wrap = textwrap.wrap(", ".join(names), 96, initial_indent="    ", subsequent_indent="    ")
        return [f"  {title} [{len(names)}]:", *wrap]

    lines = [
        f"Transformers {transformers.__version__}: {len(RECORD)} text families (model classes "
        f"of the causal, masked and seq2seq mappings): {len(by[BITWISE]) + len(by[EXACT])} "
        f"exact on register() ({len(by[BITWISE])} bit for bit), "
        f"{sum(map(len, skipped.values()))} skipped, {len(by[FAILED])} unexplained misses",
    ]
    if by[EXACT]:
        lines += listed(f"exact within {RTOL:g} but not bit for bit", by[EXACT])
    for reason, names in sorted(skipped.items(), key=lambda item: -len(item[1])):
        lines += listed(f"skipped, {reason}", names)
    if by[FAILED]:
        lines += listed("FAILED, unexplained", by[FAILED])
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
    (BUILD / "hf_families.txt").write_text(summary(details=True) + "\n")


def skip(name: str, reason: Reason, detail: str) -> None:
    RECORD[name] = (reason.value, detail)
    pytest.skip(f"{reason.value} ({detail})")


@pytest.mark.parametrize("name", CLASSES)
def test_family_runs_exactly_on_register(name: str) -> None:
    RECORD[name] = (FAILED, "")
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
        scale = expected.abs().max().item()
        assert diff <= RTOL * scale, f"{name}: max |ours - eager| {diff:.3g}, |eager| {scale:.3g}"
        diffs.append(diff / scale)
    # The comparison has teeth: an error of 10% in the attention moves the logits by far
    # more than the tolerance.
    SHIFT[0] = 0.1
    try:
        shifted = logits(ours, inputs)
    finally:
        SHIFT[0] = 0.0
    moved = (shifted - actual).abs().max().item()
    assert moved > 100 * RTOL * scale, f"{name}: the logits barely depend on the attention"
    RECORD[name] = (BITWISE, "") if max(diffs) == 0 else (EXACT, f"{max(diffs):.1e} relative")

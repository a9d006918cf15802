"""attention: the attention mechanism, written to be read and checked against PyTorch.

The public API is re-exported here; each concept lives in its own module.
"""

from importlib import metadata as _metadata

from attention import distributed as distributed  # a namespace: needs a process group
from attention import examples as examples  # a namespace: worked examples for the pages
from attention import numpy_reference as numpy_reference  # a namespace, see its docstring
from attention.approximate import (
    favor_features,
    linformer_attention,
    nystrom_attention,
    performer_attention,
    random_features,
)
from attention.delta_rule import delta_rule_attention
from attention.differential import (
    differential_attention,
    differential_lambda,
    differential_lambda_init,
    gated_attention_output,
)
from attention.efficient import (
    block_sparse_attention,
    flash_attention,
    linear_attention,
    sliding_window_attention,
)
from attention.functional import attention_weights, scaled_dot_product_attention
from attention.indexer import indexer_scores, topk_keys, topk_mask, topk_sparse_attention
from attention.kv_cache import KVCache
from attention.latent import LatentCache, MultiHeadLatentAttention, kv_cache_numbers_per_token
from attention.layer_patterns import interleaved_layer_types, kv_cache_positions
from attention.linear_decay import decayed_linear_attention
from attention.masks import (
    block_sparse_mask,
    causal_mask,
    combine_masks,
    mask_to_bias,
    padding_mask,
    sliding_window_mask,
    strided_layout,
)
from attention.multi_head import (
    CausalSelfAttention,
    CrossAttention,
    MultiHeadAttention,
    SelfAttention,
)
from attention.normalization import rms_norm
from attention.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    relative_position_buckets,
    rope_frequencies,
    sinusoidal_encoding,
)
from attention.sinks import sink_attention
from attention.softcap import soft_cap, softcap_score_mod
from attention.state_space import ssd
from attention.viz import (
    HeadView,
    attention_entropy,
    plot_activation_norms,
    plot_attention,
    plot_attention_entropy,
    plot_attention_heads,
    plot_positional_encoding,
)

__all__ = [
    "CausalSelfAttention",
    "CrossAttention",
    "HeadView",
    "KVCache",
    "LatentCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "RelativePositionBias",
    "SelfAttention",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "attention_entropy",
    "attention_weights",
    "block_sparse_attention",
    "block_sparse_mask",
    "causal_mask",
    "combine_masks",
    "decayed_linear_attention",
    "delta_rule_attention",
    "differential_attention",
    "differential_lambda",
    "differential_lambda_init",
    "favor_features",
    "flash_attention",
    "gated_attention_output",
    "indexer_scores",
    "interleaved_layer_types",
    "kv_cache_numbers_per_token",
    "kv_cache_positions",
    "linear_attention",
    "linformer_attention",
    "mask_to_bias",
    "nystrom_attention",
    "padding_mask",
    "performer_attention",
    "plot_activation_norms",
    "plot_attention",
    "plot_attention_entropy",
    "plot_attention_heads",
    "plot_positional_encoding",
    "random_features",
    "relative_position_buckets",
    "rms_norm",
    "rope_frequencies",
    "scaled_dot_product_attention",
    "sink_attention",
    "sinusoidal_encoding",
    "sliding_window_attention",
    "sliding_window_mask",
    "soft_cap",
    "softcap_score_mod",
    "ssd",
    "strided_layout",
    "topk_keys",
    "topk_mask",
    "topk_sparse_attention",
]

# The version's one home is git (setuptools-scm, at build); the installed metadata holds it.
try:
    __version__ = _metadata.version("attention-by-running")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

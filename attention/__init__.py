"""attention: the attention mechanism, written to be read and checked against PyTorch.

The public API is re-exported here; each concept lives in its own module.
"""

from attention.functional import attention_weights, scaled_dot_product_attention
from attention.masks import causal_mask

__all__ = ["attention_weights", "causal_mask", "scaled_dot_product_attention"]

__version__ = "0.1.0"

"""Bridges from other libraries to this package's attention.

- [`huggingface`][attention.integrations.huggingface]: run a Hugging Face Transformers
  model with this package's attention (`pip install "attention-by-running[hf]"`).

Each bridge is imported by its own path (`from attention.integrations.huggingface
import register`): it needs its library, which the package itself does not.
"""

__all__: list[str] = []

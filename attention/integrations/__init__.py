"""Bridges from other libraries to this package's attention.

- [`huggingface`][attention.integrations.huggingface]: run a Hugging Face Transformers
  model with this package's attention. It needs Transformers 5 or later: the package's
  `hf` extra, whose install line is on the site's Install page.

Each bridge is imported by its own path (`from attention.integrations.huggingface
import register`): it needs its library, which the package itself does not.
"""

__all__: list[str] = []

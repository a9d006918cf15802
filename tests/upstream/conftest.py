"""Shared by the re-runs of PyTorch's own attention tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def _on_one_thread(one_thread: None) -> None:
    """Tiny tensors: one thread (``tests/conftest.py``), free of OpenMP's contention on
    a busy 2-core machine."""

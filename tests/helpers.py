"""Helpers shared by the unit tests (``from tests import helpers``)."""

from __future__ import annotations

import torch
from torch import Tensor

from attention import rope_frequencies


def make_qkv(
    *lead: int,
    L: int,
    S: int,
    D: int,
    Dv: int,
    dtype: torch.dtype,
    Hkv: int | None = None,
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Query ``(*lead, L, D)``, key ``(*kv_lead, S, D)`` and value ``(*kv_lead, S, Dv)``.

    ``kv_lead`` is ``lead`` with its last axis (the heads) set to ``Hkv`` when given,
    for grouped-query attention. Drawn in float64 from a seeded generator and then cast,
    so every dtype sees the same numbers, rounded.
    """
    g = torch.Generator().manual_seed(seed)
    kv_lead = lead if Hkv is None else (*lead[:-1], Hkv)
    q = torch.randn(*lead, L, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(*kv_lead, S, D, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(*kv_lead, S, Dv, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def rope_tables(
    n: int, dim: int, base: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` as Transformers' rotary modules return them, ``(1, n, dim)``."""
    inv_freq, _ = rope_frequencies(dim, base=base)  # float64
    angles = torch.arange(n, dtype=torch.float64).unsqueeze(-1) * inv_freq  # (n, dim / 2)
    emb = torch.cat([angles, angles], dim=-1)  # (n, dim): each angle twice, as HF lays it out
    return emb.cos().to(dtype).unsqueeze(0), emb.sin().to(dtype).unsqueeze(0)

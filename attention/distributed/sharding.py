"""Which positions of a sequence each rank holds: the two layouts, and splitting and joining.

The ``"contiguous"`` layout cuts the sequence into $W$ chunks, one per rank. The
``"zigzag"`` layout cuts it into $2W$ chunks and gives rank $r$ chunks $r$ and
$2W - 1 - r$, so that under causal masking every rank does the same work.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor

from attention._checks import check_choice, shape_str
from attention.distributed.traffic import _bytes, _record

Layout = Literal["contiguous", "zigzag"]
LAYOUTS: tuple[Layout, ...] = ("contiguous", "zigzag")


def chunk_ids(rank: int, world_size: int, layout: Layout) -> tuple[int, ...]:
    """The chunks of the sequence rank ``rank`` holds, in order (see the module docstring)."""
    if layout == "contiguous":
        return (rank,)  # W chunks
    return (rank, 2 * world_size - 1 - rank)  # 2W chunks


def shard_sequence(
    x: Tensor,
    rank: int,
    world_size: int,
    *,
    layout: Layout = "contiguous",
    dim: int = -2,
) -> Tensor:
    """The part of a full sequence that rank ``rank`` of ``world_size`` holds.

    Args:
        x: Full tensor; its sequence axis is ``dim`` (``(B, H, n, D)``: ``-2``).
        rank: This rank, ``0 <= rank < world_size``.
        world_size: Number of ranks $W$.
        layout: ``"contiguous"``: rank $r$ holds positions $rn/W$ to $(r+1)n/W - 1$.
            ``"zigzag"``: cut into $2W$ chunks, rank $r$ holds chunks $r$ and
            $2W - 1 - r$ (balanced causal work).
        dim: The sequence axis.

    Returns:
        A copy of the shard, with ``n / W`` of the ``n`` positions along ``dim``.

    Raises:
        ValueError: If the length does not divide evenly (``W`` chunks, or ``2W`` for
            ``"zigzag"``), or ``rank``, ``world_size`` or ``layout`` is invalid.

    Examples:
        >>> import torch
        >>> from attention.distributed import shard_sequence
        >>> x = torch.arange(8).view(1, 8, 1)  # (B, n, D): positions 0..7
        >>> shard_sequence(x, 0, 2, layout="zigzag").flatten().tolist()
        [0, 1, 6, 7]
        >>> shard_sequence(x, 1, 2, layout="zigzag").flatten().tolist()
        [2, 3, 4, 5]
    """
    chunks = _chunks(x, world_size, layout, dim)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}); got {rank}")
    ids = chunk_ids(rank, world_size, layout)
    return torch.cat([chunks[i] for i in ids], dim=dim)


def unshard_sequence(
    shards: list[Tensor], *, layout: Layout = "contiguous", dim: int = -2
) -> Tensor:
    """The full sequence from every rank's shard, in rank order: `shard_sequence` undone.

    Args:
        shards: The shard of each rank, rank 0 first.
        layout: How the sequence was split (see `shard_sequence`).
        dim: The sequence axis.

    Returns:
        The full tensor, with ``len(shards)`` times a shard's length along ``dim``.

    Raises:
        ValueError: If ``layout`` is not one of ``"contiguous"``, ``"zigzag"``.

    Examples:
        >>> import torch
        >>> from attention.distributed import shard_sequence, unshard_sequence
        >>> x = torch.arange(12).view(1, 12, 1)
        >>> shards = [shard_sequence(x, r, 3, layout="zigzag") for r in range(3)]
        >>> [s.flatten().tolist() for s in shards]
        [[0, 1, 10, 11], [2, 3, 8, 9], [4, 5, 6, 7]]
        >>> torch.equal(unshard_sequence(shards, layout="zigzag"), x)
        True
    """
    check_choice("layout", layout, LAYOUTS)
    world_size = len(shards)
    chunks: dict[int, Tensor] = {}
    for rank, shard in enumerate(shards):
        ids = chunk_ids(rank, world_size, layout)
        for i, chunk in zip(ids, shard.chunk(len(ids), dim=dim), strict=True):
            chunks[i] = chunk
    return torch.cat([chunks[i] for i in sorted(chunks)], dim=dim)


def gather_sequence(
    x: Tensor,
    *,
    layout: Layout = "contiguous",
    dim: int = -2,
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    """The full sequence, on every rank, from each rank's shard ``x`` (not differentiable).

    Args:
        x: This rank's shard (every rank's has the same shape).
        layout: How the sequence was split (see `shard_sequence`).
        dim: The sequence axis.
        group: The process group; the default group if ``None``.

    Returns:
        The tensor `shard_sequence` was given, with ``W`` times the shard's length.

    Raises:
        ValueError: If ``layout`` is not one of ``"contiguous"``, ``"zigzag"``.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> from attention.distributed import gather_sequence
        >>> # A group of one rank, in this process (torchrun would start W of them).
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> gather_sequence(torch.arange(4).view(1, 4, 1)).flatten().tolist()
        [0, 1, 2, 3]
        >>> dist.destroy_process_group()
    """
    check_choice("layout", layout, LAYOUTS)
    shards = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(shards, x.contiguous(), group=group)
    _record("all_gather", sent=_bytes(x), received=_bytes(x) * (len(shards) - 1))
    return unshard_sequence(shards, layout=layout, dim=dim)


def _chunks(x: Tensor, world_size: int, layout: Layout, dim: int) -> tuple[Tensor, ...]:
    check_choice("layout", layout, LAYOUTS)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1; got {world_size!r}")
    count = world_size * len(chunk_ids(0, world_size, layout))
    if x.shape[dim] % count:
        raise ValueError(
            f"a sequence of length {x.shape[dim]} (axis {dim} of {shape_str(x)}) cannot be "
            f"split into {count} equal chunks for {world_size} ranks with layout "
            f"{layout!r}; pad it to a multiple of {count}"
        )
    return x.chunk(count, dim=dim)

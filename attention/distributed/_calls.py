"""Every rank's call checked, then agreed on by all ranks before any transfer.

A sequence-parallel call is collective: a rank whose shapes, dtypes or flags differ
from the others', or whose arguments are refused, would leave the others waiting in a
transfer (or abort it inside the backend). So each call first checks what this rank
can check alone (`attention._checks.check_sequence_parallel_call`), then all-gathers a
96-byte summary of the call (`_Call`), and every rank raises the same error where the
ranks differ or one of them refused its arguments.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from attention._checks import check_sequence_parallel_call
from attention._kernels import default_scale
from attention.distributed.sharding import LAYOUTS, Layout, chunk_ids
from attention.distributed.traffic import _bytes, _record


def check_call(
    strategy: str,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool,
    key_padding_mask: Tensor | None,
    scale: float | None,
    enable_gqa: bool,
    layout: Layout,
    group: dist.ProcessGroup | None,
) -> float:
    """Check this rank's arguments and agree with every other rank on the call.

    Returns the scale to apply. Raises this rank's own error if its arguments are
    refused, and the same ``ValueError`` on every rank if the ranks' calls differ or
    another rank refused its arguments: never before the agreement, which the other
    ranks wait for.
    """
    world = dist.get_world_size(group)
    problem, effective_scale = None, 0.0
    try:
        checked_scale = check_sequence_parallel_call(
            strategy,
            world,
            query,
            key,
            value,
            is_causal=is_causal,
            key_padding_mask=key_padding_mask,
            scale=scale,
            enable_gqa=enable_gqa,
            layout=layout,
            chunks_per_rank={name: len(chunk_ids(0, world, name)) for name in LAYOUTS},
        )
        effective_scale = default_scale(query, checked_scale)
    except (TypeError, ValueError) as error:
        problem = error  # raised after the agreement, which the other ranks wait for
    call = _Call.of(
        strategy,
        problem is None,
        query,
        key,
        value,
        key_padding_mask,
        is_causal,
        enable_gqa,
        layout,
        effective_scale,
    )
    _check_same_call_everywhere(strategy, call, query, group)
    if problem is not None:
        raise problem
    return effective_scale


_STRATEGIES = ("ring_attention", "all_gather_attention", "ulysses_attention")
_DTYPES = tuple(sorted({t for t in vars(torch).values() if isinstance(t, torch.dtype)}, key=str))


@dataclass(frozen=True)
class _Call:
    """What every rank's call must agree on, as 24 int32 (96 bytes) to all-gather.

    Fields: the function; whether this rank's arguments passed its own checks; the
    shapes of query, key and value (4 each); their dtypes; whether a key padding mask
    was given; ``is_causal``; ``enable_gqa``; the layout; the scale applied (a float64
    as two int32); whether autograd records the call for a backward pass (which is
    collective too). With a valid call the padding mask's shape and dtype follow from
    the query's; the process group is the one the collective runs in.
    """

    fields: tuple[int, ...]

    @classmethod
    def of(
        cls,
        strategy: str,
        valid: bool,
        query: object,
        key: object,
        value: object,
        key_padding_mask: object,
        is_causal: object,
        enable_gqa: object,
        layout: object,
        scale: float,
    ) -> _Call:
        tensors = (query, key, value)
        shapes = [_shape_fields(t) for t in tensors]
        dtypes = [_DTYPES.index(t.dtype) if isinstance(t, Tensor) else -1 for t in tensors]
        high, low = struct.unpack("<ii", struct.pack("<d", scale))
        graph = torch.is_grad_enabled() and any(
            isinstance(t, Tensor) and t.requires_grad for t in tensors
        )
        return cls(
            (
                _STRATEGIES.index(strategy),
                int(valid),
                *(size for shape in shapes for size in shape),
                *dtypes,
                int(key_padding_mask is not None),
                int(is_causal is True),
                int(enable_gqa is True),
                LAYOUTS.index(layout) if layout in LAYOUTS else -1,
                high,
                low,
                int(graph),
            )
        )

    @property
    def valid(self) -> bool:
        return bool(self.fields[1])

    def described(self) -> dict[str, str]:
        """The agreed arguments, by name, as the error message shows them."""
        f = self.fields
        shapes = [f[i : i + 4] for i in (2, 6, 10)]
        names = ("query", "key", "value")
        (scale,) = struct.unpack("<d", struct.pack("<ii", f[21], f[22]))
        return {
            "function": _STRATEGIES[f[0]],
            "shapes": ", ".join(
                f"{n} {tuple(shape)}" for n, shape in zip(names, shapes, strict=True)
            ),
            "dtypes": ", ".join(f"{n} {_DTYPES[d]}" for n, d in zip(names, f[14:17], strict=True)),
            "key_padding_mask": "given" if f[17] else "None",
            "is_causal": str(bool(f[18])),
            "enable_gqa": str(bool(f[19])),
            "layout": repr(LAYOUTS[f[20]]),
            "scale": repr(scale),
            "autograd": "records the graph for backward"
            if f[23]
            else "no graph (grad mode off, or no input requires grad)",
        }


def _shape_fields(t: object) -> tuple[int, ...]:
    """A 4-D tensor's shape, each size capped to an int32 (no shard comes near 2**31)."""
    if not isinstance(t, Tensor) or t.ndim != 4:
        return (-1,) * 4
    return tuple(min(size, 2**31 - 1) for size in t.shape)


def _check_same_call_everywhere(
    strategy: str, call: _Call, query: object, group: dist.ProcessGroup | None
) -> None:
    """Every rank's call agrees with every other's: checked before any other collective.

    Transfers whose shapes or dtypes differ between ranks abort inside the backend or
    wait forever; so would one rank's error, raised while the others wait. One small
    all-gather instead, and then every rank raises the same error.
    """
    mine = torch.tensor(call.fields, dtype=torch.int32, device=_check_device(query, group))
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    _record("shape check", sent=_bytes(mine), received=_bytes(mine) * (len(every) - 1))
    calls = [_Call(tuple(t.tolist())) for t in every]
    refused = [rank for rank, c in enumerate(calls) if not c.valid]
    if refused:
        if not call.valid:
            return  # this rank raises its own error, which says why
        raise ValueError(
            f"{strategy} could not run: its arguments were refused on {_ranks(refused)} "
            "(the error raised there says why); every rank stops here instead of waiting"
        )
    described = [c.described() for c in calls]
    differences = []
    for name in described[0]:
        values: dict[str, list[int]] = {}
        for rank, d in enumerate(described):
            values.setdefault(d[name], []).append(rank)
        if len(values) > 1:
            listed = "; ".join(f"{_ranks(ranks)}: {value}" for value, ranks in values.items())
            differences.append(f"{name} ({listed})")
    if differences:
        raise ValueError(
            "sequence-parallel attention needs the same call on every rank: the same "
            "function, shards of one shape (split the sequence evenly, e.g. with "
            "shard_sequence), the same dtypes, a key_padding_mask on every rank or on none, "
            "and the same flags, scale and layout; the ranks differ in "
            + ", and in ".join(differences)
        )


def _ranks(ranks: list[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _check_device(query: object, group: dist.ProcessGroup | None) -> torch.device:
    """Where the agreement's tensor lives: the query's device (NCCL moves only GPU tensors).

    Where this rank's query is no tensor, the device the backend takes.
    """
    if isinstance(query, Tensor):
        return query.device
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")

"""Counting the bytes each rank sends and receives, by operation.

Every transfer of the package records itself here (`_record`); `count_traffic` collects
what is recorded while its block runs, so that measured traffic can be checked against
the strategies' formulas.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class Traffic:
    """Bytes this rank sent and received inside `count_traffic`, by operation.

    Args:
        sent: Bytes sent, by operation (``"send/recv"``, ``"all_gather"``,
            ``"reduce_scatter"``, ``"all_to_all"``, ``"shape check"``: the ranks'
            agreement on the call, 96 bytes).
        received: Bytes received, by operation.

    Examples:
        >>> from collections import Counter
        >>> from attention.distributed import Traffic
        >>> traffic = Traffic(sent=Counter({"send/recv": 4096, "shape check": 96}))
        >>> traffic.sent_bytes, traffic.received_bytes
        (4192, 0)
    """

    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)

    @property
    def sent_bytes(self) -> int:
        """All bytes sent, every operation together."""
        return sum(self.sent.values())

    @property
    def received_bytes(self) -> int:
        """All bytes received, every operation together."""
        return sum(self.received.values())


_counters: list[Traffic] = []


@contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Count the bytes this rank sends and receives in `attention.distributed`.

    What is counted is each rank's share of the data an operation moves, as the
    algorithm sees it (an all-gather of $W$ blocks sends this rank's block and
    receives the $W - 1$ others): how the backend routes it is not visible here.

    Returns:
        A context manager; its target, a `Traffic`, fills up while the block runs.

    Raises:
        RuntimeError: Only as the counted code does; counting adds no failure of its own.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> from attention.distributed import count_traffic, ring_attention
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> q = torch.randn(1, 2, 16, 8)  # (B, H, n / W, D), float32
        >>> with count_traffic() as traffic:
        ...     _ = ring_attention(q, q, q)
        >>> dict(traffic.sent)  # one rank: no block to pass, only the shape check
        {'shape check': 96}
        >>> dist.destroy_process_group()
    """
    traffic = Traffic()
    _counters.append(traffic)
    try:
        yield traffic
    finally:  # by identity: two counters that counted the same are equal, not the same
        del _counters[next(i for i, t in enumerate(_counters) if t is traffic)]


def _record(op: str, *, sent: int, received: int) -> None:
    """Add one transfer's bytes to every open counter (called by each transfer)."""
    for traffic in _counters:
        traffic.sent[op] += sent
        traffic.received[op] += received


def _bytes(*tensors: Tensor | None) -> int:
    """The bytes of the given tensors' elements (``None`` counts 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)

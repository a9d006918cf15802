"""The project's six targets for `flash_attention`, and the verdict of a results file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attention_bench.accuracy import ACCURACY_N
from attention_bench.cases import BACKWARD, FORWARD, MiB
from attention_bench.report import find


@dataclass(frozen=True)
class Target:
    """A measured quantity of one point that must stay below ``limit``.

    ``unit`` is "ratio" (time over ``F.scaled_dot_product_attention``'s at the same
    point, causal or not like the point) or "mib" (peak extra memory).
    """

    what: str
    implementation: str
    n: int
    mode: str
    unit: str
    limit: float
    causal: bool = False


@dataclass(frozen=True)
class AccuracyTarget:
    """An accuracy figure (``key`` of an accuracy row) that may not exceed ``limit``."""

    what: str
    key: str
    limit: float


TARGETS = (
    Target(
        "flash_attention forward time / SDPA's, n = 4096", "flash", 4096, FORWARD, "ratio", 1.25
    ),
    Target(
        "flash_attention causal forward time / SDPA's causal, n = 4096",
        "flash",
        4096,
        FORWARD,
        "ratio",
        1.3,
        causal=True,
    ),
    Target(
        "flash_attention forward peak extra memory, n = 8192", "flash", 8192, FORWARD, "mib", 64
    ),
    Target(
        "flash_attention forward+backward time / SDPA's, n = 2048",
        "flash",
        2048,
        BACKWARD,
        "ratio",
        1.3,
    ),
)
ACCURACY_TARGETS = (
    AccuracyTarget(
        f"flash_attention max error / naive's, against float64, n = {ACCURACY_N}",
        "error_ratio",
        2.0,
    ),
    AccuracyTarget(
        f"flash_attention gradients - SDPA's, in float64, n = {ACCURACY_N}",
        "gradient_max_difference_float64",
        1e-8,
    ),
)


def check_targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The project's six targets against a results file.

    Memory is read without a mask, a time at the target's own masking; a time ratio
    is the interleaved one of `paired_ratio` where the file has it, else the ratio of
    the two medians. Accuracy is the worse of the runs with and without a causal mask.
    """
    rows = []
    for target in TARGETS:
        name, n, mode, unit = target.implementation, target.n, target.mode, target.unit
        causal = target.causal
        record, sdpa = find(data, name, n, mode, causal), find(data, "sdpa", n, mode, causal)
        paired = [
            row
            for row in data.get("paired_ratios", [])
            if (row["implementation"], row["n"], row["mode"], row["causal"])
            == (name, n, mode, causal)
        ]
        value: float | None = None
        if unit == "ratio" and paired:
            value = paired[0]["ratio"]
        elif unit == "ratio" and record is not None and sdpa is not None:
            value = record["median_s"] / sdpa["median_s"]
        elif unit == "mib" and record is not None and record.get("peak_extra_bytes") is not None:
            value = record["peak_extra_bytes"] / MiB
        rows.append(_target_row(target.what, target.limit, unit, value))
    accuracy = data.get("accuracy", [])  # empty when flash_attention was not benchmarked
    for goal in ACCURACY_TARGETS:
        value = max((row[goal.key] for row in accuracy), default=None)
        unit = "ratio" if goal.key == "error_ratio" else "absolute"
        rows.append(_target_row(goal.what, goal.limit, unit, value, inclusive=True))
    return rows


def _target_row(
    what: str, limit: float, unit: str, value: float | None, inclusive: bool = False
) -> dict[str, Any]:
    met = None if value is None else bool(value <= limit if inclusive else value < limit)
    bound = "≤" if inclusive else "<"
    return {
        "target": what,
        "bound": bound,
        "limit": limit,
        "unit": unit,
        "value": value,
        "met": met,
    }

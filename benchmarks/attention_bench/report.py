"""Reading a results file: records, series, fitted slopes, tables, plots and a summary."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attention_bench.cases import FORWARD, IMPLEMENTATIONS, Config, MiB, Point
from attention_bench.cost import flop_count

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# 2: adds "accuracy" and "paired_ratios"; 3: adds "sequence_parallel", optional (a
# schema-2 file is a schema-3 file without it).
SCHEMA_VERSION = 3
PARALLEL_SECTION = "sequence_parallel"  # the key of attention_bench.sequence_parallel's results


def load(path: str | Path) -> dict[str, Any]:
    """Read a results file written by this script."""
    data: dict[str, Any] = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema {data.get('schema')}, expected {SCHEMA_VERSION}")
    return data


def merge_sections(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` results with the sections that ``new`` holds taken from ``new``.

    A results file has two sections: the implementations (every key but
    ``"sequence_parallel"``: the run, the machine, the records...) and the
    sequence-parallel one (``"sequence_parallel"``, with its own run and machine). A
    run of one section merged into a file of both replaces that section only.
    ``old`` may be of schema 2 (which has no sequence-parallel section); the result
    is of the current schema.
    """
    if old.get("schema") not in (2, SCHEMA_VERSION):
        raise ValueError(f"cannot merge into schema {old.get('schema')}; expected 2 or 3")
    if "results" in new:  # the implementations were measured
        merged = {key: value for key, value in new.items() if key != PARALLEL_SECTION}
        if PARALLEL_SECTION in old:
            merged[PARALLEL_SECTION] = old[PARALLEL_SECTION]
    else:
        merged = dict(old)
    if PARALLEL_SECTION in new:
        merged[PARALLEL_SECTION] = new[PARALLEL_SECTION]
    merged["schema"] = SCHEMA_VERSION
    return merged


def find(
    data: dict[str, Any], implementation: str, n: int, mode: str = FORWARD, causal: bool = False
) -> dict[str, Any] | None:
    """The record of one point, or None if it was not measured."""
    for record in data["results"]:
        if (record["implementation"], record["n"], record["mode"], record["causal"]) == (
            implementation,
            n,
            mode,
            causal,
        ):
            return dict(record)
    return None


def series(
    data: dict[str, Any], implementation: str, key: str, mode: str = FORWARD, causal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(n, value)`` arrays of one implementation, for the points that have the value."""
    pairs = sorted(
        (r["n"], r[key])
        for r in data["results"]
        if r["implementation"] == implementation
        and r["mode"] == mode
        and r["causal"] == causal
        and r.get(key) is not None
    )
    ns = np.array([n for n, _ in pairs], dtype=float)
    return ns, np.array([value for _, value in pairs], dtype=float)


def fit_slope(ns: np.ndarray, values: np.ndarray, upper: float = 0.5) -> float | None:
    """Log-log slope fitted on the largest ``upper`` share of the points (at least 2).

    Small ``n`` measure fixed costs (Python, dispatch, thread start-up), not growth.
    """
    keep = values > 0
    ns, values = ns[keep], values[keep]
    if len(ns) < 2:
        return None
    count = max(2, math.ceil(upper * len(ns)))
    order = np.argsort(ns)[-count:]
    if len(set(ns[order].tolist())) < 2:
        return None
    return float(np.polyfit(np.log(ns[order]), np.log(values[order]), 1)[0])


def _style(name: str) -> dict[str, Any]:
    order = list(IMPLEMENTATIONS)
    colors = ["C3", "C5", "C1", "C0", "C9", "C2", "C4", "C7"]
    markers = "o^vsDx*P"
    i = order.index(name) if name in order else len(order) - 1
    return {"color": colors[i % len(colors)], "marker": markers[i % len(markers)]}


# Size of the slope labels at the line ends, in points. The site shows the two-column
# figure (8 in) shrunk to its 720 px column and enlarges any text below 10.24 pt to stay
# readable (docs_build/figures.py); drawn at this size they are never enlarged, so the
# spacing computed for it is the spacing of the text on the page.
_SLOPE_LABEL_PT = 10.5


def _label_line_ends(ax: Any, ends: list[tuple[float, float, str, str]]) -> None:
    """Write each line's slope right of its last point, spread so that none overlap.

    Call it once the figure is laid out: the spacing is one line of
    ``_SLOPE_LABEL_PT`` text in the axes' final height. Labels of lines that end at
    the same n share a column and are spread apart; columns at different n do not
    meet, so each is spread on its own.
    """
    if not ends:
        return
    low, high = (math.log10(v) for v in ax.get_ylim())
    height_pt = ax.get_window_extent().height * 72 / ax.figure.dpi
    gap = 1.25 * _SLOPE_LABEL_PT / height_pt * (high - low)  # one line of text, in decades
    for x_end in sorted({x for x, _, _, _ in ends}):
        column = sorted((end for end in ends if end[0] == x_end), key=lambda end: end[1])
        levels = [math.log10(y) for _, y, _, _ in column]
        for i in range(1, len(levels)):  # push up what sits too close to the label below
            levels[i] = max(levels[i], levels[i - 1] + gap)
        if levels[-1] > high - gap / 2:  # then down again from the top of the panel
            levels[-1] = high - gap / 2
            for i in range(len(levels) - 2, -1, -1):
                levels[i] = min(levels[i], levels[i + 1] - gap)
        for (x, y, text, color), level in zip(column, levels, strict=True):
            ax.annotate(
                text,
                (x, y),
                xytext=(x * 1.12, 10**level),
                fontsize=_SLOPE_LABEL_PT,
                color=color,
                va="center",
            )


def plot_results(data: dict[str, Any], combos: Sequence[tuple[str, bool]] | None = None) -> Figure:
    """Log-log time and peak-memory plots, one column per (mode, causal), with slopes.

    The number at the end of each line is its log-log slope, fitted on the upper half
    of the sizes (`fit_slope`). The dotted line in the time panels is the time the
    FLOPs would take at the measured matmul peak; in the memory panels, the size of one
    ``(B, H, n, n)`` float32 matrix. Points without a value (skipped, or a peak of 0 at
    the method's resolution) are left out.
    """
    import matplotlib.pyplot as plt

    if combos is None:
        combos = [(m, c) for m in data["run"]["modes"] for c in data["run"]["causal"]]
    shape = data["run"]["shape"]
    peak = data["matmul"]["peak_gflops"]
    fig, axes = plt.subplots(
        2,
        len(combos),
        figsize=(3.6 * len(combos) + 0.8, 6.4),
        layout="constrained",
        squeeze=False,
    )
    handles: dict[str, Any] = {}
    line_ends: list[tuple[Any, list[tuple[float, float, str, str]]]] = []
    for column, (mode, causal) in enumerate(combos):
        panels = (
            (axes[0, column], "median_s", 1e3, "median time (ms)"),
            (axes[1, column], "peak_extra_bytes", 1 / MiB, "peak extra memory (MiB)"),
        )
        all_ns: set[float] = set()
        for ax, key, scale, ylabel in panels:
            ends = []
            for name, info in data["implementations"].items():
                ns, values = series(data, name, key, mode, causal)
                positive = values > 0  # a log axis cannot show 0
                ns, values = ns[positive], values[positive]
                if not len(ns):
                    continue
                all_ns.update(ns.tolist())
                (line,) = ax.loglog(ns, values * scale, lw=1.2, ms=4, **_style(name))
                handles[info["label"]] = line
                slope = fit_slope(ns, values)
                if slope is not None:
                    ends.append((ns[-1], values[-1] * scale, f"{slope:.2f}", line.get_color()))
            ns = np.array(sorted(all_ns))
            if len(ns) and key == "median_s":
                config = _config_from(data)
                flops = [flop_count(Point("sdpa", int(n), causal, mode), config) for n in ns]
                (line,) = ax.loglog(ns, np.array(flops) / (peak * 1e9) * 1e3, "k:", lw=1)
                handles["softmax FLOPs at the matmul peak"] = line
            elif len(ns):
                one = shape["B"] * shape["H"] * ns**2 * 4 / MiB
                (line,) = ax.loglog(ns, one, "k--", lw=0.8)
                handles["one (B, H, n, n) float32 matrix"] = line
            ax.set(ylabel=ylabel)
            if len(ns):
                ax.set_xlim(ns[0] / 1.25, ns[-1] * 1.9)  # room for the slopes
                ax.set_xticks(ns, [str(int(n)) for n in ns], fontsize=8)
                ax.set_xticks([], minor=True)
            ax.grid(True, which="major", alpha=0.3)
            line_ends.append((ax, ends))
        axes[0, column].set_title(f"{mode}, {'causal' if causal else 'no mask'}", fontsize=10)
        axes[1, column].set_xlabel("sequence length n")
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="outside lower center",
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        f"B={shape['B']}, H={shape['H']}, D={shape['D']}, {data['run']['dtype']};"
        f" {data['machine']['cpu_model']}, {data['machine']['torch_threads']} threads,"
        f" {data['created'][:10]}\nnumbers at the line ends: log-log slopes (upper half of n)",
        fontsize=8.5,
    )
    fig.draw_without_rendering()  # lay the figure out: the labels are spaced in its units
    for ax, ends in line_ends:
        _label_line_ends(ax, ends)
    return fig


def _config_from(data: dict[str, Any]) -> Config:
    shape = data["run"]["shape"]
    return Config(
        batch=shape["B"], heads=shape["H"], head_dim=shape["D"], window=data["run"]["window"]
    )


def _cell(record: dict[str, Any] | None, key: str, reference: dict[str, Any] | None) -> str:
    if record is None:
        return "—"
    if key == "time":
        ms = record["median_s"] * 1e3
        text = f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"
        if reference is not None:
            text += f" ({record['median_s'] / reference['median_s']:.2f}×)"
        return text
    if key == "gflops":
        return f"{record['gflops']:.0f} ({100 * record['fraction_of_matmul_peak']:.0f} %)"
    value = record.get("peak_extra_bytes")
    return "—" if value is None else f"{value / MiB:.1f}"


def markdown_table(
    data: dict[str, Any], key: str, mode: str = FORWARD, causal: bool = False
) -> str:
    """A Markdown table, implementations by n, of ``key``: "time", "gflops" or "memory".

    "time" is the median in ms with the ratio to ``F.scaled_dot_product_attention`` at
    the same n; "gflops" the GFLOP/s with the share of the matmul peak; "memory" the
    peak extra memory in MiB. A dash marks a point not measured.
    """
    sizes = data["run"]["sizes"]
    header = {"time": "ms (× SDPA)", "gflops": "GFLOP/s (% of peak)", "memory": "MiB"}[key]
    lines = [
        f"| {header} | " + " | ".join(f"n = {n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, info in data["implementations"].items():
        cells = [
            _cell(find(data, name, n, mode, causal), key, find(data, "sdpa", n, mode, causal))
            for n in sizes
        ]
        if all(cell == "—" for cell in cells):
            continue
        lines.append(f"| {info['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_comparison(
    first: dict[str, Any], second: dict[str, Any], labels: tuple[str, str] = ("first", "second")
) -> str:
    """Markdown table of the time relative to SDPA's in two runs: "first / second".

    Rows are the implementations of ``first``, columns its sizes; a dash marks a point
    that a run does not have.
    """

    def ratio(data: dict[str, Any], name: str, n: int) -> str:
        record, sdpa = find(data, name, n), find(data, "sdpa", n)
        if record is None or sdpa is None:
            return "—"
        return f"{record['median_s'] / sdpa['median_s']:.2f}"

    sizes = first["run"]["sizes"]
    lines = [
        f"| × SDPA: {labels[0]} / {labels[1]} | " + " | ".join(f"n = {n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, info in first["implementations"].items():
        cells = [f"{ratio(first, name, n)} / {ratio(second, name, n)}" for n in sizes]
        lines.append(f"| {info['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(data: dict[str, Any]) -> str:
    """One paragraph: where, when, with what, and how long the run took."""
    machine, run = data["machine"], data["run"]
    caches = ", ".join(f"{k} {v['size']}" for k, v in machine["caches"].items())
    kind = "quick (reduced) run" if run["quick"] else "full run"
    return (
        f"{kind} of {data['created'].replace('T', ' ')}, `{run['command']}`, "
        f"{run['duration_s']:.0f} s; {machine['cpu_model']} ({machine['cpu_capability']}), "
        f"{machine['logical_cpus']} logical CPUs, {machine['torch_threads']} torch threads, "
        f"caches {caches or 'unknown'}, {machine['memory_gib']} GiB; "
        f"Python {machine['python']}, torch {machine['torch']}, NumPy {machine['numpy']}; "
        f"torch.matmul peak {data['matmul']['peak_gflops']:.0f} GFLOP/s, "
        f"copy bandwidth {data['copy_bandwidth']['gbytes_per_s']:.1f} GB/s, writing into"
        f" fresh memory {data['first_touch']['gbytes_per_s']:.1f} GB/s."
    )

r"""Pictures of attention: weight heatmaps, per-head grids, entropy and output norms.

Every function here draws and returns what it drew on (an ``Axes``, or a ``Figure``
for grids). None of them calls ``plt.show()`` or saves a file: in a notebook the
figure appears below the cell on its own, in a script call ``plt.show()`` or
``fig.savefig(...)`` yourself. Pass ``ax=`` (``fig=`` for a grid) to draw into a
figure you laid out; without it a new figure is made with pyplot, so that notebooks
display it and ``plt.close`` can free it.

Inputs may be torch tensors (on any device, with or without gradients) or NumPy
arrays; tensors are converted once, at the boundary.

One number per query summarises how spread out its attention is, the entropy of
its row of weights, in nats:

$$
\mathcal{H}_i = -\sum_{j=1}^{S} p_{ij} \log p_{ij}, \qquad 0 \le \mathcal{H}_i \le \log S,
$$

with $p_{ij}$ the weight query $i$ gives key $j$ and $0 \log 0 = 0$. It is $0$ for
a query that reads a single key and $\log S$ for one that spreads evenly over all
$S$ keys.

References:
    - Clark et al., "What Does BERT Look At? An Analysis of BERT's Attention", 2019
      (per-head attention entropy). [arXiv:1906.04341](https://arxiv.org/abs/1906.04341)
    - Vaswani et al., "Attention Is All You Need", 2017 (sinusoidal positional
      encoding). [arXiv:1706.03762](https://arxiv.org/abs/1706.03762)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from attention._checks import (
    check_labels,
    check_non_negative,
    check_size,
    check_tensor,
)

# matplotlib is imported where a figure is drawn: `import attention` does not pay for
# it (about 0.4 s), and a program that only computes attention never loads it.
if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

__all__ = [
    "HeadView",
    "attention_entropy",
    "plot_activation_norms",
    "plot_attention",
    "plot_attention_entropy",
    "plot_attention_heads",
    "plot_positional_encoding",
]

# Labels up to this many characters fit under a heatmap cell upright ("the", "mats");
# longer ones are rotated 45 degrees so that neighbours do not overlap.
_MAX_UPRIGHT_LABEL = 4
# Heatmap cell size in inches when the function makes the figure: room for "0.00".
_CELL_INCHES = 0.55


def plot_attention(
    weights: Tensor | NDArray[Any],
    *,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    annotate: bool = True,
    fmt: str = ".2f",
    cmap: str | Colormap = "viridis",
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    title: str | None = None,
    colorbar: bool = True,
) -> Axes:
    """Heatmap of an ``(L, S)`` attention matrix: who reads from whom.

    Row $i$ (y axis) is query $i$, the token doing the attending; column $j$ (x axis)
    is key $j$, the token attended to. The colour scale is fixed to $[0, 1]$ so that
    the colours of two plots of probabilities can be compared; pass ``vmin`` and
    ``vmax`` (``None`` for the data's range) to plot anything else, such as scores.
    Each cell is annotated with its value, in black on light cells and in white on
    dark ones.

    Args:
        weights: ``(L, S)`` tensor or array, typically attention probabilities.
        query_labels: ``L`` tick labels for the rows (tokens); positions if omitted.
            For a square matrix, one of ``query_labels`` and ``key_labels`` labels
            both axes.
        key_labels: ``S`` tick labels for the columns. Labels longer than four
            characters are rotated 45 degrees.
        ax: Axes to draw into; a new pyplot figure is made if omitted.
        annotate: Write each value in its cell. Switch off for large matrices.
        fmt: Format spec for the annotations, as in ``format(value, fmt)``.
        cmap: Matplotlib colormap or its name.
        vmin: Value at the bottom of the colour scale; ``None`` for the minimum.
        vmax: Value at the top of the colour scale; ``None`` for the maximum.
        title: Axes title; none if omitted.
        colorbar: Add a colorbar labelled "weight" next to the axes (reach it
            afterwards as ``ax.images[0].colorbar``).

    Returns:
        The Axes drawn on. ``ax.images[0]`` holds the matrix, ``ax.texts`` the
            ``L * S`` annotations in row-major order.

    Raises:
        TypeError: If ``weights`` is not a real tensor or array, or a label list is a
            single string.
        ValueError: If ``weights`` is not a non-empty 2-D matrix or a label list does
            not have one label per row or column.

    Examples:
        >>> import torch
        >>> from matplotlib.figure import Figure
        >>> from attention import plot_attention
        >>> w = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0]])  # (L, S) = (2, 3)
        >>> ax = Figure().subplots()  # off-screen; leave out ax= in a notebook
        >>> ax = plot_attention(w, query_labels=["I", "am"], key_labels=["<s>", "I", "am"], ax=ax)
        >>> [t.get_text() for t in ax.texts]
        ['1.00', '0.00', '0.00', '0.25', '0.75', '0.00']
        >>> [t.get_text() for t in ax.get_xticklabels()], ax.get_xlabel()
        (['<s>', 'I', 'am'], 'key (attended to)')
        >>> [t.get_text() for t in ax.get_yticklabels()], ax.get_ylabel()
        (['I', 'am'], 'query (attending)')
    """
    matrix = _as_array(
        "weights",
        weights,
        ndim=2,
        shape_name="(L, S)",
        hint=" (for several heads use plot_attention_heads, or select one: weights[0])",
    )
    L, S = matrix.shape
    # Read each argument once (it may be a generator), then share: square weights use
    # one set of labels for both axes when only one is given.
    rows = check_labels("query_labels", query_labels, L, "query (L)")
    columns = check_labels("key_labels", key_labels, S, "key (S)")
    if L == S:
        rows = columns if rows is None else rows
        columns = rows if columns is None else columns

    if ax is None:
        ax = _new_axes((min(2.5 + _CELL_INCHES * S, 16.0), min(1.5 + _CELL_INCHES * L, 16.0)))
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    _set_ticks(ax, "x", columns)
    _set_ticks(ax, "y", rows)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title is not None:
        ax.set_title(title)
    if annotate:
        _annotate_cells(ax, image, matrix, fmt)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="weight")
    return ax


def plot_attention_heads(
    weights: Tensor | NDArray[Any],
    *,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ncols: int | None = None,
    annotate: bool = False,
    fmt: str = ".2f",
    cmap: str | Colormap = "viridis",
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    fig: Figure | None = None,
    titles: Sequence[str] | None = None,
) -> Figure:
    """Grid of heatmaps, one per head, on one shared colour scale with one colorbar.

    Each panel is drawn by [`plot_attention`][attention.viz.plot_attention], so it
    reads the same way: queries on the y axis, keys on the x axis. Axis titles
    appear once per row and column of the grid; grid cells beyond the last head
    are hidden.

    Args:
        weights: ``(H, L, S)`` tensor or array, or ``(1, H, L, S)`` (a batch of one,
            as returned for a single sequence).
        query_labels: ``L`` tick labels for the rows, as in ``plot_attention``.
        key_labels: ``S`` tick labels for the columns, as in ``plot_attention``.
        ncols: Panels per row; ``min(H, 4)`` if omitted.
        annotate: Write each value in its cell (off by default: panels are small).
        fmt: Format spec for the annotations.
        cmap: Matplotlib colormap or its name.
        vmin: Bottom of the shared colour scale; ``None`` for the minimum over heads.
        vmax: Top of the shared colour scale; ``None`` for the maximum over heads.
        fig: Empty figure to draw the grid into; a new pyplot figure if omitted.
        titles: ``H`` panel titles; ``"head 0"``, ``"head 1"``, ... if omitted.

    Returns:
        The Figure. ``fig.axes`` lists the grid's panels in row-major order (the
            hidden ones included), then the colorbar.

    Raises:
        TypeError: If ``weights`` is not a real tensor or array, ``ncols`` is not an
            int, or a label list is a single string.
        ValueError: If ``weights`` is not ``(H, L, S)`` or ``(1, H, L, S)``, is
            empty, ``ncols`` is below 1, or a label list has the wrong length.

    Examples:
        >>> import torch
        >>> from matplotlib.figure import Figure
        >>> from attention import plot_attention_heads
        >>> w = torch.softmax(torch.randn(3, 4, 5), dim=-1)  # (H, L, S) = (3, 4, 5)
        >>> fig = plot_attention_heads(w, ncols=2, fig=Figure())  # 2 x 2 grid
        >>> [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.images]
        ['head 0', 'head 1', 'head 2']
        >>> [ax.get_visible() for ax in fig.axes[:4]]  # the fourth cell is hidden
        [True, True, True, False]
    """
    array = _as_array("weights", weights)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]  # (1, H, L, S) -> (H, L, S)
    if array.ndim != 3 or 0 in array.shape:
        hint = ""
        if array.ndim == 4:
            hint = " (select one sequence of the batch, e.g. weights[0])"
        elif array.ndim == 2:
            hint = " (for a single (L, S) matrix use plot_attention)"
        raise ValueError(
            "weights must have shape (H, L, S) or (1, H, L, S), with no empty dimension; "
            f"got {_shape_str(array.shape)}{hint}"
        )
    H, L, S = array.shape
    if ncols is None:
        ncols = min(H, 4)
    ncols = check_size("ncols", ncols, minimum=1)
    nrows = math.ceil(H / ncols)
    head_titles = check_labels("titles", titles, H, "head (H)")
    if head_titles is None:
        head_titles = [f"head {h}" for h in range(H)]
    # Check the labels before drawing anything, so an error leaves no half-drawn grid,
    # and read them once: a generator would be empty for every panel after the first.
    query_labels = check_labels("query_labels", query_labels, L, "query (L)")
    key_labels = check_labels("key_labels", key_labels, S, "key (S)")
    if L == S:
        query_labels = key_labels if query_labels is None else query_labels
        key_labels = query_labels if key_labels is None else key_labels
    # One colour scale for every head, or the same colour would mean different weights.
    vmin = float(np.nanmin(array)) if vmin is None else vmin
    vmax = float(np.nanmax(array)) if vmax is None else vmax

    if fig is None:
        cell = _CELL_INCHES if annotate else 0.3
        panel = (min(1.5 + cell * S, 8.0), min(1.5 + cell * L, 8.0))
        fig = _new_figure((ncols * panel[0] + 1.0, nrows * panel[1]))
    grid: NDArray[Any] = fig.subplots(nrows, ncols, squeeze=False)  # (nrows, ncols) of Axes
    panels: list[Axes] = list(grid.flat)
    for h, ax in enumerate(panels[:H]):
        plot_attention(
            array[h],
            query_labels=query_labels,
            key_labels=key_labels,
            ax=ax,
            annotate=annotate,
            fmt=fmt,
            cmap=cmap,
            vmin=vmin,
            vmax=vmax,
            title=head_titles[h],
            colorbar=False,
        )
        if h % ncols != 0:
            ax.set_ylabel("")
        if h + ncols < H:  # another panel below this one carries the x axis title
            ax.set_xlabel("")
    for ax in panels[H:]:
        ax.set_visible(False)
    fig.colorbar(panels[0].images[0], ax=panels[:H], label="weight")
    return fig


def plot_positional_encoding(
    encoding: Tensor | NDArray[Any],
    *,
    ax: Axes | None = None,
    title: str | None = None,
    cmap: str | Colormap = "RdBu_r",
    vmax: float | None = 1.0,
    colorbar: bool = True,
) -> Axes:
    """Heatmap of an ``(L, D)`` positional encoding: one row per position.

    Position runs down the y axis, the encoding's dimension along the x axis. The
    diverging colour scale runs from ``-vmax`` (blue) through 0 (white) to ``vmax``
    (red); its default of 1 suits sinusoidal encodings, whose values lie in
    $[-1, 1]$.

    Args:
        encoding: ``(L, D)`` tensor or array.
        ax: Axes to draw into; a new pyplot figure is made if omitted.
        title: Axes title; none if omitted.
        cmap: Matplotlib colormap or its name; a diverging one keeps 0 neutral.
        vmax: Half-width of the colour scale, which is symmetric about 0 so that 0
            always sits at its centre; ``None`` for the largest absolute value.
        colorbar: Add a colorbar labelled "value" next to the axes.

    Returns:
        The Axes drawn on; ``ax.images[0]`` holds the encoding.

    Raises:
        TypeError: If ``encoding`` is not a real tensor or array.
        ValueError: If ``encoding`` is not a non-empty 2-D matrix.

    Examples:
        >>> import torch
        >>> from matplotlib.figure import Figure
        >>> from attention import plot_positional_encoding
        >>> position = torch.arange(6.0)[:, None]  # (L, 1)
        >>> encoding = torch.cat([position.sin(), position.cos()], dim=-1)  # (L, D) = (6, 2)
        >>> ax = plot_positional_encoding(encoding, ax=Figure().subplots())
        >>> ax.images[0].get_array().shape, ax.get_ylabel(), ax.get_xlabel()
        ((6, 2), 'position', 'dimension')
        >>> ax.images[0].get_clim()
        (-1.0, 1.0)
    """
    matrix = _as_array("encoding", encoding, ndim=2, shape_name="(L, D)")
    if vmax is None:
        vmax = float(np.nanmax(np.abs(matrix)))
    if ax is None:
        ax = _new_axes((6.4, 4.8))
    # aspect="auto": an encoding is often far wider than tall (D = 512, L = 50).
    image = ax.imshow(
        matrix, cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest"
    )
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("position")
    ax.set_xlabel("dimension")
    if title is not None:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="value")
    return ax


@overload
def attention_entropy(weights: Tensor) -> Tensor: ...
@overload
def attention_entropy(weights: NDArray[Any]) -> NDArray[Any]: ...
def attention_entropy(weights: Tensor | NDArray[Any]) -> Tensor | NDArray[Any]:
    r"""Entropy, in nats, of each query's distribution over the keys.

    $$\mathcal{H}_i = -\sum_j p_{ij} \log p_{ij}, \qquad 0 \log 0 = 0.$$

    $\mathcal{H}_i = 0$ means query $i$ puts all its weight on one key (one-hot); the maximum,
    $\log S$, means it spreads evenly over all $S$ keys. A row of zeros, which is
    what this package's attention gives a query whose keys are all masked, has
    entropy 0 by the same convention, never NaN. Rows are taken as they are: they
    are not renormalised.

    Args:
        weights: ``(..., L, S)`` (or any ``(..., S)``) tensor or array of
            non-negative weights, each row a distribution over the last axis.

    Returns:
        Entropies of shape ``(..., L)``, of the same kind as ``weights``: a tensor
            with its dtype and device for a tensor, an array of its dtype for an array.

    Raises:
        TypeError: If ``weights`` is not a floating-point tensor or array.
        ValueError: If ``weights`` has no dimension or a negative entry (scores rather
            than probabilities).

    Examples:
        >>> import math
        >>> import torch
        >>> from attention import attention_entropy
        >>> w = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        >>> attention_entropy(w)  # uniform, one-hot, fully masked
        tensor([1.3863, 0.0000, 0.0000])
        >>> round(math.log(4), 4)
        1.3863
        >>> attention_entropy(w.numpy()).round(4)
        array([1.3863, 0.    , 0.    ], dtype=float32)
    """
    if isinstance(weights, Tensor):
        weights = check_tensor("weights", weights, min_ndim=1)
        check_non_negative(float(weights.detach().min()) if weights.numel() else 0.0)
        # log(1) = 0 stands in for log(0): zeros add nothing, and their gradient is 0
        # rather than xlogy's NaN (p log p has slope -inf at 0; 0 is the usual stand-in).
        # 0 - sum rather than -sum, so that a one-hot row gives 0.0, not -0.0.
        p_log_p = weights * torch.log(torch.where(weights > 0, weights, 1.0))
        entropy: Tensor = 0.0 - p_log_p.sum(dim=-1)
        return entropy
    if isinstance(weights, np.ndarray):
        if weights.dtype.kind != "f":
            raise TypeError(
                "weights must have a floating-point dtype (float16, float32, float64); "
                f"got {weights.dtype}"
            )
        if weights.ndim < 1:
            raise ValueError("weights must have at least 1 dimension (..., S); got shape ()")
        check_non_negative(float(weights.min()) if weights.size else 0.0)
        # log(1) = 0 stands in for log(0), so zeros add nothing and log never sees 0.
        np_p_log_p = weights * np.log(np.where(weights > 0, weights, 1))
        return np.asarray(0.0 - np_p_log_p.sum(axis=-1))
    raise TypeError(
        f"weights must be a torch.Tensor or a numpy.ndarray; got {type(weights).__name__}"
    )


def plot_attention_entropy(
    weights: Tensor | NDArray[Any],
    *,
    query_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    r"""Bar chart of each query's attention entropy, against the uniform maximum.

    One bar per query, its height
    [`attention_entropy`][attention.viz.attention_entropy] in nats; a dashed line at
    $\log S$ marks the entropy of uniform attention over the $S$ keys. A bar near
    the line: the query reads everything a little; a bar near 0: it reads one key.

    Args:
        weights: ``(L, S)`` tensor or array of attention probabilities.
        query_labels: ``L`` tick labels for the bars (tokens); positions if omitted.
        ax: Axes to draw into; a new pyplot figure is made if omitted.
        title: Axes title; none if omitted.

    Returns:
        The Axes drawn on. ``ax.patches`` holds the ``L`` bars, ``ax.lines[0]`` the
            uniform line.

    Raises:
        TypeError: If ``weights`` is not a real tensor or array, or ``query_labels``
            is a single string.
        ValueError: If ``weights`` is not a non-empty 2-D matrix or has a negative
            entry, or ``query_labels`` does not have ``L`` labels.

    Examples:
        >>> import torch
        >>> from matplotlib.figure import Figure
        >>> from attention import plot_attention_entropy
        >>> w = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.9, 0.1]])  # (L, S) = (3, 2)
        >>> ax = plot_attention_entropy(w, query_labels=["a", "b", "c"], ax=Figure().subplots())
        >>> [round(float(bar.get_height()), 3) for bar in ax.patches]  # log 2 = 0.693
        [0.693, 0.0, 0.325]
        >>> ax.lines[0].get_label(), round(ax.lines[0].get_ydata()[0], 3)
        ('uniform (log S)', 0.693)
    """
    matrix = _as_array("weights", weights, ndim=2, shape_name="(L, S)")
    L, S = matrix.shape
    labels = check_labels("query_labels", query_labels, L, "query (L)")
    entropy = attention_entropy(matrix)  # (L,)
    uniform = math.log(S)

    if ax is None:
        ax = _new_axes((min(2.0 + 0.45 * L, 16.0), 3.5))
    ax.bar(range(L), entropy, color="C0")
    ax.axhline(uniform, color="0.3", linestyle="--", label="uniform (log S)")
    _set_ticks(ax, "x", labels)
    ax.set_xlabel("query (attending)")
    ax.set_ylabel("entropy (nats)")
    # Headroom above the line for the legend; a one-key matrix has log S = 0.
    ax.set_ylim(0.0, 1.15 * max(uniform, float(np.nanmax(entropy))) or 1.0)
    ax.legend(loc="upper right")
    if title is not None:
        ax.set_title(title)
    return ax


def plot_activation_norms(
    output: Tensor | NDArray[Any],
    *,
    labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    r"""Bar chart of the L2 norm of each row of an attention output.

    Row $i$ of the output $P V$ is what query $i$ (token $i$, in self-attention)
    carries to the next layer; its length $\lVert (PV)_i \rVert_2$ is a rough
    "activation strength" to compare across tokens, or across two models.

    Args:
        output: ``(L, Dv)`` tensor or array, one output vector per query.
        labels: ``L`` tick labels for the bars (tokens); positions if omitted.
        ax: Axes to draw into; a new pyplot figure is made if omitted.
        title: Axes title; none if omitted.

    Returns:
        The Axes drawn on; ``ax.patches`` holds the ``L`` bars.

    Raises:
        TypeError: If ``output`` is not a real tensor or array, or ``labels`` is a
            single string.
        ValueError: If ``output`` is not a non-empty 2-D matrix or ``labels`` does
            not have ``L`` labels.

    Examples:
        >>> import torch
        >>> from matplotlib.figure import Figure
        >>> from attention import plot_activation_norms
        >>> out = torch.tensor([[3.0, 4.0], [0.0, 1.0]])  # (L, Dv) = (2, 2)
        >>> ax = plot_activation_norms(out, labels=["cat", "sat"], ax=Figure().subplots())
        >>> [float(bar.get_height()) for bar in ax.patches]
        [5.0, 1.0]
        >>> [t.get_text() for t in ax.get_xticklabels()]
        ['cat', 'sat']
    """
    matrix = _as_array("output", output, ndim=2, shape_name="(L, Dv)")
    L = matrix.shape[0]
    names = check_labels("labels", labels, L, "query (L)")
    norms = np.linalg.norm(matrix, axis=-1)  # (L, Dv) -> (L,)

    if ax is None:
        ax = _new_axes((min(2.0 + 0.45 * L, 16.0), 3.5))
    ax.bar(range(L), norms, color="C0")
    _set_ticks(ax, "x", names)
    ax.set_xlabel("query (output row)")
    ax.set_ylabel("L2 norm of output row")
    if title is not None:
        ax.set_title(title)
    return ax


class HeadView:
    r"""The attention of every layer and head of a model, to explore in a browser.

    Choose a layer and two heads side by side, hover over or focus a query token
    to see the lines to the keys it reads (their opacity is the weight), and save
    the view as SVG or PNG. In Jupyter the object displays as that view; `save`
    writes it to a single HTML file that opens in any browser, offline (the viewer is
    `attention/head_view.js`, inlined: no library, no network). The documentation
    site shows the same view for the models its tutorials train.

    Args:
        weights: Attention weights of shape ``(layers, H, L, S)`` (a tensor or an
            array), or a sequence of ``layers`` tensors ``(H, L, S)``, e.g. the
            weights each layer of your model returns for one input (take one batch
            element first).
        tokens: ``L`` labels of the queries.
        key_tokens: ``S`` labels of the keys; defaults to ``tokens`` (self-attention).
        layer_names: One name per layer; defaults to ``"layer 0"``, ``"layer 1"``...
        decimals: Digits kept per weight in the page (4: 0.0001 steps, invisible
            as line opacity, and a file a fraction of the size of full floats).

    Raises:
        TypeError: If ``weights`` is not a tensor, an array or a sequence of them, or
            a label list is a single string.
        ValueError: If ``weights`` does not have 4 dimensions ``(layers, H, L, S)``,
            holds negative or non-finite values, or a label list has the wrong length.

    Examples:
        >>> import torch
        >>> from attention import HeadView, MultiHeadAttention
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> layer = MultiHeadAttention(8, 2)
        >>> x = torch.randn(1, 3, 8)  # (B, L, E)
        >>> _, weights = layer(x, x, x, need_weights=True, average_attn_weights=False)
        >>> view = HeadView(weights[0][None], ["the", "cat", "sat"])  # (1, H, L, S)
        >>> view.data["heads"], view.data["tokens"]
        (2, ['the', 'cat', 'sat'])
        >>> import pathlib, tempfile
        >>> path = view.save(pathlib.Path(tempfile.mkdtemp()) / "heads.html")
        >>> path.read_text().count("mountHeadView(")
        2
    """

    def __init__(
        self,
        weights: Tensor | NDArray[Any] | Sequence[Tensor | NDArray[Any]],
        tokens: Sequence[str],
        *,
        key_tokens: Sequence[str] | None = None,
        layer_names: Sequence[str] | None = None,
        decimals: int = 4,
    ) -> None:
        if isinstance(weights, (list, tuple)):
            layers = [
                _as_array(f"weights[{i}]", w, ndim=3, shape_name="(H, L, S)")
                for i, w in enumerate(weights)
            ]
            if not layers or len({a.shape for a in layers}) != 1:
                shapes = ", ".join(_shape_str(a.shape) for a in layers) or "none"
                raise ValueError(f"weights must be layers of one shape (H, L, S); got {shapes}")
            array = np.stack(layers)
        else:
            array = _as_array("weights", weights, ndim=4, shape_name="(layers, H, L, S)")
        if not np.isfinite(array).all():
            raise ValueError("weights must be finite (attention weights, not scores)")
        check_non_negative(float(array.min()))
        n_layers, heads, L, S = array.shape
        queries = check_labels("tokens", tokens, L, "query (L)")
        keys = check_labels("key_tokens", key_tokens, S, "key (S)")
        if keys is None:
            if S != L:
                raise ValueError(
                    f"key_tokens is needed when the keys are not the queries: weights "
                    f"{_shape_str(array.shape)} has L={L} queries but S={S} keys"
                )
            keys = queries
        names = check_labels("layer_names", layer_names, n_layers, "layer")
        decimals = check_size("decimals", decimals)
        self.data: dict[str, Any] = {
            "tokens": queries,
            "keyTokens": keys,
            "layers": names or [f"layer {i}" for i in range(n_layers)],
            "heads": heads,
            "weights": np.round(array, decimals).tolist(),
        }

    def _parts(self) -> tuple[str, str, str]:
        """The viewer's script and style sheet, and the data as JSON for a script."""
        from importlib.resources import files

        here = files("attention")
        script = (here / "head_view.js").read_text(encoding="utf-8")
        style = (here / "head_view.css").read_text(encoding="utf-8")
        return script, style, _script_json(self.data)

    def _inline_view(self, element_id: str) -> str:
        script, style, data = self._parts()
        return (
            f'<style>{style}</style><div id="{element_id}" class="head-view"></div>'
            f'<script type="module">{script}\n'
            f'mountHeadView(document.getElementById("{element_id}"), {data})</script>'
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """Jupyter shows the view; the documentation site reads the data alone."""
        element_id = f"head-view-{id(self):x}"
        return {
            "text/html": self._inline_view(element_id),
            "application/vnd.attention.head-view+json": self.data,
            "text/plain": repr(self),
        }

    def __repr__(self) -> str:
        layers, heads = len(self.data["layers"]), self.data["heads"]
        L, S = len(self.data["tokens"]), len(self.data["keyTokens"])
        return f"HeadView(layers={layers}, heads={heads}, L={L}, S={S})"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the view to a standalone HTML file and return its path.

        Args:
            path: Where to write it (conventionally ending in ``.html``).

        Returns:
            The path written, as a ``pathlib.Path``.
        """
        path = Path(path)
        path.write_text(
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<title>Head view</title></head><body style="font-family: sans-serif">'
            f"{self._inline_view('head-view')}</body></html>\n",
            encoding="utf-8",
        )
        return path


# Characters that could let data change how the page around a <script> parses: "<" opens
# "</script>", "<!--" and "<script" (the last two move the HTML parser into its
# double-escaped state, where the real "</script>" no longer closes the element); ">" and
# "&" for good measure. Inside JSON strings these escapes read back as the same
# characters, in JSON and in JavaScript alike.
_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def _script_json(data: object) -> str:
    """``data`` as JSON that is safe to place inside an HTML ``<script>`` element."""
    # ensure_ascii escapes every non-ASCII character, U+2028 and U+2029 (line ends in
    # older JavaScript) among them.
    return json.dumps(data, ensure_ascii=True).translate(_SCRIPT_ESCAPES)


def _as_array(
    name: str, value: object, *, ndim: int | None = None, shape_name: str = "", hint: str = ""
) -> NDArray[np.float64]:
    """Convert a real tensor or array to a float64 NumPy array, checking its shape."""
    if isinstance(value, Tensor):
        if value.is_complex():
            raise TypeError(f"{name} must hold real numbers; got {value.dtype}")
        # matplotlib given a tensor warns under NumPy 2, and .numpy() refuses bfloat16
        # and anything on a GPU: detach, move, cast, then convert.
        array = value.detach().to("cpu", torch.float64).numpy()
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"{name} must hold real numbers; got dtype {value.dtype}")
        array = value.astype(np.float64)
    else:
        raise TypeError(
            f"{name} must be a torch.Tensor or a numpy.ndarray; got {type(value).__name__}"
        )
    if ndim is not None and (array.ndim != ndim or 0 in array.shape):
        hint = hint if array.ndim > ndim else ""
        raise ValueError(
            f"{name} must be a non-empty {ndim}-D matrix {shape_name}; "
            f"got shape {_shape_str(array.shape)}{hint}"
        )
    return array


def _shape_str(shape: tuple[int, ...]) -> str:
    """Format a shape as ``(2, 4, 7, 16)``, as ``attention._checks.shape_str`` does."""
    return "(" + ", ".join(str(n) for n in shape) + ")"


def _set_ticks(ax: Axes, axis: str, labels: list[str] | None) -> None:
    """One tick per label, or integer positions when there are no labels."""
    from matplotlib.ticker import MaxNLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    if labels is None:
        target.set_major_locator(MaxNLocator(integer=True))
    elif axis == "x" and max(map(len, labels)) > _MAX_UPRIGHT_LABEL:
        # Anchored rotation puts the end of each label under its own cell.
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", rotation_mode="anchor")
    elif axis == "x":
        ax.set_xticks(range(len(labels)), labels)
    else:
        ax.set_yticks(range(len(labels)), labels)


def _annotate_cells(ax: Axes, image: AxesImage, matrix: NDArray[np.float64], fmt: str) -> None:
    """Write each value in its cell, in whichever of black or white contrasts more."""
    colors = image.to_rgba(matrix)  # (L, S, 4), the colours the cells are painted
    for (i, j), value in np.ndenumerate(matrix):
        ax.text(
            j,
            i,
            format(value, fmt),
            ha="center",
            va="center",
            fontsize=9,
            color=_text_color_on(colors[i, j]),
        )


def _text_color_on(rgba: NDArray[np.float64]) -> str:
    """Black or white, whichever has the higher WCAG contrast ratio with ``rgba``."""
    if rgba[3] < 0.5:  # a NaN cell is left transparent, showing the (white) axes
        return "black"
    linear = np.where(rgba[:3] <= 0.04045, rgba[:3] / 12.92, ((rgba[:3] + 0.055) / 1.055) ** 2.4)
    luminance = float(linear @ np.array([0.2126, 0.7152, 0.0722]))
    # Contrast with black (Y + 0.05) / 0.05 beats contrast with white 1.05 / (Y + 0.05)
    # exactly when Y exceeds sqrt(1.05 * 0.05) - 0.05, about 0.179.
    return "black" if luminance > math.sqrt(1.05 * 0.05) - 0.05 else "white"


def _new_axes(figsize: tuple[float, float]) -> Axes:
    return _new_figure(figsize).add_subplot()


def _new_figure(figsize: tuple[float, float]) -> Figure:
    # Through pyplot, unlike a bare Figure(), so that a notebook shows the figure
    # and plt.close() frees it. Imported here: `import attention` needs no backend.
    import matplotlib.pyplot as plt

    # Constrained layout makes room for rotated labels and the colorbar.
    return plt.figure(figsize=figsize, layout="constrained")

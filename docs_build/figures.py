"""Turn a matplotlib figure into what the site publishes: a light and a dark SVG.

Both the concept pages (markdown-exec blocks, in the MkDocs process) and the tutorials
(in their Jupyter kernels) render figures through this module, so every figure on the
site gets the same treatment:

- **SVG with text as text** (``svg.fonttype = "none"``): sharp at any zoom, small, and the
  labels stay selectable instead of becoming hundreds of glyph paths.
- **Readable labels**: a figure is shrunk to the content column, so labels are enlarged
  where needed to stay at least :data:`MIN_LABEL_PX` on screen after the shrink.
- **A dark twin**: the same figure recoloured for Material's slate scheme (light text and
  axes on a transparent background); the colormaps and the numbers drawn on top of
  images keep their colours, because they are data. The page shows one or the other
  through Material's ``#only-light`` / ``#only-dark`` image fragments. The figure is
  drawn once: the twin is the light SVG with a style sheet that recolours exactly what
  a recoloured second drawing would (tested pixel for pixel), at half the cost.
- **Reproducible bytes**: fixed hash salt and no date, so an unchanged figure keeps its
  content-hashed file name (and the reader's cache) from one build to the next.

The SVGs travel inside the page as ``data:`` URIs; :func:`figure_files` (a step of the
site's build, run before any other reads the page) moves each one into its own
content-hashed SVG file under ``assets/figures/``, loaded lazily, with its size declared
(no layout shift) and the ``#only-light`` / ``#only-dark`` fragment that makes Material
show the render that matches the reader's colour scheme.
"""

from __future__ import annotations

import base64
import hashlib
import html
import inspect
import io
import posixpath
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib as mpl
from matplotlib import cbook
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.colors import to_hex, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import Bbox

# Width of Material's content column on a desktop screen with both sidebars (px), and
# the smallest label size we accept after a wider figure is shrunk into it: Material's
# small print is 0.64rem of a 20 px root, 12.8 px.
CONTENT_WIDTH_PX = 720
MIN_LABEL_PX = 12.8
# Numbers written inside heatmap cells must fit their cells; they get a lower floor.
MIN_DATA_LABEL_PX = 9.0
# Foreground for the dark twin: Material slate's body text colour, near enough.
DARK_FOREGROUND = "#dcdde4"
DARK_MUTED = "#8b8fa3"

RC_PARAMS = {
    "svg.fonttype": "none",  # text stays <text>, not paths
    "svg.hashsalt": "attention-site",  # stable ids, so stable bytes
    "font.size": 10,
    "font.family": "sans-serif",
}


_Change = Callable[[object, str, object], None]


class _Edits:
    """Property changes made to a figure's artists, undone in reverse order.

    Called like ``set_<prop>``: ``edits(text, "color", "white")``. The renders change
    the figure (larger labels, gids, dark colours) and must hand it back unchanged.
    """

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def __call__(self, artist: object, prop: str, value: object) -> None:
        self._undo.append((artist, prop, getattr(artist, f"get_{prop}")()))
        getattr(artist, f"set_{prop}")(value)

    def undo(self) -> None:
        """Restore every changed property, the last change first."""
        while self._undo:
            artist, prop, value = self._undo.pop()
            getattr(artist, f"set_{prop}")(value)


def apply_style() -> None:
    """Set the rcParams every published figure is drawn with."""
    mpl.rcParams.update(RC_PARAMS)


def _px(points: float) -> float:
    return points * 96 / 72


def _width_in(fig: Figure) -> float:
    # The saved SVG is cropped or grown to the artists' tight box (bbox_inches="tight"):
    # a legend outside the axes makes it wider than the figure, and so shrinks it more.
    tight = fig.get_tightbbox()
    return max(float(fig.get_size_inches()[0]), float(tight.width))


def _is_dark(color: object) -> bool:
    r, g, b, a = to_rgba(color)  # type: ignore[arg-type]
    # Grey/black only: a dark *hue* ("C3" red, navy) names a series, and recolouring it
    # would leave the line grey while its legend entry stays red.
    gray = max(r, g, b) - min(r, g, b) < 0.1
    return a > 0 and gray and 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.35


def _is_white(color: object) -> bool:
    r, g, b, a = to_rgba(color)  # type: ignore[arg-type]
    return a > 0 and min(r, g, b) > 0.97


def _draws_data_under_text(ax: Axes) -> bool:
    # Numbers written on a heatmap sit on colormap cells: they are data, and their
    # colour was chosen against those cells, not against the page.
    return bool(ax.images) or any(type(c).__name__ == "QuadMesh" for c in ax.collections)


# What matplotlib's own tick formatters write on log axes ("$\mathdefault{10^{3}}$",
# "$\mathdefault{2^{-4}}$", "$\mathdefault{3\times10^{2}}$"): digits and exponents in
# the body font, which any browser draws. Every other mathtext is refused (see below).
_TICK_MATHTEXT = re.compile(r"\$\\mathdefault\{[-−0-9.^{} ]*(\\times[-−0-9.^{} ]*)?\}\$")


def _reject_mathtext(texts: list[Text]) -> None:
    """Fail on ``$...$`` (or usetex) text: it does not survive ``svg.fonttype="none"``.

    With text kept as ``<text>``, mathtext comes out as separately placed glyphs in
    matplotlib's math fonts (STIX, cmsy10), which browsers do not have: the page shows
    a tiny, detached "√" beside "1/D". Plain Unicode ("1/√D", "ℓₜ") is set by the
    browser in one run of the body font and reads as written.
    """
    for text in texts:
        content = text.get_text()
        mathtext = text.get_parse_math() and cbook.is_math_text(content)
        if text.get_usetex() or (mathtext and not _TICK_MATHTEXT.fullmatch(content)):
            raise ValueError(
                f"figure text {content!r} is matplotlib mathtext, which a browser cannot "
                "draw from the SVG: use Unicode instead of $...$ in figure text "
                "(e.g. '1/√D', 'ℓₜ', '‖∂ℒ/∂z‖'; a literal dollar sign is written '\\$')"
            )


def _data_labels(fig: Figure) -> set[int]:
    return {id(t) for ax in fig.axes if _draws_data_under_text(ax) for t in ax.texts}


def _enlarge_labels(fig: Figure, change: _Change) -> list[Text]:
    """Grow every label that would end up under its floor once the figure is shrunk to
    the content column; return the figure's visible texts.
    """
    shrink = min(1.0, CONTENT_WIDTH_PX / (_width_in(fig) * 96))
    data_labels = _data_labels(fig)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    _reject_mathtext(texts)  # before any change: nothing to undo when it raises
    for text in texts:
        floor = MIN_DATA_LABEL_PX if id(text) in data_labels else MIN_LABEL_PX
        min_points = floor / shrink * 72 / 96
        if text.get_fontsize() < min_points:
            change(text, "fontsize", min_points)
    return texts


def _recolour_for_dark(fig: Figure, texts: list[Text], change: _Change) -> None:
    """Light text and axes on a transparent background; data colours untouched."""
    data_labels = _data_labels(fig)
    change(fig.patch, "facecolor", (0, 0, 0, 0))
    for text in texts:
        if id(text) not in data_labels and _is_dark(text.get_color()):
            change(text, "color", DARK_FOREGROUND)
    for ax in fig.axes:
        if _is_white(ax.patch.get_facecolor()):
            change(ax.patch, "facecolor", (0, 0, 0, 0))
        for spine in ax.spines.values():
            if _is_dark(spine.get_edgecolor()):
                change(spine, "edgecolor", DARK_MUTED)
        for axis in (ax.xaxis, ax.yaxis):
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                for line in (tick.tick1line, tick.tick2line):
                    if _is_dark(line.get_color()):
                        change(line, "color", DARK_MUTED)
                if _is_dark(tick.gridline.get_color()):
                    change(tick.gridline, "color", DARK_MUTED)
        for line in ax.lines:
            if _is_dark(line.get_color()):
                change(line, "color", DARK_FOREGROUND)
        for collection in ax.collections:
            if type(collection).__name__ == "QuadMesh":
                continue
            edges = collection.get_edgecolor()
            if len(edges) and all(_is_dark(c) for c in edges):
                change(collection, "edgecolor", DARK_FOREGROUND)
        for patch in ax.patches:
            if _is_dark(patch.get_edgecolor()):
                change(patch, "edgecolor", DARK_FOREGROUND)
    # Axes legends and figure legends (fig.legend) alike: a dark frame, and the
    # sample lines of grey/black series recoloured like the series themselves.
    for legend in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        if legend is None:
            continue
        frame = legend.get_frame()
        change(frame, "facecolor", "#2e303e")
        change(frame, "edgecolor", DARK_MUTED)
        for handle in legend.get_lines():
            if _is_dark(handle.get_color()):
                change(handle, "color", DARK_FOREGROUND)


# What each kind of artist paints, and where its SVG group (``<g id="gid">``, written
# by matplotlib's SVG backend for any artist with a gid) carries that paint: the CSS
# selector inside the group, and the property.
_Paint = tuple[str, str]  # (selector inside the group, CSS property)


def _paints(artist: object) -> dict[_Paint, object]:
    return {
        key: None if value is None else to_rgba(value) for key, value in _raw_paints(artist).items()
    }  # type: ignore[arg-type]


def _raw_paints(artist: object) -> dict[_Paint, object]:
    if isinstance(artist, Text):
        return {("text, tspan", "fill"): artist.get_color()}
    if isinstance(artist, Line2D):  # the line itself, then its markers
        return {
            ("> path", "stroke"): artist.get_color(),
            ("use", "stroke"): artist.get_markeredgecolor(),
            ("use", "fill"): artist.get_markerfacecolor(),
        }
    if isinstance(artist, Patch):  # spines, frames and backgrounds included
        return {
            ("> path", "fill"): artist.get_facecolor(),
            ("> path", "stroke"): artist.get_edgecolor(),
        }
    if isinstance(artist, Collection):
        edges = [tuple(c) for c in artist.get_edgecolor()]
        return {("path, use", "stroke"): edges[0] if len(set(edges)) == 1 else None}
    raise TypeError(f"no dark rule for {type(artist).__name__}")


def _css_paint(prop: str, before: object, after: object, forced_alpha: bool) -> str:
    """The declarations that turn paint ``before`` into ``after``."""
    new = to_rgba(after)  # type: ignore[arg-type]
    if new[3] == 0:
        return f"{prop}:none!important;"
    css = f"{prop}:{to_hex(new)}!important;"
    # An artist's own alpha (set_alpha) overrides its colours' alpha in both renders.
    if not forced_alpha and before is not None and to_rgba(before)[3] != new[3]:  # type: ignore[arg-type]
        css += f"{prop}-opacity:{new[3]:g}!important;"
    return css


def _dark_rules(fig: Figure, texts: list[Text]) -> tuple[str, list[tuple[Artist, str]]]:
    """CSS that turns the light render into the dark one, and the gids it relies on.

    The recolouring is planned on the figure (``_recolour_for_dark``, plus what
    ``savefig(transparent=True)`` does), each changed artist's paints are read before
    and after, and the figure is put back: rendering it a second time would cost as
    much as the first, and the two renders differ only in these colours.
    """
    changed: dict[int, tuple[Artist, dict[_Paint, object]]] = {}
    edits = _Edits()

    def change(artist: Artist, prop: str, value: object) -> None:
        changed.setdefault(id(artist), (artist, _paints(artist)))
        edits(artist, prop, value)

    try:
        _recolour_for_dark(fig, texts, change)
        for patch in [fig.patch, *(ax.patch for ax in _all_axes(fig))]:  # transparent
            change(patch, "facecolor", "none")
            change(patch, "edgecolor", "none")
        # Artists recoloured alike share one rule through a common gid prefix
        # ("d0-3", "d0-7": [id^="d0-"]): a figure has hundreds of tick labels.
        styles: dict[tuple[tuple[str, str], ...], int] = {}
        gids: list[tuple[Artist, str]] = []
        for number, (artist, before) in enumerate(changed.values()):
            after = _paints(artist)
            forced = artist.get_alpha() is not None
            by_selector: dict[str, str] = {}
            for (selector, prop), value in after.items():
                if value is not None and value != before[(selector, prop)]:
                    css = _css_paint(prop, before[(selector, prop)], value, forced)
                    by_selector[selector] = by_selector.get(selector, "") + css
            if by_selector:
                style = styles.setdefault(tuple(by_selector.items()), len(styles))
                gids.append((artist, f"d{style}-{number}"))
        rules = []
        for declarations, style in styles.items():
            for selector, css in declarations:
                scoped = ",".join(
                    f'[id^="d{style}-"] {part.strip()}' for part in selector.split(",")
                )
                rules.append(f"{scoped}{{{css}}}")
    finally:
        edits.undo()
    return "".join(rules), gids


def _all_axes(fig: Figure) -> list[Axes]:
    found: list[Axes] = []
    stack = list(fig.axes)
    while stack:
        ax = stack.pop(0)
        if ax not in found:
            found.append(ax)
            stack.extend(ax.child_axes)
    return found


# A marker's shape in <defs>, and its style (matplotlib writes the same stroke on each
# <use> that draws it).
_MARKER_STYLE = re.compile(r'(<path id="m[0-9a-f]+" d="[^"]*" style=")([^"]*)"')
_STROKE_PAINT = re.compile(r"\bstroke(-opacity)?: [^;]*(; )?")


def _marker_paint_to_uses(svg: str) -> str:
    """Drop the stroke colour from the markers' shapes in <defs>, so that each copy a
    <use> draws takes it from that <use>. A style rule cannot reach those copies, but
    it reaches the <use>s; width and joins stay on the shape (the SVG's own ``*`` rule
    would otherwise round the corners of square markers).
    """
    return _MARKER_STYLE.sub(lambda m: m[1] + _STROKE_PAINT.sub("", m[2]).rstrip("; ") + '"', svg)


def _save_svg(fig: Figure, bbox: Bbox) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches=bbox, metadata={"Date": None})
    return buffer.getvalue()


def _drop_layout_engine(fig: Figure) -> None:
    """No layout engine at all, not ``"none"``: that leaves a placeholder engine, and
    ``savefig`` draws a figure with any engine once more before it renders it (a
    third of a constrained figure's cost), to let the engine lay it out.
    """
    no_default_engine = {"figure.autolayout": False, "figure.constrained_layout.use": False}
    with mpl.rc_context(no_default_engine):
        fig.set_layout_engine(None)


def render_pair(fig: Figure) -> tuple[str, str]:
    """The figure as SVG text for the light and for the dark colour scheme.

    Labels are enlarged and the layout is computed once, and the figure is drawn once:
    the dark twin is the light SVG with a style sheet that recolours the text, axes
    and background (see ``_dark_rules``), so a figure costs one render, not two, and
    the two can never disagree on anything but colour. Every change to the figure is
    undone before returning.
    """
    change = _Edits()
    engine = fig.get_layout_engine()
    with mpl.rc_context(RC_PARAMS):
        try:
            # The tight box (measured first, to know how much the figure will be
            # shrunk) also creates the automatic tick labels, colorbars' included, so
            # they are enlarged with the rest, without a full draw.
            texts = _enlarge_labels(fig, change)
            # The layout, for the enlarged labels. The engine alone, not a draw:
            # the tight box below places titles and applies aspect ratios itself,
            # and a draw on top of the layout cost a third of a figure's time
            # without changing a byte of the SVG (checked on every tutorial figure).
            if engine is not None:
                engine.execute(fig)
            pad = mpl.rcParams["savefig.pad_inches"]
            bbox = fig.get_tightbbox().padded(pad)  # what bbox_inches="tight" computes
            if engine is not None:
                _drop_layout_engine(fig)  # keeps the positions just computed
            rules, gids = _dark_rules(fig, texts)
            for artist, gid in gids:
                change(artist, "gid", gid)
            light = _save_svg(fig, bbox)
        finally:
            change.undo()
            if engine is not None:
                fig.set_layout_engine(engine)
    # matplotlib opens every SVG with one style element; the dark rules join it, and
    # !important lets them override the colours written on each element.
    dark = _marker_paint_to_uses(light).replace("</style>", rules + "</style>", 1)
    return light, dark


def render_svg(fig: Figure, *, dark: bool = False) -> str:
    """The figure as SVG text, for the light or the dark colour scheme."""
    return render_pair(fig)[int(dark)]


# The notebook kernel asks for a figure's two renders through two display formatters,
# light first (its mimetype is registered first). The light one renders both and
# leaves the dark one here for the dark formatter to pick up.
_dark_pending: dict[int, str] = {}


def light_for_display(fig: Figure) -> str:
    """Light render for the kernel's ``image/svg+xml`` formatter."""
    light, _dark_pending[id(fig)] = render_pair(fig)
    return light


def dark_for_display(fig: Figure) -> str:
    """Dark render for the kernel's dark formatter: the one ``light_for_display`` made."""
    pending = _dark_pending.pop(id(fig), None)
    return pending if pending is not None else render_pair(fig)[1]


def _data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def figure_html(fig: Figure, caption: str) -> str:
    """A ``<figure>`` with the light and dark renders and a caption.

    The caption (plain text) is also the images' alt text: it says what the figure
    shows, so a reader who cannot see the picture still gets its content.
    :func:`figure_files` turns the ``data:`` URIs into files and adds the
    ``#only-light``/``#only-dark`` fragments that let Material show the one matching the
    colour scheme.
    """
    if not caption or not caption.strip():
        raise ValueError("every figure on the site needs a caption saying what it shows")
    alt = html.escape(" ".join(caption.split()), quote=True)
    light, dark = render_pair(fig)
    return (
        '<figure class="site-figure">'
        f'<img src="{_data_uri(light)}" data-scheme="light" alt="{alt}">'
        f'<img src="{_data_uri(dark)}" data-scheme="dark" alt="{alt}">'
        f"<figcaption>{html.escape(caption.strip())}</figcaption>"
        "</figure>"
    )


def publish(fig: Figure, caption: str) -> None:
    """Print the figure for a markdown-exec block (``html="true"``) and close it."""
    import matplotlib.pyplot as plt

    # markdown-exec captures a block's output by replacing `print` in the block's
    # globals, not sys.stdout: the builtin would send the figure to the build's log.
    block_print = inspect.currentframe().f_back.f_globals.get("print", print)  # type: ignore[union-attr]
    block_print(figure_html(fig, caption))
    plt.close(fig)


FIGURE_DIR = "assets/figures"
DATA_IMG = re.compile(
    r'<img src="data:image/svg\+xml;base64,(?P<data>[A-Za-z0-9+/=]+)" '
    r'data-scheme="(?P<scheme>light|dark)"'
)
SVG_SIZE = re.compile(r'<svg[^>]*?width="([\d.]+)pt" height="([\d.]+)pt"')


def _figure_file(match: re.Match[str], page_url: str, site: Path) -> str:
    svg = base64.b64decode(match["data"])
    name = hashlib.sha256(svg).hexdigest()[:16] + ".svg"
    target = site / FIGURE_DIR / name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(svg)
    size = SVG_SIZE.search(svg[:2000].decode(errors="replace"))
    dims = ""
    if size:  # points to CSS pixels: the browser reserves the box before it loads
        width, height = (round(float(v) * 96 / 72) for v in size.groups())
        dims = f' width="{width}" height="{height}"'
    src = posixpath.relpath(f"{FIGURE_DIR}/{name}", page_url or ".")
    return f'<img src="{src}#only-{match["scheme"]}" loading="lazy" decoding="async"{dims}'


def figure_files(html: str, page_url: str, site: Path) -> str:
    """Write every inline figure of a page to ``site/assets/figures/<hash>.svg`` and
    point its ``<img>`` there (module docstring). ``page_url``: the page's address
    relative to the site, without its trailing slash.
    """
    if "data:image/svg+xml;base64," not in html:
        return html
    return DATA_IMG.sub(lambda m: _figure_file(m, page_url, site), html)

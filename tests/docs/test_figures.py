"""Figures reach the reader: every tutorial figure is there, as a file, for both schemes.

Counted, not assumed: a build that silently lost its figures (a kernel that inherited
``MPLBACKEND=Agg`` used to) passed every test that only looked for errors. The
``built_site`` fixture builds with ``MPLBACKEND=Agg`` set on purpose.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import re
from pathlib import Path

import jupytext
import pytest

from docs_build import figures, tutorials
from tests.conftest import ROOT

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))


FIGURE = re.compile(r'<figure class="site-figure">(.*?)</figure>', re.DOTALL)
IMG = re.compile(r"<img\b([^>]*)>")
ATTR = re.compile(r'([\w-]+)="([^"]*)"')
# Calls that draw: a cell containing one must declare a caption for what it draws.
DRAWS = re.compile(r"\bplt\.(subplots|figure)\(|\bplot_\w+\(|\.imshow\(|\.plot\(")


def declared_figures(tutorial: Path) -> list[tuple[int, list[str], str]]:
    """(cell index, captions, source) of every code cell of a tutorial."""
    cells = jupytext.read(tutorial).cells
    return [
        (i, tutorials._captions(cell), cell.source)
        for i, cell in enumerate(cells)
        if cell.cell_type == "code"
    ]


def draws(source: str) -> bool:
    """Whether the cell itself draws (a call in a function it only defines does not)."""
    tree = ast.parse(source)
    return any(
        DRAWS.search(ast.get_source_segment(source, node) or "")
        for node in tree.body
        if not isinstance(node, ast.FunctionDef | ast.ClassDef)
    )


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_every_drawing_cell_declares_its_captions(tutorial: Path) -> None:
    missing = [
        f"cell {i}: {source.splitlines()[0]!r}"
        for i, captions, source in declared_figures(tutorial)
        if draws(source) and not captions
    ]
    assert not missing, f"{tutorial.name}: cells that draw without a caption: {missing}"


def figures_of(html: str) -> list[list[dict[str, str]]]:
    return [
        [dict(ATTR.findall(attrs)) for attrs in IMG.findall(body)] for body in FIGURE.findall(html)
    ]


def test_each_tutorial_page_shows_every_declared_figure(built_site: Path) -> None:
    for tutorial in TUTORIALS:
        expected = sum(len(c) for _, c, _ in declared_figures(tutorial))
        html = (built_site / "tutorials" / tutorial.stem / "index.html").read_text()
        shown = figures_of(html)
        assert len(shown) == expected, f"{tutorial.name}: {len(shown)} of {expected} figures"


def test_each_markdown_page_shows_every_figure_it_publishes(built_site: Path) -> None:
    # publish() prints through the block's own `print`, which markdown-exec swaps for
    # its capture; through the builtin the figures went to the build log, not the page.
    docs = ROOT / "docs"
    pages = [p for p in docs.rglob("*.md") if "publish(fig" in p.read_text()]
    assert len(pages) >= 8
    for source in pages:
        # An explorer's block shows one figure too: the static one (docs_build.explorers).
        expected = len(
            re.findall(r"^\s*(publish\(|\w+_explorer\(\))", source.read_text(), re.MULTILINE)
        )
        html = (built_site / source.relative_to(docs).with_suffix("") / "index.html").read_text()
        assert len(figures_of(html)) == expected, f"{source.name}: figures missing"


def test_figures_are_lazy_files_with_alt_text_in_both_schemes(built_site: Path) -> None:
    total = 0
    for page in built_site.rglob("*.html"):
        html = page.read_text()
        assert "data:image/" not in html, f"{page}: an image is inlined as a data: URI"
        for images in figures_of(html):
            total += 1
            schemes = sorted(src["src"].rsplit("#", 1)[-1] for src in images)
            assert schemes == ["only-dark", "only-light"], f"{page}: {images}"
            for img in images:
                file = (page.parent / img["src"].split("#")[0]).resolve()
                assert file.is_file() and file.suffix == ".svg", f"{page}: {img['src']}"
                assert img.get("loading") == "lazy" and img.get("width") and img.get("height")
                assert len(img.get("alt", "")) > 20, f"{page}: alt text {img.get('alt')!r}"
                assert "TODO" not in img["alt"]
            # One image in two colourings: what a screen reader or axe reads of the one
            # shown in dark is what it reads of the light one (the dark scheme's axe
            # run checks colour only: tests/docs/_walk.py, COLOUR_RULES).
            one, other = ({k: v for k, v in img.items() if k != "src"} for img in images)
            assert one == other, f"{page}: the twins differ: {one} != {other}"
    assert total >= 60, f"only {total} figures on the whole site"


def test_figure_text_stays_text(built_site: Path) -> None:
    figures = list((built_site / "assets" / "figures").glob("*.svg"))
    assert figures
    for svg in figures:
        text = svg.read_text()
        # fonttype "none": labels are <text> elements, not glyph outlines (<defs> of
        # <path id="DejaVuSans-...">), and no figure embeds a font.
        assert "<text" in text, svg.name
        assert 'id="DejaVuSans' not in text, f"{svg.name}: text drawn as paths"


def test_labels_are_large_enough_once_shrunk_into_the_column(built_site: Path) -> None:
    # Material's small print is 12.8 px; a figure wider than the column is scaled down
    # by the browser, so the label sizes in the SVG must allow for that shrink.
    size = re.compile(r'<svg[^>]*?width="([\d.]+)pt"')
    font = re.compile(r"font-size:\s*([\d.]+)px|font:\s*([\d.]+)px")
    for svg in (built_site / "assets" / "figures").glob("*.svg"):
        text = svg.read_text()
        width_px = float(size.search(text).group(1)) * 96 / 72
        shrink = min(1.0, figures.CONTENT_WIDTH_PX / width_px)
        sizes = [float(a or b) for a, b in font.findall(text)]
        # matplotlib writes sizes in pt-as-px units of the SVG's own coordinate system
        smallest = min(sizes, default=99) * 96 / 72 * shrink
        # Sizes are chosen from the figure's tight box before the labels grow, and grown
        # labels can widen that box by a few percent: allow that much below the floor.
        assert smallest >= figures.MIN_DATA_LABEL_PX * 0.95, f"{svg.name}: {smallest:.1f} px"


def test_axis_labels_are_enlarged_to_body_small_print() -> None:
    # A figure twice the column's width: its 8 pt labels would show at 5 px.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(15, 3))
    ax.imshow([[0.0, 1.0]])
    ax.text(0, 0, "0.00", fontsize=4)  # a number on a heatmap cell
    ax.set_title("title", fontsize=8)
    ax.set_xlabel("key", fontsize=8)
    svg = figures.render_svg(fig)
    plt.close(fig)
    width_px = float(re.search(r'<svg[^>]*?width="([\d.]+)pt"', svg).group(1)) * 96 / 72
    shrink = min(1.0, figures.CONTENT_WIDTH_PX / width_px)
    sizes = sorted({float(s) for s in re.findall(r"font-size:\s*([\d.]+)px", svg)})
    on_screen = [s * 96 / 72 * shrink for s in sizes]
    assert min(on_screen) >= figures.MIN_DATA_LABEL_PX - 0.1  # the cell number
    assert sorted(on_screen)[1] >= figures.MIN_LABEL_PX - 0.1  # the labels


def test_downloadable_notebooks_carry_their_outputs(built_site: Path) -> None:
    for tutorial in TUTORIALS:
        folder = built_site / "tutorials" / tutorial.stem
        notebook = json.loads((folder / f"{tutorial.stem}.ipynb").read_text())
        outputs = [o for c in notebook["cells"] for o in c.get("outputs", [])]
        assert outputs, f"{tutorial.name}: the notebook has no outputs"
        images = [o for o in outputs if "image/svg+xml" in o.get("data", {})]
        expected = sum(len(c) for _, c, _ in declared_figures(tutorial))
        assert len(images) == expected, f"{tutorial.name}: {len(images)} images in the .ipynb"
        assert not any(tutorials.DARK_SVG in o.get("data", {}) for o in outputs)
        # A cell's value shows on the page only when it draws itself (a HeadView): a
        # plain repr there is a stray last expression, [Text(0.5, 0, ...)] from ax.set.
        reprs = [
            "".join(o["data"]["text/plain"])[:60]
            for o in outputs
            if o.get("output_type") == "execute_result" and set(o["data"]) == {"text/plain"}
        ]
        assert not reprs, f"{tutorial.name}: a cell ends in a value shown as its repr: {reprs}"
        assert (folder / tutorial.name).read_text() == tutorial.read_text()
        # its first cell installs the wheel the site offers where that version is missing
        # (Colab, a fresh venv); test_reader_install runs that line
        first = "".join(notebook["cells"][0]["source"])
        assert "%pip install" in first and "/dist/attention_by_running-" in first
        # the cells are the tutorial's own, and the code is valid Python
        for cell in notebook["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "%pip" not in source:
                ast.parse(source)


def _offscreen_figure():
    """A figure with an Agg canvas, outside pyplot (nothing to close afterwards)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    return fig


@pytest.mark.parametrize(
    ("where", "label"),
    [
        ("title", r"scale $1/\sqrt{D}$"),
        ("xlabel", r"median $\Vert\partial\ell/\partial z\Vert$"),
        ("legend", r"running sum $\ell_t$"),
        ("text", "$t$"),
    ],
)
def test_mathtext_in_figure_text_fails_the_render(where: str, label: str) -> None:
    # With text kept as <text>, mathtext becomes loose glyphs in fonts browsers lack.
    fig = _offscreen_figure()
    ax = fig.subplots()
    ax.plot([1, 2], [1, 4], label=label if where == "legend" else "series")
    ax.legend()
    if where == "title":
        ax.set_title(label)
    elif where == "xlabel":
        ax.set_xlabel(label)
    elif where == "text":
        ax.text(1, 2, label)
    with pytest.raises(ValueError, match=r"use Unicode instead of \$\.\.\.\$") as error:
        figures.render_svg(fig, dark=where == "text")
    assert repr(label) in str(error.value)  # names the offending text


def test_unicode_dollars_and_log_ticks_pass_the_mathtext_check() -> None:
    fig = _offscreen_figure()
    ax = fig.subplots()
    ax.loglog([1, 1e4], [2**-4, 2**6], label="costs \\$5 and $6")  # not mathtext
    ax.set_yscale("log", base=2)  # tick labels "$\mathdefault{2^{-4}}$" ...
    ax.set(title="scale 1/√D", xlabel="‖∂ℒ/∂z‖", ylabel="running sum ℓₜ")
    ax.legend()
    svg = figures.render_svg(fig)
    assert "1/√D" in svg and "ℓₜ" in svg


def _recoloured_render(fig) -> str:
    """The dark render drawn for real: the figure recoloured, then saved transparent.

    What the site did before the dark twin became a style sheet, kept here as the
    reference the style sheet must match.
    """
    import matplotlib as mpl

    change = figures._Edits()
    with mpl.rc_context(figures.RC_PARAMS):
        try:
            texts = figures._enlarge_labels(fig, change)
            fig.draw_without_rendering()
            bbox = fig.get_tightbbox().padded(mpl.rcParams["savefig.pad_inches"])
            fig.set_layout_engine("none")
            figures._recolour_for_dark(fig, texts, change)
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", bbox_inches=bbox, transparent=True)
        finally:
            change.undo()
    return buffer.getvalue()


def test_dark_twin_draws_what_a_recoloured_render_draws(browser) -> None:
    """The dark SVG is the light one plus a style sheet (one render per figure, not
    two): on the slate background it must show, pixel for pixel, what recolouring the
    figure and drawing it again shows, with the data (heatmap numbers, coloured series,
    colormaps) untouched and the text, axes, black series and legend made light."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def draw():  # a fresh figure each time: a layout starts from the same state
        fig, (lines, heat, bars) = plt.subplots(1, 3, figsize=(11, 3.4), layout="constrained")
        n = np.arange(1, 9)
        lines.loglog(2**n, 4.0**n, "k-o", label="black series, markers")
        lines.loglog(2**n, 3.0**n, "C1--s", label="orange series", alpha=0.6)
        lines.loglog(2**n, 2.0**n, "C2:", marker="o", markerfacecolor="white", label="hollow")
        lines.legend(fontsize=8)
        lines.set(title="log–log", xlabel="n", ylabel="seconds")
        image = heat.imshow(np.linspace(0, 1, 16).reshape(4, 4), cmap="viridis")
        heat.text(1, 1, "0.33", ha="center", color="black")  # a number on a cell: data
        fig.colorbar(image, ax=heat, label="weight")
        heat.scatter([0, 3], [0, 3], c="red", edgecolors="black", s=80)
        bars.bar(["a", "b", "c"], [3, 1, 2], color="C0", edgecolor="black")
        bars.axhline(2, color="0.2", linestyle="--")
        bars.annotate("peak", (0, 3), xytext=(1.2, 2.6), arrowprops={"arrowstyle": "->"})
        fig.suptitle("a figure with every kind of artist the dark rules touch")
        return fig

    fig = draw()
    light, dark = figures.render_pair(fig)
    plt.close(fig)
    fig = draw()
    reference = _recoloured_render(fig)
    plt.close(fig)
    assert dark.startswith(light.split("</style>")[0])  # the same drawing, restyled

    page = browser.new_page(viewport={"width": 1300, "height": 500})
    try:
        shots = []
        for svg in (dark, reference):
            uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
            page.set_content(f'<body style="margin:0;background:#1e2129"><img id="f" src="{uri}">')
            page.wait_for_function("document.getElementById('f').complete")
            assert page.evaluate("document.getElementById('f').naturalWidth") > 500
            shots.append(page.locator("#f").screenshot())
    finally:
        page.close()
    from PIL import Image

    twin, drawn = (np.asarray(Image.open(io.BytesIO(s)).convert("RGB"), dtype=int) for s in shots)
    assert twin.shape == drawn.shape
    differing = int((np.abs(twin - drawn).max(axis=2) > 8).sum())
    assert differing == 0, f"{differing} pixels differ between the twin and the recoloured render"
    # And the dark render is dark: the light text really was recoloured.
    assert figures.DARK_FOREGROUND in dark and figures.DARK_FOREGROUND not in light

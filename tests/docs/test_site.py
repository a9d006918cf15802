"""The strict build succeeds and produces what a reader needs, checked in the HTML."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import jupytext

from docs_build import theme
from tests.conftest import ROOT


def html_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def test_strict_build_has_no_warnings(built_site: Path) -> None:
    log = (built_site / ".build-log").read_text()
    assert not re.search(r"^WARNING", log, flags=re.MULTILINE), log
    # Python's warnings too (the build runs with PYTHONWARNINGS=default): a page that
    # hands matplotlib a tensor warns under NumPy 2, a file left open warns at exit.
    python_warnings = re.findall(r"^\S+:\d+: \w*Warning: .*$", log, flags=re.MULTILINE)
    assert not python_warnings, "\n".join(python_warnings)
    # And a C++ library's own log, written to the process's stderr past Python's
    # logging. Kineto, torch.profiler's backend, wrote two lines per profile, dozens per
    # build, until the build set KINETO_LOG_LEVEL (docs_build/plugin.py):
    # "USDT:2026-11-28 06:52:52 5268:5268 SyncActivityProfilerHandler.cpp:52] profiler_start".
    # c10's glog-style lines ("W1128 06:52:52.1 5268 file.cpp:12] ...") look alike.
    native = re.findall(r"^.*\.(?:cpp|cc|cxx|cu|h):\d+\].*$", log, flags=re.MULTILINE)
    assert not native, f"{len(native)} lines of a C++ library's log:\n" + "\n".join(native[:10])


def test_every_link_in_a_tutorial_is_checked_by_the_build(built_site: Path) -> None:
    """MkDocs checks links to source files only; a tutorial's links are written for the
    page's URL (they must work in a downloaded notebook too), so the build rewrites them
    to files. Any link MkDocs could not check would show in the log as unrecognized."""
    log = (built_site / ".build-log").read_text()
    unchecked = [line for line in log.splitlines() if "unrecognized relative link" in line]
    assert not unchecked, "\n".join(unchecked)


def test_every_markdown_page_and_tutorial_is_built(built_site: Path) -> None:
    docs = ROOT / "docs"
    for source in [*docs.rglob("*.md"), *docs.glob("tutorials/[0-9][0-9]_*.py")]:
        rel = source.relative_to(docs).with_suffix("")
        page = built_site / (
            "index.html"
            if rel.name == "index" and rel.parent == Path()
            else rel.parent / "index.html"
            if rel.name == "index"
            else rel / "index.html"
        )
        assert page.is_file(), (
            f"{source.relative_to(ROOT)} did not produce {page.relative_to(built_site)}"
        )


def test_tutorials_were_executed_with_outputs(built_site: Path) -> None:
    # Figures are counted in test_figures.py; here: the code ran and its output is shown.
    for tutorial in (ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"):
        html = (built_site / "tutorials" / tutorial.stem / "index.html").read_text()
        cells = html.count('class="nb-cell"')
        outputs = html.count('class="nb-output')
        cells_ = jupytext.read(tutorial).cells
        code_cells = sum(c.cell_type == "code" and bool(c.source.strip()) for c in cells_)
        assert cells >= code_cells > 3, f"{tutorial.name}: {cells} cells for {code_cells}"
        assert outputs > 3, f"{tutorial.name}: {outputs} outputs"
        assert "Traceback" not in html
        # A cell ending in a call that returns an object (ax.legend(), fig.colorbar())
        # shows its repr, "<matplotlib.legend.Legend at 0x7f...>": noise, not output.
        stray = re.findall(r"&lt;[\w.]+(?: object)? at 0x[0-9a-f]+&gt;", html)
        assert not stray, f"{tutorial.name} shows object reprs: {stray}"
        # the source and the executed notebook are offered for download next to the page
        assert f'href="{tutorial.name}" download' in html
        assert f'href="{tutorial.stem}.ipynb" download' in html
        # Colab opens the executed notebook from the repository's notebooks branch
        colab = "https://colab.research.google.com/github/"
        assert f'/blob/notebooks/{tutorial.stem}.ipynb"' in html and colab in html


def test_api_reference_shows_signatures_source_and_examples(built_site: Path) -> None:
    html = (built_site / "reference" / "functional" / "index.html").read_text()
    assert 'id="attention.functional.scaled_dot_product_attention"' in html
    assert 'id="attention.functional.attention_weights"' in html
    assert "doc-signature" in html  # formatted signature block
    assert "Source code in" in html  # show_source
    assert "&gt;&gt;&gt;" in html or "gp" in html  # examples rendered
    masks = (built_site / "reference" / "masks" / "index.html").read_text()
    assert 'id="attention.masks.causal_mask"' in masks


def test_no_page_references_a_font_service_or_cdn(built_site: Path) -> None:
    # Scripts and <link>s that the browser fetches; an href in prose (an arXiv link)
    # and <link rel="canonical"> (a label, never fetched) are fine.
    external_asset = re.compile(
        r"""<script[^>]+src=["'](?:https?:)?//|<link(?![^>]*rel="canonical")[^>]+href=["'](?:https?:)?//"""
    )
    for page in html_pages(built_site):
        html = page.read_text()
        assert not external_asset.search(html), (
            f"{page.relative_to(built_site)} loads an external asset"
        )
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html


def test_every_concept_page_shows_its_executed_output(built_site: Path) -> None:
    # Each ```python exec="on"``` block of a concept page must come out of the build
    # with its result (printed text or a figure) right below it, and without a traceback.
    for source in sorted((ROOT / "docs" / "concepts").glob("*.md")):
        if source.name == "index.md":
            continue
        executed = len(re.findall(r'^\s*```python exec="on"', source.read_text(), re.MULTILINE))
        html = (built_site / "concepts" / source.stem / "index.html").read_text()
        # An explorer's block (source hidden) shows the explorer itself.
        results = html.count('<div class="result">') + html.count('<div class="explorer" ')
        assert executed and results == executed, (
            f"{source.name}: {executed} executed blocks, {results} results in the HTML"
        )
        assert "Traceback (most recent call last)" not in html, source.name


def test_no_id_appears_twice_on_a_page(built_site: Path) -> None:
    # Code blocks rendered by markdown-exec and mkdocstrings each restart the line-id
    # counter (docs_build/accessibility.py renumbers them): a duplicate id is invalid HTML, axe
    # flags it, and a link to the line lands on the first block with that number.
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) > 30
    duplicated = {}
    for page in pages:
        ids = Counter(re.findall(r'\sid="([^"]+)"', page.read_text()))
        repeated = sorted(i for i, n in ids.items() if n > 1)
        if repeated:
            duplicated[page.relative_to(built_site).as_posix()] = repeated[:4]
    assert not duplicated, f"ids used more than once: {duplicated}"


def test_every_link_within_a_page_has_its_target(built_site: Path) -> None:
    # Renumbering code-line ids (docs_build/accessibility.py) once left the line-number links
    # of mkdocstrings' source blocks pointing at ids that no longer existed.
    pages = sorted(built_site.rglob("*.html"))
    broken = {}
    for page in pages:
        html = page.read_text()
        ids = set(re.findall(r'\sid="([^"]+)"', html)) | set(re.findall(r'\sname="([^"]+)"', html))
        missing = sorted({t for t in re.findall(r'\shref="#([^"]+)"', html) if t not in ids})
        if missing:
            broken[page.relative_to(built_site).as_posix()] = missing[:4]
    assert not broken, f"links to ids that are not on their page: {broken}"


def test_every_page_takes_the_readers_colour_scheme_from_its_first_paint(
    built_site: Path,
) -> None:
    """The browser walk (``_walk.py``) opens every page in a light context and switches it
    to dark with Material's toggle; a reader whose system asks for dark instead gets the
    dark palette from the page's own script, before the page is styled. test_browser.py
    checks in a dark context that the script does so; here, that every page has it,
    right after Material's own palette script, as ``docs_build/theme.py`` puts it."""
    pages = sorted(built_site.rglob("*.html"))
    script = theme.STORED_PALETTE.pattern + re.escape(theme.MATCHING_PALETTE)
    missing = [
        page.relative_to(built_site).as_posix()
        for page in pages
        if not re.search(script, page.read_text(encoding="utf-8"))
    ]
    assert len(pages) > 30, pages
    assert not missing, f"pages without the reader's scheme from the first paint: {missing}"

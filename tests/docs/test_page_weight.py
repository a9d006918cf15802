"""Pages stay light: a budget per page, figures as files, nothing shipped unused.

Budgets are for the HTML as a reader's browser receives it (gzip). Figures live in their
own cached files and load lazily, so a tutorial's budget holds with all its figures on it.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

PAGE_BUDGET_KB = 150
TUTORIAL_BUDGET_KB = 60


def gzipped_kb(path: Path) -> float:
    return len(gzip.compress(path.read_bytes(), compresslevel=6)) / 1024


def test_every_page_is_within_its_budget(built_site: Path) -> None:
    rows, over = [], []
    for page in sorted(built_site.rglob("index.html")):
        rel = page.parent.relative_to(built_site).as_posix()
        budget = TUTORIAL_BUDGET_KB if re.match(r"tutorials/\d\d_", rel) else PAGE_BUDGET_KB
        size = gzipped_kb(page)
        rows.append(f"{rel or '.':50s} {size:6.1f} KB gz (budget {budget})")
        if size > budget:
            over.append(rows[-1])
    assert len(rows) >= 30
    assert not over, "pages over budget:\n" + "\n".join(over)


def test_no_page_inlines_images_or_styles(built_site: Path) -> None:
    for page in built_site.rglob("*.html"):
        html = page.read_text()
        assert "data:image/" not in html, f"{page}: image inlined as a data: URI"
        styles = sum(len(s) for s in re.findall(r"<style[^>]*>(.*?)</style>", html, re.S))
        assert styles < 2_000, f"{page}: {styles} bytes of inline CSS"


def referenced_names(site: Path) -> str:
    """Everything a browser could be sent to fetch: the text of pages, styles, scripts."""
    texts = []
    for pattern in ("*.html", "*.css", "*.js", "*.json", "*.xml", "*.webmanifest"):
        texts += [p.read_text(errors="replace") for p in site.rglob(pattern)]
    return "\n".join(texts)


def test_every_shipped_asset_is_used(built_site: Path) -> None:
    corpus = referenced_names(built_site)
    unused = [
        asset.relative_to(built_site).as_posix()
        for asset in (built_site / "assets").rglob("*")
        # a vendored library's licence travels with it, whether or not a page links it
        if asset.is_file() and asset.name not in corpus and asset.name != "LICENSE"
    ]
    assert not unused, "assets nothing refers to:\n" + "\n".join(sorted(unused))
    # markdown-exec's Pyodide runner and the in-browser math typesetter are not needed
    assert not list(built_site.rglob("*pyodide*"))
    assert not list(built_site.rglob("auto-render*"))


def test_no_script_blocks_the_first_paint(built_site: Path) -> None:
    # A script file without `defer` or `async` stops the parser until it has been
    # downloaded and run; on a phone's link that held every page's first paint back by
    # most of a second (Material's bundle, GLightbox). Inline scripts are Material's
    # few lines restoring the palette and tabs before the first paint, as they must.
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) > 30
    blocking = [
        f"{page.relative_to(built_site)}: {tag}"
        for page in pages
        for tag in re.findall(r"<script\b[^>]*\bsrc=[^>]*>", page.read_text())
        if not re.search(r"\s(defer|async)[\s=>]", tag)
    ]
    assert not blocking, "scripts that block the first paint:\n" + "\n".join(blocking[:10])

"""Every concept page keeps the shape readers rely on.

An API collapsible first, mathematics, code executed at build time (so its output is
real), references to the papers, and a "Where next"; and the page is reachable from
the nav and from the concepts index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

CONCEPTS = sorted(p for p in (ROOT / "docs" / "concepts").glob("*.md") if p.name != "index.md")


def test_there_are_concept_pages():
    assert CONCEPTS


@pytest.mark.parametrize("page", CONCEPTS, ids=[p.stem for p in CONCEPTS])
def test_concept_page_structure(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    if text.startswith("---\n"):  # YAML front matter (e.g. `hide: [toc]`) comes first
        text = text.split("\n---\n", 1)[1].lstrip()
    body = text.split("\n", 1)[1].lstrip()
    assert text.startswith("# "), "a page starts with its title"
    assert body.startswith('??? abstract "API used on this page"'), (
        "the first thing after the title is the collapsible API list"
    )
    assert "$" in text or "\\(" in text, "no mathematics"
    assert re.search(r'^\s*```python exec="on"', text, re.MULTILINE), (
        "no code executed at build time"
    )
    assert "\n## References\n" in text and "arxiv.org/abs/" in text
    assert "\n## Where next\n" in text


@pytest.mark.parametrize("page", CONCEPTS, ids=[p.stem for p in CONCEPTS])
def test_concept_page_is_in_the_nav_and_the_index(page: Path) -> None:
    assert f"concepts/{page.name}" in (ROOT / "mkdocs.yml").read_text()
    assert f"({page.name})" in (ROOT / "docs" / "concepts" / "index.md").read_text()

"""The API reference index renders its tables as tables.

A blank line inside a Markdown table ends it: the rows after it render as raw
``| … |`` text. A list item right after an indented table, with no blank line between,
becomes one more row of the table. Both happened on this page; both are checked in the
built HTML.
"""

from __future__ import annotations

import re
from pathlib import Path

import attention
from attention.integrations import huggingface
from tests.conftest import ROOT
from tests.docs._codeblocks import Element, parse_html

SOURCE = ROOT / "docs" / "reference" / "index.md"


def prose_lines(element: Element) -> list[str]:
    """Lines of visible text outside code (where a literal "|" is fine)."""

    def text(node: Element) -> str:
        if node.tag in {"code", "pre", "script", "style"}:
            return ""
        return "".join(c if isinstance(c, str) else text(c) for c in node.children)

    return [line.strip() for line in text(element).splitlines() if line.strip()]


def source_table_rows(markdown: str) -> int:
    """Data rows of every table in the Markdown: lines that start with "|", less the
    delimiter rows (``|---|``) and the header row above each delimiter."""
    lines = [line.strip() for line in markdown.splitlines()]
    delimiters = [i for i, line in enumerate(lines) if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line)]
    rows = sum(line.startswith("|") for line in lines)
    return rows - 2 * len(delimiters)


def cells(row: Element) -> list[Element]:
    return [c for c in row.children if isinstance(c, Element) and c.tag in {"td", "th"}]


def test_reference_index_tables_render_every_row(built_site: Path) -> None:
    root = parse_html((built_site / "reference" / "index.html").read_text(encoding="utf-8"))
    article = next(e for e in root.iter() if e.tag == "article")
    raw = [line for line in prose_lines(article) if line.startswith("|")]
    assert not raw, "table rows rendered as text:\n" + "\n".join(raw)

    tables = [e for e in article.iter() if e.tag == "table"]
    body_rows = [[r for r in t.iter() if r.tag == "tr" and r.parent.tag == "tbody"] for t in tables]
    assert sum(map(len, body_rows)) == source_table_rows(SOURCE.read_text(encoding="utf-8"))
    summary, conventions = body_rows  # the page has exactly these two tables

    # The summary lists every public object once, plus the NumPy reference module, the
    # worked examples', the distributed functions' and the integrations' names
    # (namespaces, so written with them).
    listed = [code.text() for row in summary for code in cells(row)[0].iter() if code.tag == "code"]
    namespaced = [
        f"{module.__name__.removeprefix('attention.')}.{name}"
        for module in (attention.examples, attention.distributed, huggingface)
        for name in module.__all__
    ]
    assert sorted(listed) == sorted([*attention.__all__, "numpy_reference", *namespaced])

    # The mask conventions: every row fills its three columns (the bullet the table
    # swallowed was a row with one cell of text and two empty ones).
    assert all(len(cells(row)) == 3 and cells(row)[2].text().strip() for row in conventions)
    bullets = [li.text().strip() for li in article.iter() if li.tag == "li"]
    assert any(b.startswith("Bad input raises") for b in bullets), bullets


def test_source_table_rows_counts_data_rows_only():
    markdown = (
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n"  # a blank line split this one
        "    | m | n |\n    |:-|-:|\n    | 5 | 6 |\n"
    )
    assert source_table_rows(markdown) == 3

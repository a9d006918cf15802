"""Build step: every box that can scroll sideways reachable by keyboard; unique line ids;
named section menus; no empty header cells.

A reader who cannot use a mouse scrolls a box with the arrow keys once it has focus, and
a box gets focus only if it is focusable (WCAG 2.1.1; axe's rule
scrollable-region-focusable). Which boxes overflow depends on the screen, so every box
that *can* scroll gets ``tabindex="0"``, written into the HTML at build time so it holds
with JavaScript off too:

- ``<code>`` inside ``<pre>``: code blocks, API signatures, notebook output. Material
  scrolls the ``<code>``, not the ``<pre>``. With JavaScript on, Material's own code-block
  script keeps the ``tabindex`` only where the block does overflow (and the device has a
  pointer that hovers), so wide screens get no needless tab stops.
- ``<table>`` without a class (the tables Markdown writes): with JavaScript off the table
  is its own scroll box (Material gives it ``overflow: auto``); with it on, Material wraps
  it at load time in a ``.md-typeset__scrollwrap`` that scrolls instead, and the keyboard
  scrolls the nearest scrolling ancestor of the focused table. Tables with a class
  (Pygments' line-number tables) are layout, never scrolled on their own.
- ``<div class="arithmatex">``: a display formula, which scrolls inside its own box
  (the math section of assets/stylesheets/site.css).

The visible focus ring for these boxes is in assets/stylesheets/site.css.

It also makes the ids of code lines unique on the page. Each code line carries an id
(``__span-N-M``, with an anchor ``__codelineno-N-M`` linking to itself), N counting the
code blocks of one Markdown rendering. markdown-exec and mkdocstrings render each block
or docstring in a Markdown instance of their own, so N restarts at 0 many times on a page
and the same ids appeared up to a dozen times (axe's duplicate-id; a link to a line led
to the first block with that number). Blocks are numbered again here, in page order.

Two more, found by axe run as a reader runs it (every rule, every impact):

- **Each section's menu in the sidebar is named after its section.** Material labels the
  ``<nav>`` of a section with the section's toggle (``aria-labelledby="__nav_4_label"``),
  and with ``navigation.indexes`` that toggle holds an icon and no text: every section
  menu was a navigation landmark with no name, the same as its neighbours (axe's
  landmark-unique). The menu's own title (``<label class="md-nav__title">``) holds the
  section's name, which becomes the ``aria-label``. Material 9.8's markup; if a later
  Material writes it otherwise, :func:`named_section_menus` raises.
- **A header cell with nothing in it is an ordinary cell.** A Markdown table's corner
  cell (``| | row 0 | row 1 |``) is written ``<th></th>``: a header that names no row or
  column, which a screen reader announces as a blank header for every cell under it
  (axe's empty-table-header). It becomes ``<td></td>``.
"""

from __future__ import annotations

import itertools
import re

from docs_build import BuildError

# Each pattern matches an opening tag up to (not including) its ">" or "/>", and only tags
# without a tabindex of their own. HTML inside code blocks is escaped (&lt;table&gt;), so
# none of these can match the text of an example.
_NO_TABINDEX = r"(?![^>]*\btabindex=)"
SCROLL_BOXES = re.compile(
    # <code> right after its <pre>, Pygments' empty <span></span> in between.
    r"(?P<tag><pre\b[^>]*>(?:<span></span>)?<code\b" + _NO_TABINDEX + r"[^>]*?)(?=/?>)"
    r"|(?P<table><table\b(?![^>]*\bclass=)" + _NO_TABINDEX + r"[^>]*?)(?=/?>)"
    r"|(?P<math><div\b[^>]*\bclass=\"[^\"]*\barithmatex\b[^\"]*\""
    + _NO_TABINDEX
    + r"[^>]*?)(?=/?>)"
)


def focusable_scroll_boxes(html: str) -> str:
    """Add ``tabindex="0"`` to every code block, Markdown table and display formula."""
    return SCROLL_BOXES.sub(lambda match: match.group(0) + ' tabindex="0"', html)


# A code block's element, and in it the two ids every line carries (and the anchor's
# name and href, which repeat the second). Only the bare ids: mkdocstrings prefixes
# those of its "Source code" blocks with the object's path (`...--source--__codelineno-0-
# 245`), unique already, and links them from a line-number column outside the <code>.
CODE_BLOCK = re.compile(r"<code\b[^>]*>.*?</code>", re.DOTALL)
LINE_ID = re.compile(r"(?<=[\"#])__(span|codelineno)-\d+-(?=\d)")


def unique_line_ids(html: str) -> str:
    """Number the code blocks that carry line ids 0, 1, 2... in the order of the page."""
    blocks = itertools.count()

    def renumber(block: re.Match[str]) -> str:
        if "__span-" not in block[0]:
            return block[0]
        n = next(blocks)
        return LINE_ID.sub(lambda m: f"__{m[1]}-{n}-", block[0])

    return CODE_BLOCK.sub(renumber, html)


# A section's menu as Material 9.8 writes it (partials/nav-item.html): the <nav>, labelled
# by the section's toggle, then the menu's title, whose text is the section's name.
SECTION_MENU = re.compile(
    r'(<nav class="md-nav"[^>]*?) aria-labelledby="__nav_[0-9_]+_label"'
    r'([^>]*>\s*<label class="md-nav__title" for="__nav_[0-9_]+">)(.*?)(?=</label>)',
    re.DOTALL,
)
TAG = re.compile(r"<[^>]*>")


def named_section_menus(html: str) -> str:
    """Name each section's ``<nav>`` in the sidebar after its section (its menu's title).

    Raises:
        BuildError: If a section's menu is still labelled by its toggle afterwards (a
            Material upgrade changed the markup).
    """

    def name(menu: re.Match[str]) -> str:
        title = " ".join(TAG.sub("", menu[3]).split()).replace('"', "&quot;")
        return f'{menu[1]} aria-label="{title}"{menu[2]}{menu[3]}'

    html = SECTION_MENU.sub(name, html)
    if 'aria-labelledby="__nav_' in html:
        raise BuildError(
            "docs_build/accessibility.py: a section's menu is not written as in "
            "mkdocs-material 9.8; update SECTION_MENU so that each menu gets its name"
        )
    return html


# A header cell with no content but white space; its attributes (an alignment) are kept.
EMPTY_HEADER_CELL = re.compile(r"<th\b([^>]*)>(\s*)</th>")


def no_empty_header_cells(html: str) -> str:
    """Write each empty ``<th>`` as a ``<td>`` (a corner cell names no row or column)."""
    return EMPTY_HEADER_CELL.sub(r"<td\1>\2</td>", html)


def accessible(html: str) -> str:
    """Every rule of this module. After math is typeset (``math.py`` swaps each
    formula's placeholder element for KaTeX's, and matches the placeholder's attributes
    exactly, so a ``tabindex`` added first would hide it).
    """
    html = unique_line_ids(focusable_scroll_boxes(html))
    return no_empty_header_cells(named_section_menus(html))

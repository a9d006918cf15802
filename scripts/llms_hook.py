"""MkDocs hook: write ``/llms.txt``, the site's map for language models (llmstxt.org).

The format: an H1 with the site's name, a blockquote summary, then one H2 section per
part of the navigation listing its pages as ``- [title](url): one line``. The line is
the page's ``description`` from its front matter, else the first sentence of its first
plain paragraph, so the file follows the pages without being maintained by hand.

Written by a hook rather than the ``mkdocs-llmstxt`` plugin, which needs ``mdformat``
0.7 and with it ``markdown-it-py`` < 4, older than the version this project pins.
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.nav import Link, Navigation, Section
from mkdocs.structure.pages import Page

MAX_LINE = 200  # characters of a page's one-line description
FEED_CHARS = 8192  # the parser reads the page this much at a time

_descriptions: dict[str, str] = {}  # page URL -> one line
_nav: Navigation | None = None


class _FirstParagraph(html.parser.HTMLParser):
    """Text of the page's first paragraph of prose, with its math as ``$TeX$``.

    Paragraphs inside asides (admonitions, collapsible blocks, tables, figures, lists)
    are passed over: on these pages they hold "API used on this page" boxes, captions
    and the like, not the page's opening.
    """

    ASIDES = frozenset({"details", "table", "figure", "aside", "blockquote", "ul", "ol", "nav"})
    VOID = frozenset(
        {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, inside an aside)
        self.text: list[str] | None = None  # collecting a paragraph
        self.math_depth = 0  # > 0 inside math: its TeX is kept, not its rendering
        self.math_text: list[str] = []  # all text inside the math element
        self.tex: list[str] | None = None  # KaTeX's TeX annotation, once it starts
        self.in_tex = False
        self.found: str | None = None

    def _aside(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.found is not None or tag in self.VOID:
            return
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        aside = self._aside() or tag in self.ASIDES or "admonition" in classes
        self.stack.append((tag, aside))
        if self.text is None:
            if tag == "p" and not aside:
                self.text = []
            return
        if self.math_depth:
            self.math_depth += 1
            if tag == "annotation" and attributes.get("encoding") == "application/x-tex":
                self.tex, self.in_tex = [], True
        elif "arithmatex" in classes or "katex" in classes:
            self.math_depth, self.math_text, self.tex = 1, [], None

    def handle_endtag(self, tag: str) -> None:
        if self.found is not None or tag in self.VOID:
            return
        while self.stack:  # tolerate unclosed elements, as browsers do
            if self.stack.pop()[0] == tag:
                break
        if self.text is None:
            return
        if self.math_depth:
            self.math_depth -= 1
            self.in_tex = self.in_tex and tag != "annotation"
            if self.math_depth == 0:
                # Typeset by KaTeX: its annotation; still raw: the \( \) source.
                tex = "".join(self.math_text if self.tex is None else self.tex).strip()
                for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
                    tex = tex.removeprefix(left).removesuffix(right).strip()
                self.text.append(f"${tex}$")
        elif tag == "p":
            text = " ".join("".join(self.text).split())
            self.text = None
            # A paragraph that starts in lower case continues a sentence broken by
            # display math or a code block: not an opening.
            if len(text) >= 40 and not text[0].islower():
                self.found = text

    def handle_data(self, data: str) -> None:
        if self.found is not None or self.text is None:
            return
        if not self.math_depth:
            self.text.append(data)
        else:
            self.math_text.append(data)
            if self.in_tex and self.tex is not None:
                self.tex.append(data)


def _one_line(text: str) -> str:
    """The first sentence, or the text cut at a word boundary, within MAX_LINE."""
    text = " ".join(text.split())
    sentence = re.match(r"(.+?[.!?])(\s|$)", text)
    if sentence and len(sentence.group(1)) <= MAX_LINE:
        return sentence.group(1)
    if len(text) <= MAX_LINE:
        return text
    return text[: MAX_LINE - 1].rsplit(" ", 1)[0] + "…"


def on_page_content(html: str, page: Page, config: MkDocsConfig, **kwargs: object) -> str:
    if description := page.meta.get("description"):
        _descriptions[page.url] = _one_line(str(description))
    else:
        parser = _FirstParagraph()
        # In pieces, stopping at the first paragraph: parsing a whole tutorial or API
        # page (thousands of highlighted-code tags) cost seconds of every build.
        for start in range(0, len(html), FEED_CHARS):
            parser.feed(html[start : start + FEED_CHARS])
            if parser.found is not None:
                break
        if parser.found:
            _descriptions[page.url] = _one_line(parser.found)
    return html


def _entry(item: Page | Link, base: str) -> str:
    if isinstance(item, Link):
        return f"- [{item.title}]({item.url})"
    line = f"- [{item.title}]({base}{item.url})"
    if description := _descriptions.get(item.url):
        line += f": {description}"
    return line


def _pages(section: Section) -> list[Page | Link]:
    found: list[Page | Link] = []
    for child in section.children:
        found.extend(_pages(child) if isinstance(child, Section) else [child])
    return found


def on_nav(nav: Navigation, config: MkDocsConfig, **kwargs: object) -> Navigation:
    global _nav
    _nav = nav
    return nav


def on_post_build(config: MkDocsConfig, **kwargs: object) -> None:
    nav = _nav
    assert nav is not None, "on_nav runs before on_post_build"
    # Absolute links, so the file is usable on its own; relative ones without site_url.
    base = (config.site_url or "/").rstrip("/") + "/"
    lines = [f"# {config.site_name}", ""]
    if config.site_description:
        lines += [f"> {' '.join(config.site_description.split())}", ""]
    loose: list[Page | Link] = []
    sections: list[tuple[str, list[Page | Link]]] = []
    for item in nav.items:
        if isinstance(item, Section):
            sections.append((item.title, _pages(item)))
        else:
            if not loose:
                sections.append(("Overview", loose))
            loose.append(item)
    for title, items in sections:
        lines += [f"## {title}", "", *(_entry(item, base) for item in items), ""]
    Path(config.site_dir, "llms.txt").write_text("\n".join(lines), encoding="utf-8")

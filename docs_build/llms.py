"""Build step: ``/llms.txt``, the site's map for language models (llmstxt.org).

The format: an H1 with the site's name, a blockquote summary, then one H2 section per
part of the navigation listing its pages as ``- [title](url): one line``. The line is
the page's ``description`` from its front matter, else the first sentence of its first
plain paragraph, so the file follows the pages without being maintained by hand.

Written here rather than by the ``mkdocs-llmstxt`` plugin, which needs ``mdformat``
0.7 and with it ``markdown-it-py`` < 4, older than the version this project pins.
"""

from __future__ import annotations

import html.parser
import re
from dataclasses import dataclass

MAX_LINE = 200  # characters of a page's one-line description
FEED_CHARS = 8192  # the parser reads the page this much at a time


@dataclass(frozen=True)
class Entry:
    """One line of the file: a page (``url`` relative to the site) or an outside link."""

    title: str
    url: str
    description: str | None = None
    external: bool = False


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


def page_description(html: str, meta: dict[str, object]) -> str | None:
    """The page's line: its front matter's ``description``, else its first paragraph."""
    if description := meta.get("description"):
        return _one_line(str(description))
    parser = _FirstParagraph()
    # In pieces, stopping at the first paragraph: parsing a whole tutorial or API
    # page (thousands of highlighted-code tags) cost seconds of every build.
    for start in range(0, len(html), FEED_CHARS):
        parser.feed(html[start : start + FEED_CHARS])
        if parser.found is not None:
            break
    return _one_line(parser.found) if parser.found else None


def _entry(item: Entry, base: str) -> str:
    if item.external:
        return f"- [{item.title}]({item.url})"
    line = f"- [{item.title}]({base}{item.url})"
    if item.description:
        line += f": {item.description}"
    return line


def llms_txt(
    name: str,
    summary: str | None,
    site_url: str | None,
    sections: list[tuple[str, list[Entry]]],
) -> str:
    """The file: the site's name, its summary, and one section per part of the nav."""
    # Absolute links, so the file is usable on its own; relative ones without site_url.
    base = (site_url or "/").rstrip("/") + "/"
    lines = [f"# {name}", ""]
    if summary:
        lines += [f"> {' '.join(summary.split())}", ""]
    for title, items in sections:
        lines += [f"## {title}", "", *(_entry(item, base) for item in items), ""]
    return "\n".join(lines)

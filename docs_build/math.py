"""Typeset every formula at build time with KaTeX, so readers get finished HTML.

``pymdownx.arithmatex`` (generic mode) leaves math as ``<span class="arithmatex">\\(…\\)</span>``
and ``<div class="arithmatex">\\[…\\]</div>`` on Markdown pages, in mkdocstrings
docstrings, in markdown-exec output and on the tutorial pages alike. This step replaces
each one with KaTeX's HTML (what is seen) plus MathML (what screen readers read): no raw
TeX shows while a page loads or with JavaScript off, and no 277 KB script is shipped.

Engine: Node.js runs the KaTeX that is vendored for the site's CSS and fonts
(``docs/assets/vendor/katex``), so the markup always matches the stylesheet readers get.
Node rather than an embedded V8 from PyPI (mini-racer, 82 MB installed, equally fast
here): Node is part of this machine image and of the test setup (npm) already, and a
separate process keeps a JavaScript engine out of the build process that also imports
torch and executes the pages' code. One process serves the whole build; each page sends
its formulas in one JSON line and gets one back. Rendering is cached on
``(tex, display)`` for the build: many formulas repeat across pages.

Order of events, and why (the plugin calls :class:`Typesetter` in each):

1. ``on_page_content`` (late): render the page's formulas, and put a *text form* of each
   (``QK<sup>⊤</sup>/√d``, derived from KaTeX's MathML) into the page, inside the
   arithmatex element with a ``data-katex`` key. Table-of-contents titles get the same.
2. Material's search plugin indexes ``page.content`` in ``on_page_context``: it sees the
   readable text form, never TeX, and never KaTeX's markup (whose glyph text comes in
   visual rather than reading order, a fraction's denominator first, with zero-width
   spaces, and whose MathML carries the TeX source as an annotation). Marking KaTeX's
   markup ``data-search-exclude`` would not do: the plugin's parser compares elements
   by tag name only, so the first nested ``</span>`` ends the exclusion.
3. ``on_post_page``: each keyed element in the finished HTML (content and the
   table of contents) gets KaTeX's markup in place of its text form.

A formula KaTeX cannot parse is logged as a warning naming the page and the TeX, which
fails the strict build.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
import shutil
import subprocess
import time
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from docs_build import LOGGER, BuildError

log = logging.getLogger(f"{LOGGER}.math")

# Relative to docs_dir. The file is excluded from the built site (exclude_docs in
# mkdocs.yml): readers need only the CSS and fonts next to it.
KATEX_JS = Path("assets/vendor/katex/katex.min.js")

# The renderer process. It reads one JSON array of [tex, display] pairs per line and
# answers one JSON array of {html} or {error, html} objects per line, in order.
# strict: "error" makes KaTeX refuse input that LaTeX itself would reject (for example
# Unicode text in math mode) instead of printing a console warning nobody reads.
RENDERER_JS = r"""
"use strict";
const katex = require(process.argv[1]);
const lines = require("readline").createInterface({ input: process.stdin });
const options = (display, throwOnError) => ({
  displayMode: display,
  output: "htmlAndMathml",
  throwOnError,
  strict: "error",
  trust: false,
});
lines.on("line", (line) => {
  const replies = JSON.parse(line).map(([tex, display]) => {
    try {
      return { html: katex.renderToString(tex, options(display, true)) };
    } catch (error) {
      // Still hand back KaTeX's own error rendering (the TeX in red) for `mkdocs serve`.
      const html = katex.renderToString(tex, options(display, false));
      return { error: String(error.message), html };
    }
  });
  process.stdout.write(JSON.stringify(replies) + "\n");
});
"""

# What arithmatex (generic mode) emits; the TeX inside is HTML-escaped text, no tags.
ARITHMATEX = re.compile(r'<(?P<tag>span|div) class="arithmatex">(?P<body>.*?)</(?P=tag)>', re.S)
# What this step leaves until on_post_page: the same element, keyed, holding the text form.
KEYED = re.compile(
    r'<(?P<tag>span|div) class="arithmatex" data-katex="(?P<key>[0-9a-f]{20})">.*?</(?P=tag)>', re.S
)
# Table-of-contents titles hold the heading as escaped text, with arithmatex's delimiters.
TOC_MATH = re.compile(r"\\\((?P<tex>.+?)\\\)", re.S)


@dataclass(frozen=True)
class Rendered:
    html: str  # KaTeX's markup: HTML for the eye, MathML for screen readers
    text: str  # a readable text form (escaped, with <sub>/<sup>) for search and titles
    error: str | None = None


class KatexRenderer:
    """One long-lived ``node`` process that renders with the vendored KaTeX."""

    def __init__(self, katex_js: Path) -> None:
        if not katex_js.is_file():
            raise BuildError(f"KaTeX is missing: {katex_js} (run scripts/vendor_katex.sh)")
        self.katex_js = katex_js
        self.process: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            raise BuildError(
                "Node.js is needed to typeset the site's math at build time and was not "
                "found on PATH (Debian: apt-get install nodejs)."
            )
        return subprocess.Popen(
            [node, "-e", RENDERER_JS, str(self.katex_js.resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def render(self, items: list[tuple[str, bool]]) -> list[dict[str, str]]:
        if self.process is None:
            self.process = self._start()
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(items) + "\n")
            self.process.stdin.flush()
            reply = self.process.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply:
            code = self.process.poll()
            raise BuildError(
                f"the KaTeX renderer (node) stopped (exit status {code}); see its output above"
            )
        results: list[dict[str, str]] = json.loads(reply)
        if len(results) != len(items):
            raise BuildError(
                f"the KaTeX renderer answered {len(results)} results for {len(items)} formulas"
            )
        return results

    def close(self) -> None:
        if self.process is None:
            return
        process, self.process = self.process, None
        assert process.stdin is not None
        process.stdin.close()  # readline ends, and node exits on its own
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()  # or Python warns of an unclosed file at exit


# --- MathML to a readable text form ---------------------------------------------------

MATHML = re.compile(r"<math\b.*?</math>", re.S)
# Invisible times/separator/plus and zero-width space: nothing to read.
INVISIBLE = dict.fromkeys(map(ord, "\u2062\u2063\u2064\u200b"), None)
# Function application (after log, softmax, ...): a space before an argument, none
# before a parenthesis. Kept as a marker until the whole formula is assembled.
APPLY = "\u2061"
# Binary operators and relations get spaces around them: "L ≠ S" reads better than
# "L≠S", and the search index splits terms at spaces only.
SPACED_OPERATORS = {"=", "+", "<", ">"}  # and every other single Unicode math symbol
# Under- and overbraces carry their label as a script; the brace itself is not read.
BRACES = {"\u23df", "\u23de", "\ufe38", "\ufe37"}
PREFIX_SIGNS = {"+", "\u2212", "\u00b1", "\u2213", "\u00ac"}
PRIMES = {"\u2032", "\u2033", "\u2034"}
COMBINING_ACCENTS = {
    "^": "\u0302",
    "~": "\u0303",
    "\u02c9": "\u0304",
    "\u00af": "\u0304",
    ".": "\u0307",
    "\u02d9": "\u0307",
    "\u2192": "\u20d7",
    "\u20d7": "\u20d7",
}
DOUBLE_STRUCK = {"C": "ℂ", "H": "ℍ", "N": "ℕ", "P": "ℙ", "Q": "ℚ", "R": "ℝ", "Z": "ℤ"}


def _double_struck(text: str) -> str:
    return "".join(
        DOUBLE_STRUCK.get(c) or (chr(0x1D538 + ord(c) - ord("A")) if "A" <= c <= "Z" else c)
        for c in text
    )


def _tag(element: ET.Element) -> str:
    return element.tag.rpartition("}")[2]


def _text(element: ET.Element) -> tuple[str, bool]:
    """Text form of a MathML element and whether it reads as one unit (needs no parentheses).

    Reading order follows MathML (a fraction's numerator before its denominator), sub-
    and superscripts become <sub>/<sup>, which Material's search index keeps.
    """
    tag = _tag(element)
    children = list(element)
    if tag in ("annotation", "annotation-xml", "mphantom", "none"):
        return "", True
    if tag in ("mi", "mn", "mtext", "ms", "merror"):
        text = html.escape((element.text or "").translate(INVISIBLE), quote=False)
        if element.get("mathvariant") == "double-struck":
            text = _double_struck(text)
        return text, tag != "mtext" or len(text.strip()) <= 1
    if tag == "mo":
        op = (element.text or "").translate(INVISIBLE)
        if op == APPLY:
            return APPLY, True
        if element.get("separator") == "true":
            return html.escape(op, quote=False) + " ", True
        delimiter = "fence" in element.attrib or "stretchy" in element.attrib
        if not delimiter and (
            op in SPACED_OPERATORS or (len(op) == 1 and unicodedata.category(op) == "Sm")
        ):
            return f" {html.escape(op, quote=False)} ", False
        return html.escape(op, quote=False), True
    if tag == "mspace":
        return ("" if element.get("width", "").startswith("-") else " "), True
    if tag == "semantics":
        return _text(children[0]) if children else ("", True)
    if tag in ("msub", "msup", "msubsup", "munder", "mover", "munderover"):
        base, base_unit = _text(children[0])
        base = base.strip()
        # "max_j s_j": the function-application marker belongs after the scripts.
        applied = APPLY if base.endswith(APPLY) else ""
        base = base.removesuffix(APPLY)
        scripts = [_text(child)[0].strip() for child in children[1:]]
        if tag in ("mover", "munder"):
            if html.unescape(scripts[0]) in BRACES:
                return _parenthesize(base, base_unit), True
            mark = COMBINING_ACCENTS.get(html.unescape(scripts[0]))
            if mark and len(html.unescape(base)) == 1:
                return base + mark, True
        sub, sup = {
            "msub": (scripts[0], ""),
            "munder": (scripts[0], ""),
            "msup": ("", scripts[0]),
            "mover": ("", scripts[0]),
        }.get(tag, (scripts[0], scripts[-1]))
        sup_html = sup if sup in PRIMES else f"<sup>{sup}</sup>" if sup else ""
        return base + (f"<sub>{sub}</sub>" if sub else "") + sup_html + applied, base_unit
    if tag == "mfrac":
        (num, num_unit), (den, den_unit) = _text(children[0]), _text(children[1])
        return f"{_parenthesize(num, num_unit)}/{_parenthesize(den, den_unit)}", False
    if tag == "msqrt":
        inner, unit = _row(children)
        return "√" + _parenthesize(inner, unit), True
    if tag == "mroot":
        (radicand, unit), (index, _) = _text(children[0]), _text(children[1])
        return f"<sup>{index.strip()}</sup>√{_parenthesize(radicand, unit)}", True
    if tag == "mtable":
        # Alignment environments (aligned, split) pack columns tight: one expression
        # split at "&". Cases and matrices space their columns: separate cells.
        joiner = " " if element.get("columnspacing", "").startswith("0") else ", "
        rows = [joiner.join(_row(list(cell))[0].strip() for cell in row) for row in children]
        return "".join(
            row + ("" if i == len(rows) - 1 else " " if row[-1:] in ",;." else "; ")
            for i, row in enumerate(rows)
        ), False
    # math, mrow, mstyle, mpadded, menclose, ...: the children in order.
    return _row(children)


def _row(children: list[ET.Element]) -> tuple[str, bool]:
    parts = [_text(child) for child in children]
    parts = [part for part in parts if part[0]]
    if len(parts) == 1:
        return parts[0]
    texts: list[str] = []
    for text, _ in parts:
        # A sign at the start, after another operator or after an opening delimiter
        # is a prefix: "−∞", "x = −y", "(+1".
        prefix = not texts or _is_spaced_operator(texts[-1]) or texts[-1].strip()[-1:] in "([{,"
        texts.append(text.strip() if prefix and text.strip() in PREFIX_SIGNS else text)
    text = "".join(texts)
    fenced = text.strip()[:1] in "([{|⟨‖∥" and text.strip()[-1:] in ")]}|⟩‖∥"
    return text, fenced


def _is_spaced_operator(text: str) -> bool:
    return len(text) > 2 and text[0] == " " and text[-1] == " "


def _parenthesize(text: str, unit: bool) -> str:
    text = text.strip()
    return text if unit else f"({text})"


def text_form(katex_html: str) -> str:
    """The readable text form of one KaTeX rendering, as escaped HTML with <sub>/<sup>."""
    match = MATHML.search(katex_html)
    if match is None:  # KaTeX's error rendering carries no MathML: fall back to its text
        return html.escape(re.sub(r"<[^>]+>", "", katex_html), quote=False)
    text, _ = _text(ET.fromstring(match.group(0)))
    text = re.sub(r"\s+", " ", text)
    text = re.sub(APPLY + r"\s*(?=[(\[{|‖∥])", "", text).replace(APPLY, " ")
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+(</su[bp]>)", r"\1", re.sub(r"(<su[bp]>)\s+", r"\1", text))
    return text.strip()


# --- the typesetter of one build ---------------------------------------------------------


class TocItem(Protocol):
    """An entry of a page's table of contents, as MkDocs gives it."""

    title: str
    children: Iterable[TocItem]


class Typesetter:
    """What one build keeps: the renderer, the cache, and numbers for the log."""

    def __init__(self, katex_js: Path) -> None:
        self.renderer = KatexRenderer(katex_js)
        self.cache: dict[str, Rendered] = {}
        self.formulas = 0
        self.pages = 0
        self.seconds = 0.0  # spent typesetting, node's rendering included

    def render(self, formulas: list[tuple[str, bool]], where: str) -> list[str]:
        """Render (through the cache) and return each formula's key; warn on errors."""
        keys = [_key(tex, display) for tex, display in formulas]
        todo = {
            key: formula
            for key, formula in zip(keys, formulas, strict=True)
            if key not in self.cache
        }
        if todo:
            results = self.renderer.render(list(todo.values()))
            for key, result in zip(todo, results, strict=True):
                self.cache[key] = Rendered(
                    result["html"], text_form(result["html"]), result.get("error")
                )
        for key, (tex, display) in zip(keys, formulas, strict=True):
            error = self.cache[key].error
            if error is not None:
                opening, closing = ("\\[", "\\]") if display else ("\\(", "\\)")
                log.warning("%s: cannot typeset %s%s%s: %s", where, opening, tex, closing, error)
        self.formulas += len(formulas)
        return keys

    def keyed(self, tag: str, key: str) -> str:
        """The placeholder the page carries until :meth:`typeset`: the text form, keyed."""
        return f'<{tag} class="arithmatex" data-katex="{key}">{self.cache[key].text}</{tag}>'

    def _typeset(self, match: re.Match[str]) -> str:
        tag = match.group("tag")
        return f'<{tag} class="arithmatex">{self.cache[match.group("key")].html}</{tag}>'

    def render_page(self, html_: str, toc: Iterable[TocItem], where: str) -> str:
        """Step 1: render the page's formulas and the TOC's; leave keyed text forms.

        ``toc`` titles are changed in place; the page's HTML is returned.
        """
        start = time.perf_counter()
        formulas = [_formula(match, where) for match in ARITHMATEX.finditer(html_)]
        toc_items = [item for item in _walk(toc) if TOC_MATH.search(item.title)]
        formulas += [
            (html.unescape(match.group("tex")).strip(), False)
            for item in toc_items
            for match in TOC_MATH.finditer(item.title)
        ]
        if not formulas:
            return html_
        # The same order as collected: page content first, then the table of contents.
        keys = iter(self.render(formulas, where))
        html_ = ARITHMATEX.sub(lambda match: self.keyed(match.group("tag"), next(keys)), html_)
        for item in toc_items:
            item.title = TOC_MATH.sub(lambda _: self.keyed("span", next(keys)), item.title)
        self.pages += 1
        self.seconds += time.perf_counter() - start
        return html_

    def typeset(self, output: str) -> str:
        """Step 3: every keyed element of the finished page gets KaTeX's markup."""
        start = time.perf_counter()
        output = KEYED.sub(self._typeset, output)
        self.seconds += time.perf_counter() - start
        return output

    def close(self) -> None:
        """Stop the renderer and log what this build typeset."""
        self.renderer.close()
        log.info(
            "KaTeX typeset %d formulas on %d pages (%d distinct) in %.1f s",
            self.formulas,
            self.pages,
            len(self.cache),
            self.seconds,
        )


def _key(tex: str, display: bool) -> str:
    return hashlib.sha1(f"{int(display)}\0{tex}".encode()).hexdigest()[:20]


def _formula(match: re.Match[str], where: str) -> tuple[str, bool]:
    """(tex, display) of one arithmatex element."""
    body = html.unescape(match.group("body")).strip()
    display = match.group("tag") == "div"
    opening, closing = ("\\[", "\\]") if display else ("\\(", "\\)")
    if not (body.startswith(opening) and body.endswith(closing)):
        raise BuildError(f"{where}: unexpected arithmatex output {match.group(0)[:120]!r}")
    return body[2:-2].strip(), display


def _walk(toc: Iterable[TocItem]) -> Iterator[TocItem]:
    for item in toc:
        yield item
        yield from _walk(item.children)

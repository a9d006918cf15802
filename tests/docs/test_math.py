"""Math is typeset when the site is built (docs_build/math.py), never in the browser.

A reader sees finished formulas at once, with JavaScript off too; no KaTeX script is
shipped; the search index holds readable text, never TeX and never "¶".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from docs_build import math
from tests.conftest import ROOT
from tests.docs._phone import PhoneWalk

KATEX_JS = ROOT / "docs" / "assets" / "vendor" / "katex" / "katex.min.js"

# What a reader would see of untypeset math: the delimiters arithmatex emits, $$, and
# a $...$ pair holding TeX (a command, a sub- or superscript) or one letter, as Markdown
# that never went through arithmatex (a raw HTML block, for one) would show it.
RAW_MATH = re.compile(r"\\\(|\\\[|\$\$|\$[^$\n]*?(?:\\[A-Za-z]|[_^])[^$\n]*?\$|\$[A-Za-z]\$")
# TeX in the search index: commands the site's formulas use, and the delimiters.
TEX_IN_INDEX = re.compile(
    r"\\(frac|sqrt|top|mathbf|mathbb|operatorname|text|times|cdot|left|right|begin|\(|\[)"
)
# Pages with math typeset: the site has about two thousand formulas. A floor far below
# that still catches a build where math stopped being typeset on whole groups of pages.
MIN_FORMULAS = 1000


def html_pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


class VisibleText(HTMLParser):
    """The text of a page outside code, scripts, styles and MathML annotations (where
    TeX is legitimate: code shows it, the annotation carries it for assistive tools)."""

    SKIP = frozenset({"code", "pre", "script", "style", "annotation", "textarea"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)

    @classmethod
    def of(cls, html: str) -> str:
        parser = cls()
        parser.feed(html)
        parser.close()
        return "".join(parser.parts)


def context_of(text: str, match: re.Match[str]) -> str:
    return " ".join(text[max(0, match.start() - 40) : match.end() + 40].split())


def raw_math_in(text: str, where: str) -> list[str]:
    """Raw math in a page's visible text: the first few places and how many in all."""
    found = [context_of(text, m) for m in RAW_MATH.finditer(text)]
    more = [f"{where}: ... {len(found)} places in all"] if len(found) > 3 else []
    return [f"{where}: raw math shown: {snippet!r}" for snippet in found[:3]] + more


def test_every_formula_is_typeset_in_the_built_html(built_site: Path) -> None:
    problems: list[str] = []
    formulas = 0
    for page in html_pages(built_site):
        html = page.read_text()
        where = page.relative_to(built_site).as_posix()
        problems += raw_math_in(VisibleText.of(html), where)
        untypeset = re.findall(
            r'<(?:span|div) class="arithmatex"(?![^>]*>\s*<span class="katex)[^>]*>.{0,60}', html
        )
        problems += [f"{where}: formula left untypeset: {u!r}" for u in untypeset]
        if "katex-error" in html:
            problems.append(f"{where}: KaTeX rendered an error")
        # No renderer in the page: neither KaTeX's script nor an init script.
        problems += [
            f"{where}: loads a client-side math script: {s}"
            for s in re.findall(
                r'<script[^>]*src="[^"]*(?:katex|auto-render|mathjax)[^"]*"', html, re.I
            )
        ]
        katex = html.count('<span class="katex">')
        # output "htmlAndMathml": each formula carries MathML for screen readers.
        mathml = html.count('<math xmlns="http://www.w3.org/1998/Math/MathML"')
        if katex != mathml:
            problems.append(f"{where}: {katex} formulas but {mathml} MathML copies")
        if katex and "assets/vendor/katex/katex.min.css" not in html:
            problems.append(f"{where}: typeset math but no KaTeX stylesheet")
        formulas += katex
    assert not problems, "\n".join(problems)
    assert formulas >= MIN_FORMULAS, f"only {formulas} typeset formulas on the whole site"


def test_no_client_side_katex_is_shipped(built_site: Path) -> None:
    shipped = sorted(
        p.relative_to(built_site).as_posix()
        for p in built_site.rglob("*.js")
        if re.search(r"katex|auto-render", p.name)
    )
    assert shipped == [], shipped
    # What the typeset HTML does need: the stylesheet and its fonts, of the same version.
    css = built_site / "assets" / "vendor" / "katex" / "katex.min.css"
    fonts = set(re.findall(r"url\(fonts/([^)]+\.woff2)\)", css.read_text()))
    assert len(fonts) > 10
    missing = [f for f in sorted(fonts) if not (css.parent / "fonts" / f).is_file()]
    assert not missing, missing


def test_search_index_has_no_tex_and_no_pilcrows(built_site: Path) -> None:
    docs = json.loads((built_site / "search" / "search_index.json").read_text())["docs"]
    assert len(docs) > 50
    problems = []
    for doc in docs:
        for field in ("title", "text"):
            # Code is indexed as code (API source listings quote their docstrings, TeX
            # and all); what must hold no TeX is everything else: prose and formulas.
            value = re.sub(r"<(pre|code)>.*?</\1>", "", doc[field], flags=re.S)
            problems += [
                f"{doc['location']} {field}: TeX {context_of(value, m)!r}"
                for pattern in (TEX_IN_INDEX, RAW_MATH)
                for m in pattern.finditer(value)
            ]
            problems += [
                f"{doc['location']} {field}: {marker!r} in {value[-60:]!r}"
                for marker in ("¶", "$$", "\u200b", "application/x-tex")
                if marker in value
            ]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
    # Formulas are indexed as readable text (from KaTeX's MathML, in reading order),
    # not dropped: the site's central formula is found as it reads.
    texts = " ".join(doc["text"] for doc in docs)
    assert "softmax((QK<sup>⊤</sup>)/√" in texts


@pytest.mark.browser
def test_no_raw_tex_without_javascript_on_a_phone(phone_walk: PhoneWalk) -> None:
    """Every page, JavaScript off, 390 px wide: the math is there, typeset, and fits.

    The pages are loaded by the ``phone_walk`` session fixture, side by side with
    test_mobile.py's load of each with JavaScript on (``_phone.py`` holds the probes,
    ``MATH_WIDTH`` and ``VISIBLE_TEXT``)."""
    assert len(phone_walk.pages) > 20
    problems: list[str] = []
    formulas = 0
    for record in phone_walk.without_js:
        formulas += record.math["formulas"]
        widths = record.math["widths"]
        if widths["withMath"] > max(widths["withoutMath"], widths["viewport"]):
            problems.append(f"/{record.page}: math widens the page at 390 px: {widths}")
        problems += raw_math_in(record.text, f"/{record.page}")
    assert not problems, "\n".join(problems)
    assert formulas >= MIN_FORMULAS


# --- the step itself, on formulas of its own ------------------------------------------


@pytest.fixture(scope="module")
def renderer():
    renderer = math.KatexRenderer(KATEX_JS)
    yield renderer
    renderer.close()


@pytest.mark.parametrize(
    ("tex", "text"),
    [
        # reading order (numerator first), scripts as <sub>/<sup>, operators spaced
        (
            r"\operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V",
            "softmax((QK<sup>⊤</sup>)/√d<sub>k</sub>)V",
        ),
        (r"L \ne S", "L ≠ S"),
        (
            r"\sum_{j=1}^{n} e^{z_j - m}",
            "∑<sub>j = 1</sub><sup>n</sup>e<sup>z<sub>j</sub> − m</sup>",
        ),
        (r"M_{ij} = -\infty", "M<sub>ij</sub> = −∞"),
        (r"\log n + \max_j s_j", "log n + max<sub>j</sub> s<sub>j</sub>"),
        (r"x \in \mathbb{R}^{B \times L \times D}", "x ∈ ℝ<sup>B × L × D</sup>"),
        (
            r"\begin{aligned} m' &= \max(m, s) \\ \ell' &= e^{m - m'} \ell \end{aligned}",
            "m′ = max(m, s); ℓ′ = e<sup>m − m′</sup>ℓ",
        ),
        (r"a < b", "a &lt; b"),  # escaped: the index holds HTML
    ],
)
def test_text_form_reads_like_the_formula(renderer, tex: str, text: str) -> None:
    [result] = renderer.render([(tex, False)])
    assert "error" not in result
    assert math.text_form(result["html"]) == text


def test_a_formula_katex_cannot_parse_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "assets" / "vendor" / "katex").mkdir(parents=True)
    (docs / "assets" / "vendor" / "katex" / "katex.min.js").symlink_to(KATEX_JS)
    (docs / "index.md").write_text("# Home\n\nFine: \\(QK^\\top\\).\n")
    (docs / "broken.md").write_text("# Broken\n\nA typo: \\(\\frac{1}{\\sqrt{d}\\).\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nstrict: true\n"
        "plugins: [attention-site]\n"
        "markdown_extensions: [{pymdownx.arithmatex: {generic: true}}]\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert warning.startswith(
        r"WARNING -  broken.md: cannot typeset \(\frac{1}{\sqrt{d}\): KaTeX parse error"
    )

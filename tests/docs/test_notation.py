r"""One notation, enforced: the symbols the notation page retired stay out of the math.

``docs/concepts/notation.md`` holds the site's one table of symbols ("One symbol per
meaning"). This lint reads the mathematics of every Markdown page under ``docs/``, of
the tutorials' Markdown cells and of the package's docstrings (they render on the API
pages), and flags every use of a retired symbol with its file, line and text. Code is
not read: a fenced block, inline code or a tutorial's code cell may call a variable
``s`` or ``ell``. Figures are read: their captions (``publish(fig, "...")`` on a page,
``# %% caption="..."`` in a tutorial) and the text drawn in them (titles, axis and
legend labels, notes), written in Unicode ("score zⱼ", "‖∂ℒ/∂q‖"), which the lint
turns into TeX before it applies the rules; and two rules (the loss written as "∂ℓ",
the title's √d_k) read every line.

Each rule is narrow enough to have no false positive on today's pages; the synthetic
test below feeds every rule the retired use it exists for, so no rule can silently
match nothing, and checks that code and allowed uses are left alone.

Two kinds of rule. A *retired* symbol is one the table's last column lists: another
text's letter for one of the site's meanings (``s_j`` for a score). A *reserved* letter
is one of the site's own symbols given another meaning on some page: a matrix letter
(Q, K, V, O, P, Z) used as a number (a vocabulary ``V = 52``, a clipping distance
``2K + 1``), the model width E used as a matrix, the online softmax's ``\tilde{O}`` on
a page without its ``\ell``, the query index i as the imaginary unit, the scores
written ``e_ij``, the heads' H as an entropy, a bare m (the running maximum) as ALiBi's
slope. The fix of such a rule names the symbol to write instead, and that symbol must
be defined on the notation page, in its table or among the letters that belong to one
page (``registered``). Where a page may use a letter its own way (Bahdanau's ``e_ij``,
quoted), it is listed with the rule.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import DOCS, ROOT
from tests.docs._codeblocks import OPENING

PAGES = sorted(p for p in DOCS.rglob("*.md") if "assets" not in p.relative_to(DOCS).parts)
TUTORIALS = sorted((DOCS / "tutorials").glob("[0-9][0-9]_*.py"))
MODULES = sorted((ROOT / "attention").rglob("*.py"))  # integrations/, distributed/ too
# Build code that draws figures a page shows: the explorers' static figures.
FIGURE_CODE = [ROOT / "docs_build" / "explorers.py"]

NOTATION = "docs/concepts/notation.md"
SYMBOL_TABLE = "## One symbol per meaning"  # its last column names the retired symbols
# Pages that quote or map the paper's own letters may write d_k.
PAPER_MAPPING = {NOTATION, "docs/concepts/why-scale.md"}
PAPER_MAPPING |= {"attention/numpy_reference.py"}  # W_i^Q in R^{d_model x d_k}
# Where the encoder width of cross-attention is written: E_ctx, never C.
CROSS_ATTENTION = {"docs/tutorials/06_cross_attention.py", "docs/concepts/self-cross-causal.md"}
# Where Bahdanau's paper is quoted in its own letters (e_ij for a score).
BAHDANAU = {NOTATION, "docs/concepts/similarity-to-attention.md"}
# Known uses of a reserved letter that this change does not touch, each with the
# rule it breaks; test_pending_exceptions_are_still_needed fails once one is fixed,
# so that its entry is removed with it.
PENDING: set[tuple[str, str]] = set()

# A letter standing alone: not part of a word, not a TeX command (\ell, \sum, ...) and
# not a subscript (the K of W_K).
ALONE = r"(?<![\\A-Za-z_])"


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    fix: str
    only: frozenset[str] | None = None  # files (relative to the root) it applies to
    unless: frozenset[str] = frozenset()  # files where the use is allowed
    # "math": inside the formulas; "prose": the running text, formulas with their
    # delimiters; "everywhere": every line, code and figure labels included.
    scope: str = "math"
    # A file whose mathematics matches this anywhere is left alone by the rule: the
    # letter is in its own meaning there (the online softmax's \tilde{O} beside its \ell).
    unless_file_has: re.Pattern[str] | None = None
    # The symbols the fix asks for, as the notation page writes them: they must be there.
    registered: tuple[str, ...] = ()

    def applies_to(self, where: str) -> bool:
        return (self.only is None or where in self.only) and where not in self.unless


def rule(
    name: str,
    pattern: str,
    fix: str,
    *,
    unless: frozenset[str] = frozenset(),
    unless_file_has: str | None = None,
    registered: str | tuple[str, ...] = (),
    **kwargs: object,
) -> Rule:
    return Rule(
        name,
        re.compile(pattern),
        fix,
        unless=unless,
        unless_file_has=None if unless_file_has is None else re.compile(unless_file_has),
        registered=(registered,) if isinstance(registered, str) else registered,
        **kwargs,  # type: ignore[arg-type]
    )


# The matrices of the table: never a count, a size or a distance.
MATRIX = r"[QKVOPZ]"
NOT_SUBSCRIPTED = r"(?![A-Za-z_^{])"


RULES = [
    # -- scores: Z, z_ij ---------------------------------------------------------------
    rule(
        "scores written s",
        ALONE + r"s_(?:\{?[jbt]\b|\{i\s*j\})|e\^\{s\s*-",
        "scores are z_j, z_ij, z_b (s_{i-1} stays Bahdanau's decoder state)",
    ),
    rule("scores written S", ALONE + r"(?:S_\{i\s*j\}|S\s*=\s*Q\s*K\^)", "scores are Z, z_ij"),
    # -- the scale: \text{scale} -----------------------------------------------------
    rule(
        "scale written s",
        ALONE + r"s\s*(?:\\[,;:! ]\s*|\\cdot\s*)?(?:Q\s*K\^|q_i\s*\\cdot|dZ)",
        r"write \text{scale} (PyTorch's argument)",
    ),
    rule(
        "scale written s (prose)",
        r"scale\s+(?:\\\(s\\\)|\$s\$)",
        r"write \(\text{scale}\)",
        scope="prose",
    ),
    # -- RoPE's context-extension factor: \gamma -------------------------------------------
    rule(
        "extension factor written s",
        r"\\ln\s*s(?![A-Za-z_])",
        r"the context-extension factor is \gamma (RoPE, derived)",
        registered=r"\(\gamma\)",
    ),
    rule(
        "extension factor written s (prose)",
        r"factor`*\s+(?:\\\(|\$)s(?![A-Za-z_])",
        r"the context-extension factor is \gamma (RoPE, derived)",
        scope="prose",
        registered=r"\(\gamma\)",
    ),
    # -- weights P, p_ij; permutation Pi -------------------------------------------------
    rule("weight entries written P_ij", ALONE + r"P_\{i\s*(?:j|\\cdot)\}", "entries are p_ij"),
    rule(
        "permutation written P",
        r"(?:\\operatorname\{\w*Attn\w*\}|\\operatorname\{SelfAttention\})\s*\(\s*P\s*X"
        r"|" + ALONE + r"P\s*\^\\top\s*P\s*=\s*I|softmax\}\(P\s*Z\s*P",
        r"a permutation is \Pi",
    ),
    # -- the loss: \mathcal{L}; ell only for the running denominator -------------------------
    rule("loss written ell", r"\\partial\s*\\ell", r"the loss is \mathcal{L}"),
    rule(
        "loss written ell (prose)",
        r"loss\s+\\\(\\ell\\\)",
        r"the loss is \(\mathcal{L}\)",
        scope="prose",
    ),
    rule("loss written ℓ", r"∂ℓ", "the loss is ℒ", scope="everywhere"),
    # -- online softmax: m, ell, \tilde{o} / \tilde{O} -------------------------------------
    rule(r"\tilde without braces", r"\\tilde\s+[oO]\b", r"write \tilde{o} or \tilde{O}"),
    rule(
        "accumulator written a or o",
        r"e\^\{m\s*-\s*m'\}\s*(?:\\,\s*)?[ao]\b"
        + (r"|" + ALONE + r"[ao]'\s*&?=")
        + (r"|" + ALONE + r"[ao]\s*/\s*\\ell\b"),
        r"the accumulator is \tilde{o} (\tilde{O} for a block), the output o = \tilde{o} / \ell",
    ),
    rule(
        "summation index m",
        r"\\sum_\{?m\b(?![_'])",
        "m is the running maximum: sum over j'",
    ),
    rule(r"\operatorname{LSE}", r"\\operatorname\{LSE\}", r"write \operatorname{lse}"),
    # -- lengths and counts ---------------------------------------------------------------
    rule("sequence length written N", ALONE + r"N(?:\^2|\s*\\times\s*D)", "the length is n"),
    rule(
        "layer count written n, ell or k",
        r"\\\((?:n|\\ell|k)\\\)\s+(?:stacked\s+)?layers",
        r"the number of layers is N_{\text{layers}}",
        scope="prose",
    ),
    rule(
        r"layer count written \text{layers}",
        r"(?<!N_\{)\\text\{layers\}",
        r"the number of layers is N_{\text{layers}}",
    ),
    # -- entropy: \mathcal{H}; H is the number of heads -----------------------------------
    rule(
        "entropy written H",
        ALONE + r"H\s*\(\s*(?:p\b|\\cdot)|" + ALONE + r"H_i\b|"
        r"(?<![\\A-Za-z_{])H\s*(?:=|\\approx)\s*-?\s*(?:\\log|\\sum)",
        r"entropy is \mathcal{H}",
    ),
    # -- head size D; the paper's d_k only where the paper is mapped ------------------------
    rule(
        "head size written d_k",
        r"(?<![A-Za-z\\])d_(?:k\b|\{k\})",
        "the head size is D",
        unless=frozenset(PAPER_MAPPING),
    ),
    rule("title written √d_k", r"√d_k", "the page is 'Why scale by √D'", scope="everywhere"),
    # -- cross-attention: E_ctx; the encoder output is not Z -------------------------------
    rule(
        "encoder width written C",
        r"(?<![\\A-Za-z_{])C(?![A-Za-z])",
        r"the encoder width is E_{\text{ctx}}",
        only=frozenset(CROSS_ATTENTION),
    ),
    rule(r"E_{ctx} without \text", r"E_\{ctx\}", r"write E_{\text{ctx}}"),
    rule(
        "encoder output written Z",
        r"\(Y,\s*Z\)|" + ALONE + r"Z\s*\\in\s*\\mathbb\{R\}\^\{S",
        "Z is the scores: the encoder output is X (X_kv)",
    ),
    # -- dropout and linear attention ----------------------------------------------------
    rule("dropout probability written p", r"1\s*/\s*\(1\s*-\s*p\)", r"write p_{\text{drop}}"),
    rule(
        "feature count written M",
        r"n\s*(?:\\,\s*)?M\s*(?:\\,\s*)?D_v|M\s*\\times\s*D_v|" + ALONE + r"M\s*=\s*D(?:_v)?\b",
        r"linear attention's feature count is D_\phi (M is the mask)",
    ),
    # -- reserved letters given another meaning ------------------------------------------
    rule(
        "matrix letter used as a number",
        "|".join(
            [
                ALONE + MATRIX + r"\s*=\s*\d+",  # V = 52
                r"\\(?:ln|log)\s*" + MATRIX + NOT_SUBSCRIPTED,  # \ln V
                r"(?<![A-Za-z_\\{])\d\s*" + MATRIX + r"(?![A-Za-z_^{(])",  # 2K
                ALONE + MATRIX + r"\s*[+\-]\s*\d",  # V - 1
                r"(?:\d|\\varepsilon|\\epsilon)\s*/\s*" + MATRIX + NOT_SUBSCRIPTED,  # 1/V
                r"\\[td]?frac\{[^{}]*\}\{" + MATRIX + r"\}",  # \frac{\varepsilon}{V}
                r"\\(?:max|min)\(\s*-\s*" + MATRIX + r"\b",  # \max(-K, ...)
            ]
        ),
        r"Q, K, V, O, P, Z are matrices: a vocabulary size is N_{\text{vocab}}, a clipping"
        r" distance d_{\max}",
        registered=(r"N_{\text{vocab}}", r"d_{\max}"),
    ),
    rule(
        "vocabulary written V",
        r"(?:\\\(|\$)V(?:\\\)|\$)\s+(?:logits|tokens|symbols|target tokens|classes)"
        r"|vocabular(?:y|ies)\s+(?:size\s+|of\s+)?(?:\\\(|\$)V\b",
        r"the vocabulary size is N_{\text{vocab}} (V is the values)",
        scope="prose",
        registered=r"N_{\text{vocab}}",
    ),
    rule(
        "model width E used as a matrix",
        "|".join(
            [
                ALONE + r"E\s*\^\{?\\top",  # E^\top
                ALONE + r"E\s*=\s*I\b",  # E = I
                ALONE
                + r"E\s*(?:,\s*F\s*)?\\in\s*\\mathbb\{R\}\^\{[^}]*\\times",  # E, F in R^{r x n}
                ALONE + r"E\s*[KV](?![A-Za-z_])",  # EK
            ]
        ),
        r"E is the model width: Linformer's projections are U_K, U_V",
        registered=r"\(U_K\)",
    ),
    rule(
        "model width E used as a matrix (prose)",
        r"matri(?:x|ces)\s+\\\(E\\\)",
        r"E is the model width: Linformer's projections are U_K, U_V",
        scope="prose",
        registered=r"\(U_K\)",
    ),
    rule(
        r"\tilde{O} without an online softmax",
        r"\\tilde\{[oO]\}",
        r"\tilde{O} is the online softmax's accumulator (its \ell nowhere on this page):"
        r" an approximate output is \hat{O}",
        unless_file_has=r"\\ell(?!_\{?[12]\b)",
        registered=r"\(\hat{O}\)",
    ),
    rule(
        "imaginary unit written i",
        # e^{i m \theta}, e^{i (m - n) \theta_t}, x_0 + i x_1
        r"e\^\{\s*(?:[^{}]*?[\s(+\-])?i\s*"
        r"(?:\(|\\(?:theta|phi|omega|pi|varphi)\b|[a-z](?![A-Za-z_{]))"
        r"|[+\-]\s*i\s*[a-z]_",
        r"i is the query index: the imaginary unit is \mathrm{i}",
        registered=r"\(\mathrm{i}\)",
    ),
    rule(
        "scores written e",
        ALONE + r"e_\{?i\s*,?\s*j\}?",
        "the scores are z_ij (e_ij stays Bahdanau's, where his paper is quoted)",
        unless=frozenset(BAHDANAU),
        registered=r"\(z_{ij}\)",
    ),
    rule(
        "entropy written H with a subscript",
        "|".join(
            [
                ALONE + r"H_(?:\\[A-Za-z]+|\{\\[A-Za-z]+\})",  # H_\varepsilon
                ALONE + r"H_(?!\{?kv\b|\{?q\b)(?:[a-z0-9]|\{[^{}]*\})\s*=\s*-",  # H_1 = -...
            ]
        ),
        r"entropy is \mathcal{H} (H, H_kv, H_q count heads)",
        registered=r"\(\mathcal{H}(p)\)",
    ),
    rule(
        "ALiBi slope written m",
        r"-\s*m\s*(?:\\[,;:! ]\s*)?(?:\(\s*i|\\lvert|\|)",
        "ALiBi's slope is m_h, with its head (m is the running maximum)",
        registered=r"\(m_h\)",
    ),
    rule(
        "ALiBi slope written m (prose)",
        r"slopes?\s+\\\(m\s*(?:=|\\\))",
        "ALiBi's slope is m_h, with its head (m is the running maximum)",
        scope="prose",
        registered=r"\(m_h\)",
    ),
]


# -- where the math is ---------------------------------------------------------------------

MATH = re.compile(
    r"\$\$(?P<a>.+?)\$\$|\\\[(?P<b>.+?)\\\]|\\\((?P<c>.+?)\\\)|(?<![\\$])\$(?!\$)(?P<d>[^$]+?)(?<!\\)\$",
    re.DOTALL,
)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def fenced_blocks(lines: list[str]) -> Iterator[tuple[re.Match[str], int, int]]:
    """(opening match, opening line, closing line) of each fenced code block, 0-based;
    the closing line is ``len(lines)`` for a block left open."""
    i = 0
    while i < len(lines):
        match = OPENING.match(lines[i])
        if not match or (match["fence"][0] == "`" and "`" in lines[i][match.end("fence") :]):
            i += 1
            continue
        fence = match["fence"]
        closing = re.compile(rf"^{re.escape(match['indent'])}{fence[0]}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        yield match, i, end
        i = end + 1


def without_fences(lines: list[str]) -> list[str]:
    """The lines with every fenced code block blanked (line numbers kept)."""
    out = list(lines)
    for _, start, end in fenced_blocks(lines):
        for j in range(start, min(end + 1, len(lines))):
            out[j] = ""
    return out


def prose(markdown: str) -> str:
    """Markdown without code: fences and inline code blanked, line breaks kept."""
    text = "\n".join(without_fences(markdown.split("\n")))
    return INLINE_CODE.sub(_blank, text)


def math_segments(text: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """(line of the segment's start, TeX) for every formula in prose ``text``."""
    for match in MATH.finditer(text):
        body = next(group for group in match.groups() if group is not None)
        start = match.start() + match.group(0).index(body)
        yield first_line + text.count("\n", 0, start), body


def markdown_cells(source: str) -> str:
    """A jupytext percent script's Markdown cells, '# ' removed; other lines empty."""
    lines = source.split("\n")
    out = [""] * len(lines)
    markdown = False
    for i, line in enumerate(lines):
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
        elif markdown and (line.startswith("# ") or line == "#"):
            out[i] = line[2:]
    return "\n".join(out)


def docstrings(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of every docstring of a module."""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            constant = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            if constant and isinstance(first.value.value, str):
                yield first.value.lineno, first.value.value


# -- figure captions and figure text --------------------------------------------------------

# Calls whose string arguments a reader sees in or under a figure: a page's caption
# (publish; the explorers' figure_html), titles, axis labels and notes.
FIGURE_CALLS = frozenset(
    {
        "publish",
        "figure_html",
        "set_title",
        "set_xlabel",
        "set_ylabel",
        "suptitle",
        "supxlabel",
        "supylabel",
        "title",
        "xlabel",
        "ylabel",
        "text",
        "figtext",
        "annotate",
        "legend",
    }
)
# Keywords whose strings are drawn: ax.set(title=...), plot(..., label=...),
# colorbar(..., label=...), the package's plot functions' title=, head_titles=.
FIGURE_KEYWORDS = frozenset({"caption", "title", "xlabel", "ylabel", "label", "head_titles"})

# Figure text is Unicode, the rules read TeX: each symbol becomes its TeX command, and a
# run of subscript (superscript) letters one subscript (superscript): zᵢⱼ -> z_{ij}.
UNICODE_TEX = {
    "ℓ": r"\ell ",
    "∂": r"\partial ",
    "ℒ": r"\mathcal{L}",
    "ℋ": r"\mathcal{H}",
    "√": r"\sqrt ",
    "Σ": r"\sum ",
    "·": r" \cdot ",
    "×": r" \times ",
    "−": "-",
    "≈": r" \approx ",
    "≤": r" \le ",
    "≥": r" \ge ",
    "∈": r" \in ",
    "θ": r"\theta ",
    "ω": r"\omega ",
    "π": r"\pi ",
    "ε": r"\varepsilon ",
    "τ": r"\tau ",
    "β": r"\beta ",
    "λ": r"\lambda ",
}
SUBSCRIPTS = dict(zip("ᵢⱼₖₜₕₙₘₓₐₑₒᵥ₀₁₂₃₄₅₆₇₈₉", "ijkthnmxaeov0123456789", strict=True))
SUPERSCRIPTS = {"ᵀ": r"\top", "ᴼ": "O", "²": "2", "³": "3", "⁻": "-", "¹": "1"}


def unicode_to_tex(text: str) -> str:
    """Figure text with its Unicode mathematics written as TeX, for the rules."""
    for marks, prefix in ((SUBSCRIPTS, "_"), (SUPERSCRIPTS, "^")):
        run = "[" + "".join(marks) + "]+"
        text = re.sub(
            run,
            lambda m, marks=marks, prefix=prefix: (
                prefix
                + (
                    marks[m.group(0)]
                    if len(m.group(0)) == 1
                    else "{" + "".join(marks[c] for c in m.group(0)) + "}"
                )
            ),
            text,
        )
    return "".join(UNICODE_TEX.get(c, c) for c in text)


def _strings(node: ast.AST) -> list[str]:
    """The text of a string expression: literals, f-strings (each value as {}), lists."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
        return ["".join(str(part) for part in parts)]
    if isinstance(node, ast.List | ast.Tuple):
        return [text for element in node.elts for text in _strings(element)]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _strings(node.left) + _strings(node.right)
    return []


def figure_text(code: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """(line, text) of every caption and figure label that ``code`` passes to a call."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # not Python: a shell line, a traceback shown as text
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        values = list(node.args) if name in FIGURE_CALLS else []
        values += [k.value for k in node.keywords if k.arg in FIGURE_KEYWORDS]
        for value in values:
            for text in _strings(value):
                yield first_line + value.lineno - 1, text


CELL_HEADER = re.compile(r"^# %%(?P<options>.*)$")


def tutorial_captions(source: str) -> Iterator[tuple[int, str]]:
    """(line, caption) of every ``# %% caption="..."`` or ``captions=[...]`` header."""
    for number, line in enumerate(source.split("\n"), start=1):
        header = CELL_HEADER.match(line)
        if header and "caption" in header["options"]:
            options = header["options"].replace("[markdown]", "")
            call = ast.parse(f"cell({options.strip()})", mode="eval").body
            assert isinstance(call, ast.Call)
            for keyword in call.keywords:
                if keyword.arg in ("caption", "captions"):
                    yield from ((number, text) for text in _strings(keyword.value))


def markdown_figure_text(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of the figure text in a page's ``python`` blocks."""
    lines = source.split("\n")
    for match, start, end in fenced_blocks(lines):
        if match["lang"].lower() == "python":
            indent = match["indent"]
            body = [
                line[len(indent) :] if line.startswith(indent) else line
                for line in lines[start + 1 : end]
            ]
            yield from figure_text("\n".join(body), first_line=start + 2)


def lint_figures(where: str, texts: list[tuple[int, str]], everything: str) -> list[Finding]:
    """Findings of the mathematics rules in figure captions and figure text."""
    findings = []
    rules = [
        r
        for r in RULES
        if r.scope == "math"
        and r.applies_to(where)
        and not (r.unless_file_has is not None and r.unless_file_has.search(everything))
    ]
    for line, text in texts:
        tex = unicode_to_tex(text)
        for r in rules:
            findings += [
                Finding(where, line, r.name, m.group(0), r.fix) for m in r.pattern.finditer(tex)
            ]
    return findings


# -- the lint ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    where: str
    line: int
    rule: str
    text: str
    fix: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.rule}: {self.text!r} ({self.fix})"


def file_math(text: str) -> str:
    """All the formulas of prose ``text``, one after another."""
    return "\n".join(formula for _, formula in math_segments(text))


def lint_text(
    where: str, text: str, first_line: int = 1, whole_file: str | None = None
) -> list[Finding]:
    """Findings in prose ``text`` (Markdown with its code already removed); the rules
    that look at the whole file read ``whole_file``'s formulas (by default ``text``'s)."""
    findings = []
    everything = file_math(text) if whole_file is None else whole_file
    rules = [
        r
        for r in RULES
        if r.applies_to(where)
        and not (r.unless_file_has is not None and r.unless_file_has.search(everything))
    ]
    for line, formula in math_segments(text, first_line):
        for r in (r for r in rules if r.scope == "math"):
            for match in r.pattern.finditer(formula):
                at = line + formula.count("\n", 0, match.start())
                findings.append(Finding(where, at, r.name, match.group(0), r.fix))
    # Words next to a formula ("the loss \(\ell\)", "\(n\) layers").
    for r in (r for r in rules if r.scope == "prose"):
        for match in r.pattern.finditer(text):
            at = first_line + text.count("\n", 0, match.start())
            findings.append(Finding(where, at, r.name, match.group(0), r.fix))
    return findings


def lint_every_line(where: str, source: str) -> list[Finding]:
    """The rules that read code too (figure labels are drawn for the reader)."""
    findings = []
    for r in (r for r in RULES if r.scope == "everywhere" and r.applies_to(where)):
        for number, line in enumerate(source.split("\n"), start=1):
            for match in r.pattern.finditer(line):
                findings.append(Finding(where, number, r.name, match.group(0), r.fix))
    return findings


def without_retired_column(source: str) -> str:
    """The notation page with the last cell of its symbol table blanked: that column
    lists the retired symbols on purpose."""
    lines = source.split("\n")
    if SYMBOL_TABLE not in lines:
        return source
    start = lines.index(SYMBOL_TABLE)
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        if lines[i].startswith("|"):
            cut = lines[i].rstrip().rstrip("|").rindex("|")
            lines[i] = lines[i][: cut + 1]
    return "\n".join(lines)


def lint_markdown(where: str, source: str) -> list[Finding]:
    if where == NOTATION:
        source = without_retired_column(source)
    text = prose(source)
    figures = list(markdown_figure_text(source))
    return (
        lint_text(where, text)
        + lint_figures(where, figures, file_math(text))
        + lint_every_line(where, source)
    )


def lint_tutorial(where: str, source: str) -> list[Finding]:
    text = prose(markdown_cells(source))
    figures = list(tutorial_captions(source)) + list(figure_text(source))
    return (
        lint_text(where, text)
        + lint_figures(where, figures, file_math(text))
        + lint_every_line(where, source)
    )


def lint_module(where: str, source: str) -> list[Finding]:
    findings = []
    texts = [(first_line, prose(text)) for first_line, text in docstrings(source)]
    whole = "\n".join(file_math(text) for _, text in texts)
    for first_line, text in texts:
        findings += lint_text(where, text, first_line, whole_file=whole)
    findings += lint_figures(where, list(figure_text(source)), whole)
    return findings + lint_every_line(where, source)


def lint_file(path: Path) -> list[Finding]:
    where = path.relative_to(ROOT).as_posix()
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return lint_markdown(where, source)
    if path.is_relative_to(ROOT / "attention") or path in FIGURE_CODE:
        return lint_module(where, source)
    return lint_tutorial(where, source)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    return sorted(set(findings), key=lambda f: (f.where, f.line, f.rule, f.text))


# -- the tests -----------------------------------------------------------------------------


def test_the_sources_are_found():
    assert len(PAGES) > 30 and len(TUTORIALS) >= 11 and len(MODULES) >= 10
    assert ROOT / NOTATION in PAGES
    assert SYMBOL_TABLE in (ROOT / NOTATION).read_text().split("\n")


def test_the_math_is_found():
    # Guards the extraction: the site has thousands of formulas, in all three places.
    counts = {
        "pages": sum(len(list(math_segments(prose(p.read_text())))) for p in PAGES),
        "tutorials": sum(
            len(list(math_segments(prose(markdown_cells(t.read_text()))))) for t in TUTORIALS
        ),
        "docstrings": sum(
            len(list(math_segments(prose(text))))
            for m in MODULES
            for _, text in docstrings(m.read_text())
        ),
    }
    assert counts["pages"] > 1500 and counts["tutorials"] > 500 and counts["docstrings"] > 200, (
        counts
    )


def test_the_figure_text_is_found():
    # Guards the extraction of captions and figure text (counted when it was written:
    # 141 on the pages, 48 tutorial captions, 131 tutorial labels, 27 in the package
    # and the explorers).
    counts = {
        "pages": sum(len(list(markdown_figure_text(p.read_text()))) for p in PAGES),
        "tutorial captions": sum(len(list(tutorial_captions(t.read_text()))) for t in TUTORIALS),
        "tutorial labels": sum(len(list(figure_text(t.read_text()))) for t in TUTORIALS),
        "code": sum(len(list(figure_text(m.read_text()))) for m in MODULES + FIGURE_CODE),
    }
    assert counts["pages"] > 100 and counts["tutorial captions"] >= len(TUTORIALS), counts
    assert counts["tutorial labels"] > 100 and counts["code"] > 20, counts


def test_no_retired_title_in_the_nav_or_readme():
    for name in ("mkdocs.yml", "README.md"):
        findings = lint_every_line(name, (ROOT / name).read_text(encoding="utf-8"))
        assert not findings, "\n".join(map(str, findings))


SOURCES = PAGES + TUTORIALS + MODULES + FIGURE_CODE


@pytest.mark.parametrize("path", SOURCES, ids=[p.relative_to(ROOT).as_posix() for p in SOURCES])
def test_no_retired_symbol(path: Path) -> None:
    findings = [f for f in _dedupe(lint_file(path)) if (f.where, f.rule) not in PENDING]
    assert not findings, "retired symbols (see docs/concepts/notation.md):\n" + "\n".join(
        map(str, findings)
    )


def test_pending_exceptions_are_still_needed() -> None:
    fixed = [
        (where, name)
        for where, name in sorted(PENDING)
        if not any(f.rule == name for f in lint_file(ROOT / where))
    ]
    assert not fixed, f"fixed: remove these entries from PENDING: {fixed}"


# Every retired use, one per line, each in the kind of source where it was found.
SYNTHETIC_PAGE = r"""
# Why scale by √d_k
with scores \(s_j = q \cdot k_j\) and \(s_{ij}\), a block \(e^{s_b - m}\)
the scores \(S_{ij}\), or \(S = Q K^\top\)
\(Z = s\, Q K^\top\) and \(dQ = s\; dZ\, K\), with scale \(s\)
\(P_{ij} = e^{z_{ij}}\)
$$\operatorname{Attn}(PX) = P\,\operatorname{Attn}(X), \qquad P^\top P = I$$
the gradient \(\partial \ell / \partial V\), of the loss \(\ell\)
an accumulator \(\tilde o\)
$$a' = e^{m - m'}\,a + \textstyle\sum_j e^{z_j - m'} v_j, \qquad O = a / \ell$$
\(\operatorname{softmax}(z)_j = e^{z_j} / \sum_m e^{z_m}\)
\(\operatorname{LSE} = m + \log \ell\)
\(4 N^2 D\) values, inputs \(N \times D\)
after \(n\) layers, \(\ell\) stacked layers
a cache of \(2 \cdot \text{layers} \cdot S\) values
the entropy \(H(p) = -\sum_j p_j \log p_j\), \(H_i\), \(H \approx \log S\)
the paper's \(1/\sqrt{d_k}\)
the width \(E_{ctx}\)
$$\operatorname{CrossAttention}(Y, Z), \qquad Z \in \mathbb{R}^{S \times E}$$
scaled by \(1/(1-p)\)
linear attention: \(O(n M D_v)\), an \(M \times D_v\) state, \(M = D\)
a vocabulary of \(V = 52\) symbols, chance \(\ln V\), clipped at \(K\), \(2K + 1\)
the read-out gives \(V\) logits
matrices \(E\) and \(F\): \(\operatorname{softmax}(Q (EK)^\top) FV\), exact for \(E = I\)
\(x_0 + i x_1\) turned by \(e^{i m \theta}\), pair \(i\) by \(e^{i (m - n) \theta_i}\)
the scores \(e_{ij} = q_i \cdot k_j\)
$$H_\varepsilon = -(1 - \varepsilon) \ln (1 - \varepsilon)$$
ALiBi adds \(-m\,(i - j)\), \(- m \lvert i - j \rvert\), with slope \(m = 1/2\)
with the model's scale $s$, YaRN's \(0.1 \ln s + 1\) for an extension factor \(s\)
"""
# An approximate output written with the online softmax's tilde, on a page without
# that softmax (an l2 norm is not its denominator).
SYNTHETIC_APPROXIMATE = r"""
the error of an output \(\tilde{O}\), \(\lVert \tilde{O} - O \rVert\), \(\ell_2\)-normalised
"""
SYNTHETIC_CROSS = r"""
with \(Z \in \mathbb{R}^{S \times C}\), width \(C = 8\)
"""
SYNTHETIC_LABEL = 'ax.set_ylabel("median ‖∂ℓ/∂z‖")\n'

# Allowed: code, the running denominator, Bahdanau's decoder state, the l2 norm, braces.
SYNTHETIC_CLEAN = r"""
```python
s = q @ k.T  # s_j, S_{ij}, \partial \ell, H(p), d_k: code may say anything
```
`s_j` in inline code, and \(\ell = \sum_j e^{z_j - m}\), \(\ell_2\)-normalised,
\(\tilde{o}' = e^{m - m'}\,\tilde{o} + e^{z_j - m'} v_j\), \(o = \tilde{o} / \ell\),
\(\partial \mathcal{L} / \partial V\), \(\mathcal{H}(p)\), \(H_{kv} = H\), \(n^2 D\),
\(W s_{i-1} + U h_j\), \(\Pi X\), \(p_{ij}\), \(E_{\text{ctx}}\), \(N_{\text{layers}}\),
\(1/(1 - p_{\text{drop}})\), \(D_\phi \times D_v\), \(Z = Q K^\top \cdot \text{scale}\)
\(E = H D\), \(W \in \mathbb{R}^{E \times E}\), \((B, L, E)\), \(O(n^2 D)\), \(O(LSD)\),
\(N_{\text{vocab}} = 52\), \(\ln N_{\text{vocab}}\), \(2 d_{\max} + 1\), \(K^\top\),
\(U_K K\), \(\hat{O} - O\), \(e^{\mathrm{i} m \theta_t}\), \(x_0 + \mathrm{i}\, x_1\),
\(z_{ij}\), \(e^{z_i - m_i}\), \(\mathcal{H}_\varepsilon\), \(H_{kv} = 2\), \(H_q = 8\),
\(-m_h\,(i - j)\), slope \(m_h = 1/2\), \((m - m')\), \(e^{m - m'}\)
"""


def test_every_rule_flags_its_retired_use():
    findings = lint_markdown("docs/synthetic.md", SYNTHETIC_PAGE)
    findings += lint_tutorial(
        "docs/tutorials/06_cross_attention.py",
        "# %% [markdown]\n" + "\n".join(f"# {line}" for line in SYNTHETIC_CROSS.split("\n")),
    )
    findings += lint_tutorial("docs/tutorials/99_synthetic.py", "# %%\n" + SYNTHETIC_LABEL)
    findings += lint_markdown("docs/synthetic_approximate.md", SYNTHETIC_APPROXIMATE)
    flagged = {f.rule for f in findings}
    missing = [r.name for r in RULES if r.name not in flagged]
    assert not missing, f"rules that flag nothing in their own example: {missing}"
    # Findings carry the file, the line and the offending text: s_j is on line 3.
    s_j = next(f for f in findings if f.text == "s_j")
    assert str(s_j).startswith("docs/synthetic.md:3: scores written s: 's_j'")


def test_code_and_allowed_uses_are_not_flagged():
    assert lint_markdown("docs/synthetic.md", SYNTHETIC_CLEAN) == []
    # d_k is allowed where the paper is mapped, C outside cross-attention pages.
    assert lint_markdown("docs/concepts/notation.md", r"the paper's \(d_k\)") == []
    assert lint_markdown("docs/concepts/variants.md", r"chunks of \(C\) rows") == []
    # Bahdanau's e_ij where his paper is quoted; the online softmax's tilde beside its ell.
    quoted = r"\(e_{ij} = v^\top \tanh(W s_{i-1} + U h_j)\)"
    assert lint_markdown("docs/concepts/similarity-to-attention.md", quoted) == []
    assert [f.rule for f in lint_markdown("docs/synthetic.md", quoted)] == ["scores written e"]
    online = r"\(\tilde{O}\) and its \(\ell\), and at the end \(O = \tilde{O} / \ell\)"
    assert lint_markdown("docs/synthetic.md", online) == []
    # A tutorial's code cells are code; its Markdown cells are prose.
    tutorial = "# %%\nH = 2  # H(p) = entropy? no: heads\n# %% [markdown]\n# \\(H(p)\\)\n"
    assert [(f.line, f.rule) for f in lint_tutorial("docs/tutorials/99_x.py", tutorial)] == [
        (4, "entropy written H")
    ]


# Captions and figure text, in Unicode: a page's block and a tutorial's caption header.
SYNTHETIC_FIGURE_PAGE = """
Text.

```python exec="on" html="1"
ax.set_xlabel("score sⱼ")  # line 5
ax.set(title="weights Pᵢⱼ", ylabel="H(p)")
print("sⱼ, H(p)")  # printed, not drawn: not read here
from docs_build.figures import publish  # markdown-exec: hide
publish(fig, f"The {n} rows, W_Q = W_K = 3I, ‖∂ℒ/∂q‖ at S = QKᵀ / √D")  # markdown-exec: hide
```
"""
SYNTHETIC_FIGURE_TUTORIAL = """# %% [markdown]
# Text.

# %% caption="Entropy H(p) of each row; the online softmax's o / ℓ."
fig, ax = plt.subplots()
ax.plot(x, y, label=f"step {t}: zᵢⱼ, not sᵢⱼ")
"""


def test_figure_captions_and_text_are_read():
    page = [(f.line, f.rule, f.text) for f in lint_markdown("docs/x.md", SYNTHETIC_FIGURE_PAGE)]
    assert sorted(page) == [
        (5, "scores written s", "s_j"),
        (6, "entropy written H", "H(p"),
        (6, "weight entries written P_ij", "P_{ij}"),
        (9, "scores written S", "S = QK^"),
    ]
    tutorial = lint_tutorial("docs/tutorials/99_x.py", SYNTHETIC_FIGURE_TUTORIAL)
    assert sorted((f.line, f.rule) for f in tutorial) == [
        (4, "accumulator written a or o"),
        (4, "entropy written H"),
        (6, "scores written s"),
    ]
    assert unicode_to_tex("zᵢⱼ, QKᵀ, ∂ℒ, N²") == r"z_{ij}, QK^\top, \partial \mathcal{L}, N^2"


def test_docstring_lines_are_the_file_lines():
    source = 'def f():\n    r"""Sum.\n\n    $$H(p) = 0$$\n    """\n'
    [finding] = lint_module("attention/x.py", source)
    assert (finding.line, finding.text) == (4, "H(p")


def test_the_reserved_letters_point_to_the_notation_page():
    # Each rule on a reserved letter asks for a symbol the notation page defines.
    notation = (ROOT / NOTATION).read_text(encoding="utf-8")
    registered = {r.name: r.registered for r in RULES if r.registered}
    assert len(registered) >= 10
    missing = {
        name: [symbol for symbol in symbols if symbol not in notation]
        for name, symbols in registered.items()
        if any(symbol not in notation for symbol in symbols)
    }
    assert not missing, f"symbols the notation page does not define: {missing}"

"""Find the code blocks of the docs: in the Markdown sources and on the built pages.

Shared by the tests that run code blocks (``test_snippets``, ``test_built_snippets``,
``test_exec_output``) and the clipboard test (``test_copy``).

The built pages are read with the standard library's HTML parser into a minimal tree,
so the tests depend on nothing that the site's own build may stop installing.
"""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from tests.conftest import ROOT

# -- Markdown sources ----------------------------------------------------------------

OPENING = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*\{?\.?(?P<lang>[\w+-]*)(?P<info>.*)$"
)


@dataclass(frozen=True)
class Fence:
    """One fenced code block of a Markdown file, dedented."""

    path: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    options: dict[str, str] = field(default_factory=dict)  # exec="on" source="block" ...


def markdown_fences(path: Path, languages: set[str]) -> list[Fence]:
    """Return the fenced code blocks of a Markdown file whose language is in ``languages``.

    Fences are found by hand rather than with a CommonMark parser because Material's
    content tabs and admonitions indent their fences by four spaces, which CommonMark
    would read as an indented code block.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    fences: list[Fence] = []
    i = 0
    while i < len(lines):
        match = OPENING.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match["indent"], match["fence"], match["lang"].lower()
        if fence[0] == "`" and "`" in lines[i][match.end("fence") :]:
            i += 1  # CommonMark: not a fence but inline code that starts the line
            continue
        closing = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        if lang in languages:
            body = "\n".join(
                line[len(indent) :] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1 : end]
            )
            info = match["info"].strip().rstrip("}")
            options = dict(
                word.split("=", 1) if "=" in word else (word, "") for word in shlex.split(info)
            )
            fences.append(Fence(path, i + 2, lang, textwrap.dedent(body) + "\n", options))
        i = end + 1
    return fences


# -- Built pages -----------------------------------------------------------------------

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


@dataclass(eq=False)
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Element | None = None
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self) -> Iterator[Element]:
        """This element and every element below it, in document order."""
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def ancestors(self) -> Iterator[Element]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def next_element(self) -> Element | None:
        """The next sibling that is an element (text between them is skipped)."""
        if self.parent is None:
            return None
        siblings = self.parent.children
        for sibling in siblings[siblings.index(self) + 1 :]:
            if isinstance(sibling, Element):
                return sibling
        return None


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, self.stack[-1])
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        # Close up to the matching open element; a stray end tag is ignored.
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


@dataclass(frozen=True)
class CodeBlock:
    """A highlighted code block on a built page, as a reader would copy it."""

    page: str  # path of the page relative to the site, e.g. "reference/masks/index.html"
    index: int  # position among the page's Python and pycon blocks, from 0
    lang: str  # "python" or "pycon"
    copied: str  # what the copy button puts on the clipboard
    element: Element = field(repr=False, compare=False)  # the div.highlight

    @property
    def id(self) -> str:
        return f"{self.page}#{self.index}"

    @property
    def doctest_style(self) -> bool:
        return self.lang == "pycon"

    def head(self, lines: int = 6) -> str:
        return "\n".join(self.copied.splitlines()[:lines])


def copied_text(code: Element, *, console: bool) -> str:
    """The text Material's copy button yields for this ``<code>`` element.

    Material copies ``innerText`` with ``data-md-copying`` set on the element; the copy
    section of our ``site.css`` then hides, in a console (``pycon``) block, every prompt
    (``.gp``) and every line that has no prompt (its output). So the clipboard holds the
    code lines with ``>>> `` / ``... `` removed and their indentation intact. Material
    trims the trailing whitespace. This function computes the same from the HTML: the
    browser test checks that the two agree on every block.
    """
    if not console:
        return code.text().rstrip()
    # Walk the leaves in order, remembering which text is a prompt; then keep the lines
    # that had one, without it.
    lines: list[list[str]] = [[]]
    prompted: list[bool] = [False]

    def walk(node: Element) -> None:
        for child in node.children:
            if isinstance(child, Element):
                if "gp" in child.classes:
                    prompted[-1] = True
                    if "\n" in child.text():  # never seen: a prompt ends its line
                        raise ValueError(f"prompt spanning lines: {child.text()!r}")
                    continue
                walk(child)
                continue
            for n, piece in enumerate(child.split("\n")):
                if n:
                    lines.append([])
                    prompted.append(False)
                lines[-1].append(piece)

    walk(code)
    kept = ["".join(parts) for parts, has_prompt in zip(lines, prompted, strict=True) if has_prompt]
    return "\n".join(kept).rstrip()


def built_code_blocks(site: Path, page: Path) -> list[CodeBlock]:
    """Every Python (``language-python``) and console (``language-pycon``) block of a page.

    mkdocstrings' signature blocks (``doc-signature``) are headings, not code to run,
    and are left out. Each block carries the text its copy button yields.
    """
    root = parse_html(page.read_text(encoding="utf-8"))
    blocks: list[CodeBlock] = []
    for element in root.iter():
        classes = element.classes
        if element.tag != "div" or "highlight" not in classes or "doc-signature" in classes:
            continue
        lang = next((c.removeprefix("language-") for c in classes if c.startswith("language-")), "")
        if lang not in {"python", "pycon"}:
            continue
        code = next(e for e in element.iter() if e.tag == "code")
        blocks.append(
            CodeBlock(
                page=page.relative_to(site).as_posix(),
                index=len(blocks),
                lang=lang,
                copied=copied_text(code, console=lang == "pycon"),
                element=element,
            )
        )
    return blocks


def in_notebook_cell(block: CodeBlock) -> bool:
    return any("nb-cell" in a.classes for a in block.element.ancestors())


def in_api_source(block: CodeBlock) -> bool:
    """Inside mkdocstrings' collapsible "Source code in attention/....py"."""
    return any("mkdocstrings-source" in a.classes for a in block.element.ancestors())


TUTORIAL_PAGE = re.compile(r"^tutorials/\d\d_[^/]+/")


def site_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


# -- Executed blocks: the Markdown source beside what the built page shows --------------

# Code that reads a clock (or a profiler's times): what it prints differs on every run.
READS_CLOCK = re.compile(
    r"\b(thread_time|process_time|perf_counter|monotonic|timeit|Timer|profile)\(|\btime\.time\("
)

HIDE = "markdown-exec: hide"


def is_on(value: str | None) -> bool:
    """markdown-exec's reading of a boolean option (``exec="on"``, ``html="1"``...)."""
    return value is not None and value.lower() not in {"", "no", "off", "false", "0"}


def shown_source(code: str) -> str:
    """The source markdown-exec displays: without the lines marked to hide."""
    lines = code.split("\n")
    return "\n".join(line for line in lines if HIDE not in line).strip()


@dataclass
class ExecBlock:
    fence: Fence
    result: Element | None  # the <div class="result"> under the shown source

    @property
    def id(self) -> str:
        return f"{self.fence.path.relative_to(ROOT)}:{self.fence.line}"

    @property
    def compared(self) -> bool:
        """Whether its output is shown as text, and so compared with a fresh run."""
        options = self.fence.options
        return bool(options.get("result")) and not is_on(options.get("html"))


def exec_blocks(site: Path, source: Path) -> list[ExecBlock]:
    """The page's exec blocks, each paired with the result the built page shows for it.

    A block that shows its source is found on the page by that source (its copy text),
    in order; the ``<div class="result">`` right after it holds its output.
    """
    fences = [f for f in markdown_fences(source, {"python", "py"}) if is_on(f.options.get("exec"))]
    html = site / "concepts" / ("" if source.stem == "index" else source.stem) / "index.html"
    shown = [
        (block, after)
        for block in built_code_blocks(site, html)
        if block.lang == "python"
        and (after := block.element.next_element()) is not None
        and "result" in after.classes
    ]
    blocks, position = [], 0
    for fence in fences:
        if not fence.options.get("source"):
            blocks.append(ExecBlock(fence, None))
            continue
        want = shown_source(fence.code)
        for i in range(position, len(shown)):
            if shown[i][0].copied == want:
                blocks.append(ExecBlock(fence, shown[i][1]))
                position = i + 1
                break
        else:
            raise ValueError(f"{source.name}:{fence.line}: the built page does not show this block")
    return blocks


def hidden_names_used(code: str) -> set[str]:
    """Names that lines marked ``# markdown-exec: hide`` bind and shown lines use.

    The build runs the hidden lines, a reader copies the block without them: the copy
    behaves as the build's run only if the hidden lines define nothing it reads.
    """
    lines = code.split("\n")
    bound: set[str] = set()
    for line in (line.strip() for line in lines if HIDE in line):
        try:
            tree = ast.parse(line)
        except SyntaxError:  # the head of a compound statement: binds its target
            tree = ast.parse(line.rstrip(":").split("#")[0] + ": pass")
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    shown = [node for node in ast.walk(ast.parse(shown_source(code))) if isinstance(node, ast.Name)]
    # Read by the shown code and not bound by it: it would come from the hidden lines.
    used = {n.id for n in shown if isinstance(n.ctx, ast.Load)}
    used -= {n.id for n in shown if isinstance(n.ctx, ast.Store)}
    return bound & used

"""What a concept page shows under an executed block is what that block prints.

markdown-exec runs each ```` ```python exec="on" ``` ```` block at build time and puts
what it printed on the page. It captures output by handing the block its own ``print``,
which honours ``end=`` but drops ``sep=`` (and ``file=``): ``print("P:", P, sep="\\n")``
shows as ``P: tensor(...)`` on one line. And every block runs in the one long build
process, so a block could lean on state (print options, default dtype, random state)
that an earlier block left behind: the page would then show what the reader, running the
block, does not get.

So here each exec block of ``docs/concepts/*.md`` runs as a plain script: real
``print``, a fresh namespace in a fresh process (``_forkrun``), the lines marked
``# markdown-exec: hide`` included as the build runs them. Blocks that share a
``session="..."`` share one namespace, in page order, as markdown-exec does. Its standard
output must equal the text of the code block in the ``<div class="result">`` that
follows the block's source on the built page (trailing spaces and blank lines at either
end ignored).

Compared: blocks with ``result="..."`` (output shown as a code block). Not compared:
``html="1"`` blocks (their output is raw HTML: figures, SVG) and blocks without
``result`` (their output is Markdown, rendered into the page), and blocks that do not
show their source (nothing to pair them with on the page).

Blocks that read a clock print different numbers on every run: for those, numbers (and
lists of numbers) are masked and runs of spaces collapsed, so labels, line breaks and
separators, which is what a dropped ``sep`` breaks, must still match.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from _codeblocks import Element, Fence, built_code_blocks, markdown_fences
from _forkrun import run_programs

ROOT = Path(__file__).resolve().parents[2]
CONCEPTS = sorted((ROOT / "docs" / "concepts").glob("*.md"))
# What markdown-exec's print does not honour (it honours ``end``).
IGNORED_BY_MARKDOWN_EXEC = {"sep", "file", "flush"}
CLOCK = re.compile(r"\b(perf_counter|monotonic|process_time|thread_time|timeit|Timer|time\.time)\b")


def is_on(value: str | None) -> bool:
    """markdown-exec's reading of a boolean option (``exec="on"``, ``html="1"``...)."""
    return value is not None and value.lower() not in {"", "no", "off", "false", "0"}


def shown_source(code: str) -> str:
    """The source markdown-exec displays: without the lines marked to hide."""
    lines = code.split("\n")
    return "\n".join(line for line in lines if "markdown-exec: hide" not in line).strip()


@dataclass
class ExecBlock:
    fence: Fence
    result: Element | None  # the <div class="result"> under the shown source

    @property
    def id(self) -> str:
        return f"{self.fence.path.relative_to(ROOT)}:{self.fence.line}"

    @property
    def compared(self) -> bool:
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
            pytest.fail(f"{source.name}:{fence.line}: the built page does not show this block")
    return blocks


def normalise(text: str, *, clock: bool) -> str:
    text = "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))
    if clock:
        text = re.sub(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", "#", text)
        text = re.sub(r"\[(?:#(?:, #)*)?\]", "[#]", text)  # a list of measured values
        text = re.sub(r"[ \t]+", " ", text)
    return text


def test_executed_output_on_the_page_is_what_the_code_prints(built_site: Path) -> None:
    programs: list[list[ExecBlock]] = []
    for source in CONCEPTS:
        sessions: dict[str, list[ExecBlock]] = {}
        for block in exec_blocks(built_site, source):
            session = block.fence.options.get("session")
            if session:
                if session not in sessions:
                    sessions[session] = []
                    programs.append(sessions[session])
                sessions[session].append(block)
            elif block.compared:
                programs.append([block])
    # A session runs whole only if one of its blocks is compared.
    programs = [p for p in programs if any(b.compared for b in p)]
    compared = [b for p in programs for b in p if b.compared]
    # Guards the pairing: most concept-page output is text (over a hundred blocks).
    assert len(compared) >= 80, len(compared)

    results = run_programs(
        [[b.fence.code for b in program] for program in programs],
        names=[program[0].id for program in programs],
    )
    problems = []
    for program, result in zip(programs, results, strict=True):
        if not result.ok:
            problems.append(f"{program[0].id}: fails when run as a script:\n{result.error}")
            continue
        for block, printed in zip(program, result.outputs, strict=True):
            if not block.compared:
                continue
            assert block.result is not None
            shown = next(e for e in block.result.iter() if e.tag == "code").text()
            clock = bool(CLOCK.search(block.fence.code))
            if normalise(printed, clock=clock) != normalise(shown, clock=clock):
                problems.append(
                    f"{block.id}: the page shows\n{shown}\nbut the block prints\n{printed}"
                )
    assert not problems, "\n\n".join(problems)


def test_masking_keeps_what_a_dropped_sep_breaks():
    shown = "weights: tensor([0.5000, 0.5000])\nn = 128  1.25 ms"
    printed = "weights:\ntensor([0.5000, 0.5000])\nn = 128   11.50 ms"
    assert normalise(shown, clock=True) != normalise(printed, clock=True)
    assert normalise("n = 128  1.25 ms [1, 2]", clock=True) == normalise(
        "n = 128   11.50 ms []", clock=True
    )
    assert normalise("a  1.25\n", clock=False) != normalise("a  1.26", clock=False)


def test_no_executed_block_passes_print_an_argument_markdown_exec_ignores():
    # A static check over every exec block of the docs, figures and benchmarks included
    # (which the comparison above does not run): cheap, and it says what to fix.
    pages = sorted((ROOT / "docs").rglob("*.md"))
    blocks = [f for p in pages for f in markdown_fences(p, {"python", "py"})]
    blocks = [f for f in blocks if is_on(f.options.get("exec"))]
    assert len(blocks) > 100
    offending = [
        f"{f.path.relative_to(ROOT)}:{f.line + node.lineno - 1}: print(..., {kw.arg}=...)"
        for f in blocks
        for node in ast.walk(ast.parse(f.code))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
        for kw in node.keywords
        if kw.arg in IGNORED_BY_MARKDOWN_EXEC
    ]
    assert not offending, (
        "markdown-exec's print ignores these arguments, so the page would not show what "
        "the code prints; write the separator into the text instead:\n" + "\n".join(offending)
    )

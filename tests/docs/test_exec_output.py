"""What a concept page shows under an executed block is what that block prints.

markdown-exec runs each ```` ```python exec="on" ``` ```` block at build time and puts
what it printed on the page. It captures output by handing the block its own ``print``,
which honours ``end=`` but drops ``sep=`` (and ``file=``): ``print("P:", P, sep="\\n")``
shows as ``P: tensor(...)`` on one line. And every block runs in the one long build
process, so a block could lean on state (print options, default dtype, random state)
that an earlier block left behind: the page would then show what the reader, running the
block, does not get.

So here each exec block of ``docs/concepts/*.md`` runs as a plain script, as a reader on
another machine runs it: real ``print``, a fresh namespace in a fresh process
(``_forkrun``), torch's default thread count (the build runs the pages on one thread),
ATen's portable kernels (``ATEN_CPU_CAPABILITY=default``, as another processor sums in
another order), and the lines marked ``# markdown-exec: hide`` included as the build
runs them. A page that printed float noise (``0.0e+00`` in the build, ``3.0e-08`` here)
fails: print such a figure rounded to what the claim needs. Blocks that share a
``session="..."`` share one namespace, in page order, as markdown-exec does. Its standard
output must equal the text of the code block in the ``<div class="result">`` that
follows the block's source on the built page (trailing spaces and blank lines at either
end ignored).

Compared: blocks with ``result="..."`` (output shown as a code block). Not compared:
``html="1"`` blocks (their output is raw HTML: figures, SVG) and blocks without
``result`` (their output is Markdown, rendered into the page), and blocks that do not
show their source (nothing to pair them with on the page).

Blocks that read a clock print other numbers on every run, and sentences whose words
are chosen by those numbers ("faster", "grew about linearly"): they run here, and must
run cleanly, but their output is not compared. What a dropped ``sep`` would break in
them is checked on the source instead (the last test below).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT
from tests.docs._codeblocks import READS_CLOCK, ExecBlock, exec_blocks, is_on, markdown_fences
from tests.docs._forkrun import run_programs

CONCEPTS = sorted((ROOT / "docs" / "concepts").glob("*.md"))
# What markdown-exec's print does not honour (it honours ``end``).
IGNORED_BY_MARKDOWN_EXEC = {"sep", "file", "flush"}


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))


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
        env={"ATEN_CPU_CAPABILITY": "default"},
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
            if READS_CLOCK.search(block.fence.code):
                continue  # ran cleanly; its numbers, and words, are this run's
            if normalise(printed) != normalise(shown):
                problems.append(
                    f"{block.id}: the page shows\n{shown}\nbut the block prints\n{printed}"
                )
    assert not problems, "\n\n".join(problems)


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

"""Timings taken while the site is built measure the code, and the text beside them is checked.

Concept pages (markdown-exec), the live section of the performance page and some
tutorials time code at build time and write about the result ("the cache wins by more
as t grows", "slope near 2"). The site is built on a shared 2-core machine, where
the tutorials' kernels run while the Markdown pages render. Wall-clock time there
measures that other work as much as the code: with two threads, every parallel step waits for both,
and a thread that loses its core stalls the other, so a busy machine slows a loop of
many small steps about ten times more than one fused call. A page built that way once
said "the slopes fall below 2" next to measured slopes of 2.9 and 3.6.

So a build-time timing follows four rules, checked here on the sources:

* a page that times code says so in its front matter (``measures_time: true``): the
  build then renders it once at most one tutorial kernel still runs, so that it has
  a core to itself;

* it reads the CPU time of one thread (``time.thread_time``) with torch on one thread,
  which counts the work of the call and not the waiting; a concept page runs in the
  one MkDocs process, so it sets the thread count back afterwards;
* the claims the text makes about it are asserted in the block or cell itself, with
  tolerances for a busy machine (a concept-page block may instead hand its numbers to
  a later block of the same ``session``, which prints the sentences);
* a tutorial cell that only prints an elapsed time may use any clock (nothing is
  said about it), but one that asserts on timings, or compares them, follows the
  first two rules.

Whether the assertions hold is checked by running the pages (``test_exec_output``,
``test_tutorials``) and by the strict build.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest
from _codeblocks import markdown_fences

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs" / "concepts").glob("*.md")), ROOT / "docs" / "performance.md"]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))

WALL_CLOCK = re.compile(r"\b(perf_counter|monotonic|timeit|Timer)\b|\btime\.time\(")
CPU_CLOCK = re.compile(r"\bthread_time\(")
ONE_THREAD = re.compile(r"\bset_num_threads\(\s*1\s*\)")
RESTORE = re.compile(r"\bset_num_threads\(\s*(?!1\s*\))\w+\s*\)")
ASSERTS = re.compile(r"^\s*assert\b|\bassert_close\(", re.MULTILINE)


@dataclass(frozen=True)
class Code:
    """One executed block or notebook cell, with where it comes from."""

    where: str
    code: str
    session: str | None = None
    one_thread_before: bool = False  # a tutorial set one thread in an earlier cell


def page_blocks(path: Path) -> list[Code]:
    """The ``exec="on"`` Python blocks of a Markdown page."""
    return [
        Code(f"{path.relative_to(ROOT)}:{fence.line}", fence.code, fence.options.get("session"))
        for fence in markdown_fences(path, {"python", "py"})
        if fence.options.get("exec", "").lower() in {"on", "1", "true", "yes"}
    ]


def tutorial_cells(path: Path) -> list[Code]:
    """The code cells of a jupytext percent script."""
    cells: list[Code] = []
    one_thread = False
    chunks = re.split(r"^# %%.*$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    headers = re.findall(r"^# %%.*$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    line = 1 + chunks[0].count("\n")
    for header, body in zip(headers, chunks[1:], strict=True):
        if "[markdown]" not in header:
            where = f"{path.relative_to(ROOT)}:{line}"
            cells.append(Code(where, body, one_thread_before=one_thread))
            one_thread = one_thread or bool(ONE_THREAD.search(body))
        line += 1 + body.count("\n")
    return cells


def in_this_process(code: str) -> str:
    """The code with its string literals emptied: what this process itself runs."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code  # not Python the tokenizer can read: check all of it
    strings = [t for t in tokens if t.type == tokenize.STRING]
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = code
    for token in reversed(strings):  # from the end, so earlier offsets stay valid
        begin = starts[token.start[0] - 1] + token.start[1]
        end = starts[token.end[0] - 1] + token.end[1]
        out = out[:begin] + '""' + out[end:]
    return out


def problems_of_page_block(block: Code) -> list[str]:
    """Why a concept-page block that reads a clock breaks the rules (empty: it doesn't)."""
    problems = []
    if WALL_CLOCK.search(block.code):
        problems.append("reads a wall clock: time with time.thread_time on one thread")
    if CPU_CLOCK.search(block.code):
        # The build's own thread count matters only where this process sets it: a
        # program passed as a string to a child Python keeps its setting to itself.
        here = in_this_process(block.code)
        if not ONE_THREAD.search(block.code):
            problems.append("reads thread_time without torch.set_num_threads(1)")
        elif (one := ONE_THREAD.search(here)) and not RESTORE.search(here[one.end() :]):
            problems.append("sets one thread and never sets the count back")
        if not ASSERTS.search(block.code) and block.session is None:
            problems.append("times code but asserts nothing about the numbers")
    return problems


def problems_of_tutorial_cell(cell: Code) -> list[str]:
    """Why a tutorial cell that reads a clock breaks the rules (empty: it doesn't)."""
    asserts = bool(ASSERTS.search(cell.code))
    problems = []
    if WALL_CLOCK.search(cell.code) and asserts:
        problems.append("asserts on wall-clock times: use time.thread_time on one thread")
    if CPU_CLOCK.search(cell.code):
        if not (cell.one_thread_before or ONE_THREAD.search(cell.code)):
            problems.append("reads thread_time without torch.set_num_threads(1)")
        if not asserts:
            problems.append("times code but asserts nothing about the numbers")
    return problems


BLOCKS = [block for page in PAGES for block in page_blocks(page)]
CELLS = [cell for tutorial in TUTORIALS for cell in tutorial_cells(tutorial)]


def test_the_timing_code_is_found():
    # Guards the extraction: these pages and tutorials time code at build today.
    timed_pages = {b.where.split(":")[0] for b in BLOCKS if CPU_CLOCK.search(b.code)}
    assert {
        "docs/concepts/complexity.md",
        "docs/concepts/masks.md",
        "docs/concepts/variants.md",
        "docs/performance.md",
    } <= timed_pages
    timed_tutorials = {c.where.split(":")[0] for c in CELLS if CPU_CLOCK.search(c.code)}
    assert "docs/tutorials/10_generating_with_a_kv_cache.py" in timed_tutorials


def test_pages_that_time_code_are_rendered_on_quiet_cores():
    from mkdocs.utils.meta import get_data

    timed = sorted({b.where.split(":")[0] for b in BLOCKS if CPU_CLOCK.search(b.code)})
    undeclared = [
        page
        for page in timed
        if not get_data((ROOT / page).read_text(encoding="utf-8"))[1].get("measures_time")
    ]
    assert not undeclared, f"time code without `measures_time: true`: {undeclared}"


def test_page_timings_measure_the_work_and_check_the_text():
    problems = [f"{b.where}: {p}" for b in BLOCKS for p in problems_of_page_block(b)]
    assert not problems, "\n".join(problems)


def test_tutorial_timings_that_assert_measure_the_work():
    problems = [f"{c.where}: {p}" for c in CELLS for p in problems_of_tutorial_cell(c)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("code", "session", "expected"),
    [
        # what the complexity page used to do: two threads, wall clock, no check
        ("t = time.perf_counter()\nf()\nprint(time.perf_counter() - t)\n", None, "wall clock"),
        ("t = time.thread_time()\nf()\nassert t\n", None, "set_num_threads(1)"),
        (
            "torch.set_num_threads(1)\nt = time.thread_time()\nassert t\n",
            None,
            "never sets the count back",
        ),
        (
            "n = torch.get_num_threads()\ntorch.set_num_threads(1)\n"
            "t = time.thread_time()\ntorch.set_num_threads(n)\nprint(t)\n",
            None,
            "asserts nothing",
        ),
    ],
)
def test_the_rules_catch_what_they_are_for(code: str, session: str | None, expected: str):
    problems = problems_of_page_block(Code("example", code, session))
    assert any(expected in problem for problem in problems), problems


def test_the_rules_accept_a_good_block():
    good = (
        "threads = torch.get_num_threads()\ntorch.set_num_threads(1)\n"
        "start = time.thread_time()\nf()\nseconds = time.thread_time() - start\n"
        "torch.set_num_threads(threads)\nassert seconds < 1\n"
    )
    assert problems_of_page_block(Code("example", good)) == []
    # its numbers read by a later block of the same session: no assert needed here
    shared = good.replace("assert seconds < 1\n", "")
    assert problems_of_page_block(Code("example", shared, session="live")) == []
    # one thread set only in a program a child Python runs: nothing to set back here
    child = (
        'PROGRAM = """\ntorch.set_num_threads(1)\nt = time.thread_time()\n"""\n'
        "assert run(PROGRAM)\n"
    )
    assert problems_of_page_block(Code("example", child)) == []
    assert problems_of_tutorial_cell(Code("example", "t = time.perf_counter()\n")) == []
    assert (
        problems_of_tutorial_cell(
            Code("example", good.replace("torch.set_num_threads(1)\n", ""), one_thread_before=True)
        )
        == []
    )

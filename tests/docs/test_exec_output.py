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
import re
from pathlib import Path

import pytest

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


# A number as Python prints it: 12, -0.5, 3.0e-08, 1e-06, 2.4E+3 (a full stop may follow).
PRINTED_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?!\w|\.\d)")
# Words that make the number after them a bound: "below 1e-6", "< 1e-5", "within 1e-12".
BOUND_BEFORE = re.compile(r"(?:<|<=|≤|\bbelow|\bunder|\bwithin|\bat most|\bless than)\s*$", re.I)
# The comment that says why a block's small numbers are not rounding errors.
NOT_ROUNDING = re.compile(r"#\s*Not rounding:\s*\S")
SMALL = 1e-4


def significant_digits(token: str) -> int:
    mantissa = re.split(r"[eE]", token.lstrip("+-"))[0].replace(".", "").lstrip("0")
    return max(len(mantissa), 1)


def code_numbers(code: str) -> set[float]:
    """The numbers the code writes as literals: its parameters and its bounds."""
    return {
        float(node.value)
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
        and node.value != 0
    }


def rounding_digits(line: str, literals: set[float]) -> list[str]:
    """The numbers of an output line that look like a rounding error's digits."""
    found = []
    for match in PRINTED_NUMBER.finditer(line):
        token = match.group()
        value = float(token)
        if value == 0 or abs(value) >= SMALL:
            continue  # exact zero, or large enough to be no rounding error
        if BOUND_BEFORE.search(line[: match.start()]):
            continue  # "below 1e-6": a bound, the same on every machine
        digits = significant_digits(token)
        if any(float(f"{c:.{digits - 1}e}") == value for c in literals):
            continue  # a number the code states: a tolerance, eps, a learning rate
        found.append(token)
    return found


def test_no_compared_block_prints_a_rounding_error(built_site: Path) -> None:
    """The output compared above shows no rounding error's digits, on any page.

    A rounding error (``max |a - b|`` of two computations that agree in exact
    arithmetic) has digits that depend on the order of the sums: the processor, its
    vector width and the thread count. ``torch causal_lower_right   2.38e-07`` in the
    build was ``1.79e-07`` on ATen's portable kernels, so the comparison above failed on
    another machine, though not on the one the page was written on. So this test does
    not wait for a machine that differs: it reads every compared block's output in the
    built site and flags each printed number ``x`` with ``0 < |x| < 1e-4``, except:

    * a **bound**: the number follows ``<``, ``<=``, ``≤``, ``below``, ``under``,
      ``within``, ``at most`` or ``less than`` (``below 1e-6: True``);
    * a number **the code writes**: equal, to the digits printed, to a literal of the
      block's source (a tolerance ``atol=2e-6``, ``eps = 1e-6``, a learning rate), since
      it is a parameter, not a result;
    * a block that says why its small numbers are not rounding, in a comment that starts
      ``# Not rounding:`` and gives the reason (a truncation error, a probability of a
      far-away key, ``finfo.eps``, a vanishing gradient): their leading digits are the
      same on every machine, and a reviewer reads the reason.

    Zero is exact. What a rounding error may print instead: the value rounded to what
    the claim needs, or ``below <bound>`` with the bound asserted. Blocks that read a
    clock are not compared, so not read here. (The tutorials are not compared either:
    ``test_other_machines`` runs them as scripts, and several show the size of a
    rounding error on purpose.)
    """
    flagged = []
    for source in CONCEPTS:
        for block in exec_blocks(built_site, source):
            if not block.compared or READS_CLOCK.search(block.fence.code):
                continue
            if NOT_ROUNDING.search(block.fence.code):
                continue
            assert block.result is not None
            shown = next(e for e in block.result.iter() if e.tag == "code").text()
            literals = code_numbers(block.fence.code)
            flagged += [
                f"{block.id}: {line.strip()}  <- {', '.join(numbers)}"
                for line in shown.splitlines()
                if (numbers := rounding_digits(line, literals))
            ]
    assert not flagged, (
        "These compared blocks print a number below 1e-4 that looks like a rounding "
        "error, whose digits change with the processor and the thread count. Print it "
        "rounded to what the claim needs, or as 'below <bound>' with the bound asserted; "
        "if the digits are the same on every machine (not a rounding error), say why in "
        "a '# Not rounding:' comment in the block:\n" + "\n".join(flagged)
    )


@pytest.mark.parametrize(
    ("line", "code", "flagged"),
    [
        ("  torch causal_lower_right   2.38e-07", "", ["2.38e-07"]),  # issue 34
        ("max error, package (float32): 3.0e-08.", "", ["3.0e-08"]),
        ("max |a - b| = -4.5e-09, sum 0.00002", "", ["-4.5e-09", "0.00002"]),
        ("max |diff| below 1e-06: True", "", []),
        ("dQ (5, 11): max |page - package| < 1e-14: True", "", []),
        ("10.0 |  0.0000  1.0000 | < 1e-6", "", []),
        ("max |diff| 0.0e+00, weights 0.25 1e-04 3e+02", "", []),  # zero, not small
        ("1e-06   smallest error at eps = 1e-06", "eps = [1e-2, 1e-6]", []),
        ("equal to 2e-6", "assert_close(a, b, atol=2e-6)", []),
        ("lr 3e-05, loss 2.4e-05", "lr = 3e-5", ["2.4e-05"]),
        ("version 1.2.3, step 12", "", []),
    ],
)
def test_the_rule_flags_rounding_digits_only(line: str, code: str, flagged: list[str]) -> None:
    assert rounding_digits(line, code_numbers(code)) == flagged


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

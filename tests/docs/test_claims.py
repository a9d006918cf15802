"""What the build asserts holds on any machine: no assertion depends on a clock.

The site's pages and tutorials assert their claims where they make them: a failed claim
fails the build. Each assertion is one of three kinds, and its code says which:

* **exact** (unmarked, the default): deterministic arithmetic, counts, shapes, bytes,
  FLOPs, page faults, equality within a tolerance derived from the dtype;
* **statistical**: the outcome of training or of random data, with a margin that holds
  across seeds (set from 20 on ATen's portable kernels in the tutorials that train, from
  at least five on the concept pages). Marked by a comment that starts
  ``# Across seeds:`` on the line or directly above it. The tutorials that train read
  ``ATTENTION_SEED``, and ``test_other_machines`` runs them with seeds 20 and 21, which
  no threshold was set from;
* **timing**: never asserted. A machine with another processor, or a busy one, gives
  other times: a log-log slope asserted below 0.8 measured 0.83 on a loaded machine,
  and a tile loop asserted slower than the fused kernel was faster with ATen's portable
  kernels. What a page says about a live timing is a sentence it generates from the
  numbers, and speed claims stated as facts come from the committed benchmark.

This module enforces the third rule on the sources, by following each clock reading
(``time.thread_time()``, ``perf_counter``, ``timeit``, a profiler's times...) through
the assignments, calls and loops of a block or tutorial to every ``assert`` and
``assert_close`` whose value it reaches. Numbers read from the committed benchmark file
are not clock readings: they are the same on every build.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import DOCS, ROOT
from tests.docs._codeblocks import READS_CLOCK, markdown_fences

TUTORIALS = sorted((DOCS / "tutorials").glob("[0-9][0-9]_*.py"))
PAGES = sorted(DOCS.rglob("*.md"))

# Functions whose result is a clock reading, or a time measured with one.
CLOCK_CALLS = {
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "monotonic_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "time_ns",
    "timeit",
    "default_timer",
    "blocked_autorange",
    "adaptive_autorange",
}
# Attributes that hold a measured duration: torch.profiler's events (``cpu_time_total``,
# ``self_cpu_time_total``...), torch.utils.benchmark's measurements. Not timestamps:
# a profile's ``start_time_ns`` only orders its memory events.
CLOCK_ATTRIBUTES = re.compile(r"(cpu|device|cuda)_time|duration|elapsed")
ASSERT_FUNCTIONS = {"assert_close", "assert_allclose", "assert_array_less", "assert_equal"}


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _is_wall_clock(call: ast.Call) -> bool:
    """``time.time()``: the only clock named like its module."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "time"
        and isinstance(func.value, ast.Name)
        and func.value.id == "time"
    )


def _bound_names(target: ast.AST) -> set[str]:
    """The variables an assignment target binds or mutates (``x``, ``x[i]``, ``x.a``)."""
    while isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
        target = target.value
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound_names(t) for t in target.elts))
    return set()


@dataclass
class TimingFlow:
    """Which names hold values computed from a clock, statement by statement."""

    tainted: set[str] = field(default_factory=set)  # variables
    timers: set[str] = field(default_factory=set)  # functions that return a timing
    found: list[tuple[int, str]] = field(default_factory=list)  # (line, assertion)

    def reads_clock(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = _called_name(sub)
                if name in CLOCK_CALLS or name in self.timers or _is_wall_clock(sub):
                    return True
            elif isinstance(sub, ast.Name):
                if sub.id in self.tainted:
                    return True
            elif isinstance(sub, ast.Attribute) and CLOCK_ATTRIBUTES.search(sub.attr):
                return True
        return False

    def run(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self.statement(statement)

    def _branches(self, *bodies: list[ast.stmt]) -> None:
        """Run each branch from the same state; afterwards a name is tainted if it is
        tainted after any branch."""
        start, union = set(self.tainted), set(self.tainted)
        for body in bodies:
            self.tainted = set(start)
            self.run(body)
            union |= self.tainted
        self.tainted = union

    def _loop(self, body: list[ast.stmt], orelse: list[ast.stmt]) -> None:
        for _ in range(2):  # a value tainted late in the body reaches its start
            self.run(body)
        self.run(orelse)

    def assign(self, target: ast.AST, value: ast.AST) -> None:
        """``a, b = t, 2`` taints ``a`` only; a name rebound to a value no clock
        reached is clean again."""
        pairs = isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.Tuple)
        if pairs and len(target.elts) == len(value.elts):
            for element, part in zip(target.elts, value.elts, strict=True):
                self.assign(element, part)
            return
        names = _bound_names(target)
        if self.reads_clock(value):
            self.tainted |= names
        elif isinstance(target, (ast.Name, ast.Tuple, ast.List)):
            self.tainted -= names

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = TimingFlow(set(self.tainted), set(self.timers))
            inner.tainted -= {a.arg for a in node.args.args + node.args.kwonlyargs}
            inner.run(node.body)
            self.found += inner.found
            returns = [n for n in ast.walk(node) if isinstance(n, (ast.Return, ast.Yield))]
            if any(inner.reads_clock(r.value) for r in returns):
                self.timers.add(node.name)
            # What the body stored into names of the enclosing scope (times.append(t)).
            local = {
                n.id
                for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            self.tainted |= inner.tainted - local
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self.assign(target, node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if self.reads_clock(node.value):
                self.tainted |= _bound_names(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            if self.reads_clock(node.iter):
                self.tainted |= _bound_names(node.target)
            self._loop(node.body, node.orelse)
        elif isinstance(node, ast.While):
            self._loop(node.body, node.orelse)
        elif isinstance(node, ast.If):
            self._branches(node.body, node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None and self.reads_clock(item.context_expr):
                    self.tainted |= _bound_names(item.optional_vars)
            self.run(node.body)
        elif isinstance(node, ast.Try):
            self._branches(node.body, *(h.body for h in node.handlers), node.orelse)
            self.run(node.finalbody)
        elif isinstance(node, ast.Assert):
            if self.reads_clock(node.test):
                self.found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            arguments = [*call.args, *(k.value for k in call.keywords)]
            if _called_name(call) in ASSERT_FUNCTIONS:
                if any(self.reads_clock(a) for a in arguments):
                    self.found.append((node.lineno, ast.unparse(node)))
            elif isinstance(call.func, ast.Attribute) and any(map(self.reads_clock, arguments)):
                self.tainted |= _bound_names(call.func.value)  # times.append(seconds)


def timing_assertions(code: str) -> list[tuple[int, str]]:
    """``(line, source)`` of every assertion whose value a clock reading reaches."""
    flow = TimingFlow()
    flow.run(ast.parse(code).body)
    return sorted(set(flow.found))  # a loop's body is followed twice


def tutorial_code(path: Path) -> str:
    """A percent script as Python: its IPython magics (``%pip``) commented out."""
    return re.sub(r"^(\s*)%", r"\1#", path.read_text(encoding="utf-8"), flags=re.MULTILINE)


@dataclass(frozen=True)
class Program:
    """One tutorial, or one page's executed block (a session's blocks together)."""

    where: str
    code: str
    lines: tuple[int, ...]  # the source line of each line of code


def page_programs(path: Path) -> list[Program]:
    """The executed blocks of a page, a ``session``'s blocks joined in page order."""
    groups: dict[str, list] = {}
    for fence in markdown_fences(path, {"python", "py"}):
        if fence.options.get("exec", "").lower() not in {"on", "1", "true", "yes"}:
            continue
        groups.setdefault(fence.options.get("session") or f"line {fence.line}", []).append(fence)
    programs = []
    for fences in groups.values():
        code, lines = "", []
        for fence in fences:
            code += fence.code
            lines += [fence.line + i for i in range(fence.code.count("\n"))]
        programs.append(Program(str(path.relative_to(ROOT)), code, tuple(lines)))
    return programs


PROGRAMS = [
    *(
        Program(
            str(t.relative_to(ROOT)),
            (code := tutorial_code(t)),
            tuple(range(1, 1 + len(code.splitlines()))),
        )
        for t in TUTORIALS
    ),
    *(program for page in PAGES for program in page_programs(page)),
]


def test_no_assertion_depends_on_a_clock() -> None:
    found = [
        f"{program.where}:{program.lines[line - 1]}: {source}"
        for program in PROGRAMS
        for line, source in timing_assertions(program.code)
    ]
    assert not found, (
        "These assertions depend on a timing, which another machine or a busy one "
        "changes. Assert counts, bytes or FLOPs instead, and let the code print the "
        "sentence about the times:\n" + "\n".join(found)
    )


def test_the_code_that_times_is_found() -> None:
    # Guards the extraction: these pages and tutorials time code at build today.
    timed = {p.where for p in PROGRAMS if READS_CLOCK.search(p.code)}
    assert {
        "docs/concepts/complexity.md",
        "docs/concepts/masks.md",
        "docs/concepts/variants.md",
        "docs/performance.md",
        "docs/tutorials/10_generating_with_a_kv_cache.py",
        "docs/tutorials/11_efficient_attention_from_scratch.py",
    } <= timed, timed


def test_pages_that_time_code_say_so() -> None:
    """``measures_time: true`` marks the pages ``test_timed_pages_under_load`` builds."""
    from mkdocs.utils.meta import get_data

    timed = sorted(
        {p.where for p in PROGRAMS if p.where.endswith(".md") and READS_CLOCK.search(p.code)}
    )
    undeclared = [
        page
        for page in timed
        if not get_data((ROOT / page).read_text(encoding="utf-8"))[1].get("measures_time")
    ]
    assert not undeclared, f"time code without `measures_time: true`: {undeclared}"


@pytest.mark.parametrize(
    ("code", "lines"),
    [
        # what tutorial 10 asserted: a slope fitted to CPU times
        (
            "import time\nimport numpy as np\n"
            "def seconds(f):\n    start = time.thread_time()\n    f()\n"
            "    return time.thread_time() - start\n"
            "runs = []\nfor n in (1, 2):\n    runs.append(seconds(f))\n"
            "slope = np.polyfit([1, 2], np.log(runs), 1)[0]\nassert slope < 0.8\n",
            [11],
        ),
        # what performance.md asserted: profiler times, through a dict comprehension
        (
            "with profile() as prof:\n    f()\n"
            "times = {e.key: e.self_cpu_time_total for e in prof.key_averages()}\n"
            "total = sum(times.values())\nassert total > 1\n",
            [5],
        ),
        # a timing inside assert_close, and one reaching an assert through a tuple
        (
            "t0 = time.perf_counter()\nt = time.perf_counter() - t0\n"
            "a, b = t, 2\nnp.testing.assert_allclose(a, 1)\nassert b == 2\n",
            [4],
        ),
        # time.time() is a clock; a name rebound to a count is not one any more
        (
            "t = time.time()\nassert t > 0\nt = 5\nassert t == 5\n",
            [2],
        ),
    ],
)
def test_the_flow_finds_what_it_is_for(code: str, lines: list[int]) -> None:
    assert [line for line, _ in timing_assertions(code)] == lines


def test_the_flow_leaves_exact_assertions_alone() -> None:
    exact = (
        "import time\nstart = time.thread_time()\nout = f(x)\n"
        "seconds = time.thread_time() - start\n"
        "print(f'{seconds:.3f} s')\n"
        "assert out.shape == (2, 3)\n"  # the result, not its time
        "flops = 4 * n * n * d\nassert flops == 4096\n"
        "times = [1, 2]\nassert len(times) == 2\n"  # rebound before use
    )
    assert timing_assertions(exact) == []


def _is_bound_check(node: ast.AST, tolerances: set[str]) -> bool:
    """``error < 1e-6``, ``errors[eps] < bound``: a value against a float bound."""
    if not (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.Lt, ast.LtE))
    ):
        return False
    bound = node.comparators[0]
    if isinstance(bound, ast.Constant):
        return isinstance(bound.value, float)
    return isinstance(bound, ast.Name) and bound.id in tolerances


def unasserted_bound_checks(code: str) -> list[tuple[int, str]]:
    """``(line, comparison)`` of each bound check a ``print`` shows and no ``assert``
    makes: ``print(f"below 1e-6: {error < 1e-6}")`` with no ``assert error < 1e-6``.

    A bound check is a comparison ``x < b`` or ``x <= b`` whose bound ``b`` is a float
    literal, or a name assigned an expression with one (``bound = 1e-14 / eps``); a
    name assigned such a comparison (``below = error < 1e-6``) counts where it is
    printed. It is asserted by an ``assert`` whose test holds the same comparison, or
    that name.
    """
    tree = ast.parse(code)
    tolerances = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(
            isinstance(c, ast.Constant) and isinstance(c.value, float) for c in ast.walk(node.value)
        )
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    named: dict[str, ast.AST] = {}  # below = error < 1e-6
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=False))
            for name, value in pairs:
                if isinstance(name, ast.Name) and _is_bound_check(value, tolerances):
                    named[name.id] = value
    asserted: set[str] = set()  # ast.dump of each asserted comparison, and names
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Compare):
                    asserted.add(ast.dump(sub))
                elif isinstance(sub, ast.Name):
                    asserted.add(sub.id)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"):
            continue
        for sub in ast.walk(node):
            if _is_bound_check(sub, tolerances) and ast.dump(sub) not in asserted:
                found.append((node.lineno, ast.unparse(sub)))
            elif (
                isinstance(sub, ast.Name)
                and sub.id in named
                and sub.id not in asserted
                and ast.dump(named[sub.id]) not in asserted
            ):
                found.append((node.lineno, f"{sub.id} = {ast.unparse(named[sub.id])}"))
    return found


def test_every_printed_bound_check_is_asserted() -> None:
    """A page that prints ``below 1e-6: True`` asserts it: otherwise another machine
    could print ``False`` under a sentence that says the opposite, and the build would
    pass. (Where the number itself is the point, print it rounded to what the claim
    needs instead; ``test_exec_output`` checks that no rounding error's digits show.)"""
    found = [
        f"{program.where}:{program.lines[line - 1]}: {comparison}"
        for program in PROGRAMS
        for line, comparison in unasserted_bound_checks(program.code)
    ]
    assert not found, (
        "These bound checks are printed but not asserted; add `assert <comparison>` "
        "next to the print:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ('print(f"below 1e-6: {error < 1e-6}")\n', [(1, "error < 1e-06")]),
        ('print(f"below 1e-6: {error < 1e-6}")\nassert error < 1e-6\n', []),
        ("below = gap <= 1e-5\nprint('below 1e-5:', below)\n", [(2, "below = gap <= 1e-05")]),
        ("shape, below = (2, 3), gap < 1e-5\nprint(below)\nassert below\n", []),
        ("bound = 1e-14 / eps\nprint(err < bound)\n", [(2, "err < bound")]),
        ("bound = 1e-14 / eps\nprint(err < bound)\nassert all([err < bound])\n", []),
        # not bound checks: a count, an identity, a timing ratio against 1
        ("print(n < 3, w is None, ratio < 1)\n", []),
    ],
)
def test_the_bound_check_rule(code: str, found: list[tuple[int, str]]) -> None:
    assert unasserted_bound_checks(code) == found

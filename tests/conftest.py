"""What every test module shares: the repository's paths, and the session's setup.

Test modules import the paths (``from tests.conftest import ROOT``) and use the
fixtures by name. The fixtures of one part of the suite live beside it:
``tests/docs/conftest.py`` builds and serves the site.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = DOCS / "tutorials"
BUILD = ROOT / "build"  # what the tests build and write (ignored by git)
# The site build's line for the session's summary, written by the process that built it
# (tests/docs/conftest.py): under `pytest -n` a worker, not the process that reports.
BUILD_SUMMARY = BUILD / "test-site" / ".build-summary"
_IMPORTED = time.time()


# Session fixtures too costly to compute twice: under `pytest -n` every module that uses
# one runs in the same worker (tests/docs/conftest.py defines them).
SHARED_FIXTURES = ("site_walk", "phone_walk")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # `make test` runs a worker per core: an intra-op thread more per worker only
        # waits for the core the other one holds (one thread is what `one_thread`
        # measured 50x faster for many small operations on a busy machine).
        torch.set_num_threads(1)


@functools.cache
def work_unit(module: str) -> str:
    """The unit of work a test module goes to a worker in: the first shared fixture its
    source names, else the module itself, so that a module-scoped fixture also runs once.

    Read from the source because the process that hands out the work collects no tests;
    each worker checks it against what its tests really use
    (``pytest_collection_modifyitems``).
    """
    text = (ROOT / module).read_text(encoding="utf-8")
    return next((f for f in SHARED_FIXTURES if re.search(rf"\b{f}\b", text)), module)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``pytest -n`` hands out whole work units (`work_unit`) in the order
    ``pytest_collection_modifyitems`` puts them in, each to the first worker that runs
    out of work.

    xdist's own ``--dist loadgroup`` cannot group them: it renames the tests by setting
    ``item._nodeid``, which pytest 9.2 no longer reads. And its ``loadscope`` would sort
    the units by their number of tests (``--loadscope-reorder``, on by default), which
    says nothing of their cost: it handed the site walk out after five minutes, and one
    core sat idle for the last two while the walk finished on the other.
    """
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False
    return ByWorkUnit(config, log)


# The order of the work units. First the site walk: its worker builds the site, with
# the tutorial scripts beside the build as its load (tests/docs/_reader_runs.py), then
# walks it, the suite's longest chain. Meanwhile the other worker runs the modules that
# need neither the site nor more than one core: the unit tests and doctests. Then the
# modules that take longest (the scripts' tests, which read what the build recorded,
# the phone walk, the reader's install), then the browser tests that mostly wait (for a
# page to settle, a search to answer), while the walk keeps both cores busy; then the
# other modules of the site's tests, and last those that only compute (each runs the
# pages' code blocks in processes of its own): whichever worker is left at the end
# keeps its core busy to the end. Both orders were measured: with the waiting tests
# last, one core was idle for most of the last minute.
FIRST_UNITS = (
    "site_walk",
    "tests/docs/test_other_machines.py",
    "phone_walk",
    "tests/docs/test_reader_install.py",
    "tests/docs/test_search.py",
    "tests/docs/test_explorers.py",
    "tests/docs/test_hosting.py",
    "tests/docs/test_copy.py",
)
LAST_UNITS = (
    "tests/docs/test_exec_output.py",
    "tests/docs/test_built_snippets.py",
)


def _rank(unit: str) -> int:
    if unit == FIRST_UNITS[0]:
        return 0
    if unit in FIRST_UNITS:
        return 1 + FIRST_UNITS.index(unit)  # 2, 3, ...: after the unit tests
    if unit in LAST_UNITS:
        return 2 + len(FIRST_UNITS) + LAST_UNITS.index(unit)
    return 1 if not unit.startswith("tests/docs/") else 1 + len(FIRST_UNITS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the work units (``FIRST_UNITS``, `_rank`), each unit's tests in their order,
    and check that every test that uses a shared fixture is in a module `work_unit`
    groups with it (one that reached it through another fixture would not be)."""
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        for fixture in SHARED_FIXTURES:
            if fixture in getattr(item, "fixturenames", ()) and work_unit(module) != fixture:
                raise pytest.UsageError(
                    f"{item.nodeid} uses {fixture}, but its module does not name it: "
                    "under pytest -n it would compute it in a worker of its own"
                )
    items.sort(key=lambda item: _rank(work_unit(item.nodeid.split("::", 1)[0])))  # stable


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report the site build's wall time (issue: under 90 s on two idle cores), measured
    here rather than asserted: a test must not fail on a busy machine's clock."""
    if BUILD_SUMMARY.is_file() and BUILD_SUMMARY.stat().st_mtime >= _IMPORTED:
        terminalreporter.write_line(BUILD_SUMMARY.read_text())


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Run a module's tests on one intra-op thread (``pytestmark =
    pytest.mark.usefixtures("one_thread")``), and give the count back after.

    For tests of many small operations: on a busy 2-core machine each one waits for both
    threads to be scheduled (measured on the tiled loops: 50x slower than one thread).
    Only for tests whose results do not depend on the thread count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

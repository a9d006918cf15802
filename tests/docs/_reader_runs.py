"""The tutorials run as a reader runs them, and the site built on a busy machine, together.

``test_other_machines.py`` explains what each run checks. This module holds what the
site build's fixture (``tests/docs/conftest.py``) and that test module share: which runs
there are, and how they run beside a build.

The strict site build is the build on a busy machine: when the session includes the
busy-machine test, the fixture that builds the site for every test runs the selected
tutorial scripts beside it, two at a time, longest first, and tops them up with
processes that only spin while fewer than two scripts are left and the build still
runs. The scripts are the build's load, so the machine does useful work while it is
loaded, and nothing is built twice: the pages that time code were once built a second
time for this check alone (52 s of processor time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mkdocs.utils.meta import get_data

from tests.conftest import DOCS, ROOT

TUTORIALS = sorted((DOCS / "tutorials").glob("[0-9][0-9]_*.py"))
# A tutorial that reads its seed from the environment: it trains.
READS_SEED = re.compile(r"""os\.environ\.get\(\s*["']ATTENTION_SEED["']""")
# A tutorial that measures CPU time to compare timings (one that only prints how long
# its training took argues nothing from it).
MEASURES_CPU_TIME = re.compile(r"\b(thread_time|process_time|timeit)\(")
PORTABLE = ("ATEN_CPU_CAPABILITY", "default")
# The two seeds the suite runs, outside those the thresholds were set from.
SEEDS = ("20", "21")
# The tests that read what a build beside the scripts recorded.
SCRIPT_TEST = "test_tutorial_runs_as_a_script"
BUSY_TEST = "test_the_pages_that_time_code_build_strictly_on_a_busy_machine"
# Where the build's fixture writes what ran beside it, in the built site.
RECORD = ".reader-runs.json"


def reads_seed(tutorial: Path) -> bool:
    return bool(READS_SEED.search(tutorial.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Run:
    """One script run of a tutorial, in an environment a reader might have."""

    tutorial: Path
    env: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        parts = [self.tutorial.stem[:2]]
        parts += [f"seed{v}" if k == "ATTENTION_SEED" else f"cpu-{v}" for k, v in self.env]
        return "-".join(parts)

    @property
    def command(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env)
        return f"{env} python {self.tutorial.relative_to(ROOT)}"


def runs_of(tutorial: Path) -> list[Run]:
    if not reads_seed(tutorial):
        return [Run(tutorial, (PORTABLE,))]
    return [Run(tutorial, (("ATTENTION_SEED", seed), PORTABLE)) for seed in SEEDS]


RUNS = [run for tutorial in TUTORIALS for run in runs_of(tutorial)]


def timed_pages() -> list[str]:
    """The pages that time code, as paths under docs/."""
    pages = [
        page.relative_to(DOCS).as_posix()
        for page in sorted(DOCS.rglob("*.md"))
        if get_data(page.read_text(encoding="utf-8"))[1].get("measures_time")
    ]
    tutorials = [
        t.relative_to(DOCS).as_posix()
        for t in TUTORIALS
        if MEASURES_CPU_TIME.search(t.read_text(encoding="utf-8"))
    ]
    return pages + tutorials


def selected(items: list[object]) -> tuple[list[Run], bool]:
    """The script runs a session selected, and whether it selected the busy-machine test."""
    names = {getattr(item, "originalname", None) for item in items}
    runs = [
        item.callspec.params["run"]  # type: ignore[attr-defined]
        for item in items
        if getattr(item, "originalname", None) == SCRIPT_TEST
    ]
    return runs, BUSY_TEST in names


@dataclass
class Script:
    returncode: int
    stderr: str


@dataclass
class ReaderRuns:
    """What the scripts gave, and, for a build beside them, how busy the machine was."""

    scripts: dict[str, Script] = field(default_factory=dict)
    # The fewest CPU-bound processes seen beside the build; None: never looked.
    least_busy: int | None = None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> ReaderRuns:
        data = json.loads(path.read_text(encoding="utf-8"))
        scripts = {k: Script(**v) for k, v in data.pop("scripts").items()}
        return cls(scripts=scripts, **data)


SPIN = "import time\nend = time.monotonic() + 1800\nwhile time.monotonic() < end: pass\n"


def _script_env(run: Run) -> dict[str, str]:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "error::DeprecationWarning"}
    return env | dict(run.env)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def run_scripts(
    runs: list[Run], workdir: Callable[[str], Path], build: subprocess.Popen[str] | None = None
) -> ReaderRuns:
    """Run ``runs`` two at a time, longest first, each from its own ``workdir(run.id)``
    (not the tutorial's folder); while ``build`` runs, keep at least two CPU-bound
    processes beside it, topping the scripts up with spinners."""
    order = sorted(runs, key=lambda run: -run.tutorial.stat().st_size)
    result = ReaderRuns()
    spinners: list[subprocess.Popen[bytes]] = []
    running = [0]  # scripts running now
    lock = threading.Lock()

    def execute(run: Run) -> subprocess.CompletedProcess[str]:
        with lock:
            running[0] += 1
        try:
            return subprocess.run(
                [sys.executable, str(run.tutorial)],
                cwd=workdir(run.id),
                env=_script_env(run),
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            with lock:
                running[0] -= 1

    def keep_busy() -> None:
        """While the build runs: at least two CPU-bound processes beside it."""
        while build is not None and build.poll() is None:
            with lock:
                spinners[:] = [p for p in spinners if p.poll() is None]  # still spinning
                while running[0] + len(spinners) < 2:
                    spinners.append(subprocess.Popen([sys.executable, "-c", SPIN]))
                while spinners and running[0] + len(spinners) > 2:
                    _stop(spinners.pop())  # a script took its place
                busy = running[0] + sum(p.poll() is None for p in spinners)
                seen = result.least_busy
                result.least_busy = busy if seen is None else min(seen, busy)
            time.sleep(0.1)

    watcher = threading.Thread(target=keep_busy, name="keep-busy", daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = list(pool.map(execute, order))
        for run, proc in zip(order, done, strict=True):
            result.scripts[run.id] = Script(proc.returncode, proc.stderr)
        if build is not None:  # the spinners alone keep the machine busy now
            build.wait(timeout=900)
    finally:
        if build is not None and build.poll() is None:
            build.kill()
        watcher.join()
        for spinner in spinners:
            _stop(spinner)
    return result

"""Every tutorial runs to completion as a plain Python script.

The strict site build executes them as notebooks too; running them as scripts keeps
the promise made on the tutorials page ("runs as a notebook and as a script") and gives
a readable traceback when one breaks. The scripts run two at a time, except those that
compare CPU times, which run alone after the others.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import mkdocs_hooks  # noqa: E402

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))


def test_there_are_tutorials():
    assert TUTORIALS


# A tutorial that measures CPU time compares two timings in its claims (the KV cache
# against recomputing): it runs alone. The others run two at a time, as the build runs
# them, which nearly halves this part of the suite. (A wall-clock reading that is only
# printed, "trained in 9.1 s", needs no quiet core.)
CLOCK = re.compile(r"\b(thread_time|process_time)\(")


def _run_script(tutorial: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "error::DeprecationWarning"}
    return subprocess.run(
        [sys.executable, str(tutorial)],
        cwd=workdir,  # a tutorial must not depend on the directory it is run from
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def script_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[Path, subprocess.CompletedProcess[str]]:
    """Each selected tutorial run once as a script, in a directory of its own."""
    selected = [
        item.callspec.params["tutorial"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_tutorial_runs_as_a_script"
    ]
    timed = [t for t in selected if CLOCK.search(t.read_text(encoding="utf-8"))]
    untimed = [t for t in selected if t not in timed]

    def run(tutorial: Path) -> subprocess.CompletedProcess[str]:
        return _run_script(tutorial, tmp_path_factory.mktemp(tutorial.stem))

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(untimed, pool.map(run, untimed), strict=True))
    results |= {t: run(t) for t in timed}
    return results


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_runs_as_a_script(
    tutorial: Path, script_runs: dict[Path, subprocess.CompletedProcess[str]]
) -> None:
    result = script_runs[tutorial]
    assert result.returncode == 0, f"{tutorial.name} failed:\n{result.stdout}\n{result.stderr}"


def test_timed_tutorials_are_recognised() -> None:
    """Tutorial 10 times the KV cache against recomputation: it must run alone."""
    timed = {t.name for t in TUTORIALS if CLOCK.search(t.read_text(encoding="utf-8"))}
    assert "10_generating_with_a_kv_cache.py" in timed


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_is_listed_in_the_nav_and_the_index(tutorial: Path) -> None:
    rel = tutorial.relative_to(ROOT / "docs").as_posix()
    assert rel in (ROOT / "mkdocs.yml").read_text(), f"{rel} is missing from nav in mkdocs.yml"
    index = (ROOT / "docs" / "tutorials" / "index.md").read_text()
    assert f"({tutorial.name})" in index, f"{tutorial.name} is missing from tutorials/index.md"
    # Its run time, which readers see and by which the build orders the kernels' queue:
    # read with the build's own parser, so the two cannot disagree.
    assert tutorial.name in mkdocs_hooks.run_times(index), (
        f"tutorials/index.md gives no run time ('about N s') for {tutorial.name}"
    )

"""Every tutorial runs to completion as a plain Python script.

The strict site build executes them as notebooks too; running them as scripts keeps
the promise made on the tutorials page ("runs as a notebook and as a script") and gives
a readable traceback when one breaks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import mkdocs_hooks  # noqa: E402

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))


def test_there_are_tutorials():
    assert TUTORIALS


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_runs_as_a_script(tutorial: Path, tmp_path: Path) -> None:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "error::DeprecationWarning"}
    result = subprocess.run(
        [sys.executable, str(tutorial)],
        cwd=tmp_path,  # a tutorial must not depend on the directory it is run from
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{tutorial.name} failed:\n{result.stdout}\n{result.stderr}"


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

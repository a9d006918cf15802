"""Every tutorial is listed where readers look for it.

Running them is elsewhere: the strict build executes each as a notebook
(``built_site``), and ``test_other_machines`` runs each as a script on ATen's portable
kernels, and the ones that train with two more seeds (each of which reads its seed:
checked there).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 14


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_is_listed_in_the_nav_and_the_index(tutorial: Path) -> None:
    rel = tutorial.relative_to(ROOT / "docs").as_posix()
    assert rel in (ROOT / "mkdocs.yml").read_text(), f"{rel} is missing from nav in mkdocs.yml"
    index = (ROOT / "docs" / "tutorials" / "index.md").read_text()
    row = next((line for line in index.splitlines() if f"({tutorial.name})" in line), None)
    assert row is not None, f"{tutorial.name} is missing from tutorials/index.md"
    assert re.search(r"\|\s*about \d+ s\s*\|\s*$", row), (
        f"tutorials/index.md gives no run time ('about N s') for {tutorial.name}"
    )

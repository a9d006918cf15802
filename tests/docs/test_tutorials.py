"""Every tutorial is listed where readers look for it, and the ones that train take a seed.

Running them is elsewhere: the strict build executes each as a notebook
(``built_site``), and ``test_other_machines`` runs each as a script on ATen's portable
kernels, and the ones that train with two more seeds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))
TRAINS = re.compile(r"\btorch\.optim\.")
READS_SEED = re.compile(r"""os\.environ\.get\(\s*["']ATTENTION_SEED["']""")


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 14


def test_every_tutorial_that_trains_reads_its_seed():
    training = {t.name for t in TUTORIALS if TRAINS.search(t.read_text(encoding="utf-8"))}
    # Guards the pattern: these three train a model today.
    assert {
        "09_train_a_tiny_transformer.py",
        "12_induction_heads.py",
        "13_encoder_decoder_transformer.py",
    } <= training
    missing = sorted(
        name
        for name in training
        if not READS_SEED.search((ROOT / "docs/tutorials" / name).read_text(encoding="utf-8"))
    )
    assert not missing, f"train without reading ATTENTION_SEED: {missing}"


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

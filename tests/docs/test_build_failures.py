"""When the build cannot go on, it says why in words a reader can act on.

A tutorial whose claim fails names the tutorial, the cell, its section and the claim;
a notebook cache that cannot be written says what to change. Neither is a traceback
from inside the build's plugins.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_build import BuildError, tutorials


def test_a_failed_claim_names_the_tutorial_cell_section_and_assertion(tmp_path: Path) -> None:
    tutorial = tmp_path / "99_example.py"
    tutorial.write_text(
        "# %% [markdown]\n# ## 1. Setup\n\n# %%\nx = 1\n\n"
        "# %% [markdown]\n# ## 2. The claim\n\n# %%\nassert x == 2, f'x is {x}'\n",
        encoding="utf-8",
    )
    with pytest.raises(tutorials.TutorialError) as failure:
        tutorials.execute(tutorial)
    first_line = str(failure.value).splitlines()[0]
    assert first_line == (
        "99_example.py failed in code cell 2 (section '2. The claim'): AssertionError: x is 1"
    )
    assert "assert x == 2" in str(failure.value)  # the cell's source, from the kernel


def test_an_unwritable_notebook_cache_is_one_sentence(tmp_path: Path, monkeypatch) -> None:
    # Root writes anywhere a mode allows nothing, so block the folder with a file.
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".cache").write_text("not a folder")
    monkeypatch.setenv("ATTENTION_NOTEBOOK_CACHE", "true")
    with pytest.raises(BuildError) as failure:
        tutorials.cache_dir()
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith("the notebook cache .cache/notebooks is not writable")
    assert "ATTENTION_NOTEBOOK_CACHE=false" in message


def test_the_cache_is_on_unless_switched_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTENTION_NOTEBOOK_CACHE", raising=False)
    assert tutorials.cache_dir() == Path(".cache/notebooks")
    monkeypatch.setenv("ATTENTION_NOTEBOOK_CACHE", "false")
    assert tutorials.cache_dir() is None

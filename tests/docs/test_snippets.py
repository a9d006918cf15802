"""Code blocks checked in the Markdown sources: the README's, and ``>>>`` outputs.

Most code blocks are checked on the built site instead (``test_built_snippets.py``):
every Python block of every page, API reference included, runs there on its own, as
the copy button gives it. Two things only the sources can check stay here:

* the README, which is not part of the site: its Python blocks run on their own;
* the output printed under each ``>>>`` (``pycon``) block of the docs: these are
  doctests, so the output on the page must be the output the code produces. (On the
  site a ``>>>`` block is copied without its outputs, so running it there cannot tell.)

Each block runs in a fresh namespace, with nothing left over from the block before it.
"""

from __future__ import annotations

import doctest

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from tests.conftest import ROOT
from tests.docs._codeblocks import Fence, markdown_fences

README = ROOT / "README.md"
SNIPPETS = [
    *markdown_fences(README, {"python", "py", "pycon"}),
    *(
        fence
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for fence in markdown_fences(page, {"pycon"})
    ),
]


def snippet_id(fence: Fence) -> str:
    path = fence.path.relative_to(ROOT) if fence.path.is_relative_to(ROOT) else fence.path
    return f"{path}:{fence.line}"


@pytest.fixture(autouse=True)
def fresh_global_state():
    """Undo global settings a snippet may change, so none can lean on another's."""
    matplotlib.use("Agg")
    yield
    torch.set_printoptions(profile="default")
    torch.set_default_dtype(torch.float32)
    plt.close("all")


def run_snippet(fence: Fence) -> None:
    """Run one block in a fresh namespace; a pycon block must print what it shows."""
    namespace = {"__name__": "__main__"}
    name = snippet_id(fence)
    if fence.lang == "pycon":
        test = doctest.DocTestParser().get_doctest(
            fence.code, namespace, name, str(fence.path), fence.line - 1
        )
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report: list[str] = []
        runner.run(test, out=report.append)
        assert runner.failures == 0, "".join(report)
        assert test.examples, f"{name}: pycon block without any >>> example"
    else:
        exec(compile(fence.code, name, "exec"), namespace)


@pytest.mark.parametrize("fence", SNIPPETS, ids=[snippet_id(s) for s in SNIPPETS])
def test_snippet_runs_and_shows_its_output(fence: Fence) -> None:
    run_snippet(fence)


def test_there_are_snippets_to_check():
    # Guards the extractor itself: if it silently stopped finding blocks, all would pass.
    assert any(f.path == README and f.lang == "python" for f in SNIPPETS)
    pycon_pages = {f.path.name for f in SNIPPETS if f.lang == "pycon"}
    assert {"scaled-dot-product-attention.md", "similarity-to-attention.md"} <= pycon_pages


def test_extractor_handles_indented_fences_options_and_other_languages(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nmake test\n```\n\n"
        '=== "Tab"\n\n    ```python exec="on" result="text"\n    x = 1\n    if x:\n'
        "        y = 2\n    ```\n\n"
        "````pycon\n>>> 1 + 1\n2\n````\n"
        "```` ```python ``` ```` is inline code, not a fence\n"
    )
    found = markdown_fences(page, {"python", "pycon"})
    assert [(s.lang, s.line) for s in found] == [("python", 8), ("pycon", 14)]
    assert found[0].code == "x = 1\nif x:\n    y = 2\n"
    assert found[0].options == {"exec": "on", "result": "text"}


def test_a_pycon_block_showing_the_wrong_output_fails(tmp_path):
    wrong = Fence(tmp_path / "x.md", 1, "pycon", ">>> 1 + 1\n3\n")
    with pytest.raises(AssertionError, match="Expected:"):
        run_snippet(wrong)


def test_a_python_block_cannot_see_names_from_the_block_before(tmp_path):
    run_snippet(Fence(tmp_path / "x.md", 1, "python", "secret = 1\n"))
    with pytest.raises(NameError):
        run_snippet(Fence(tmp_path / "x.md", 5, "python", "print(secret)\n"))

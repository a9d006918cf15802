"""Every Python code block of the Markdown docs and the README runs on its own.

A reader copies one block into a fresh interpreter; so each block runs here in a fresh
namespace, with nothing left over from the block before it. ``python`` blocks must run
without error; ``pycon`` blocks (``>>>`` sessions) are doctests, so the output printed
on the page must be the output the code produces.

Fences are found by hand rather than with a CommonMark parser because Material's
content tabs and admonitions indent their fences by four spaces, which CommonMark
would read as an indented code block.
"""

from __future__ import annotations

import doctest
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
RUNNABLE = {"python", "py", "pycon"}
OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*\{?\.?(?P<lang>[\w+-]*)")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str

    @property
    def id(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def extract_snippets(path: Path) -> list[Snippet]:
    """Return the runnable fenced code blocks of a Markdown file, dedented."""
    lines = path.read_text(encoding="utf-8").splitlines()
    snippets: list[Snippet] = []
    i = 0
    while i < len(lines):
        match = OPENING.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match["indent"], match["fence"], match["lang"].lower()
        if fence[0] == "`" and "`" in lines[i][match.end("fence") :]:
            i += 1  # CommonMark: not a fence but inline code that starts the line
            continue
        closing = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        if lang in RUNNABLE:
            body = "\n".join(
                line[len(indent) :] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1 : end]
            )
            snippets.append(Snippet(path, i + 2, lang, textwrap.dedent(body) + "\n"))
        i = end + 1
    return snippets


SNIPPETS = [snippet for path in SOURCES for snippet in extract_snippets(path)]


@pytest.fixture(autouse=True)
def fresh_global_state():
    """Undo global settings a snippet may change, so none can lean on another's."""
    matplotlib.use("Agg")
    yield
    torch.set_printoptions(profile="default")
    torch.set_default_dtype(torch.float32)
    plt.close("all")


def run_snippet(snippet: Snippet) -> None:
    """Run one block in a fresh namespace; a pycon block must print what it shows."""
    namespace = {"__name__": "__main__"}
    if snippet.lang == "pycon":
        test = doctest.DocTestParser().get_doctest(
            snippet.code, namespace, snippet.id, str(snippet.path), snippet.line - 1
        )
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report: list[str] = []
        runner.run(test, out=report.append)
        assert runner.failures == 0, "".join(report)
        assert test.examples, f"{snippet.id}: pycon block without any >>> example"
    else:
        exec(compile(snippet.code, snippet.id, "exec"), namespace)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs_on_its_own(snippet: Snippet) -> None:
    run_snippet(snippet)


def test_the_docs_have_snippets_to_check():
    # Guards the extractor itself: if it silently stopped finding blocks, every page
    # would pass.
    by_file = {s.path.name for s in SNIPPETS}
    assert {
        "index.md",
        "scaled-dot-product-attention.md",
        "check-against-pytorch.md",
        "README.md",
    } <= by_file
    concepts = {p.name for p in (ROOT / "docs" / "concepts").glob("*.md")} - {"index.md"}
    assert concepts <= by_file, f"concept pages without a runnable block: {concepts - by_file}"
    # The NumPy and PyTorch tabs of the worked example hold indented blocks.
    page = [s for s in SNIPPETS if s.path.name == "scaled-dot-product-attention.md"]
    assert any("import numpy as np" in s.code for s in page), "tabbed blocks were missed"
    assert len(page) >= 5


def test_extractor_handles_indented_fences_and_skips_other_languages(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nmake test\n```\n\n"
        '=== "Tab"\n\n    ```python\n    x = 1\n    if x:\n        y = 2\n    ```\n\n'
        "````pycon\n>>> 1 + 1\n2\n````\n"
        "```` ```python ``` ```` is inline code, not a fence\n"
    )
    found = extract_snippets(page)
    assert [(s.lang, s.line) for s in found] == [("python", 8), ("pycon", 14)]
    assert found[0].code == "x = 1\nif x:\n    y = 2\n"


def test_a_pycon_block_showing_the_wrong_output_fails(tmp_path):
    wrong = Snippet(tmp_path / "x.md", 1, "pycon", ">>> 1 + 1\n3\n")
    with pytest.raises(AssertionError, match="Expected:"):
        run_snippet(wrong)


def test_a_python_block_cannot_see_names_from_the_block_before(tmp_path):
    run_snippet(Snippet(tmp_path / "x.md", 1, "python", "secret = 1\n"))
    with pytest.raises(NameError):
        run_snippet(Snippet(tmp_path / "x.md", 5, "python", "print(secret)\n"))

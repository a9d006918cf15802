"""Every Python code block on the built site runs on its own, exactly as a reader copies it.

This reads the built HTML, not the Markdown: it sees what readers see, the API
reference's docstring examples included, after every plugin has had its say. For each
``language-python`` and ``language-pycon`` block it takes the text the copy button
yields (for a ``>>>`` block: the code lines without prompts, outputs dropped, as the
copy section of ``site.css`` makes it; ``test_copy.py`` checks in the browser that the
clipboard holds exactly this text) and runs it in a fresh interpreter: a new
``__main__`` namespace in a process forked from one that has only imported torch, numpy,
matplotlib (Agg) and ``attention`` (see ``_forkrun``). A block that uses a name an
earlier block defined, or that forgot an import, fails with ``NameError`` as it would
for the reader.

Not checked here, on purpose:

* tutorial pages (``tutorials/NN_*/``) and any block inside a ``.nb-cell``: notebook
  cells share one kernel by design; each tutorial is executed whole at build time.
* mkdocstrings' "Source code" blocks: excerpts of a module, shown for reading (a
  function without its module's imports); the module itself is what the tests import.
* signature blocks (``doc-signature``) and blocks in other languages (shell, text):
  only Python is meant to be pasted into Python.

* blocks the build executed (markdown-exec): the strict build already ran each as a
  reader runs a pasted block. markdown-exec gives it a fresh namespace, and the build
  resets the state torch, NumPy and matplotlib keep (random state, defaults, print
  options) before it (``docs_build/pages.py``), so a block that forgot an import or
  leaned on an earlier block fails the build. What the build runs besides the copied
  text, the lines marked ``# markdown-exec: hide``, defines nothing the copied text
  reads (checked below). ``test_exec_output`` runs them again where a reader's machine
  differs (ATen's portable kernels) and compares what they print.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs._codeblocks import (
    TUTORIAL_PAGE,
    CodeBlock,
    built_code_blocks,
    hidden_names_used,
    in_api_source,
    in_notebook_cell,
    is_on,
    markdown_fences,
    shown_source,
    site_pages,
)
from tests.docs._forkrun import Result, run_programs

EXECUTED = [
    fence
    for page in sorted((ROOT / "docs").rglob("*.md"))
    for fence in markdown_fences(page, {"python", "py"})
    if is_on(fence.options.get("exec"))
]


def runnable_blocks(site: Path) -> list[CodeBlock]:
    """The blocks a reader may copy and run alone that the build did not run (see the
    module docstring)."""
    executed = {shown_source(fence.code) for fence in EXECUTED}
    blocks = []
    for page in site_pages(site):
        for block in built_code_blocks(site, page):
            if TUTORIAL_PAGE.match(block.page) or in_notebook_cell(block):
                continue
            if in_api_source(block) or block.copied.strip() in executed:
                continue
            blocks.append(block)
    return blocks


def test_hidden_lines_define_nothing_the_shown_code_reads() -> None:
    assert len(EXECUTED) > 100  # guards the extraction
    offending = [
        f"{fence.path.relative_to(ROOT)}:{fence.line}: {sorted(names)}"
        for fence in EXECUTED
        if (names := hidden_names_used(fence.code))
    ]
    assert not offending, (
        "a reader copies these blocks without their hidden lines, which define names the "
        "shown code reads:\n" + "\n".join(offending)
    )


def test_every_code_block_runs_on_its_own_as_copied(built_site: Path) -> None:
    blocks = runnable_blocks(built_site)
    # Guards the extraction: if it silently stopped finding blocks, every page would
    # pass. The API reference alone has ~50 examples; the concept pages' blocks that
    # are only shown are ~40 more.
    pages = {block.page.split("/")[0] for block in blocks}
    assert {"reference", "concepts", "how-to", "index.html"} <= pages, pages
    assert sum(b.doctest_style for b in blocks) >= 40
    assert len(blocks) >= 80, len(blocks)

    results = run_programs([[block.copied] for block in blocks], names=[b.id for b in blocks])
    failures = [
        f"{block.id} ({block.lang}), first lines as copied:\n{block.head()}\n\n{result.error}"
        for block, result in zip(blocks, results, strict=True)
        if not result.ok
    ]
    assert not failures, f"{len(failures)} of {len(blocks)} blocks fail when run alone:\n\n" + (
        "\n\n".join(failures)
    )


# Small programs that pin down what the fork server promises, run in one server call
# (each call imports torch once).
PROBES = {
    "defines": ["import torch\nx = torch.ones(2)\n"],
    "uses-a-name": ["print(x)\n"],
    "uses-an-import": ["print(torch.ones(1))\n"],
    "fresh": [
        "import sys\n"
        "import matplotlib\n"
        "assert __name__ == '__main__' and sys.modules['__main__'].__dict__ is globals()\n"
        "names = sorted(k for k in globals() if not k.startswith('__'))\n"
        "assert names == ['matplotlib', 'sys'], names\n"
        "print(matplotlib.get_backend().lower())\n"
        "raise SystemExit(3)\n"
    ],
    "session": ["y = 1\nprint('first')\n", "print(y + 1)\n"],
}


@pytest.fixture(scope="module")
def probes() -> dict[str, Result]:
    results = run_programs(list(PROBES.values()), names=[f"<{name}>" for name in PROBES])
    return dict(zip(PROBES, results, strict=True))


def test_a_block_cannot_see_what_an_earlier_one_defined(probes: dict[str, Result]) -> None:
    # Every program gets a namespace of its own: what one defines (or imports) is not
    # visible to the next, although the modules are loaded in the process it forks from.
    assert probes["defines"].ok
    error = probes["uses-a-name"].error
    assert error and "NameError: name 'x' is not defined" in error
    # The traceback points into the block (by its name), not into the fork server.
    assert 'File "<uses-a-name>", line 1' in error and "_forkrun" not in error
    error = probes["uses-an-import"].error
    assert error and "NameError: name 'torch' is not defined" in error


def test_a_program_runs_as_in_a_fresh_interpreter(probes: dict[str, Result]) -> None:
    result = probes["fresh"]
    assert result.outputs == ["agg\n"]
    assert result.error and "SystemExit: 3" in result.error  # exiting is not running clean


def test_chunks_of_one_program_share_a_namespace_and_report_output_apart(
    probes: dict[str, Result],
) -> None:
    # What test_exec_output relies on for markdown-exec's session="...".
    assert probes["session"].ok and probes["session"].outputs == ["first\n", "2\n"]

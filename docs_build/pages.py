"""Build step: what happens to a page's Markdown before MkDocs renders it.

- :func:`from_a_fresh_state`: every block markdown-exec runs starts from the state a
  fresh interpreter has.
- :func:`source_links`: a tutorial's links, written for its address, point to the
  source files MkDocs checks.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

# The opening line of a block markdown-exec runs, indented in tabs and admonitions.
_EXEC_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?:python|py)\b(?P<info>[^\n]*"
    r"\bexec=\"(?:on|1|true|yes)\"[^\n]*)\n",
    flags=re.MULTILINE,
)
_SESSION = re.compile(r'\bsession="(?P<name>[^"]+)"')
FRESH_STATE = (
    "from docs_build import kernel_state; kernel_state.restore_computation()  # markdown-exec: hide"
)


def from_a_fresh_state(markdown: str) -> str:
    """Start every executed block (a session: its first block) from the state a fresh
    interpreter has: the random state, default dtype, print options and figures torch,
    NumPy and matplotlib start with, whatever earlier blocks left behind.

    markdown-exec gives each block a fresh namespace but runs all of them in this one
    process. With the state reset too, a block's run at build is the run a reader gets
    from pasting it into a new interpreter, so the snippet tests need not run it again
    (``tests/docs/test_built_snippets.py``). The reset is a hidden first line.
    """
    sessions: set[str] = set()

    def reset(match: re.Match[str]) -> str:
        session = _SESSION.search(match["info"])
        if session is not None:
            if session["name"] in sessions:
                return match[0]  # a later block of a session continues its state
            sessions.add(session["name"])
        return f"{match[0]}{match['indent']}{FRESH_STATE}\n"

    return _EXEC_FENCE.sub(reset, markdown)


# A relative link written for the page's URL, as a notebook must write it ("../../x/").
_URL_LINK = re.compile(r"\]\((?P<path>\.\./[^)#\s]*)(?P<fragment>#[^)\s]*)?\)")


def source_links(
    markdown: str, src_uri: str, url: str, exists: Callable[[str], bool]
) -> tuple[str, list[str]]:
    """Turn a tutorial's URL links into links to source files, which MkDocs validates.

    A notebook is read outside the site too (Colab, a download), so its links are
    written for the page's address ``url`` (``tutorials/NN_name/``); MkDocs only checks
    links to files. ``exists`` says whether the site has a source file. Returns the
    Markdown and the links that lead to no page at all (the plugin warns of each, as a
    broken link on a Markdown page is an error of the strict build).
    """
    page_dir = posixpath.dirname(src_uri)  # tutorials
    broken: list[str] = []

    def replace(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(url, match["path"]))
        candidates = [f"{target}.md", f"{target}/index.md", f"{target}.py"]
        if target == ".":
            candidates = ["index.md"]
        found = next((c for c in candidates if exists(c)), None)
        if found is None:
            broken.append(match["path"])
            return match[0]
        return f"]({posixpath.relpath(found, page_dir)}{match['fragment'] or ''})"

    return _URL_LINK.sub(replace, markdown), broken

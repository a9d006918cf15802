"""MkDocs hooks for this site (registered under ``hooks:`` in mkdocs.yml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jupytext


def on_post_build(config: Any, **kwargs: Any) -> None:
    """Write an ``.ipynb`` next to each rendered tutorial, for the download button.

    The tutorials are jupytext percent scripts; readers who use Jupyter want a
    notebook. It is written without outputs: the reader runs it (the outputs shown on
    the site come from executing the same source during this build).
    """
    docs = Path(config["docs_dir"])
    site = Path(config["site_dir"])
    for source in sorted(docs.glob("tutorials/[0-9][0-9]_*.py")):
        notebook = jupytext.read(source)
        target = site / "tutorials" / source.stem / f"{source.stem}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(notebook, target, fmt="ipynb")

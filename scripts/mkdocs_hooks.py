"""MkDocs hooks for this site (registered under ``hooks:`` in mkdocs.yml)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import jupytext

PACKAGE = Path(__file__).resolve().parents[1] / "attention"


def on_config(config: Any, **kwargs: Any) -> Any:
    """Key mkdocs-jupyter's execution cache on the package source as well.

    The plugin's cache key covers only each notebook's own text, so after a change
    to ``attention/`` it would replay outputs computed with the old code. When the
    cache is on (``make serve``), give it a directory named after a hash of the
    package source and drop the directories of older versions. ``mkdocs serve``
    reloads the config on every rebuild, so this follows edits as they happen.
    """
    plugin = config.plugins.get("mkdocs-jupyter")
    if plugin is None or not plugin.config["cache"]:
        return config
    digest = hashlib.sha256()
    for source in sorted(PACKAGE.rglob("*.py")):
        digest.update(source.relative_to(PACKAGE).as_posix().encode())
        digest.update(source.read_bytes())
    base = Path(plugin.config["cache_dir"])
    current = base / f"package-{digest.hexdigest()[:16]}"
    if base.is_dir():
        for old in base.glob("package-*"):
            if old != current:
                shutil.rmtree(old, ignore_errors=True)
    plugin.config["cache_dir"] = str(current)
    return config


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

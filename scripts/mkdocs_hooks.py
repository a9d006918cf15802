"""MkDocs hooks for this site (registered under ``hooks:`` in mkdocs.yml).

- Tutorials: executed as notebooks before any page is rendered, several at once, and
  served as Markdown pages (``scripts/notebooks.py``); the executed ``.ipynb`` and the
  jupytext source are written next to each page for download.
- Figures: every figure is rendered into the page as a ``data:`` URI by
  ``scripts/site_figures.py``; here each one becomes a content-hashed SVG file under
  ``assets/figures/``, loaded lazily, with its size declared (no layout shift) and the
  ``#only-light`` / ``#only-dark`` fragment that makes Material show the render that
  matches the reader's colour scheme.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import logging
import os
import posixpath
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

SCRIPTS = str(Path(__file__).resolve().parent)
sys.path.insert(0, SCRIPTS)  # MkDocs puts it there while it imports a hook, then removes it
import kernel_state  # noqa: E402  (torch, NumPy, matplotlib: the pages import them anyway)
import notebooks  # noqa: E402

log = logging.getLogger("mkdocs.hooks.tutorials")

TUTORIAL = re.compile(r"^tutorials/\d\d_[^/]+\.py$")
FIGURE_DIR = "assets/figures"
DATA_IMG = re.compile(
    r'<img src="data:image/svg\+xml;base64,(?P<data>[A-Za-z0-9+/=]+)" '
    r'data-scheme="(?P<scheme>light|dark)"'
)
SVG_SIZE = re.compile(r'<svg[^>]*?width="([\d.]+)pt" height="([\d.]+)pt"')

_executed: dict[str, notebooks.Executed] = {}


class TutorialFile(File):
    """A tutorial: its source is the jupytext ``.py`` (edit links point there), its
    content the Markdown rendered from the executed notebook.

    The notebook runs in the background from ``on_files`` on; the content is awaited
    only when MkDocs reads the page, which it does after every other page (the
    tutorials are the last files): the kernels and the rendering of the Markdown pages
    share the build's time instead of following one another.
    """

    run: concurrent.futures.Future[notebooks.Executed]

    @property  # type: ignore[override]
    def content_string(self) -> str:
        if self._content is None:
            try:
                run = self.run.result()
            except notebooks.TutorialError as error:
                # MkDocs reports a PluginError as its message alone: the tutorial's own
                # traceback, not the build's stack around it.
                raise PluginError(str(error)) from None
            how = "from cache" if run.cached else f"in {run.seconds:.1f} s"
            log.info("  %s executed %s", self.src_uri, how)
            self._content = notebooks.to_markdown(run)
            _executed[self.src_uri] = run
        assert isinstance(self._content, str)
        return self._content

    def is_documentation_page(self) -> bool:
        return True

    def is_static_page(self) -> bool:
        return False

    def is_media_file(self) -> bool:
        return False

    def is_javascript(self) -> bool:
        return False


def _cache_dir() -> Path | None:
    # `make serve` turns the cache on so that a live reload does not re-run eleven
    # kernels; its key covers the package and this pipeline, so it is never stale.
    if os.environ.get("ATTENTION_NOTEBOOK_CACHE", "false").lower() not in ("1", "true"):
        return None
    cache = Path(".cache") / "notebooks"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache):
            pass
    except OSError as error:
        raise PluginError(
            f"the notebook cache {cache} is not writable ({error.strerror}): make it "
            "writable, or set ATTENTION_NOTEBOOK_CACHE=false to run the tutorials uncached"
        ) from None
    return cache


def on_config(config: Any) -> Any:
    """No repository configured (a local build: REPO_URL unset), no "edit this page"
    link either: MkDocs would otherwise warn, and fail the strict build, on every page
    whose relative ``edit_uri`` has no repository to resolve against."""
    if not config.get("repo_url"):
        config["edit_uri"] = None
    return config


def on_page_markdown(markdown: str, page: Any, files: Files, **kwargs: Any) -> str:
    """Keep scripts/ importable while pages render, and let MkDocs check tutorial links.

    The concept pages' executed blocks publish their figures with ``from site_figures
    import publish`` (set per page: other plugins restore ``sys.path`` to copies they
    took earlier in the build).
    """
    if SCRIPTS not in sys.path:
        sys.path.insert(0, SCRIPTS)
    if isinstance(page.file, TutorialFile):
        markdown = _source_links(markdown, page.file, files)
    else:
        markdown = _from_a_fresh_state(markdown)
    _render_started[page.file.src_uri] = time.perf_counter()
    return markdown


# The opening line of a block markdown-exec runs, indented in tabs and admonitions.
_EXEC_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?:python|py)\b(?P<info>[^\n]*"
    r"\bexec=\"(?:on|1|true|yes)\"[^\n]*)\n",
    flags=re.MULTILINE,
)
_SESSION = re.compile(r'\bsession="(?P<name>[^"]+)"')
FRESH_STATE = "import kernel_state; kernel_state.restore_computation()  # markdown-exec: hide"


def _from_a_fresh_state(markdown: str) -> str:
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


# When each page's Markdown began to render: the blocks markdown-exec runs are most of
# a cold build after the tutorials, and the log says which pages they cost.
_render_started: dict[str, float] = {}
SLOW_PAGE_SECONDS = 2.0


# A relative link written for the page's URL, as a notebook must write it ("../../x/").
_URL_LINK = re.compile(r"\]\((?P<path>\.\./[^)#\s]*)(?P<fragment>#[^)\s]*)?\)")


def _source_links(markdown: str, file: File, files: Files) -> str:
    """Turn a tutorial's URL links into links to source files, which MkDocs validates.

    A notebook is read outside the site too (Colab, a download), so its links are
    written for the page's address, ``tutorials/NN_name/``; MkDocs only checks links to
    files. A link to no page at all is an error, as a broken link on a Markdown page is.
    """
    page_dir = posixpath.dirname(file.src_uri)  # tutorials
    url_dir = file.url  # tutorials/NN_name/

    def replace(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(url_dir, match["path"]))
        candidates = [f"{target}.md", f"{target}/index.md", f"{target}.py"]
        if target == ".":
            candidates = ["index.md"]
        found = next((c for c in candidates if files.get_file_from_path(c)), None)
        if found is None:
            log.warning("%s: link %s leads to no page", file.src_uri, match["path"])
            return match[0]
        return f"]({posixpath.relpath(found, page_dir)}{match['fragment'] or ''})"

    return _URL_LINK.sub(replace, markdown)


# The head view's viewer, in the package, served beside the explorers (see on_files).
HEAD_VIEW_FILES = ("head_view.js", "head_view.css")


def on_files(files: Files, config: Any) -> Files:
    """Start the tutorials' kernels and swap each ``.py`` for the page its run makes."""
    # A build narrowed with exclude_docs (the test of the timed pages under load) runs
    # only the tutorials it keeps.
    sources = [f for f in files if TUTORIAL.match(f.src_uri) and not f.inclusion.is_excluded()]
    docs = Path(config["docs_dir"])
    started = notebooks.start_all([docs / f.src_uri for f in sources], _cache_dir())
    log.info(
        "Executing %d tutorials (%d at a time) while the other pages render...",
        len(sources),
        min(len(sources), os.cpu_count() or 1),
    )
    _executed.clear()
    _one_thread_beside_the_kernels()
    kernel_state.snapshot(once=True)  # what each executed block starts from (_from_a_fresh_state)
    for file, run in zip(sources, started, strict=True):
        page = TutorialFile(file.src_uri, file.src_dir, file.dest_dir, file.use_directory_urls)
        page.run = run
        files.remove(file)
        files.append(page)  # MkDocs reads the pages in this order: tutorials last
    # The head view's viewer lives in the package (attention.viz.HeadView inlines it
    # into the pages it saves); the site serves the same files beside the explorers.
    for name in HEAD_VIEW_FILES:
        package_file = notebooks.PACKAGE / name
        files.append(
            File.generated(config, f"assets/explorers/{name}", abs_src_path=str(package_file))
        )
    return files


def _one_thread_beside_the_kernels() -> None:
    """Run the pages' code on one intra-op thread, for the whole build.

    The tutorials' kernels take one core each while the pages render; a parallel region
    of two threads here would wait for a core a kernel holds at every step (measured:
    the pages' code ran more than twice as slow). Set once, never changed mid-build: no
    page asserts anything about time, and a page that times code sets its own count.
    """
    import torch

    torch.set_num_threads(1)


def _figure_file(match: re.Match[str], page_url: str, site: Path) -> str:
    svg = base64.b64decode(match["data"])
    name = hashlib.sha256(svg).hexdigest()[:16] + ".svg"
    target = site / FIGURE_DIR / name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(svg)
    size = SVG_SIZE.search(svg[:2000].decode(errors="replace"))
    dims = ""
    if size:  # points to CSS pixels: the browser reserves the box before it loads
        width, height = (round(float(v) * 96 / 72) for v in size.groups())
        dims = f' width="{width}" height="{height}"'
    src = posixpath.relpath(f"{FIGURE_DIR}/{name}", page_url or ".")
    return f'<img src="{src}#only-{match["scheme"]}" loading="lazy" decoding="async"{dims}'


# First among the plugins: image zoom (glightbox) and the search index read the page's
# HTML in this same event and must see files, not megabytes of data: URIs.
@event_priority(100)
def on_page_content(html: str, page: Any, config: Any, **kwargs: Any) -> str:
    """Move every inline figure into its own file (see the module docstring), and log
    the pages whose Markdown took long to render (their executed code)."""
    started = _render_started.pop(page.file.src_uri, None)
    if started is not None and (seconds := time.perf_counter() - started) > SLOW_PAGE_SECONDS:
        log.info("  %s rendered in %.1f s (its code runs at build)", page.file.src_uri, seconds)
    if "data:image/svg+xml;base64," not in html:
        return html
    site = Path(config["site_dir"])
    url = page.url.rstrip("/") if page.url else ""
    return DATA_IMG.sub(lambda m: _figure_file(m, url, site), html)


def on_post_build(config: Any, **kwargs: Any) -> None:
    """Offer each tutorial's source and executed notebook next to its page, and drop
    what no reader will ever be sent."""
    site = Path(config["site_dir"])
    # Material ships lunr's stemmers for every language it supports; the search worker
    # loads only those of the languages configured, and English needs none.
    search = config.plugins.get("material/search") or config.plugins.get("search")
    languages = set(search.config.lang or ["en"]) if search is not None else {"en"}
    if languages == {"en"}:
        shutil.rmtree(site / "assets" / "javascripts" / "lunr", ignore_errors=True)
    # Source maps of the theme's minified bundles: for its developers' debuggers only.
    for source_map in (site / "assets").rglob("*.map"):
        source_map.unlink()
    for run in _executed.values():
        stem = run.source.stem
        folder = site / "tutorials" / stem
        folder.mkdir(parents=True, exist_ok=True)
        (folder / run.source.name).write_bytes(run.source.read_bytes())
        notebook = notebooks.for_download(run.notebook, config.get("repo_url"))
        nbformat.write(notebook, folder / f"{stem}.ipynb")

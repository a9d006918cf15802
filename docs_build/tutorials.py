"""Build step: execute the tutorials as Jupyter notebooks, turn each into a Markdown page.

The tutorials are jupytext percent scripts (``docs/tutorials/NN_*.py``). At build time
each one is read as a notebook, executed in its own Jupyter kernel (several at once),
and rendered as an ordinary Markdown page of the site:

- Markdown cells are kept as they are, so the tutorials get everything the other pages
  get: math typeset at build, admonitions, cross-links, search, one stylesheet.
- Code cells become highlighted code blocks inside ``<div class="nb-cell">``, excluded
  from the search index (readers search for ideas, not for ``torch.manual_seed``).
- Printed output follows in a ``<pre class="nb-output">`` block.
- Figures come out of the kernel as a light and a dark SVG (``figures``), each
  with the caption its cell declares in its header: ``# %% caption="..."``, or
  ``captions=["...", "..."]`` for a cell that draws several. A figure without a caption,
  or a caption without a figure, fails the build.

The kernel's matplotlib backend is set here, never inherited: a build run with
``MPLBACKEND=Agg`` in its environment (common on CI) used to produce pages without a
single figure. Executed notebooks (with their outputs) are what readers download.

Each worker keeps one kernel and runs its tutorials in it one after another: starting a
kernel and importing torch cost ~3 s of CPU, a third of a short tutorial's. Between two
tutorials the kernel is returned to the state a fresh one has (``kernel_state``: empty
namespace, torch's start-up random state and defaults, matplotlib's style, warning
filters, working directory), and execution counts are renumbered from 1, so a page
and its download are what a fresh kernel gives.

Execution is a step of its own: ``python -m docs_build.tutorials`` (``make tutorials``)
executes every tutorial whose cached run is missing or stale, and the site's build then
renders from the cache. The cache (``.cache/notebooks/``) is keyed by a hash of
everything a run depends on (:func:`cache_key`), so it is never stale;
``ATTENTION_NOTEBOOK_CACHE=false`` switches it off. The build executes what the cache
lacks itself, while the other pages render.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import html
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat import NotebookNode

from docs_build import BuildError, dist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = ROOT / "attention"
TUTORIALS = ROOT / "docs" / "tutorials"
CACHE = Path(".cache") / "notebooks"  # relative: beside the mkdocs.yml being built
# The mimetype under which the kernel returns the dark render of a figure. It is a
# site-only detail: it is removed from the notebooks offered for download.
DARK_SVG = "application/vnd.attention-site.dark-svg+xml"
LIGHT_SVG = "image/svg+xml"
TIMEOUT_PER_CELL_S = 600
# What attention.viz.HeadView gives Jupyter besides its HTML: its data alone.
HEAD_VIEW = "application/vnd.attention.head-view+json"

# Run in the kernel before the first cell (and removed from the notebook afterwards).
KERNEL_SETUP = f"""
from IPython import get_ipython
# The inline backend registers its own figure formatters when it is switched on, so
# switch it on first, then replace them with the site's light and dark renders.
get_ipython().run_line_magic("matplotlib", "inline")
from IPython.core.formatters import BaseFormatter
from matplotlib.figure import Figure
from traitlets import ObjectName, Unicode
from docs_build import figures as site_figures
site_figures.apply_style()

class _DarkSVGFormatter(BaseFormatter):
    format_type = Unicode({DARK_SVG!r})
    print_method = ObjectName("_repr_dark_svg_")

_display = get_ipython().display_formatter
_display.formatters[{DARK_SVG!r}] = _DarkSVGFormatter(parent=_display)
_display.formatters[{LIGHT_SVG!r}].for_type(Figure, site_figures.light_for_display)
_display.formatters[{DARK_SVG!r}].for_type(Figure, site_figures.dark_for_display)
_display.formatters["image/png"].enabled = False
del _display, _DarkSVGFormatter, BaseFormatter, ObjectName, Unicode
from docs_build import kernel_state
kernel_state.snapshot()
"""

# Run before the first cell of every later tutorial in the same kernel (and removed).
KERNEL_RESET = """
get_ipython().run_line_magic("reset", "-f")
from docs_build import kernel_state
kernel_state.restore()
del kernel_state
"""


class TutorialError(RuntimeError):
    """A tutorial failed to execute or to convert; the message says where."""


@dataclass
class Executed:
    """One executed tutorial: the notebook with outputs, and how long it took."""

    source: Path
    notebook: NotebookNode
    seconds: float
    cached: bool


# The environment a run reads: the tutorials that train take their seed from
# ATTENTION_SEED, and ATen's kernels and thread counts change the printed digits.
KEY_ENVIRONMENT = ("ATTENTION_SEED", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")


def package_files() -> list[Path]:
    """Every file the package ships, not only its modules: a tutorial's output can inline
    package data (the head view's ``head_view.js`` and ``head_view.css``)."""
    return sorted(
        path
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def cache_key(source: Path) -> str:
    """Hash of everything an executed tutorial depends on: itself, the package, the
    kernel's setup, the figure rendering, the versions of torch, NumPy and matplotlib,
    and the environment variables the runs read. A change to any of them re-executes it.
    (The tutorials read no other file: none opens one.)
    """
    import matplotlib
    import numpy
    import torch

    versions = f"torch {torch.__version__} numpy {numpy.__version__} mpl {matplotlib.__version__}"
    digest = hashlib.sha256((KERNEL_SETUP + KERNEL_RESET + versions).encode())
    for name in KEY_ENVIRONMENT:
        digest.update(f"{name}={os.environ.get(name, '')}\0".encode())
    inputs = [
        source.resolve(),
        HERE / "figures.py",
        HERE / "kernel_state.py",
        *package_files(),
    ]
    for path in inputs:
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def cached_run(cache_dir: Path, source: Path) -> Path:
    """Where ``cache_dir`` keeps the run of ``source`` as it is now (`cache_key`)."""
    return cache_dir / f"{source.stem}-{cache_key(source)}.ipynb"


class Kernel:
    """A Jupyter kernel that runs tutorials one after another, reset between them.

    Started on first use; ``threads`` caps its intra-op threads, so that kernels running
    side by side each get their share of the cores instead of all spinning on all.
    """

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads
        self.manager: KernelManager | None = None
        self.runs = 0
        self._sockets = ""

    def start(self, cwd: Path) -> KernelManager:
        if self.manager is None:
            # The kernel inherits this environment: pin the backend (module docstring).
            env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
            # A reader's kernel shows the warnings Jupyter shows, not the build's choice
            # (the test build sets PYTHONWARNINGS to catch warnings in its own log).
            env.pop("PYTHONWARNINGS", None)
            if self.threads is not None:
                env["OMP_NUM_THREADS"] = str(self.threads)
            # Local sockets in a private folder instead of TCP on localhost: nothing
            # listens on a port, and ipykernel does not warn about unencrypted TCP.
            self._sockets = tempfile.mkdtemp(prefix="kernel-")
            manager = KernelManager(
                kernel_name="python3", transport="ipc", ip=f"{self._sockets}/kernel"
            )
            manager.start_kernel(env=env, cwd=str(cwd))
            self.manager, self.runs = manager, 0
        return self.manager

    def shutdown(self) -> None:
        if self.manager is not None:
            self.manager.shutdown_kernel(now=True)
            self.manager = None
        shutil.rmtree(self._sockets, ignore_errors=True)


def execute(
    source: Path,
    cache_dir: Path | None = None,
    threads: int | None = None,
    kernel: Kernel | None = None,
) -> Executed:
    """Execute one tutorial; reuse a cached run if one matches.

    In ``kernel`` if given (it is reset first if it ran a tutorial before), else in a
    fresh kernel of its own with ``threads`` intra-op threads.
    """
    cached_path = cached_run(cache_dir, source) if cache_dir else None
    if cached_path is not None and cached_path.is_file():
        return Executed(source, nbformat.read(cached_path, as_version=4), 0.0, True)
    if kernel is None:
        own = Kernel(threads)
        try:
            return execute(source, cache_dir, kernel=own)
        finally:
            own.shutdown()

    notebook = jupytext.read(source)
    first = nbformat.v4.new_code_cell(KERNEL_RESET if kernel.runs else KERNEL_SETUP)
    notebook.cells.insert(0, first)
    start = time.perf_counter()
    manager = kernel.start(source.parent)
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=TIMEOUT_PER_CELL_S,
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(source.parent)}},
    )
    try:
        client.execute()
    except Exception as error:  # CellExecutionError carries the traceback
        kernel.shutdown()  # in an unknown state: the next tutorial gets a new one
        raise TutorialError(f"{source.name} failed {_where(notebook)}\n\n{error}") from error
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
    kernel.runs += 1
    seconds = time.perf_counter() - start
    notebook.cells.pop(0)
    _number_from_one(notebook)
    if cached_path is not None:
        cached_path.parent.mkdir(parents=True, exist_ok=True)
        for stale in cached_path.parent.glob(f"{source.stem}-*.ipynb"):
            stale.unlink(missing_ok=True)
        # Written whole, then renamed: a build reading the cache at the same time (a
        # `make serve` beside the tests) never sees half a notebook.
        partial = cached_path.with_suffix(f".{os.getpid()}.partial")
        nbformat.write(notebook, partial)
        os.replace(partial, cached_path)
    return Executed(source, notebook, seconds, False)


def _where(notebook: NotebookNode) -> str:
    """The cell that raised, as readers of the page and of the source find it: its
    number among the code cells, the heading above it, and the error (for a failed
    claim, the assertion's message).
    """
    heading, code_cells = "(before the first heading)", 0
    for cell in notebook.cells[1:]:  # the first is the kernel's setup, not the tutorial
        if cell.cell_type == "markdown":
            found = re.findall(r"^#{1,3} (.+)$", cell.source, flags=re.MULTILINE)
            heading = found[-1] if found else heading
            continue
        code_cells += 1
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                return (
                    f"in code cell {code_cells} (section {heading!r}): "
                    f"{output.ename}: {output.evalue or '(no message)'}"
                )
    return "before its first cell ran"


def _number_from_one(notebook: NotebookNode) -> None:
    """Execution counts 1, 2, 3 ... as in a fresh kernel (a reused one counts on)."""
    count = 0
    for cell in notebook.cells:
        if cell.cell_type != "code" or cell.get("execution_count") is None:
            continue
        count += 1
        cell.execution_count = count
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = count


def start_all(
    sources: list[Path], cache_dir: Path | None = None, workers: int | None = None
) -> list[concurrent.futures.Future[Executed]]:
    """Start executing the tutorials side by side and return at once: the caller
    collects each run from its future when it needs it.

    ``workers`` threads (default: one per core) each keep one kernel and take the next
    tutorial from a shared queue, in the order given, until none is left.
    """
    cores = os.cpu_count() or 1
    workers = workers or min(len(sources), cores) or 1
    threads = max(1, cores // workers)
    futures = [concurrent.futures.Future[Executed]() for _ in sources]
    queue = deque(zip(sources, futures, strict=True))
    lock = threading.Lock()

    def next_run() -> tuple[Path, concurrent.futures.Future[Executed]] | None:
        with lock:
            return queue.popleft() if queue else None

    def work() -> None:
        kernel = Kernel(threads)
        try:
            while (run := next_run()) is not None:
                source, future = run
                try:
                    future.set_result(execute(source, cache_dir, kernel=kernel))
                except BaseException as error:  # reported by future.result()
                    future.set_exception(error)
        finally:
            kernel.shutdown()

    for n in range(workers):
        threading.Thread(target=work, name=f"tutorials-{n}", daemon=True).start()
    return futures


def execute_all(
    sources: list[Path], cache_dir: Path | None = None, workers: int | None = None
) -> list[Executed]:
    """Execute the tutorials side by side and wait for all of them."""
    return [future.result() for future in start_all(sources, cache_dir, workers)]


def install_cell(line: str, version: str) -> NotebookNode:
    """A first cell that installs the package this notebook was executed with, wherever
    another version or none is installed (Colab, a fresh venv); elsewhere it does nothing.
    """
    return nbformat.v4.new_code_cell(
        "# Running this notebook outside the site's build (on Colab, in a fresh venv)? This\n"
        f"# installs attention-by-running {version}, the version this notebook was executed\n"
        "# with, from the site; where that version is installed, it does nothing.\n"
        "from importlib import metadata\n\n"
        "try:\n"
        '    installed = metadata.version("attention-by-running")\n'
        "except metadata.PackageNotFoundError:\n"
        "    installed = None\n"
        f"if installed != {version!r}:\n"
        f"    %{line}"
    )


# A tutorial that imports Transformers needs the package's `hf` extra.
_NEEDS_HF = re.compile(r"^\s*(?:import|from)\s+transformers\b", re.MULTILINE)


def for_download(
    notebook: NotebookNode,
    site_url: str | None = None,
    distributions: dist.Distributions | None = None,
    source: Path | None = None,
) -> NotebookNode:
    """The notebook readers download: outputs kept, the site-only dark renders dropped,
    and (given the site's distributions) a first cell that installs the wheel the site
    offers, with the ``hf`` extra where the tutorial imports Transformers.
    """
    copy = nbformat.from_dict(json.loads(json.dumps(notebook)))
    for cell in copy.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(DARK_SVG, None)
    if site_url is not None and distributions is not None:
        text = source.read_text(encoding="utf-8") if source is not None else ""
        extras = frozenset({"hf"}) if _NEEDS_HF.search(text) else frozenset()
        line = dist.install_line(site_url, distributions.wheel.name, extras)
        copy.cells.insert(0, install_cell(line, distributions.version))
    # nbformat 4.5 wants a unique id per cell; give them stable ones (clean diffs).
    for index, cell in enumerate(copy.cells):
        cell["id"] = f"cell-{index}"
    return copy


def _captions(cell: NotebookNode) -> list[str]:
    meta = cell.metadata
    if "caption" in meta:
        return [meta["caption"]]
    return list(meta.get("captions", []))


def _figure(data: dict[str, str], caption: str) -> str:
    alt = html.escape(" ".join(caption.split()), quote=True)
    light = "data:image/svg+xml;base64," + _b64(data[LIGHT_SVG])
    dark = "data:image/svg+xml;base64," + _b64(data[DARK_SVG])
    return (
        '<figure class="site-figure">'
        f'<img src="{light}" data-scheme="light" alt="{alt}">'
        f'<img src="{dark}" data-scheme="dark" alt="{alt}">'
        f"<figcaption>{html.escape(caption.strip())}</figcaption>"
        "</figure>"
    )


def _head_view(state: dict[str, object]) -> str:
    """An ``attention.viz.HeadView``: the site's explorers mount it (their loader runs on
    every page); its inline script, for Jupyter, stays in the notebook download.
    """
    data = html.escape(json.dumps(state), quote=True)
    return (
        f'<div class="explorer" data-explorer="head-view" data-state="{data}">'
        '<p class="explorer-static"><em>The interactive head view needs JavaScript; the '
        "figure above shows the same weights.</em></p></div>"
    )


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _output_block(text: str) -> str:
    # A <pre> of our own rather than a fenced block: output is not code to copy
    # (no copy button), and it is left out of the search index like the code.
    return (
        '<pre class="nb-output no-copy" data-search-exclude><code>'
        f"{html.escape(text.rstrip())}</code></pre>"
    )


def _fence(source: str) -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", source)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}python\n{source}\n{fence}"


def to_markdown(executed: Executed) -> str:
    """The executed notebook as the Markdown of its page."""
    name = executed.source.name
    parts: list[str] = []
    for index, cell in enumerate(executed.notebook.cells):
        if cell.cell_type == "markdown":
            parts.append(cell.source)
            continue
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        captions = _captions(cell)
        body = [_fence(cell.source)]
        figures = 0
        stream = ""
        for output in cell.outputs:
            kind = output.output_type
            if kind == "stream":
                stream += output.text
                continue
            if stream:
                body.append(_output_block(stream))
                stream = ""
            if kind in ("display_data", "execute_result"):
                data = output.data
                if LIGHT_SVG in data and DARK_SVG in data:
                    if figures >= len(captions):
                        raise TutorialError(
                            f"{name}, cell {index}: figure {figures + 1} has no caption; "
                            'declare it in the cell header: # %% caption="..."'
                        )
                    body.append(_figure(data, captions[figures]))
                    figures += 1
                elif HEAD_VIEW in data:
                    body.append(_head_view(data[HEAD_VIEW]))
                elif "text/plain" in data:
                    body.append(_output_block(data["text/plain"]))
                else:
                    raise TutorialError(f"{name}, cell {index}: cannot show {sorted(data)}")
            elif kind == "error":
                raise TutorialError(f"{name}, cell {index}: {output.ename}: {output.evalue}")
        if stream:
            body.append(_output_block(stream))
        if figures != len(captions):
            raise TutorialError(
                f"{name}, cell {index}: {len(captions)} caption(s) for {figures} figure(s)"
            )
        # md_in_html: the fenced block inside the div is still Markdown.
        parts.append('<div class="nb-cell" data-search-exclude markdown>\n\n')
        parts[-1] += "\n\n".join(body) + "\n\n</div>"
    return "\n\n".join(parts) + "\n"


def cache_dir() -> Path | None:
    """The notebook cache, checked writable; None with ``ATTENTION_NOTEBOOK_CACHE=false``.

    Raises:
        BuildError: If the cache folder cannot be created or written.
    """
    if os.environ.get("ATTENTION_NOTEBOOK_CACHE", "true").lower() in ("0", "false", "no"):
        return None
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=CACHE):
            pass
    except OSError as error:
        raise BuildError(
            f"the notebook cache {CACHE} is not writable ({error.strerror}): make it "
            "writable, or set ATTENTION_NOTEBOOK_CACHE=false to run the tutorials uncached"
        ) from None
    return CACHE


def sources(folder: Path = TUTORIALS) -> list[Path]:
    """The tutorials, in the order of their numbers."""
    return sorted(folder.glob("[0-9][0-9]_*.py"))


def main(argv: list[str] | None = None) -> int:
    """``python -m docs_build.tutorials [FILE ...]``: execute what the cache lacks."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m docs_build.tutorials",
        description="Execute the tutorials into the notebook cache the site's build "
        "renders from. Runs only those whose cached run is missing or stale.",
    )
    parser.add_argument("files", nargs="*", type=Path, help="tutorials (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="kernels side by side")
    args = parser.parse_args(argv)
    cache = cache_dir()
    if cache is None:
        parser.error("ATTENTION_NOTEBOOK_CACHE=false: there is no cache to fill")
    todo = args.files or sources()
    missing = [path for path in todo if not path.is_file()]
    if missing:
        parser.error(f"no such tutorial: {', '.join(map(str, missing))}")
    start = time.perf_counter()
    failed = 0
    for path, future in zip(todo, start_all(todo, cache, args.jobs), strict=True):
        try:
            run = future.result()
        except TutorialError as error:
            failed += 1
            print(f"FAILED {error}", file=sys.stderr, flush=True)
            continue
        how = "cached" if run.cached else f"executed in {run.seconds:.1f} s"
        print(f"{path.name}: {how}", flush=True)
    # Let each worker shut its kernel down before this process exits (the kernels
    # would otherwise find their parent gone and say so). Only the workers: nbclient
    # leaves a thread of its own per worker ("tutorials-0 - runner") that never ends.
    for thread in threading.enumerate():
        if re.fullmatch(r"tutorials-\d+", thread.name):
            thread.join(timeout=30)
    print(
        f"{len(todo) - failed} of {len(todo)} tutorials in {cache}/ "
        f"({time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The site's one MkDocs plugin, ``attention-site``: every step of the build, in order.

This is the only module of :mod:`docs_build` that imports MkDocs: the steps themselves
are functions on strings and files in modules of their own. Moving to another site
generator (Zensical reads ``mkdocs.yml``, and Material for MkDocs reaches end of life in
May 2027) means rewriting this file. The events, in the order MkDocs fires them:

==================  ====================================================================
``on_config``       no repository, no "edit this page" link; start KaTeX's renderer;
                    start building the package's wheel and sdist (:mod:`~docs_build.dist`)
``on_files``        start executing the tutorials (cache first); each ``.py`` becomes a
                    page; the head view's viewer is served from the package; the
                    changelog page from ``CHANGELOG.md``
``on_nav``          keep the navigation for ``llms.txt``
``on_page_markdown``  a tutorial's Markdown is its executed notebook, its links checked;
                    every executed block of a page starts from a fresh state; each
                    ``install`` block becomes the ``pip install`` line of the built wheel
``on_env``          the footer says what the code ran with (package, torch, Python)
``on_page_content`` first: figures to files; late: the page's description, then its
                    formulas rendered (:data:`PAGE_CONTENT_LATE`)
``on_page_context`` around Material's search plugin: code reduced to text, then restored
``on_post_page``    :data:`POST_PAGE_STEPS`, in that order
``on_post_build``   tutorials' downloads, ``llms.txt``, the distributions in ``dist/``,
                    files no reader is sent removed
==================  ====================================================================

Every step raises :class:`docs_build.BuildError` for a problem the author must fix;
the plugin reports it as MkDocs reports a plugin's error: the message alone.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import platform
import posixpath
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import nbformat
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin, CombinedEvent, event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.nav import Link, Navigation, Section
from mkdocs.structure.pages import Page

from docs_build import (
    LOGGER,
    BuildError,
    accessibility,
    dist,
    figures,
    kernel_state,
    lightbox,
    llms,
    loading,
    math,
    pages,
    search_text,
    theme,
    tutorials,
)

log = logging.getLogger(f"{LOGGER}.plugin")

# The finished HTML of every page goes through these, in this order. Math first: its
# placeholders are matched by their exact attributes, which the accessibility step
# would change (a tabindex on display formulas).
POST_PAGE_STEPS: tuple[tuple[str, Callable[[str], str] | None], ...] = (
    ("math: KaTeX's markup for each formula's placeholder", None),  # the build's typesetter
    ("loading: Material's bundle deferred", loading.defer_bundle),
    ("theme: the search dialog named, no call to GitHub's API", theme.header_fixes),
    ("lightbox: GLightbox loaded lazily, light/dark pairs", lightbox.load_lazily),
    ("accessibility: scroll boxes focusable, line ids unique", accessibility.accessible),
)

TUTORIAL_PATTERN = "tutorials/[0-9][0-9]_*.py"
# The head view's viewer lives in the package (attention.viz.HeadView inlines it into
# the pages it saves); the site serves the same files beside the explorers.
HEAD_VIEW_FILES = ("head_view.js", "head_view.css")
SLOW_PAGE_SECONDS = 2.0
# The changelog's one home is the repository's CHANGELOG.md; the site shows it as a page
# (the package's metadata links to it).
CHANGELOG = "CHANGELOG.md"

T = TypeVar("T")


def _reported(event: Callable[..., T]) -> Callable[..., T]:
    """Report a :class:`BuildError` as MkDocs reports a plugin's: its message alone."""

    @functools.wraps(event)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return event(*args, **kwargs)
        except BuildError as error:
            raise PluginError(str(error)) from None

    return wrapper


class TutorialFile(File):
    """A tutorial: its source is the jupytext ``.py`` (edit links and "Last update"
    read it), its page the Markdown rendered from the executed notebook.

    MkDocs takes only Markdown files for pages; these public methods say otherwise.
    MkDocs reads the ``.py`` as the page's source (no front matter: it starts with
    ``# ---``); the plugin's first ``on_page_markdown`` replaces it by the notebook's
    Markdown. (Setting ``content_string`` instead would unset ``abs_src_path``, which
    the "Last update" plugin needs.)
    """

    def is_documentation_page(self) -> bool:
        return True

    def is_static_page(self) -> bool:
        return False

    def is_media_file(self) -> bool:
        return False

    def is_javascript(self) -> bool:
        return False


class SitePlugin(BasePlugin):  # type: ignore[type-arg]  # no options
    """The steps of :mod:`docs_build`, at the MkDocs events that run them."""

    def __init__(self) -> None:
        self.typesetter: math.Typesetter | None = None
        self.runs: dict[str, concurrent.futures.Future[tutorials.Executed]] = {}
        self.executed: list[tutorials.Executed] = []
        self.nav: Navigation | None = None
        self.descriptions: dict[str, str] = {}  # page URL -> its line in llms.txt
        self.code_insides: dict[str, list[str]] = {}  # page URL -> its <pre>s' insides
        self.render_started: dict[str, float] = {}
        self.dist_folder: Path | None = None
        self.dist_build: concurrent.futures.Future[dist.Distributions] | None = None

    # --- configuration and files ----------------------------------------------------

    @_reported
    def on_config(self, config: MkDocsConfig) -> MkDocsConfig:
        # No repository configured (a local build: REPO_URL unset), no "edit this page"
        # link either: MkDocs would otherwise warn, and fail the strict build, on every
        # page whose relative edit_uri has no repository to resolve against.
        if not config.repo_url:
            config.edit_uri = None
        # Kineto, torch.profiler's backend, writes two lines to stderr at every profile's
        # start and stop (its levels: 0 verbose to 5 those marks), dozens per build from
        # the pages that profile. It reads the level once, at the first profile: set here,
        # before any page runs and before the tutorials' kernels inherit the environment.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        if self.typesetter is not None:  # a `mkdocs serve` build that ended abnormally
            self.typesetter.renderer.close()
        self.typesetter = math.Typesetter(Path(config.docs_dir) / math.KATEX_JS)
        # The wheel and sdist build (a few seconds) while the tutorials start; the first
        # page with an install line waits for the file name.
        self._discard_distributions()
        self.dist_folder = Path(tempfile.mkdtemp(prefix="attention-dist-"))
        builder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dist")
        self.dist_build = builder.submit(dist.build, self.dist_folder / "out")
        builder.shutdown(wait=False)
        return config

    def _distributions(self) -> dist.Distributions:
        assert self.dist_build is not None, "on_config starts the build"
        return self.dist_build.result()

    def _discard_distributions(self) -> None:
        if self.dist_build is not None:
            concurrent.futures.wait([self.dist_build])
            self.dist_build = None
        if self.dist_folder is not None:
            shutil.rmtree(self.dist_folder, ignore_errors=True)
            self.dist_folder = None

    @_reported
    def on_files(self, files: Files, config: MkDocsConfig) -> Files:
        """Start the tutorials' kernels and swap each ``.py`` for the page its run makes."""
        # A build narrowed with exclude_docs (the test of the timed pages under load)
        # runs only the tutorials it keeps.
        sources = [
            file
            for file in files
            if Path(file.src_uri).match(TUTORIAL_PATTERN) and not file.inclusion.is_excluded()
        ]
        docs = Path(config.docs_dir)
        started = tutorials.start_all([docs / f.src_uri for f in sources], tutorials.cache_dir())
        log.info(
            "Executing %d tutorials (%d at a time, the cached ones skipped) while the "
            "other pages render...",
            len(sources),
            min(len(sources), os.cpu_count() or 1),
        )
        self.runs.clear()
        self.executed.clear()
        _one_thread_beside_the_kernels()
        kernel_state.snapshot(once=True)  # what each executed block starts from (pages.py)
        for file, run in zip(sources, started, strict=True):
            page = TutorialFile(file.src_uri, file.src_dir, file.dest_dir, file.use_directory_urls)
            self.runs[file.src_uri] = run
            files.remove(file)
            files.append(page)  # MkDocs reads the pages in this order: tutorials last
        for name in HEAD_VIEW_FILES:
            package_file = tutorials.PACKAGE / name
            files.append(
                File.generated(config, f"assets/explorers/{name}", abs_src_path=str(package_file))
            )
        changelog = Path(config.config_file_path).parent / CHANGELOG
        page = File.generated(config, "changelog.md", abs_src_path=str(changelog))
        # A file of the repository shown at another address, not generated content: the
        # "Last update" plugin dates generated files by the build, this by its commit.
        page.generated_by = None
        files.append(page)
        return files

    def on_nav(self, nav: Navigation, config: MkDocsConfig, files: Files) -> Navigation:
        self.nav = nav
        return nav

    # --- each page -------------------------------------------------------------------

    # First: other plugins' on_page_markdown see a tutorial's Markdown, not a placeholder.
    @event_priority(100)
    @_reported
    def _tutorial_markdown(
        self, markdown: str, page: Page, config: MkDocsConfig, files: Files
    ) -> str:
        run = self.runs.get(page.file.src_uri)
        if run is None:
            return markdown
        try:
            executed = run.result()  # the kernels ran while the pages before this rendered
        except tutorials.TutorialError as error:
            # The tutorial's own traceback, not the build's stack around it.
            raise BuildError(str(error)) from None
        how = "from cache" if executed.cached else f"in {executed.seconds:.1f} s"
        log.info("  %s executed %s", page.file.src_uri, how)
        self.executed.append(executed)
        markdown, broken = pages.source_links(
            tutorials.to_markdown(executed),
            page.file.src_uri,
            page.file.url,
            lambda path: files.get_file_from_path(path) is not None,
        )
        for link in broken:
            log.warning("%s: link %s leads to no page", page.file.src_uri, link)
        return markdown

    @_reported
    def _fresh_state(self, markdown: str, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
        if page.file.src_uri == "changelog.md" and config.repo_url and config.edit_uri:
            # Generated from the repository's CHANGELOG.md, which sits beside docs/:
            # "edit this page" opens that file (edit_uri names docs/, one level down).
            root = posixpath.normpath(posixpath.join(config.edit_uri, ".."))
            page.edit_url = f"{config.repo_url.rstrip('/')}/{root}/{CHANGELOG}"
        if page.file.src_uri not in self.runs:
            markdown = pages.from_a_fresh_state(markdown)
        if "```install" in markdown or "```dist-files" in markdown:
            markdown = dist.install_blocks(markdown, config.site_url or "/", self._distributions())
        # The blocks markdown-exec runs are most of a cold build after the tutorials;
        # the log says which pages they cost.
        self.render_started[page.file.src_uri] = time.perf_counter()
        return markdown

    on_page_markdown = CombinedEvent(_tutorial_markdown, _fresh_state)

    @_reported
    def on_env(self, env: Any, config: MkDocsConfig, files: Files) -> Any:
        """Every page's footer: the package version and the torch version its code ran
        with (the build's own, which also executed the tutorials: their cache key holds
        the package's files and torch's version)."""
        import torch

        config.copyright = dist.executed_with(
            self._distributions().version, torch.__version__, platform.python_version()
        )
        return env

    # First among the plugins: image zoom (glightbox) and the search index read the
    # page's HTML in this same event and must see files, not megabytes of data: URIs.
    @event_priority(100)
    def _figures_to_files(self, html: str, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
        started = self.render_started.pop(page.file.src_uri, None)
        if started is not None and (seconds := time.perf_counter() - started) > SLOW_PAGE_SECONDS:
            log.info("  %s rendered in %.1f s (its code runs at build)", page.file.src_uri, seconds)
        url = page.url.rstrip("/") if page.url else ""
        return figures.figure_files(html, url, Path(config.site_dir))

    # Late, so that math other plugins write in on_page_content is typeset too.
    @event_priority(-50)
    @_reported
    def _describe_and_render_math(self, html: str, page: Page, **kwargs: Any) -> str:
        if (description := llms.page_description(html, page.meta)) is not None:
            self.descriptions[page.url] = description
        assert self.typesetter is not None
        return self.typesetter.render_page(html, page.toc, page.file.src_uri)

    on_page_content = CombinedEvent(_figures_to_files, _describe_and_render_math)

    # Around Material's search plugin, which indexes page.content in on_page_context.
    @event_priority(1000)
    def _reduce_code(self, context: Any, page: Page, **kwargs: Any) -> Any:
        if page.content and "<pre" in page.content:
            page.content, self.code_insides[page.url] = search_text.reduce_code(page.content)
        return context

    @event_priority(-1000)
    def _restore_code(self, context: Any, page: Page, **kwargs: Any) -> Any:
        insides = self.code_insides.pop(page.url, None)
        if insides is None:
            return context
        try:
            page.content = search_text.restore_code(page.content or "", insides)
        except ValueError as error:  # another plugin added or removed code blocks
            raise PluginError(
                f"{page.file.src_uri}: {error} during on_page_context; "
                "their highlighting cannot be restored"
            ) from error
        return context

    on_page_context = CombinedEvent(_reduce_code, _restore_code)

    # Last: after mkdocs-glightbox's on_post_page has added the tags lightbox.py edits.
    @event_priority(-100)
    @_reported
    def on_post_page(self, output: str, page: Page, config: MkDocsConfig) -> str:
        assert self.typesetter is not None
        for _, step in POST_PAGE_STEPS:
            output = (step or self.typesetter.typeset)(output)
        return output

    @_reported
    def on_post_template(
        self, output_content: str, template_name: str, config: MkDocsConfig
    ) -> str:
        """The static templates rendered as pages: 404.html."""
        if template_name.endswith(".html"):
            return theme.header_fixes(loading.defer_bundle(output_content))
        return output_content

    # --- the end of the build --------------------------------------------------------

    @_reported
    def on_post_build(self, config: MkDocsConfig) -> None:
        """Offer each tutorial's source and executed notebook next to its page, write
        ``llms.txt``, and drop what no reader will ever be sent.
        """
        if self.typesetter is not None:
            self.typesetter.close()
            self.typesetter = None
        site = Path(config.site_dir)
        # Material ships lunr's stemmers for every language it supports; the search
        # worker loads only those of the languages configured, and English needs none.
        search = config.plugins.get("material/search") or config.plugins.get("search")
        languages = set(search.config.lang or ["en"]) if search is not None else {"en"}
        if languages == {"en"}:
            shutil.rmtree(site / "assets" / "javascripts" / "lunr", ignore_errors=True)
        # Source maps of the theme's minified bundles: for its developers' debuggers only.
        for source_map in (site / "assets").rglob("*.map"):
            source_map.unlink()
        for run in self.executed:
            stem = run.source.stem
            folder = site / "tutorials" / stem
            folder.mkdir(parents=True, exist_ok=True)
            (folder / run.source.name).write_bytes(run.source.read_bytes())
            notebook = tutorials.for_download(
                run.notebook, config.site_url or "/", self._distributions(), run.source
            )
            nbformat.write(notebook, folder / f"{stem}.ipynb")
        assert self.nav is not None, "on_nav runs before on_post_build"
        text = llms.llms_txt(
            config.site_name, config.site_description, config.site_url, self._llms_sections()
        )
        (site / "llms.txt").write_text(text, encoding="utf-8")
        self._publish_distributions(site / dist.FOLDER)

    def _publish_distributions(self, folder: Path) -> None:
        """The wheel and sdist into ``dist/``, alone: an earlier build's files are removed
        first, so an older version is never offered beside the current one."""
        built = self._distributions()
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for path in (built.wheel, built.sdist):
            shutil.copy2(path, folder / path.name)
        self._discard_distributions()

    def on_build_error(self, error: Exception) -> None:
        if self.typesetter is not None:
            self.typesetter.renderer.close()
            self.typesetter = None
        self._discard_distributions()

    def _llms_sections(self) -> list[tuple[str, list[llms.Entry]]]:
        """The navigation as llms.txt's sections: pages outside a section first, as
        "Overview".
        """
        assert self.nav is not None
        loose: list[llms.Entry] = []
        sections: list[tuple[str, list[llms.Entry]]] = []
        for item in self.nav.items:
            if isinstance(item, Section):
                sections.append((item.title, [self._entry(page) for page in _pages(item)]))
            else:
                if not loose:
                    sections.append(("Overview", loose))
                loose.append(self._entry(item))
        return sections

    def _entry(self, item: Page | Link) -> llms.Entry:
        if isinstance(item, Link):
            return llms.Entry(str(item.title), item.url, external=True)
        return llms.Entry(str(item.title), item.url, self.descriptions.get(item.url))


def _pages(section: Section) -> list[Page | Link]:
    found: list[Page | Link] = []
    for child in section.children:
        found.extend(_pages(child) if isinstance(child, Section) else [child])  # type: ignore[list-item]
    return found


def _one_thread_beside_the_kernels() -> None:
    """Run the pages' code on one intra-op thread, for the whole build.

    The tutorials' kernels take one core each while the pages render; a parallel region
    of two threads here would wait for a core a kernel holds at every step (measured:
    the pages' code ran more than twice as slow). Set once, never changed mid-build: no
    page asserts anything about time, and a page that times code sets its own count.
    """
    import torch

    torch.set_num_threads(1)

"""Fixtures that build the documentation site once per session, serve it locally, and walk
it once in a light and a dark browser for the desktop browser tests."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from docs_build.tutorials import CACHE, cached_run
from tests.conftest import BUILD, BUILD_SUMMARY, ROOT
from tests.docs import _reader_runs
from tests.docs._phone import PhoneWalk, walk_phones
from tests.docs._walk import SiteWalk, walk_site

# The repository the test build names (the Pages workflow passes the real one).
TEST_REPO_URL = "https://github.com/example/attention-by-running"


@pytest.fixture(scope="session")
def built_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run ``mkdocs build --strict`` exactly as ``make docs`` does and return the site.

    The tutorials come from the notebook cache where it holds their run (after
    ``make tutorials``, ``make docs`` or ``make serve``): its key covers everything a
    run depends on, so a cached run is the run the package as it is now gives, and a
    fresh checkout (CI) executes them all. The build's wall time goes into the
    session's summary (``BUILD_SUMMARY``).

    When the session includes the busy-machine test (``test_other_machines.py``), this
    is also the build on a busy machine: the session's tutorial scripts run beside it
    as its load (``_reader_runs.py``), what they gave is kept in the site
    (``_reader_runs.RECORD``), and the pages that time code run under that load: the
    tutorials among them are left out of the cache for this build.

    Under ``pytest -n`` (``make test``) the workers build it once between them: the
    first to ask builds under a file lock, and the others, waiting on the lock, find
    the site stamped with the run's id and use it.

    ``ATTENTION_PREBUILT_SITE=path`` skips the build and uses that site instead: only for
    iterating on the browser tests locally, never in CI.
    """
    if prebuilt := os.environ.get("ATTENTION_PREBUILT_SITE"):
        return Path(prebuilt)
    site = BUILD / "test-site"
    runs, busy = _reader_runs.selected(request.session.items)
    load = (runs, tmp_path_factory) if busy else None
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return _build_site(site, run_id, load)
    BUILD.mkdir(exist_ok=True)
    with FileLock(BUILD / "test-site.lock"):
        stamp = site / BUILT_BY
        if stamp.is_file() and stamp.read_text() == run_id:
            return site
        return _build_site(site, run_id, load)


# The run that built the site (xdist's id, shared by the workers of one run).
BUILT_BY = ".built-by"


def _build_site(
    site: Path,
    run_id: str | None,
    load: tuple[list[_reader_runs.Run], pytest.TempPathFactory] | None,
) -> Path:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # Headless CI often sets this; a kernel that inherited it once drew no figure at all.
    # Building with it set proves the build chooses the tutorials' backend itself.
    env["MPLBACKEND"] = "Agg"
    # Every warning the build's code raises, once per place, in the log (Python hides
    # DeprecationWarnings outside __main__): test_site fails on any.
    env["PYTHONWARNINGS"] = "default"
    # The Pages workflow passes the real repository; the tests need one to check the
    # repository, "edit this page" and Colab links against.
    env.setdefault("REPO_URL", TEST_REPO_URL)
    if load is not None:
        _forget_timed_tutorials()
    BUILD.mkdir(exist_ok=True)
    log_path = BUILD / "test-site.log"  # a file: a full pipe would stall the build
    start = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        build = subprocess.Popen(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            if load is None:
                build.wait(timeout=900)
            else:
                runs, tmp = load
                beside = _reader_runs.run_scripts(runs, tmp.mktemp, build)
        finally:
            if build.poll() is None:
                build.kill()
    output = log_path.read_text(encoding="utf-8")
    if build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{output}")
    (site / ".build-log").write_text(output)
    seconds = time.perf_counter() - start
    cached = output.count("executed from cache")
    how = "strict, " + (f"{cached} tutorials from the cache" if cached else "tutorials executed")
    if load is not None:
        beside.save(site / _reader_runs.RECORD)
        how += f", {len(beside.scripts)} tutorial scripts beside it"
    summary = f"site build ({how}): {seconds:.1f} s wall"
    (site / BUILD_SUMMARY.name).write_text(summary)
    if run_id is not None:
        (site / BUILT_BY).write_text(run_id)
    return site


def _forget_timed_tutorials() -> None:
    """Drop the cached runs of the tutorials that time code, so that the build executes
    them under its load (and caches them again)."""
    for page in _reader_runs.timed_pages():
        source = ROOT / "docs" / page
        if source.suffix == ".py":
            cached_run(ROOT / CACHE, source).unlink(missing_ok=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A browser that closed a page before its answer (a favicon's 404, say) is
        # not an error of the site's; anything else still prints its traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def site_url(built_site: Path) -> Iterator[str]:
    """Serve the built site on 127.0.0.1 (a free port) for the browser tests."""
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# Flags that work headless as root on a machine with no network (TOOLCHAIN.md).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every browser test of the session."""
    sync_api = pytest.importorskip("playwright.sync_api")
    candidates = ("chromium", "chromium-browser", "google-chrome")
    executable = next(filter(None, map(shutil.which, candidates)), None)
    if executable is None:
        pytest.fail("chromium is not installed: run `make browser` (or `make test`, which does it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def site_walk(browser, built_site: Path, site_url: str) -> SiteWalk:
    """Every page loaded once in a light and once in a dark browser, 1366 x 900, with what
    each desktop browser test asserts on recorded per page and scheme (``_walk.py``).

    Session-scoped, so that test_browser.py and test_accessibility.py share one walk: the
    first test to ask for it pays for the whole walk (axe is most of it)."""
    return walk_site(browser, built_site, site_url)


@pytest.fixture(scope="session")
def phone_walk(browser, built_site: Path, site_url: str) -> PhoneWalk:
    """Every page loaded once on a phone (390 x 844) with JavaScript on and once with it
    off, side by side, with what test_mobile.py and test_math.py assert on (``_phone.py``)."""
    return walk_phones(browser, built_site, site_url)

"""Fixtures that build the documentation site once per session, serve it locally, and walk
it on a desktop (light and dark) and on a phone (JavaScript on and off), the build and the
walks in a process of their own beside the rest of the suite (``_background.py``)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BUILD
from tests.docs._background import Background
from tests.docs._phone import PhoneWalk
from tests.docs._walk import SiteWalk

# The repository the test build names (the Pages workflow passes the real one).
TEST_REPO_URL = "https://github.com/example/attention-by-running"


def build_env() -> dict[str, str]:
    """The environment of the test build: ``make docs``'s, and what the tests need."""
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
    return env


# The build and the walks, started as soon as the session knows it needs them.
_background: list[Background] = []


def _needs(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the build (and the walks the collected tests need) in a process of their
    own, and run first the tests that need neither, then those that need only the site,
    then those that read a walk (``_background.py``). Within each part the order is
    pytest's."""
    if config.option.collectonly or not any(_needs(item, "built_site") for item in items):
        return
    walks = [
        name
        for name, fixture in (("desktop", "site_walk"), ("phone", "phone_walk"))
        if any(_needs(item, fixture) for item in items)
    ]
    items.sort(
        key=lambda item: (
            _needs(item, "site_walk") or _needs(item, "phone_walk"),
            _needs(item, "built_site"),
        )
    )
    prebuilt = os.environ.get("ATTENTION_PREBUILT_SITE")
    site = Path(prebuilt) if prebuilt else BUILD / "test-site"
    options = ["--prebuilt"] if prebuilt else []
    _background.append(Background(BUILD / "background", site, build_env(), options + walks))


def pytest_sessionfinish() -> None:
    for background in _background:
        background.stop()


@pytest.fixture(scope="session")
def built_site() -> Path:
    """The site, built by ``mkdocs build --strict`` exactly as ``make docs`` builds it
    (``_background.py``, started with the session), once the build is done.

    The tutorials come from the notebook cache where it holds their run (after
    ``make tutorials``, ``make docs`` or ``make serve``): its key covers everything a
    run depends on, so a cached run is the run the package as it is now gives, and a
    fresh checkout (CI) executes them all. The build's wall time goes
    to ``.build-seconds`` in the site folder and into the session's summary.

    ``ATTENTION_PREBUILT_SITE=path`` skips the build and uses that site instead: only for
    iterating on the browser tests locally, never in CI.
    """
    (background,) = _background
    if os.environ.get("ATTENTION_PREBUILT_SITE"):
        return background.site
    result = background.build_result()
    if result["returncode"] != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{result['stdout']}\n{result['stderr']}")
    site = background.site
    (site / ".build-log").write_text(result["stderr"])
    (site / ".build-seconds").write_text(f"{result['seconds']:.1f}")
    cached = result["stderr"].count("executed from cache")
    _build_seconds.append((result["seconds"], cached))
    return site


_build_seconds: list[tuple[float, int]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Report the build's wall time (issue: under 90 s on two idle cores), measured
    here rather than asserted: a test must not fail on a busy machine's clock."""
    for seconds, cached in _build_seconds:
        tutorials = f"{cached} tutorials from the cache" if cached else "tutorials executed"
        terminalreporter.write_line(f"site build (strict, {tutorials}): {seconds:.1f} s wall")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 (a free port) while the block runs; yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def site_url(built_site: Path) -> Iterator[str]:
    """Serve the built site on 127.0.0.1 (a free port) for the browser tests."""
    with serve(built_site) as url:
        yield url


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


def chromium_executable() -> str:
    candidates = ("chromium", "chromium-browser", "google-chrome")
    executable = next(filter(None, map(shutil.which, candidates)), None)
    if executable is None:
        raise RuntimeError(
            "chromium is not installed: run `make browser` (or `make test`, which does it)"
        )
    return executable


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the browser tests of the session that load pages
    themselves (the walks have their own, in ``_background.py``)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    try:
        executable = chromium_executable()
    except RuntimeError as error:
        pytest.fail(str(error))
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _walk(name: str) -> Any:
    """A walk's records from the background process, or the test fails with its error."""
    (background,) = _background
    records = background.walks_result()
    if "error" in records:
        pytest.fail(f"the browser walks failed in the background process:\n{records['error']}")
    return records[name]


@pytest.fixture(scope="session")
def site_walk(built_site: Path) -> SiteWalk:
    """Every page loaded once in a light and once in a dark browser, 1366 x 900, with what
    each desktop browser test asserts on recorded per page and scheme (``_walk.py``).

    Walked in the background process while the tests that need no walk run, shared by
    test_browser.py and test_accessibility.py."""
    walk: SiteWalk = _walk("desktop")
    return walk


@pytest.fixture(scope="session")
def phone_walk(built_site: Path) -> PhoneWalk:
    """Every page loaded once on a phone (390 x 844) with JavaScript on and once with it
    off, side by side, with what test_mobile.py and test_math.py assert on (``_phone.py``)."""
    walk: PhoneWalk = _walk("phone")
    return walk

"""Load every page of the built site in headless Chromium, with the network cut off.

For each page: no request may leave 127.0.0.1 (they are blocked and recorded), none
may fail, the console must stay free of errors, every formula must be typeset by the
vendored KaTeX, every image must load, and every internal link must point at a page
(and anchor) that exists. A full-page screenshot of each page is written to
``build/screenshots/`` for a human to look at.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"


# Runs in the page: what is left of the math after KaTeX, and how the images fared.
INSPECT_PAGE = """() => {
  const text = (el) => {
    const copy = el.cloneNode(true);
    copy.querySelectorAll('.katex, code, pre').forEach((n) => n.remove());
    return copy.textContent;
  };
  const arithmatex = [...document.querySelectorAll('.arithmatex')];
  const notebookMarkdown = [...document.querySelectorAll('.jupyter-wrapper .jp-RenderedMarkdown')];
  return {
    mathElements: arithmatex.length,
    untypesetMath: arithmatex
      .filter((el) => !el.querySelector('.katex'))
      .map((el) => el.textContent.slice(0, 80)),
    leftoverDelimiters: [...arithmatex, ...notebookMarkdown]
      .map(text)
      .filter((t) => /\\\\\\(|\\\\\\[|\\$/.test(t))
      .map((t) => t.trim().slice(0, 80)),
    katexErrors: document.querySelectorAll('.katex-error').length,
    katexCount: document.querySelectorAll('.katex').length,
    brokenImages: [...document.images]
      .filter((img) => !img.complete || img.naturalWidth === 0)
      .map((img) => img.src.slice(0, 80)),
    imageCount: document.images.length,
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
  };
}"""


def site_pages(site: Path) -> list[str]:
    """Relative URLs of every page (directory URLs: foo/index.html is served as foo/)."""
    pages = []
    for html in sorted(site.rglob("index.html")):
        rel = html.parent.relative_to(site).as_posix()
        pages.append("" if rel == "." else rel + "/")
    return pages


def load_fully(page, url: str) -> None:
    """Open ``url`` and return once its scripts have run and the network is quiet.

    "networkidle" alone is not enough: on a busy machine the parser can still be working
    through a long page (inline SVG figures) after 500 ms without requests, before the
    scripts at the end of the body (KaTeX and its init) have run. The load event comes
    after them.
    """
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")


class PageWatcher:
    """Records what a page does while it loads: off-site requests (blocked), failed
    requests, console errors and uncaught exceptions."""

    def __init__(self, page, origin: str) -> None:
        self.origin = origin
        self.left_site: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        page.route("**/*", self._route)
        page.on("requestfailed", self._on_request_failed)
        page.on("response", self._on_response)
        page.on("console", self._on_console)
        page.on("pageerror", self._on_page_error)

    def _route(self, route) -> None:
        url = urlparse(route.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.netloc != self.origin:
            self.left_site.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    def _on_request_failed(self, request) -> None:
        if request.url not in self.left_site:  # already reported as leaving the site
            self.failed.append(f"{request.url} ({request.failure})")

    def _on_response(self, response) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.url} (HTTP {response.status})")

    def _on_console(self, message) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def _on_page_error(self, error) -> None:
        self.errors.append(f"page error: {error}")


def test_every_page_renders_offline(browser, built_site: Path, site_url: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    origin = urlparse(site_url).netloc
    pages = site_pages(built_site)
    assert len(pages) >= 8, pages
    problems: list[str] = []
    all_links: set[str] = set()
    typeset_total = 0

    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    for rel in pages:
        page = context.new_page()
        watcher = PageWatcher(page, origin)
        load_fully(page, urljoin(site_url, rel))
        # KaTeX's fonts load asynchronously; wait for them before judging and capturing.
        page.evaluate("() => document.fonts.ready.then(() => true)")
        info = page.evaluate(INSPECT_PAGE)
        name = rel.strip("/").replace("/", "__") or "index"
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

        where = f"/{rel}"
        problems += [f"{where}: request left the site: {u}" for u in watcher.left_site]
        problems += [f"{where}: failed request: {f}" for f in watcher.failed]
        problems += [f"{where}: {e}" for e in watcher.errors]
        problems += [f"{where}: math not typeset: {m!r}" for m in info["untypesetMath"]]
        problems += [
            f"{where}: raw math delimiters left: {m!r}" for m in info["leftoverDelimiters"]
        ]
        if info["katexErrors"]:
            problems.append(f"{where}: {info['katexErrors']} KaTeX error(s)")
        problems += [f"{where}: image did not load: {src}" for src in info["brokenImages"]]
        typeset_total += info["katexCount"]
        all_links.update(link for link in info["links"] if urlparse(link).netloc == origin)
        page.close()
    context.close()

    problems += check_internal_links(all_links, built_site, site_url)
    assert not problems, "\n".join(problems)
    assert typeset_total > 20, "suspiciously little math was typeset across the site"


def check_internal_links(links: set[str], site: Path, site_url: str) -> list[str]:
    """Every same-site link resolves to a file, and its #fragment to an id on that page."""
    problems = []
    for link in sorted(links):
        url, fragment = urldefrag(link)
        path = urlparse(url).path[len(urlparse(site_url).path) :]
        target = site / path
        if path == "" or path.endswith("/"):
            target = target / "index.html"
        if not target.is_file():
            problems.append(f"broken link: {link}")
        elif fragment and target.suffix == ".html" and f'id="{fragment}"' not in target.read_text():
            problems.append(f"broken anchor: {link}")
    return problems


def test_tutorial_math_and_figures_render(browser, site_url: str) -> None:
    """The tutorial is the page where math rendering is most fragile (raw $ in cells)."""
    page = browser.new_page()
    load_fully(page, urljoin(site_url, "tutorials/01_attention_from_scratch/"))
    katex_in_cells = page.locator(".jupyter-wrapper .jp-RenderedMarkdown .katex").count()
    figures = page.locator(".jupyter-wrapper .jp-RenderedImage img").count()
    page.close()
    assert katex_in_cells >= 10
    assert figures >= 2

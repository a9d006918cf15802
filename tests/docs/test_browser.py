"""Load every page of the built site in headless Chromium, with the network cut off.

For each page: no request may leave 127.0.0.1 (they are blocked and recorded), none
may fail, the console must stay free of errors, KaTeX (which typesets the math at
build time; test_math.py checks that with JavaScript off) must report no error, every
image must load, and every internal link must point at a page
(and anchor) that exists.

With ``ATTENTION_SCREENSHOTS=1`` (``make screenshots``) a full-page screenshot of each
page is written to ``build/screenshots/`` for a human to look at. The suite does not
take them: nobody looks at CI's, and they were half of this test's time (measured:
25.7 s of screenshots against 25.6 s of loading and checking, on 20 pages).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from tests.conftest import ROOT
from tests.docs._pages import lay_out_everything, site_pages

sync_api = pytest.importorskip("playwright.sync_api")


SCREENSHOTS = ROOT / "build" / "screenshots"


# Figures load lazily; a page is judged with all of its images asked for.
LOAD_ALL_IMAGES = """async () => {
  const images = [...document.images];
  images.forEach((img) => { img.loading = 'eager'; });
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
}"""

# Runs in the page: how the math (typeset at build time) and the images fared.
INSPECT_PAGE = """() => {
  return {
    katexErrors: document.querySelectorAll('.katex-error').length,
    katexCount: document.querySelectorAll('.katex').length,
    brokenImages: [...document.images]
      .filter((img) => !img.complete || img.naturalWidth === 0)
      .map((img) => img.src.slice(0, 80)),
    imageCount: document.images.length,
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
  };
}"""


def load_fully(page, url: str) -> None:
    """Open ``url`` and return once its scripts have run and the network is quiet.

    "networkidle" alone is not enough: on a busy machine the parser can still be working
    through a long page (inline SVG figures) after 500 ms without requests, before the
    scripts at the end of the body have run. The load event comes after them.
    """
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    lay_out_everything(page)


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
    if os.environ.get("ATTENTION_SCREENSHOTS"):
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
        page.evaluate(LOAD_ALL_IMAGES)
        info = page.evaluate(INSPECT_PAGE)
        if os.environ.get("ATTENTION_SCREENSHOTS"):
            name = rel.strip("/").replace("/", "__") or "index"
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

        where = f"/{rel}"
        problems += [f"{where}: request left the site: {u}" for u in watcher.left_site]
        problems += [f"{where}: failed request: {f}" for f in watcher.failed]
        problems += [f"{where}: {e}" for e in watcher.errors]
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


# Per figure: which of its two renders is displayed, and at what size. An explorer's
# static figure is hidden once the live explorer replaces it (test_explorers.py checks
# it without JavaScript).
VISIBLE_FIGURES = """async () => {
  const figures = [...document.querySelectorAll('figure.site-figure')]
    .filter((figure) => !figure.closest('.explorer-static[hidden]'));
  const result = [];
  for (const figure of figures) {
    figure.scrollIntoView();
    const shown = [...figure.querySelectorAll('img')].filter(
      (img) => getComputedStyle(img).display !== 'none');
    await Promise.all(shown.map((img) => img.decode().catch(() => null)));
    result.push(shown.map((img) => ({
      scheme: img.src.split('#only-')[1],
      width: img.getBoundingClientRect().width,
      height: img.getBoundingClientRect().height,
      loaded: img.complete && img.naturalWidth > 0,
      caption: (figure.querySelector('figcaption') || {}).textContent || '',
    })));
  }
  return result;
}"""

# Code cells whose lines do not fit the column (a reader would have to scroll sideways).
OVERFLOWING_CODE = """() => [...document.querySelectorAll('.nb-cell pre')]
  .filter((pre) => pre.scrollWidth > pre.clientWidth + 1)
  .map((pre) => pre.textContent.split('\\n').sort((a, b) => b.length - a.length)[0])"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_figure_shows_once_in_the_colours_of_the_scheme(
    browser, built_site: Path, site_url: str, scheme: str
) -> None:
    context = browser.new_context(viewport={"width": 1366, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    problems, total = [], 0
    for rel in site_pages(built_site):
        if 'class="site-figure"' not in (built_site / rel / "index.html").read_text():
            continue
        load_fully(page, urljoin(site_url, rel))
        for index, shown in enumerate(page.evaluate(VISIBLE_FIGURES)):
            total += 1
            where = f"/{rel} figure {index + 1}"
            if [img["scheme"] for img in shown] != [scheme]:
                problems.append(f"{where}: shows {[img['scheme'] for img in shown]}")
            elif not (shown[0]["loaded"] and shown[0]["width"] > 100 and shown[0]["height"] > 50):
                problems.append(f"{where}: not visible: {shown[0]}")
            elif len(shown[0]["caption"]) < 20:
                problems.append(f"{where}: no caption")
        if rel.startswith("tutorials/") and scheme == "light":
            problems += [
                f"/{rel}: code wider than the column: {line!r}"
                for line in page.evaluate(OVERFLOWING_CODE)
            ]
    context.close()
    assert total >= 60, f"only {total} figures found on the site"
    assert not problems, "\n".join(problems)


# The heading a fragment names, where it lands, and whether the page skips off-screen work.
FRAGMENT_LANDING = """(id) => ({
  top: document.getElementById(id).getBoundingClientRect().top,
  header: document.querySelector('.md-header').getBoundingClientRect().bottom,
  visibility: getComputedStyle(document.querySelector('.md-content__inner > p')).contentVisibility,
})"""


@pytest.mark.parametrize(
    "viewport", [{"width": 1366, "height": 900}, {"width": 390, "height": 844}]
)
def test_lazy_layout_still_lands_links_on_their_heading(
    browser, site_url: str, viewport: dict[str, int]
) -> None:
    """site.css lays out only the blocks near the screen (content-visibility: auto); a
    link to a heading far down a long page must still put that heading just under the
    header, on a desktop and on a phone, and the figures on the way must show."""
    page = browser.new_page(viewport=viewport)
    try:
        page.goto(urljoin(site_url, "concepts/multi-head-attention/#what-different-heads-can-do"))
        page.wait_for_load_state("networkidle")
        landing = page.evaluate(FRAGMENT_LANDING, "what-different-heads-can-do")
        assert landing["visibility"] == "auto", landing  # readers get the lazy layout
        assert 0 <= landing["top"] - landing["header"] <= 80, landing
        for figure in page.query_selector_all("figure.site-figure")[:3]:
            figure.scroll_into_view_if_needed()
            shown = [img for img in figure.query_selector_all("img") if img.is_visible()]
            assert shown and shown[0].bounding_box()["height"] > 50
    finally:
        page.close()

"""One walk through every page of the built site, in a light and a dark browser side by
side, recording what each desktop browser test asserts on.

Loading a page is much of what a browser test costs, and four tests used to load the
site five or six times between them: axe in both schemes, renders-offline in light, and
the pages with figures once per scheme. The session fixture ``site_walk``
(``tests/docs/conftest.py``) now loads each page once per colour scheme, runs every
check's probe on that load and keeps the results in a :class:`PageRecord`; the tests
(``test_browser.py``, ``test_accessibility.py``) only assert on the records, each on one
thing, so that a failure still names its test, its page and its scheme.

Both schemes share one desktop viewport, 1366 x 900 (the axe and figure tests' size;
the renders-offline check, which was at 1280 x 900, does not depend on the width). Each
scheme has its own browser context, hence its own renderer process: while axe works
through a page in one scheme, the other scheme's copy loads and is inspected on the
second core. The tabs run half a step apart: a tab collects its verdict, runs its
post-axe probes and moves on to the next page while the other tab's axe still runs.

Each page gets a fresh tab, and in it, in this order:

1. **load**: the load event, Material's palette for the scheme (``data-md-color-scheme``,
   checked by the axe test: a page left in the light scheme would make the dark run
   meaningless), network idle, every block laid out (``lay_out_everything``), the fonts
   ready and every image decoded. Off-site requests are blocked (and recorded) from the
   first request on, so none can stall a load.
2. **renders offline**: ``INSPECT_PAGE`` (KaTeX errors, broken images, links) and, with
   ``ATTENTION_SCREENSHOTS=1``, the light scheme's full-page screenshot; then the
   PageWatcher's records so far (requests that left the site or failed, console errors,
   uncaught exceptions) are copied. They are copied *before* axe is injected, so that
   nothing axe does can count against the page.
3. **axe**: transitions off (``NO_TRANSITIONS``), axe injected, repeated code and math
   styles marked (``MARK_REPEATED_STYLES``), and axe started; the verdict is collected
   later. Nothing before this step scrolls the page or changes its styles (beyond
   ``lay_out_everything``, which axe always had): axe sees the page at the top, as a
   reader opens it, as on a load of its own, only later (fonts ready, images decoded).
   A screenshot run (``make screenshots``) skips axe: its full-page screenshots resize
   the viewport, and it would triple the run for a verdict nobody reads.
4. **figures and code cells**, after the verdict: ``VISIBLE_FIGURES`` scrolls each figure
   into view and ``OVERFLOWING_CODE`` measures the code cells. They run after axe because
   scrolling would change what axe sees (Material's header and tabs react to it), while
   axe's leftovers change nothing they measure: the ``data-axe-repeat`` attributes match
   no style, and with transitions and animations off every element simply shows its end
   state at once. Every image was already loaded eagerly in step 1, which changes no
   figure's verdict either: which render shows is decided by the scheme's CSS, its size
   by the layout, and each shown image is still scrolled to and decoded.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

from tests.conftest import ROOT
from tests.docs._pages import lay_out_everything, site_pages

VIEWPORT = {"width": 1366, "height": 900}

# Browser colour scheme -> the Material scheme mkdocs.yml selects for it.
SCHEMES = {"light": "default", "dark": "slate"}

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"

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

# Starts axe in the page and parks the promise of its verdict on `window`, so that the
# Python side can start the other scheme's audit before collecting this one. Only
# violations are asked for (passes and incomplete results cost time on long pages), and
# only nodes whose own impact is serious or critical are kept: a rule's impact is merely
# the worst of its nodes'.
START_AXE = """() => {
  const blocking = ['serious', 'critical'];
  axe.configure({ rules: [{ id: 'color-contrast', selector: ':not([data-axe-repeat])' }] });
  window.__axeVerdict = axe.run(document, { resultTypes: ['violations'] }).then((results) =>
    results.violations.flatMap((rule) =>
      rule.nodes
        .filter((node) => blocking.includes(node.impact))
        .map((node) => ({
          rule: rule.id,
          impact: node.impact,
          target: node.target.join(' '),
          summary: (node.failureSummary || rule.help).replace(/\\s+/g, ' ').trim(),
        }))));
}"""
AXE_VERDICT = "() => window.__axeVerdict"

# color-contrast costs one query of the layout engine per text element, and most text
# elements on these pages are syntax-highlighting tokens and KaTeX glyph boxes: up to
# 3,000 on a page, drawn in a dozen or two distinct styles. Two elements with the same
# colour, font size and weight, text shadow, opacity and background behind them have the
# same contrast, so of each such style inside code and typeset math only one element is
# left to color-contrast (every other rule still sees every element): the first that is
# not scrolled out of sight in its box, where axe could only say "incomplete". A style
# with no such element keeps all of its elements. This cuts axe's time per page by about
# two thirds without hiding a colour from it.
MARK_REPEATED_STYLES = """() => {
  const leaves = document.querySelectorAll(
    'pre span:not(:has(*)), .katex-html span:not(:has(*))');
  const transparent = 'rgba(0, 0, 0, 0)';
  const look = (el) => {
    const own = getComputedStyle(el);
    const parts = [own.color, own.fontSize, own.fontWeight, own.textShadow];
    let opacity = 1;
    for (let a = el; a; a = a.parentElement) {
      const s = getComputedStyle(a);
      opacity *= Number(s.opacity);
      if (s.backgroundImage !== 'none') parts.push(s.backgroundImage);
      if (s.backgroundColor !== transparent) {
        parts.push(s.backgroundColor);
        if (!s.backgroundColor.startsWith('rgba')) break;  // opaque: nothing shows through
      }
    }
    return parts.concat(opacity).join('|');
  };
  const inSight = (el) => {
    const box = el.closest('pre, .katex-display, div.arithmatex') || document.body;
    const outer = box.getBoundingClientRect();
    const inner = el.getBoundingClientRect();
    return inner.left >= outer.left && inner.right <= outer.right;
  };
  const byLook = new Map();
  for (const el of leaves) {
    const key = look(el);
    if (!byLook.has(key)) byLook.set(key, []);
    byLook.get(key).push(el);
  }
  for (const group of byLook.values()) {
    const kept = group.find(inSight);
    if (kept) group.forEach((el) => el === kept || el.setAttribute('data-axe-repeat', ''));
  }
  return { leaves: leaves.length, styles: byLook.size };
}"""

# Material animates colour changes (header, palette switch). Measured mid-transition, a
# colour is neither the light nor the dark one, so transitions are switched off before axe
# reads any colour.
NO_TRANSITIONS = (
    "*, *::before, *::after { transition: none !important; animation: none !important; }"
)

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
# Material scrolls the <code> inside a cell's <pre>, not the <pre> itself, so it is the
# <code> that is measured (a probe of the <pre> never fired: it missed three lines of
# 81-89 characters). Only input cells: outputs (pre.nb-output) may scroll on purpose.
OVERFLOWING_CODE = """() => [...document.querySelectorAll('.nb-cell > .highlight pre > code')]
  .filter((code) => code.scrollWidth > code.clientWidth + 1)
  .map((code) => code.textContent.split('\\n').sort((a, b) => b.length - a.length)[0])"""


class PageWatcher:
    """Records what a page does while it loads: off-site requests (blocked), failed
    requests, console errors and uncaught exceptions."""

    def __init__(self, page, origin: str) -> None:  # type: ignore[no-untyped-def]
        self.origin = origin
        self.left_site: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        page.route("**/*", self._route)
        page.on("requestfailed", self._on_request_failed)
        page.on("response", self._on_response)
        page.on("console", self._on_console)
        page.on("pageerror", self._on_page_error)

    def _route(self, route) -> None:  # type: ignore[no-untyped-def]
        url = urlparse(route.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.netloc != self.origin:
            self.left_site.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    def _on_request_failed(self, request) -> None:  # type: ignore[no-untyped-def]
        if request.url not in self.left_site:  # already reported as leaving the site
            self.failed.append(f"{request.url} ({request.failure})")

    def _on_response(self, response) -> None:  # type: ignore[no-untyped-def]
        if response.status >= 400:
            self.failed.append(f"{response.url} (HTTP {response.status})")

    def _on_console(self, message) -> None:  # type: ignore[no-untyped-def]
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def _on_page_error(self, error) -> None:  # type: ignore[no-untyped-def]
        self.errors.append(f"page error: {error}")


@dataclass
class PageRecord:
    """What one page showed in one colour scheme."""

    page: str  # relative URL, as site_pages gives it
    scheme: str  # "light" or "dark"
    palette: str | None = None  # Material's data-md-color-scheme once loaded
    left_site: list[str] = field(default_factory=list)  # PageWatcher's records
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # INSPECT_PAGE
    axe: list[dict[str, str]] | None = None  # START_AXE's verdict; None: axe did not run
    figures: list[list[dict[str, Any]]] = field(default_factory=list)  # VISIBLE_FIGURES
    overflowing_code: list[str] = field(default_factory=list)  # OVERFLOWING_CODE

    @property
    def where(self) -> str:
        return f"/{self.page} ({self.scheme})"


@dataclass
class SiteWalk:
    """Every page of the site, and its record in each scheme."""

    pages: list[str]
    records: dict[tuple[str, str], PageRecord]

    def in_scheme(self, scheme: str) -> list[PageRecord]:
        return [self.records[rel, scheme] for rel in self.pages]


def walk_site(browser, site: Path, site_url: str) -> SiteWalk:  # type: ignore[no-untyped-def]
    """Load every page of ``site`` once in each scheme and record what the tests need."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    origin = urlparse(site_url).netloc
    pages = site_pages(site)
    screenshots = bool(os.environ.get("ATTENTION_SCREENSHOTS"))
    if screenshots:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with_axe = AXE.is_file() and not screenshots

    def start(tab, record: PageRecord) -> None:  # type: ignore[no-untyped-def]
        """Steps 1-3: load, inspect, and start axe (module docstring)."""
        watcher = PageWatcher(tab, origin)
        tab.goto(urljoin(site_url, record.page), wait_until="load")
        # Material's bundle applies the palette matching the media query once it runs.
        # A page that never gets it is recorded as it is; the axe test fails on it.
        with contextlib.suppress(PlaywrightTimeout):
            tab.wait_for_function(
                "s => document.body.getAttribute('data-md-color-scheme') === s",
                arg=SCHEMES[record.scheme],
                timeout=10_000,
            )
        record.palette = tab.evaluate("() => document.body.getAttribute('data-md-color-scheme')")
        # Then the network quiet as well: "networkidle" alone is not enough, since on a
        # busy machine the parser can still be working through a long page (inline SVG
        # figures) after 500 ms without requests, before the scripts at the end of the
        # body have run. The load event comes after them.
        tab.wait_for_load_state("networkidle")
        lay_out_everything(tab)
        # KaTeX's fonts load asynchronously; wait for them before judging and capturing.
        tab.evaluate("() => document.fonts.ready.then(() => true)")
        tab.evaluate(LOAD_ALL_IMAGES)
        record.info = tab.evaluate(INSPECT_PAGE)
        if screenshots and record.scheme == "light":
            name = record.page.strip("/").replace("/", "__") or "index"
            tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
        record.left_site = list(watcher.left_site)
        record.failed = list(watcher.failed)
        record.errors = list(watcher.errors)
        if with_axe:
            tab.add_style_tag(content=NO_TRANSITIONS)
            tab.add_script_tag(path=str(AXE))
            tab.evaluate(MARK_REPEATED_STYLES)
            tab.evaluate(START_AXE)

    def finish(tab, record: PageRecord) -> None:  # type: ignore[no-untyped-def]
        """Step 4: collect axe's verdict, then look at the figures and code cells."""
        if with_axe:
            record.axe = tab.evaluate(AXE_VERDICT)
        record.figures = tab.evaluate(VISIBLE_FIGURES)
        record.overflowing_code = tab.evaluate(OVERFLOWING_CODE)
        tab.close()

    contexts = {
        scheme: browser.new_context(color_scheme=scheme, viewport=VIEWPORT, service_workers="block")
        for scheme in SCHEMES
    }
    records: dict[tuple[str, str], PageRecord] = {}
    started: dict[str, tuple[Any, PageRecord]] = {}  # per scheme: the tab axe runs in
    try:
        for rel in pages:
            for scheme, context in contexts.items():
                if scheme in started:
                    _naming_the_page(finish, *started.pop(scheme))
                record = records[rel, scheme] = PageRecord(rel, scheme)
                started[scheme] = (context.new_page(), record)
                _naming_the_page(start, *started[scheme])
        while started:
            _naming_the_page(finish, *started.popitem()[1])
    finally:
        for context in contexts.values():
            context.close()
    return SiteWalk(pages, records)


def _naming_the_page(step, tab, record: PageRecord) -> None:  # type: ignore[no-untyped-def]
    """Run one step of the walk; an error (a page that never loads) names page and scheme."""
    try:
        step(tab, record)
    except Exception as error:
        raise RuntimeError(f"{record.where}: {error}") from error

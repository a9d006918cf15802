"""One walk through every page of the built site, each page loaded once and checked in
the light and then the dark scheme, recording what each desktop browser test asserts on.

Loading a page is much of what a browser test costs. The session fixture ``site_walk``
(``tests/docs/conftest.py``) loads each page once, runs every check's probe on that
load in both schemes and keeps the results in a :class:`PageRecord` per scheme; the
tests (``test_browser.py``, ``test_accessibility.py``) only assert on the records, each
on one thing, so that a failure still names its test, its page and its scheme.

The viewport is 1366 x 900. The pages are walked in two lanes side by side, each lane a
browser context of its own (hence a renderer process of its own) taking every other
page: a visit is a few steps, and the walk takes one step in one lane, then one in the
other, so that while axe works through a page in one renderer, the other lane's page
loads, is inspected or is audited on the second core.

Each lane has one tab, in a context created with ``color_scheme="light"``, and opens its
pages in it one after another: a new tab for each page cost a quarter more of the
processor's time (356 s against 287 s for the walk). It clears what the site stored in
the browser once a page is done, so each page is a reader's first visit. On each page,
in this order:

1. **load, as a reader opens the page, and axe**: ``goto`` until the load event, a pause
   of 300 ms, and ``axe.run(document)``: no options, nothing turned off, nothing
   scrolled or laid out beforehand. This is how a reader runs axe on the page (issue
   34; a run with transitions off and every block laid out reported 0 where a reader's
   found 18 nodes), so its verdict is the one the site is held to, every node of every
   impact (``READER_AXE``). axe-core is in the page from the start (an init script of
   the context), inert until ``axe.run``, and requests nothing. Off-site requests are
   blocked (and recorded) from the first request on, so none can stall a load.
2. **the whole page laid out, light**: the verdict collected, Material's palette read
   (the axe test fails on a page left in the other scheme: its run would prove
   nothing), then every block laid out (``lay_out_everything``: site.css lays out only
   the blocks near the screen), the fonts ready and every image asked for and decoded;
   then ``INSPECT_PAGE`` (KaTeX errors, broken images, links) and, with
   ``ATTENTION_SCREENSHOTS=1``, the full-page screenshot. Then axe again, on what step 1
   could not see (``LAID_OUT_AXE``): a page opened at the top has most of its blocks not
   laid out yet, and axe takes what lies outside a block's box as off screen, so the
   rules whose verdict depends on what is on screen (``LAYOUT_RULES``) run again on the
   page laid out as a reader who scrolls through it sees each block; those that judge
   colour (``COLOUR_RULES``) only where the page shows them something new (below).
   Every other rule reads the document, which laying it out does not change. Then
   ``VISIBLE_FIGURES`` scrolls each figure into view and ``OVERFLOWING_CODE`` measures
   the code cells.
3. **dark, on the same load**: Material's own palette toggle in the header, clicked as a
   reader switches (``TO_DARK``; with CSS transitions off for the switch, so that the
   page takes the colours a reader's eye ends up with at once, not over a quarter of a
   second of frames drawn on the processor), then the palette read again,
   ``INSPECT_PAGE``, and axe's one run in this scheme: the rules that depend on colour
   (``COLOUR_RULES``), on the whole page laid out, header and menus included. Every
   other rule reads a document that is the same in both schemes, which ``SAME_DOCUMENT``
   checks (``AXE_PLANS``), and the reader's run of step 1 read it. That run is left out
   on a page that shows the colour rules nothing new: no text style, no link in its
   text and nothing they could not judge that an earlier page of the walk had not shown
   in dark (63 of 81 pages, when this was written). Then the figures again, each in
   its dark render. The PageWatcher's records (requests that left the site or failed,
   console errors, uncaught exceptions, from the first request to the last probe) are
   copied: the light record's at the toggle, the dark one's at the end.

color-contrast checks each text style once per scheme and walk (``MARK_REPEATED_STYLES``),
and link-in-text-block each pair of a link and the text around it.
A reader whose system asks for dark gets the dark palette from the first paint of every
page (``docs_build/theme.py``); ``test_browser.py`` checks that in a dark context, and
``test_site.py`` that every page carries the script that does it.

A screenshot run (``make screenshots``) skips axe: its full-page screenshots resize the
viewport, and it would triple the run for a verdict nobody reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
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

# How long a reader's run waits after the load event before it starts axe (issue 34: 3 s
# gives the same nodes).
READER_PAUSE_MS = 300

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

# Every node of every violation, whatever its impact, as one list.
_VIOLATION_NODES = """(results) => results.violations.flatMap((rule) =>
  rule.nodes.map((node) => ({
    rule: rule.id,
    impact: node.impact || rule.impact || 'unknown',
    target: node.target.join(' '),
    summary: (node.failureSummary || rule.help).replace(/\\s+/g, ' ').trim(),
  })))"""

# The page's own content, the element whose blocks site.css lays out lazily.
CONTENT = ".md-content__inner"

# Called as soon as the page's document exists: waits for the load event and the
# reader's pause, then runs axe as a reader does, axe.run(document) with no options, and
# parks the promise of its verdict on `window`, so that the other scheme's step runs
# while this page loads and axe works. (A screenshot run only waits; a page whose load
# event never comes fails instead of hanging the walk.)
READER_AXE = f"""([pause, withAxe]) => {{
  const loaded = document.readyState === 'complete' ? Promise.resolve() : new Promise(
    (resolve, reject) => {{
      addEventListener('load', resolve, {{ once: true }});
      setTimeout(() => reject(new Error('no load event after 60 s')), 60000);
    }});
  window.__axeVerdict = loaded
    .then(() => new Promise((resolve) => setTimeout(resolve, pause)))
    .then(() => (withAxe ? axe.run(document).then({_VIOLATION_NODES}) : null));
}}"""
AXE_VERDICT = "() => window.__axeVerdict"
PALETTE = "() => document.body.getAttribute('data-md-color-scheme')"

# The rules whose verdict depends on where things are on screen: in axe-core 4.14 they
# are those that call isVisibleOnScreen or measure boxes (colour contrast and the colour
# of links in text, scroll boxes, target sizes, labels that must be visible). On a page
# opened at the top, axe sees each block that is not laid out yet only as far as its
# placeholder box (site.css): these rules run again with every block laid out.
LAYOUT_RULES = [
    "color-contrast",
    "link-in-text-block",
    "scrollable-region-focusable",
    "target-size",
    "label",
    "button-name",
    "input-button-name",
    "input-image-alt",
    "select-name",
]

# The rules whose verdict depends on colour. In the dark scheme axe runs these alone, once,
# on the page laid out whole, header and menus included: every other rule reads the
# document, its accessibility attributes, what is shown and where, and none of that
# changes with the palette. SAME_DOCUMENT checks it on every page: each scheme records a
# digest of every element's tag, attributes (a scheme's twin figure, `#only-light` or
# `#only-dark`, with its scheme left out of its address) and whether it is shown, the
# twins and Material's palette switch excepted, and the test asserts the two digests
# equal. A figure's dark twin carries the attributes of its light one, which the light
# scheme's run checks (test_figures.py).
COLOUR_RULES = ["color-contrast", "link-in-text-block"]


# The scheme every page opens in (the lanes' contexts): the reader's run (READER_AXE) is
# on the page as opened, so in this scheme alone.
OPENS_IN = "light"


@dataclass(frozen=True)
class AxePlan:
    """What axe runs on each page in one scheme, on the page laid out whole."""

    laid_out_rules: list[str]  # LAID_OUT_AXE's rules
    laid_out_on: str  # the part of the page that run covers


AXE_PLANS = {
    "light": AxePlan(laid_out_rules=LAYOUT_RULES, laid_out_on=CONTENT),
    "dark": AxePlan(laid_out_rules=COLOUR_RULES, laid_out_on="html"),
}

# Until the page has settled: two frames drawn, then every CSS transition ended (Material
# fades its colours, and slides its tabs back in when the page scrolls up), so that axe
# measures the colours a reader ends up with, not a frame on the way.
_SETTLE = """
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  await Promise.all(document.getAnimations()
    .filter((a) => a instanceof CSSTransition).map((a) => a.finished.catch(() => null)));"""

# Material's palette toggle, clicked as a reader clicks it: of the palette's labels, the
# one not hidden, which selects the next palette. Material sets the body's palette
# attributes and stores the choice. Its colours fade over 250 ms; the walk turns CSS
# transitions off for the switch and on again once the page shows the new palette: the
# page ends in the same colours (every record of the walk was the same, page by page),
# without the frames in between, which the browser draws on the processor (13 s of the
# walk's processor time, measured).
TO_DARK = f"""async () => {{
  const toggle = document.querySelector('[data-md-component="palette"] label:not([hidden])');
  if (!toggle) return 'no palette toggle';
  const instant = document.head.appendChild(document.createElement('style'));
  instant.textContent = '*, *::before, *::after {{ transition: none !important; }}';
  toggle.click();
  const deadline = performance.now() + 10000;
  while (document.body.getAttribute('data-md-color-scheme') !== 'slate') {{
    if (performance.now() > deadline) return 'the toggle did not switch the palette';
    await new Promise((resolve) => setTimeout(resolve, 20));
  }}
  // Focus leaves the toggle (Material's focus-visible marks it): the document then
  // differs from the light one in its palette alone (SAME_DOCUMENT).
  document.activeElement.blur();{_SETTLE}
  instant.remove();
  return null;
}}"""

SETTLED = f"""async () => {{{_SETTLE}
}}"""

# Back from the last figure to the top, where the header covers no text.
TO_THE_TOP = f"""async () => {{
  scrollTo(0, 0);{_SETTLE}
}}"""

# What the site keeps in the browser (Material: the palette, search state): cleared when
# a page is done, so that the next page in the context is a first visit again.
FORGET_THE_VISIT = "() => { localStorage.clear(); sessionStorage.clear(); }"

SAME_DOCUMENT = """async (compare) => {
  // The explorers mount after the load (a module imported on demand): the digest waits
  // for them, so that a busy machine cannot make the schemes differ by timing alone.
  const explorers = () => [...document.querySelectorAll('[data-explorer]')];
  const deadline = performance.now() + 30000;
  while (explorers().some((e) => e.dataset.mounted !== 'true') && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const unmounted = explorers().filter((e) => e.dataset.mounted !== 'true').length;
  // A figure's twins, each with the lightbox link around it, and the palette switch.
  const twin = 'img[src*="#only-light"], img[src*="#only-dark"], a.glightbox[data-gallery], '
    + '[data-md-component="palette"] *';
  // What Material changes as the page scrolls, on its own schedule: the back-to-top
  // button and the tabs (shown or hidden), and the marks of the heading in view.
  const scrolled = '[data-md-component="top"], .md-tabs';
  const inView = / [\\w-]+--(active|passed)(?= |$)/g;
  const parts = [];
  for (const el of document.body.querySelectorAll('*')) {
    const attributes = [...el.attributes]
      .map((a) => a.name + '=' + a.value.replace(/#only-(light|dark)$/, ''))
      .map((a) => (a.startsWith('class=') ? (a + ' ').replace(inView, '').trim() : a))
      .filter((a) => !el.matches(twin) || !/^(hidden|checked)=/.test(a))
      .filter((a) => !el.matches(scrolled) || !/^(hidden|tabindex|style)=/.test(a))
      .filter((a) => !a.startsWith('data-axe-repeat='))  // the walk's own mark
      .sort();  // an attribute set again moves to the end: the order means nothing
    const free = el.matches(twin) || el.matches(scrolled);
    const shown = free ? '' : el.checkVisibility({ visibilityProperty: true });
    parts.push(el.tagName + '[' + attributes.join(' ') + ']' + shown);
  }
  // FNV-1a over the description: the digest, not a megabyte, crosses to Python, with
  // the first elements that differ from the description kept in the page before.
  let hash = 0x811c9dc5;
  const text = parts.join('\\n');
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  const before = compare ? window.__documentParts : parts;
  window.__documentParts = parts;
  const changes = [];
  for (let i = 0; i < Math.max(before.length, parts.length) && changes.length < 5; i++) {
    if (before[i] !== parts[i]) changes.push(`${before[i]} -> ${parts[i]}`.slice(0, 400));
  }
  const late = unmounted ? ` (${unmounted} explorers not mounted after 30 s)` : '';
  return { digest: parts.length + ':' + hash.toString(16) + late, changes };
}"""


# color-contrast costs one query of the layout engine per text element: on a concept page
# 4,000-6,000 of them, syntax-highlighting tokens, KaTeX glyph boxes and prose, drawn in
# a few dozen distinct styles, most of them the same on every page. Two elements with the
# same colour, font size and weight, text shadow, opacity and backgrounds behind them
# have the same contrast, so in a laid-out run color-contrast checks one element of each
# such style that no earlier page of the walk (in this scheme) had checked: the first that
# is shown and not scrolled out of sight in its box, where axe could only say
# "incomplete". The others are marked `data-axe-repeat` and left to the one checked (every
# other rule still sees every element, and the reader's run sees every element it can
# see). A style with no such element keeps all of its elements and stays unchecked for the
# next page. A failing style is then one node, on the first page that shows it.
#
# link-in-text-block compares a link with the text of the block around it: the same two
# styles, the link's underline and border included, give the same verdict. So this also
# returns the pairs no earlier page had (`links`), and how many elements of a style
# still unchecked a run could see (`unchecked`): in the dark scheme, a page with no new
# style, no new pair and nothing unchecked gives axe's colour rules (COLOUR_RULES) nothing
# they have not judged on an earlier page, and the laid-out run leaves them out there: in
# light it runs the other layout rules alone, in dark it does not run at all.
# Takes the styles and pairs checked so far and the part of the page the run covers.
MARK_REPEATED_STYLES = """([checked, checkedLinks, scope]) => {
  const root = document.querySelector(scope);
  // The marks of the other scheme's run on this load go first.
  for (const el of document.querySelectorAll('[data-axe-repeat]')) {
    el.removeAttribute('data-axe-repeat');
  }
  // KaTeX's MathML copy is clipped to a pixel for screen readers only: axe never checks
  // its contrast, so none of it may stand for a style.
  const texts = [...root.querySelectorAll('*')].filter((el) => !el.closest('.katex-mathml')
    && [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.data.trim()));
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
  const shown = (el) => {
    if (!el.checkVisibility({ visibilityProperty: true, opacityProperty: true })) return null;
    const inner = el.getBoundingClientRect();
    if (inner.width < 2 || inner.height < 2) return null;  // hidden, or clipped to a pixel
    return inner;
  };
  // In the box that scrolls it, wholly (`whole`) or in part.
  const inSight = (el, whole) => {
    const inner = shown(el);
    if (!inner) return false;
    const box = el.closest('pre, .katex-display, div.arithmatex, .md-typeset__scrollwrap');
    if (!box) return true;
    const outer = box.getBoundingClientRect();
    return whole ? inner.left >= outer.left && inner.right <= outer.right
      : inner.right > outer.left && inner.left < outer.right;
  };
  const known = new Set(checked);
  const byLook = new Map();
  for (const el of texts) {
    const key = look(el);
    if (!byLook.has(key)) byLook.set(key, []);
    byLook.get(key).push(el);
  }
  const first = [];
  let unchecked = 0;
  for (const [key, group] of byLook) {
    const kept = known.has(key) ? null : group.find((el) => inSight(el, true));
    if (!known.has(key) && !kept) {  // nothing axe could check: keep them all
      unchecked += group.filter((el) => inSight(el, false)).length;
      continue;
    }
    group.forEach((el) => el === kept || el.setAttribute('data-axe-repeat', ''));
    if (kept) first.push(key);
  }
  const decoration = (el) => {
    const s = getComputedStyle(el);
    return [s.textDecorationLine, s.borderBottomStyle, s.borderBottomWidth].join('|');
  };
  const block = (el) => {
    let a = el.parentElement;
    while (a && a !== root && getComputedStyle(a).display.startsWith('inline')) a = a.parentElement;
    return a || root;
  };
  const knownLinks = new Set(checkedLinks);
  const links = new Set();
  for (const link of root.querySelectorAll('a[href], [role="link"]')) {
    if (!shown(link)) continue;
    const around = block(link);
    const pair = [look(link), decoration(link), look(around), decoration(around)].join(' in ');
    if (!knownLinks.has(pair)) links.add(pair);
  }
  return { styles: first, links: [...links], unchecked };
}"""

# Starts the second run: the layout rules alone, on the laid-out page, repeated styles
# left out of color-contrast, and on the page's content alone: its blocks are what
# content-visibility leaves unlaid (site.css); the header, the menus and the footer are
# laid out the same for both runs, and the reader's run saw them.
LAID_OUT_AXE = f"""([rules, on]) => {{
  axe.configure({{ rules: [{{ id: 'color-contrast', selector: ':not([data-axe-repeat])' }}] }});
  window.__axeVerdict = axe.run({{ include: [on] }}, {{ runOnly: rules }})
    .then({_VIOLATION_NODES});
}}"""

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

    def forget(self) -> None:
        """Start again, for the next page in the same tab."""
        self.left_site, self.failed, self.errors = [], [], []

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
    document: str | None = None  # SAME_DOCUMENT's digest
    document_changes: list[str] = field(default_factory=list)  # its elements that differ
    left_site: list[str] = field(default_factory=list)  # PageWatcher's records
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # INSPECT_PAGE
    axe: list[dict[str, str]] | None = None  # READER_AXE's nodes; None: it did not run
    axe_laid_out: list[dict[str, str]] | None = None  # LAID_OUT_AXE's nodes
    laid_out_rules: list[str] = field(default_factory=list)  # the rules that run ran
    new_styles: int = 0  # styles, pairs and unjudged elements new to the walk
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


# The lanes the pages are walked in, side by side: one per core.
LANES = 2


def walk_site(browser, site: Path, site_url: str) -> SiteWalk:  # type: ignore[no-untyped-def]
    """Load every page of ``site`` once and record what the tests need, in both schemes."""
    origin = urlparse(site_url).netloc
    pages = site_pages(site)
    screenshots = bool(os.environ.get("ATTENTION_SCREENSHOTS"))
    if screenshots:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with_axe = AXE.is_file() and not screenshots
    records: dict[tuple[str, str], PageRecord] = {}
    # The text styles color-contrast has checked so far, and the pairs of a link and the
    # text around it link-in-text-block has, per scheme (MARK_REPEATED_STYLES).
    checked_styles: dict[str, set[str]] = {scheme: set() for scheme in SCHEMES}
    checked_links: dict[str, set[str]] = {scheme: set() for scheme in SCHEMES}

    def audit_laid_out(tab, record: PageRecord) -> Iterator[None]:  # type: ignore[no-untyped-def]
        """axe on the page laid out, in the scheme the page shows now (AXE_PLANS)."""
        plan = AXE_PLANS[record.scheme]
        styles, links = checked_styles[record.scheme], checked_links[record.scheme]
        new = tab.evaluate(MARK_REPEATED_STYLES, [sorted(styles), sorted(links), plan.laid_out_on])
        styles.update(new["styles"])
        links.update(new["links"])
        record.new_styles = len(new["styles"]) + len(new["links"]) + new["unchecked"]
        # Without anything new, the colour rules would judge again what they have judged.
        record.laid_out_rules = [
            rule for rule in plan.laid_out_rules if record.new_styles or rule not in COLOUR_RULES
        ]
        if not record.laid_out_rules:
            record.axe_laid_out = []
            return
        tab.evaluate(LAID_OUT_AXE, [record.laid_out_rules, plan.laid_out_on])
        yield
        record.axe_laid_out = tab.evaluate(AXE_VERDICT)

    def in_page(tab, script: str) -> Iterator[None]:  # type: ignore[no-untyped-def]
        """Start an async ``script`` in the page, hand the turn to the other lane while
        it waits (on transitions, say), then return its result."""
        tab.evaluate(f"() => {{ window.__step = ({script})(); }}")
        yield
        return tab.evaluate("() => window.__step")

    def watched(record: PageRecord, watcher: PageWatcher) -> None:
        record.left_site = list(watcher.left_site)
        record.failed = list(watcher.failed)
        record.errors = list(watcher.errors)

    def visit(tab, watcher, rel: str) -> Iterator[None]:  # type: ignore[no-untyped-def]
        """The steps of one page's visit (module docstring); each ``yield`` hands the
        turn to the other lane while this page loads or its axe works."""
        light = records[rel, OPENS_IN] = PageRecord(rel, OPENS_IN)
        dark = records[rel, "dark"] = PageRecord(rel, "dark")
        watcher.forget()  # the tab's previous page
        # 1. As a reader opens it, and axe as a reader runs it (in the page, from as soon
        # as its document exists: a goto that waited for the load event here would hold
        # the other lane up for the whole load).
        tab.goto(urljoin(site_url, rel), wait_until="commit")
        tab.evaluate(READER_AXE, [READER_PAUSE_MS, with_axe])
        yield
        light.axe = tab.evaluate(AXE_VERDICT)
        # 2. The whole page laid out, inspected, the layout rules again, the figures.
        light.palette = tab.evaluate(PALETTE)
        lay_out_everything(tab)
        # KaTeX's fonts load asynchronously; wait for them before judging and capturing.
        tab.evaluate("() => document.fonts.ready.then(() => true)")
        tab.evaluate(LOAD_ALL_IMAGES)
        light.info = tab.evaluate(INSPECT_PAGE)
        if screenshots:
            name = rel.strip("/").replace("/", "__") or "index"
            tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
        if with_axe:
            yield from audit_laid_out(tab, light)
        # (they scroll, so after axe)
        light.figures = tab.evaluate(VISIBLE_FIGURES)
        light.overflowing_code = tab.evaluate(OVERFLOWING_CODE)
        watched(light, watcher)
        # 3. Dark, through Material's toggle, on the same load. The documents are taken
        # on either side of the toggle, so that nothing but the toggle comes between.
        # The figures scrolled the page: Material answers (the sidebars' heights, the
        # heading marked in the contents) before the light scheme's document is taken.
        yield from in_page(tab, SETTLED)
        light.document = tab.evaluate(SAME_DOCUMENT, False)["digest"]
        failed = yield from in_page(tab, TO_DARK)
        if failed:
            raise RuntimeError(failed)
        dark.palette = tab.evaluate(PALETTE)
        same = tab.evaluate(SAME_DOCUMENT, True)
        dark.document, dark.document_changes = same["digest"], same["changes"]
        yield from in_page(tab, TO_THE_TOP)
        dark.info = tab.evaluate(INSPECT_PAGE)
        if with_axe:
            yield from audit_laid_out(tab, dark)
        dark.figures = tab.evaluate(VISIBLE_FIGURES)
        dark.overflowing_code = tab.evaluate(OVERFLOWING_CODE)
        watched(dark, watcher)
        tab.evaluate(FORGET_THE_VISIT)

    def lane(context, pages: list[str]) -> Iterator[None]:  # type: ignore[no-untyped-def]
        """Some of the pages, one after another in one tab, a step at a time."""
        tab = context.new_page()
        watcher = PageWatcher(tab, origin)
        try:
            for rel in pages:
                try:
                    yield from visit(tab, watcher, rel)
                except Exception as error:
                    raise RuntimeError(f"/{rel}: {error}") from error
        finally:
            tab.close()

    contexts = [
        browser.new_context(color_scheme=OPENS_IN, viewport=VIEWPORT, service_workers="block")
        for _ in range(LANES)
    ]
    if with_axe:
        for context in contexts:
            # axe-core in every page from its start: an init script is compiled once for
            # the context, where a script tag added to each page cost 0.35 s a page. It
            # defines `axe` and does nothing until axe.run.
            context.add_init_script(path=str(AXE))
    try:
        side_by_side([lane(c, pages[i::LANES]) for i, c in enumerate(contexts)])
    finally:
        for context in contexts:
            context.close()
    return SiteWalk(pages, {key: records[key] for key in sorted(records)})


def side_by_side(walks: list[Iterator[None]]) -> None:
    """Run walks a step at a time, one step of each in turn, until all have ended.

    A walk's step starts work in its page (a load, axe) and yields; while the next walk's
    step runs, that work goes on in the first page's renderer, on the other core."""
    while walks:
        for steps in list(walks):
            if next(steps, StopIteration) is StopIteration:
                walks.remove(steps)

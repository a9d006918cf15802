"""axe-core on every page of the built site, in light and in dark mode.

axe-core is pinned in package-lock.json and installed by ``make test`` (``npm ci``); the
test injects the installed ``axe.min.js`` into each page, so nothing is fetched from a
CDN. A page passes when axe finds no violation of impact *serious* or *critical* on it
(the level at which axe's rules mean "some readers cannot use this").

The colour scheme is chosen the way a reader's browser chooses it: mkdocs.yml pairs each
Material palette with a ``prefers-color-scheme`` media query, so a browser context
created with ``color_scheme="dark"`` gets the slate palette. The test checks that it did,
since a page silently left in the light scheme would make the dark run meaningless.

axe is slow on these pages (KaTeX and syntax highlighting make 5,000-12,000 elements on
a concept page, and color-contrast asks the layout engine about every text node), so
the two schemes run side by side: each has its own browser context, hence its own
renderer process, and axe works through a page in one scheme while the other scheme's
copy loads and is audited on the second core.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs._pages import lay_out_everything, site_pages

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]


AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"

# Browser colour scheme -> the Material scheme mkdocs.yml selects for it.
SCHEMES = {"light": "default", "dark": "slate"}

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


def format_report(violations: list[dict], limit: int = 40) -> str:
    """A count per rule, then one line per offending node: page, scheme, rule, node."""
    counts: dict[str, int] = {}
    for v in violations:
        counts[v["rule"]] = counts.get(v["rule"], 0) + 1
    lines = [f"{len(violations)} serious/critical axe violations:"]
    lines += [f"  {rule}: {n} nodes" for rule, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    for v in sorted(violations, key=lambda v: (v["rule"], v["page"], v["scheme"]))[:limit]:
        lines.append(
            f"/{v['page']} ({v['scheme']}) [{v['rule']}, {v['impact']}] {v['target']}: "
            f"{v['summary'][:220]}"
        )
    if len(violations) > limit:
        lines.append(f"... and {len(violations) - limit} more")
    return "\n".join(lines)


def open_for_audit(page, url: str, scheme: str) -> None:
    """Load ``url``, check Material applied ``scheme``'s palette, inject axe and start it."""
    page.goto(url, wait_until="load")
    # Material's bundle applies the palette matching the media query once it runs.
    page.wait_for_function(
        "s => document.body.getAttribute('data-md-color-scheme') === s",
        arg=SCHEMES[scheme],
        timeout=10_000,
    )
    page.add_style_tag(content=NO_TRANSITIONS)
    lay_out_everything(page)
    page.add_script_tag(path=str(AXE))
    page.evaluate(MARK_REPEATED_STYLES)
    page.evaluate(START_AXE)


def test_no_serious_axe_violations_light_and_dark(browser, built_site: Path, site_url: str) -> None:
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: run `npm ci` (make test does it)")
    pages = site_pages(built_site)
    assert len(pages) > 30, f"expected every page of the site, found {len(pages)}"

    tabs = {}
    for scheme in SCHEMES:
        context = browser.new_context(color_scheme=scheme, viewport={"width": 1366, "height": 900})
        # Nothing may load from elsewhere; blocked at once, it cannot stall a page load.
        context.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
        tabs[scheme] = context.new_page()

    violations: list[dict] = []
    try:
        for rel in pages:
            for scheme, tab in tabs.items():
                open_for_audit(tab, site_url + rel, scheme)
            for scheme, tab in tabs.items():
                violations += [
                    {"page": rel, "scheme": scheme, **v} for v in tab.evaluate(AXE_VERDICT)
                ]
    finally:
        for tab in tabs.values():
            tab.context.close()

    assert not violations, format_report(violations)

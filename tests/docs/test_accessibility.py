"""axe-core on every page of the built site, in light and in dark mode, as a reader runs it.

axe-core is pinned in package-lock.json and installed by ``make test`` (``npm ci``); the
site walk injects the installed ``axe.min.js`` into each page, so nothing is fetched
from a CDN.

A page passes when axe finds nothing on it: no node of any violation, whatever its
impact. That is what a reader who runs axe on the page gets (issue 34: "count every
node, and fail on any"). A filter on impact let through what axe calls moderate or
minor, such as a menu with no name among the site's landmarks, or a blank header cell
announced over a whole column, and a per-node filter hid what the rule itself rated
serious.

The reader's conditions (issue 34): a browser context created with the scheme
(``color_scheme``), 1366 x 900, ``page.goto(url, wait_until="load")``, a pause of
300 ms, then ``axe.run(document)`` with no options: nothing turned off, nothing laid
out or scrolled first. The walk opens every page so, in a context created with
``color_scheme="light"`` and nothing stored: a first visit.

A page opened at the top has most of its blocks not laid out yet (site.css lays out
only what is near the screen), and axe counts what lies outside a block's placeholder
box as off screen. So on the same load, once the reader's run is done, the rules whose
verdict depends on what is on screen run again with every block laid out, as a reader
who scrolls through the page sees each block (``_walk.py``: ``LAYOUT_RULES``,
``LAID_OUT_AXE``); a node either run finds fails the test.

Then, on the same load, the page goes dark through Material's palette toggle, as a
reader switches it, and axe runs once more: the rules that depend on colour
(``_walk.COLOUR_RULES``), on the whole page laid out, header and menus included. Every
other rule would read the same document as in light, and the test checks that it is the
same, element by element, shown or not (``_walk.SAME_DOCUMENT``). The colour rules
judge each text style, and each pair of a link and the text around it, once per scheme
and walk: on a page that shows them nothing an earlier page had not, the laid-out runs
leave them out (``_walk.MARK_REPEATED_STYLES``), and in dark there is no run left. The
test also checks that the toggle gave the slate palette, since a page silently left
light would make the dark run meaningless. A reader whose system asks for dark gets that
palette from the first paint (test_browser.py checks it in a dark context).

axe runs during the ``site_walk`` session fixture, which loads every page once for this
test and test_browser.py's together; ``_walk.py`` holds the scripts and the order of the
steps. axe is slow on these pages (KaTeX and syntax highlighting make 5,000-12,000
elements on a concept page, and color-contrast asks the layout engine about every text
node), so the pages are walked in two lanes side by side: each lane has its own browser
context, hence its own renderer process, and axe works through a page in one lane while
the other lane's page loads, is inspected or is audited on the second core.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.docs._walk import (
    AXE,
    AXE_PLANS,
    COLOUR_RULES,
    CONTENT,
    LAYOUT_RULES,
    MARK_REPEATED_STYLES,
    OPENS_IN,
    SCHEMES,
    SiteWalk,
)

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]


def format_report(violations: list[dict], limit: int = 40) -> str:
    """A count per rule, then one line per offending node: page, scheme, run, rule, node."""
    counts: dict[str, int] = {}
    for v in violations:
        counts[v["rule"]] = counts.get(v["rule"], 0) + 1
    lines = [f"{len(violations)} axe violation nodes:"]
    lines += [f"  {rule}: {n} nodes" for rule, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    for v in sorted(violations, key=lambda v: (v["rule"], v["page"], v["scheme"]))[:limit]:
        lines.append(
            f"/{v['page']} ({v['scheme']}, {v['run']}) [{v['rule']}, {v['impact']}] "
            f"{v['target']}: {v['summary'][:220]}"
        )
    if len(violations) > limit:
        lines.append(f"... and {len(violations) - limit} more")
    return "\n".join(lines)


def test_axe_finds_nothing_light_and_dark(site_walk: SiteWalk) -> None:
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: run `npm ci` (make test does it)")
    if os.environ.get("ATTENTION_SCREENSHOTS"):
        pytest.skip("a screenshot run (ATTENTION_SCREENSHOTS=1) does not run axe")
    pages = site_walk.pages
    assert len(pages) > 30, f"expected every page of the site, found {len(pages)}"
    wrong_scheme = [
        f"{record.where}: Material's palette is {record.palette!r}, not {SCHEMES[scheme]!r}"
        for (_, scheme), record in site_walk.records.items()
        if record.palette != SCHEMES[scheme]
    ]
    assert not wrong_scheme, "\n".join(wrong_scheme)

    # The dark scheme runs only the rules that depend on colour (_walk.COLOUR_RULES):
    # every other rule would read the same document as in light.
    changed = [
        f"/{rel}: the document differs between the schemes beyond colour "
        f"({light.document} != {dark.document}):\n    " + "\n    ".join(dark.document_changes)
        for rel in pages
        for light, dark in [(site_walk.records[rel, "light"], site_walk.records[rel, "dark"])]
        if light.document != dark.document
    ]
    assert not changed, "\n".join(changed)

    violations: list[dict] = []
    for (rel, scheme), record in site_walk.records.items():
        if scheme == OPENS_IN:
            assert record.axe is not None, f"{record.where}: the reader's run did not run"
        assert record.axe_laid_out is not None, f"{record.where}: the laid-out run did not run"
        violations += [
            {"page": rel, "scheme": scheme, "run": "as opened", **v} for v in record.axe or []
        ]
        violations += [
            {"page": rel, "scheme": scheme, "run": "laid out", **v} for v in record.axe_laid_out
        ]

    assert not violations, format_report(violations)


def test_the_colour_rules_are_left_out_only_where_they_have_nothing_new(
    site_walk: SiteWalk,
) -> None:
    layout_only = [rule for rule in LAYOUT_RULES if rule not in COLOUR_RULES]
    for scheme, plan in AXE_PLANS.items():
        records = site_walk.in_scheme(scheme)
        # Each lane's first page has every style to judge.
        assert records[0].new_styles and records[1].new_styles, scheme
        for record in records:
            if record.new_styles:
                assert record.laid_out_rules == plan.laid_out_rules, record.where
            else:
                kept = [rule for rule in plan.laid_out_rules if rule not in COLOUR_RULES]
                assert record.laid_out_rules == kept, record.where
    # The light run keeps the layout rules on every page; dark has no others.
    assert all(
        set(layout_only) <= set(record.laid_out_rules) for record in site_walk.in_scheme(OPENS_IN)
    )
    assert set(AXE_PLANS["dark"].laid_out_rules) <= set(COLOUR_RULES)


# What the walk meets on a page: prose with a link in it, and a line of code that a box
# scrolls, shown only in part (its style shown nowhere whole).
STYLES_PAGE = """<div class="md-content__inner" style="font: 16px sans-serif">
  <p id="prose" style="color: #222">Text with <a href="#x" id="link"
    style="color: #1a4fb3; text-decoration: underline">a link</a> in it.</p>
  <pre style="width: 200px; overflow-x: auto"><code><span id="far"
    style="color: #444; margin-left: 150px">half in sight, half out</span></code></pre>
</div>"""


def test_what_is_new_to_the_walk_is_a_style_a_link_pair_or_an_unjudged_element(
    browser,  # type: ignore[no-untyped-def]
) -> None:
    """The keys the colour rules are left out by (MARK_REPEATED_STYLES): a page is new to
    them when a text style, a link with the text around it, or an element of a style
    not yet judged is; the link's underline counts, as it does for link-in-text-block."""
    page = browser.new_page()
    try:
        page.set_content(STYLES_PAGE)

        def new(known: dict[str, list[str]]) -> dict[str, Any]:
            return page.evaluate(MARK_REPEATED_STYLES, [known["styles"], known["links"], CONTENT])

        first = new({"styles": [], "links": []})
        assert len(first["styles"]) == 2 and len(first["links"]) == 1, first  # prose, link
        assert first["unchecked"] == 1, first  # the code line, seen only in part
        page.evaluate("() => document.getElementById('far').remove()")
        assert new(first) == {"styles": [], "links": [], "unchecked": 0}
        # Every element of a judged style is left to the one judged.
        assert page.evaluate("() => document.querySelectorAll('[data-axe-repeat]').length") == 2
        # The link without its underline: the same colours, another verdict.
        page.evaluate("() => { document.getElementById('link').style.textDecoration = 'none'; }")
        assert new(first)["links"] and not new(first)["styles"]
        # The prose on another background: another contrast.
        page.evaluate("() => { document.getElementById('prose').style.background = '#eee'; }")
        assert len(new(first)["styles"]) == 2  # the prose and the link in it
    finally:
        page.close()

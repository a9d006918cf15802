"""axe-core on every page of the built site, in light and in dark mode.

axe-core is pinned in package-lock.json and installed by ``make test`` (``npm ci``); the
site walk injects the installed ``axe.min.js`` into each page, so nothing is fetched
from a CDN. A page passes when axe finds no violation of impact *serious* or *critical*
on it (the level at which axe's rules mean "some readers cannot use this").

The colour scheme is chosen the way a reader's browser chooses it: mkdocs.yml pairs each
Material palette with a ``prefers-color-scheme`` media query, so a browser context
created with ``color_scheme="dark"`` gets the slate palette. The test checks that it did,
since a page silently left in the light scheme would make the dark run meaningless.

axe runs during the ``site_walk`` session fixture, which loads every page once per scheme
(1366 x 900) for this test and test_browser.py's together; ``_walk.py`` holds the scripts
(``START_AXE``, ``MARK_REPEATED_STYLES``, ``NO_TRANSITIONS``) and explains why axe sees
each page as it would on a load of its own. axe is slow on these pages (KaTeX and syntax
highlighting make 5,000-12,000 elements on a concept page, and color-contrast asks the
layout engine about every text node), so the two schemes run side by side: each has its
own browser context, hence its own renderer process, and axe works through a page in one
scheme while the other scheme's copy loads and is audited on the second core.
"""

from __future__ import annotations

import os

import pytest

from tests.docs._walk import AXE, SCHEMES, SiteWalk

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]


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


def test_no_serious_axe_violations_light_and_dark(site_walk: SiteWalk) -> None:
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

    violations: list[dict] = []
    for (rel, scheme), record in site_walk.records.items():
        assert record.axe is not None, f"{record.where}: axe did not run"
        violations += [{"page": rel, "scheme": scheme, **v} for v in record.axe]

    assert not violations, format_report(violations)

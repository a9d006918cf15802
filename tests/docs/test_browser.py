"""Every page of the built site in headless Chromium, with the network cut off, in the
light and the dark scheme.

Each page is loaded once for this module and test_accessibility.py together, and checked
in the light scheme, then in the dark one after Material's palette toggle (the
``site_walk`` fixture; ``_walk.py`` explains the order of the steps on each load); each
test here asserts on what that walk recorded:

- every page renders offline: no request may leave 127.0.0.1 (they are blocked and
  recorded), none may fail, the console must stay free of errors, KaTeX (which typesets
  the math at build time; test_math.py checks that with JavaScript off) must report no
  error, every image must load, and every internal link must point at a page (and
  anchor) that exists;
- every figure shows once, in the render of the reader's scheme, at a visible size and
  with a caption;
- no tutorial code cell is wider than its column.

With ``ATTENTION_SCREENSHOTS=1`` (``make screenshots``) the walk writes a full-page
screenshot of each page (light scheme) to ``build/screenshots/`` for a human to look
at. The suite does not take them: nobody looks at CI's, and they were half of the
renders-offline check's time (measured: 25.7 s of screenshots against 25.6 s of loading
and checking, on 20 pages).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from tests.docs._walk import SCHEMES, SiteWalk

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]


def test_every_page_renders_offline(site_walk: SiteWalk, built_site: Path, site_url: str) -> None:
    origin = urlparse(site_url).netloc
    assert len(site_walk.pages) >= 8, site_walk.pages
    # A problem seen in both schemes is reported once, naming both.
    problems: dict[tuple[str, str], list[str]] = {}
    all_links: set[str] = set()
    typeset_total = dict.fromkeys(SCHEMES, 0)

    for (rel, scheme), record in site_walk.records.items():
        info = record.info
        found = [f"request left the site: {u}" for u in record.left_site]
        found += [f"failed request: {f}" for f in record.failed]
        found += record.errors
        if info["katexErrors"]:
            found.append(f"{info['katexErrors']} KaTeX error(s)")
        found += [f"image did not load: {src}" for src in info["brokenImages"]]
        for problem in found:
            problems.setdefault((rel, problem), []).append(scheme)
        typeset_total[scheme] += info["katexCount"]
        all_links.update(link for link in info["links"] if urlparse(link).netloc == origin)

    report = [
        f"/{rel} ({', '.join(schemes)}): {problem}" for (rel, problem), schemes in problems.items()
    ]
    report += check_internal_links(all_links, built_site, site_url)
    assert not report, "\n".join(report)
    for scheme, total in typeset_total.items():
        assert total > 20, f"suspiciously little math was typeset across the site ({scheme})"


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


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_figure_shows_once_in_the_colours_of_the_scheme(
    site_walk: SiteWalk, scheme: str
) -> None:
    problems, total = [], 0
    for record in site_walk.in_scheme(scheme):
        for index, shown in enumerate(record.figures):
            total += 1
            where = f"{record.where} figure {index + 1}"
            if [img["scheme"] for img in shown] != [scheme]:
                problems.append(f"{where}: shows {[img['scheme'] for img in shown]}")
            elif not (shown[0]["loaded"] and shown[0]["width"] > 100 and shown[0]["height"] > 50):
                problems.append(f"{where}: not visible: {shown[0]}")
            elif len(shown[0]["caption"]) < 20:
                problems.append(f"{where}: no caption")
    assert total >= 60, f"only {total} figures found on the site ({scheme})"
    assert not problems, "\n".join(problems)


def test_no_tutorial_code_cell_is_wider_than_its_column(site_walk: SiteWalk) -> None:
    """Measured in the light scheme (the dark one lays code out the same), 1366 px wide."""
    tutorials = [r for r in site_walk.in_scheme("light") if r.page.startswith("tutorials/")]
    assert tutorials, "no tutorial pages found"
    problems = [
        f"{record.where}: code wider than the column: {line!r}"
        for record in tutorials
        for line in record.overflowing_code
    ]
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


# The API pages heaviest for Lighthouse, whose members' blocks are lazy too (site.css):
# without anchor-landing.js, links to 5 of the 11 members of reference/latent and 6 of
# the 11 of reference/positional landed away from their heading (one 3,348 px below).
API_PAGES = ("reference/latent/", "reference/positional/")
MEMBER_IDS = "() => [...document.querySelectorAll('.doc-heading[id]')].map((h) => h.id)"


@pytest.mark.parametrize("api_page", API_PAGES)
def test_a_link_to_any_member_of_an_api_page_lands_on_it(
    browser, site_url: str, api_page: str
) -> None:
    """Every member's heading, opened by its link, ends just under the header once the
    page has settled (the lazy blocks above it laid out, anchor-landing.js done)."""
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    try:
        page.goto(urljoin(site_url, api_page), wait_until="load")
        members = page.evaluate(MEMBER_IDS)
        assert len(members) >= 5, members
        problems = []
        for member in members:
            page.goto("about:blank")
            page.goto(urljoin(site_url, f"{api_page}#{member}"), wait_until="load")
            page.wait_for_timeout(500)  # the page's scripts measure and lay out blocks
            landing = page.evaluate(FRAGMENT_LANDING, member)
            if not 0 <= landing["top"] - landing["header"] <= 80:
                problems.append(f"#{member}: {landing}")
        assert not problems, "\n".join(problems)
    finally:
        page.close()


# Material's palette while the page is parsed: recorded as soon as the content is in the
# document, before the deferred scripts (Material's bundle among them) have run.
SCHEME_WHILE_PARSING = """
new MutationObserver((_, observer) => {
  if (!document.querySelector('.md-content')) return;
  window.__schemeWhileParsing = document.body.getAttribute('data-md-color-scheme');
  observer.disconnect();
}).observe(document, { childList: true, subtree: true });
"""


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_first_visit_is_in_the_readers_scheme_from_the_start(
    browser, site_url: str, scheme: str
) -> None:
    """A first visit has no palette stored, and the page must still be parsed and styled
    in the reader's scheme, not switched once Material's bundle runs: a dark-mode reader
    saw the page flash light, and links that content-visibility had not laid out yet
    faded from the light link colour when they were (docs_build/theme.py)."""
    context = browser.new_context(color_scheme=scheme, service_workers="block")
    context.add_init_script(SCHEME_WHILE_PARSING)
    try:
        page = context.new_page()
        page.goto(urljoin(site_url, "concepts/masks/"), wait_until="load")
        assert page.evaluate("() => window.__schemeWhileParsing") == SCHEMES[scheme]
    finally:
        context.close()

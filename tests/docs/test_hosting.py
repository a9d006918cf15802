"""The site as hosted: it works wherever it is served, and offers what readers expect.

Material's instant navigation swaps pages without a reload only for links it finds in
``sitemap.xml``, whose URLs are absolute (built from ``site_url``). Served from another
port or path than ``site_url`` names, every click silently turns into a full page load.
The first tests serve the built site away from ``site_url`` and click through it.

The others check what readers of a documentation site expect of it: a 404 page that
helps, a repository link and an "edit this page" link to the page's real source, the
date of each page's last change, ``/llms.txt``, and figures that zoom.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import html
import http.server
import posixpath
import re
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.site


class _PrefixHandler(http.server.SimpleHTTPRequestHandler):
    """Serve a folder under a URL prefix (``/attention/``), like a GitHub project site.

    A missing file gets the site's ``404.html`` with status 404, as GitHub Pages does.
    """

    prefix = "/"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def translate_path(self, path: str) -> str:
        path = urllib.parse.urlsplit(path).path
        if not path.startswith(self.prefix):
            return str(Path(self.directory) / "does-not-exist")
        return super().translate_path("/" + path[len(self.prefix) :])

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            return super().send_error(code, message, explain)
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return None


@pytest.fixture(scope="module")
def project_site_url(built_site: Path) -> Iterator[str]:
    """The site under ``/attention/`` on ``localhost``: another host name, port and path."""
    handler = type("Handler", (_PrefixHandler,), {"prefix": "/attention/"})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(built_site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}/attention/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["root", "project"])
def served_at(request: pytest.FixtureRequest) -> str:
    """Where the site is served: ``127.0.0.1:<port>/`` and ``localhost:<port>/attention/``."""
    url = request.getfixturevalue("site_url" if request.param == "root" else "project_site_url")
    assert urllib.parse.urlsplit(url).port != 8000, "must differ from site_url's default port"
    return url


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    documents: list[str] = []
    page.on("request", lambda r: r.resource_type == "document" and documents.append(r.url))
    page.goto(url)
    # Material reads sitemap.xml right after the page loads; a click before that is a
    # plain link by design, so wait until the network is quiet.
    page.wait_for_load_state("networkidle")
    page.evaluate("window.__marker = 42")
    return page, documents


def _marker(page) -> object:
    return page.evaluate("window.__marker")


@pytest.mark.browser
def test_instant_navigation_away_from_site_url(browser, served_at: str) -> None:
    page, documents = _open(browser, served_at)
    try:
        # A header tab, then a link inside the new page's content, then history back:
        # each is an instant swap, so the window object (and our marker) survives.
        page.click(".md-tabs a.md-tabs__link:text-is('Concepts')")
        page.wait_for_function("document.title.startsWith('Concepts')")
        assert page.url == served_at + "concepts/"
        assert _marker(page) == 42, "clicking a header tab reloaded the whole page"

        page.click("article a[href$='masks/']")
        page.wait_for_function("document.title.startsWith('Masks')")
        assert page.url == served_at + "concepts/masks/"
        assert _marker(page) == 42, "clicking a link in the content reloaded the page"
        # The swapped-in page is complete: its own heading and table of contents.
        assert page.locator("article h1").inner_text().startswith("Masks")
        assert page.locator("nav.md-nav--secondary a").count() > 3

        page.go_back()
        page.wait_for_function("document.title.startsWith('Concepts')")
        assert page.url == served_at + "concepts/"
        assert _marker(page) == 42, "the back button reloaded the page"

        assert documents == [served_at], f"full page loads happened: {documents}"
    finally:
        page.close()


@pytest.mark.browser
def test_downloads_and_other_files_are_not_swapped_in(browser, site_url: str) -> None:
    """Only pages of the site are swapped in; a link to a file is left to the browser."""
    page, _ = _open(browser, site_url)
    try:
        page.evaluate(
            """() => {
                const a = document.createElement("a");
                a.href = "sitemap.xml";
                a.id = "file-link";
                a.textContent = "a file";
                document.querySelector("article").append(a);
            }"""
        )
        with page.expect_navigation():
            page.click("#file-link")
        assert page.url == site_url + "sitemap.xml"
        assert _marker(page) is None  # a real navigation: a new window object
    finally:
        page.close()


@pytest.mark.browser
def test_not_found_page(browser, built_site: Path) -> None:
    """The 404 page, served for a missing deep path, is styled and links into the site.

    Its asset and link URLs are absolute (it answers at any depth), built from
    ``site_url``'s path: the Pages workflow sets that to the project's sub-path. So the
    site is served here under the path it was built for, on another host and port.
    """
    loc = ElementTree.parse(built_site / "sitemap.xml").find(".//{*}loc")
    assert loc is not None and loc.text
    prefix = urllib.parse.urlsplit(loc.text).path
    handler = type("Handler", (_PrefixHandler,), {"prefix": prefix})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(built_site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://localhost:{server.server_address[1]}{prefix}"
    missing = root + "no/such/page/"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("response", lambda r: r.status >= 400 and r.url != missing and failed.append(r.url))
    try:
        response = page.goto(missing)
        assert response is not None and response.status == 404
        page.wait_for_load_state("networkidle")
        assert failed == [], f"assets of the 404 page did not load: {failed}"
        # Material's stylesheet applies: the header sticks to the top.
        position = page.locator(".md-header").evaluate("e => getComputedStyle(e).position")
        assert position in ("sticky", "fixed")
        assert page.locator("article h1").inner_text().strip() != ""
        links = page.locator("article a").evaluate_all("els => els.map(e => e.href)")
        paths = {urllib.parse.urlsplit(h).path for h in links if h.startswith(root)}
        for section in ("", "tutorials/", "concepts/", "reference/"):
            assert prefix + section in paths, f"no link to {section or 'home'}: {links}"
        # Each of them is a real page of the site.
        for path in paths:
            target = built_site / path[len(prefix) :] / "index.html"
            assert target.is_file(), f"the 404 page links to a missing page: {path}"
    finally:
        page.close()
        server.shutdown()
        server.server_close()


# --- What a documentation site is expected to offer ---------------------------------


_A_TAG = re.compile(r"<a\s([^>]*)>")
_ATTRIBUTE = re.compile(r'([\w:-]+)(?:="([^"]*)")?')
_DATE = re.compile(r'<span class="[^"]*git-revision-date-localized-plugin-date[^"]*"[^>]*>([^<]+)<')


@dataclasses.dataclass
class _Page:
    """What these tests read from a built page: its links' attributes, its dates."""

    links: list[dict[str, str]]
    dates: list[str]

    @classmethod
    def read(cls, path: Path) -> _Page:
        # Regular expressions, not an HTML parser: the pages are MkDocs' own output
        # (double-quoted attributes), and parsing 40 pages of KaTeX and SVG markup
        # with html.parser takes many seconds.
        text = path.read_text(encoding="utf-8")
        links = [
            {name: html.unescape(value) for name, value in _ATTRIBUTE.findall(attributes)}
            for attributes in _A_TAG.findall(text)
        ]
        return cls(links, [date.strip() for date in _DATE.findall(text)])


def _site_pages(built_site: Path) -> dict[str, _Page]:
    """Every page in the sitemap, by URL relative to the site root."""
    locs = [
        el.text or ""
        for el in ElementTree.parse(built_site / "sitemap.xml").iter()
        if el.tag.endswith("loc")
    ]
    root = urllib.parse.urlsplit(locs[0]).path  # the home page comes first
    pages = {}
    for loc in locs:
        path = urllib.parse.urlsplit(loc).path.removeprefix(root)
        pages[path] = _Page.read(built_site / path / "index.html")
    return pages


@pytest.fixture(scope="module")
def site_pages(built_site: Path) -> dict[str, _Page]:
    return _site_pages(built_site)


def _source_of(page: str, edit_url: str) -> str:
    """The docs/ path an edit link opens, checked against the page it sits on; the
    changelog page's is the repository's CHANGELOG.md, from which it is made."""
    if page == "changelog/":
        assert re.fullmatch(r"https://[^/]+/[^/]+/[^/]+/edit/[^/]+/CHANGELOG\.md", edit_url)
        return "../CHANGELOG.md"
    match = re.fullmatch(r"https://[^/]+/[^/]+/[^/]+/edit/[^/]+/docs/(.+)", edit_url)
    assert match, f"{page or 'home'}: not a GitHub edit URL: {edit_url}"
    return match[1]


def test_repository_and_edit_links(site_pages: dict[str, _Page]) -> None:
    repos = set()
    for page, parsed in site_pages.items():
        sources = [a for a in parsed.links if "md-source" in a.get("class", "").split()]
        assert sources, f"{page or 'home'}: no repository link in the header"
        # data-md-component="source" makes Material ask the GitHub API for stars and
        # forks on every fresh visit: a request to another site.
        assert all("data-md-component" not in a for a in sources), "repository facts fetched"
        repos.update(a["href"] for a in sources)

        edits = [a["href"] for a in parsed.links if a.get("rel") == "edit"]
        assert len(edits) == 1, f"{page or 'home'}: {len(edits)} edit links"
        assert edits[0].startswith(sources[0]["href"].rstrip("/") + "/edit/")
        source = _source_of(page, edits[0])
        assert (ROOT / "docs" / source).is_file(), f"{page}: edit link to a missing {source}"
        # The source is the page's own: tutorials/03_x/ <- tutorials/03_x.py (the jupytext
        # script, not a generated Markdown file); concepts/ <- concepts/index.md.
        stem = source.rsplit(".", 1)[0].removesuffix("index").rstrip("/").lower()
        assert stem.removeprefix("../") == page.rstrip("/"), f"{page or 'home'}: opens {source}"
        if page.startswith("tutorials/") and page != "tutorials/":
            assert source.endswith(".py"), f"{page}: tutorials are edited as scripts"
    assert len(repos) == 1 and repos.pop().startswith("https://"), repos


def test_a_local_build_without_a_repository_has_no_edit_links(monkeypatch, caplog) -> None:
    """``make serve`` and ``make docs`` run with REPO_URL unset. Their strict build must
    not warn about the relative ``edit_uri`` on every page (it once failed on all 38):
    the hooks drop the edit link when there is no repository to resolve it against."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files
    from mkdocs.structure.pages import Page

    monkeypatch.delenv("REPO_URL", raising=False)
    monkeypatch.chdir(ROOT)
    config = load_config(str(ROOT / "mkdocs.yml"))
    config = config.plugins.on_config(config)
    assert config["repo_url"] is None
    pages = [f for f in get_files(config) if f.src_uri.endswith(".md")]
    assert len(pages) > 20
    with caplog.at_level("WARNING"):
        for file in pages:
            page = Page(None, file, config)
            assert page.edit_url is None, file.src_uri
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_every_page_shows_the_date_of_its_last_change(site_pages: dict[str, _Page]) -> None:
    """The date under each page is its source's last commit; the build date if it has none.

    A shallow clone or a broken git lookup would stamp every page with one date.
    """
    try:
        changed = set(
            _git(
                "status", "--porcelain", "--untracked-files=all", "docs", "CHANGELOG.md"
            ).splitlines()
        )
        changed = {line[3:] for line in changed}
        in_git = True
    except (subprocess.CalledProcessError, FileNotFoundError):  # a tarball: no history
        in_git, changed = False, set()
    today = datetime.datetime.now(datetime.timezone.utc).date()
    build_dates = {today, today - datetime.timedelta(days=1)}  # a build across midnight
    for page, parsed in site_pages.items():
        assert len(parsed.dates) == 1, f"{page or 'home'}: {len(parsed.dates)} dates shown"
        shown = datetime.datetime.strptime(parsed.dates[0], "%B %d, %Y").date()
        edit = next(a["href"] for a in parsed.links if a.get("rel") == "edit")
        source = posixpath.normpath("docs/" + _source_of(page, edit))
        committed = (
            in_git and source not in changed and _git("log", "-1", "--format=%at", "--", source)
        )
        if committed:
            expected = datetime.datetime.fromtimestamp(int(committed), datetime.timezone.utc).date()
            assert shown == expected, (
                f"{page or 'home'}: shows {shown}, {source} changed {expected}"
            )
        else:
            assert shown in build_dates, f"{page or 'home'}: uncommitted, yet dated {shown}"


def test_llms_txt(built_site: Path, site_pages: dict[str, _Page]) -> None:
    """``/llms.txt`` in the llmstxt.org format, listing every page with one line on it."""
    text = (built_site / "llms.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    home = (built_site / "index.html").read_text(encoding="utf-8")
    title = re.search(r"<title>(.*?)</title>", home, re.S)
    assert title and lines[0] == f"# {html.unescape(title[1].strip())}"
    assert lines[2].startswith("> ") and len(lines[2]) > 40, "no summary blockquote"
    sections = [line[3:] for line in lines if line.startswith("## ")]
    assert {"Tutorials", "Concepts", "API reference"} <= set(sections), sections

    entry = re.compile(r"- \[(?P<title>[^\]]+)\]\((?P<url>[^)\s]+)\): (?P<about>.+)")
    entries = [entry.fullmatch(line) for line in lines if line.startswith("- ")]
    assert all(entries), [
        line for line in lines if line.startswith("- ") and not entry.fullmatch(line)
    ]
    loc = ElementTree.parse(built_site / "sitemap.xml").find(".//{*}loc")
    assert loc is not None and loc.text
    listed = [m["url"].removeprefix(loc.text) for m in entries if m]
    assert sorted(listed) == sorted(site_pages), "llms.txt and the sitemap list different pages"
    for m in entries:
        assert m is not None
        about = m["about"]
        assert len(about) <= 200, f"{m['url']}: not one line: {about}"
        for leftover in ("\\(", "\\[", "$$", "¶", "Copied!"):
            assert leftover not in about, f"{m['url']}: {leftover!r} in {about!r}"


def _page_with_most_figures(site_pages: dict[str, _Page]) -> tuple[str, int]:
    def pairs(parsed: _Page) -> int:
        return sum(
            1
            for a in parsed.links
            if "glightbox" in a.get("class", "").split() and a["href"].endswith("#only-light")
        )

    page = max(site_pages, key=lambda p: pairs(site_pages[p]))
    return page, pairs(site_pages[page])


CURRENT_SLIDE_CHANGED = (
    "prev => document.querySelector('.gslide.current img')?.getAttribute('src') !== prev"
)


@pytest.mark.browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_figures_zoom_in_the_readers_colour_scheme(
    browser, site_url: str, site_pages: dict[str, _Page], scheme: str
) -> None:
    """A click on a figure shows it full size: the render of the reader's scheme only.

    Every figure is a light and a dark render of which Material shows one. GLightbox
    links both; the hidden render's link must not be reachable (an empty link), and
    paging through the zoomed figures must never show the other scheme's twin.
    """
    path, figures = _page_with_most_figures(site_pages)
    assert figures >= 2, "no page with two light/dark figure pairs to zoom"
    shown, hidden = (
        ("#only-light", "#only-dark") if scheme == "light" else ("#only-dark", "#only-light")
    )
    page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    elsewhere: list[str] = []
    page.on(
        "request",
        lambda r: (
            r.url.startswith("http") and not r.url.startswith(site_url) and elsewhere.append(r.url)
        ),
    )
    try:
        # Arrive the way a reader does, by instant navigation from another page: the
        # lightbox must pick up figures swapped in after it was set up.
        page.goto(site_url)
        page.wait_for_load_state("networkidle")
        page.evaluate("window.__marker = 42")
        page.evaluate(
            """path => {
                const a = document.createElement("a");
                a.href = path;
                a.id = "to-figures";
                a.textContent = "figures";
                document.querySelector("article").append(a);
            }""",
            path,
        )
        page.click("#to-figures")
        page.wait_for_function("path => location.pathname.endsWith(path)", arg=path)
        page.wait_for_load_state("networkidle")
        # GLightbox loads after the page (docs_build/lightbox.py) and wraps the figures
        # when it runs: on a busy machine, later than network idle.
        page.wait_for_function(
            "n => document.querySelectorAll('article a.glightbox').length >= n", arg=figures
        )
        links = page.locator("article a.glightbox")
        boxes = links.evaluate_all(
            "els => els.map(e => [e.getAttribute('href'), e.getClientRects().length > 0])"
        )
        visible = [href for href, rendered in boxes if rendered]
        assert len(visible) == figures and all(href.endswith(shown) for href in visible), boxes
        assert not any(rendered for href, rendered in boxes if href.endswith(hidden)), boxes

        page.locator(f"article a.glightbox[href$='{shown}']").first.click()
        slide = page.locator(".gslide.current img")
        slide.wait_for(state="visible")
        seen = [slide.get_attribute("src")]
        for _ in range(figures - 1):
            page.keyboard.press("ArrowRight")
            page.wait_for_function(CURRENT_SLIDE_CHANGED, arg=seen[-1])
            seen.append(slide.get_attribute("src"))
        assert all(src.endswith(shown) for src in seen), seen
        assert len(set(seen)) == figures, f"the gallery did not walk every figure: {seen}"
        # The full-size render, loaded and drawn larger than its place in the column.
        page.wait_for_function(
            "() => { const img = document.querySelector('.gslide.current img');"
            " return img && img.complete && img.naturalWidth > 0; }"
        )
        # GLightbox's stylesheet (added once the page has loaded) lays the lightbox out.
        position = page.locator(".glightbox-container").evaluate(
            "e => getComputedStyle(e).position"
        )
        assert position == "fixed", "the lightbox is unstyled"
        width = slide.evaluate("img => img.getBoundingClientRect().width")
        assert width > 300, f"the zoomed figure is drawn {width} px wide"
        # On the lightbox's near-black overlay, each render keeps the page background it
        # was drawn for (a transparent light render would put black text on black).
        backdrop, page_background = slide.evaluate(
            """img => [getComputedStyle(img).backgroundColor,
                       getComputedStyle(document.body).backgroundColor]"""
        )
        assert backdrop == page_background, (backdrop, page_background)

        page.keyboard.press("Escape")
        page.locator(".glightbox-container").wait_for(state="detached")
        assert page.evaluate("window.__marker") == 42, "the page was reloaded, not swapped"
        assert elsewhere == [], f"requests left the site: {elsewhere}"
    finally:
        page.close()

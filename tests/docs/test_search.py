"""Searching the built site finds the page a reader is looking for.

Each query is typed into Material's search box and the results are read as a reader
sees them (Material lists one result per page, its matching sections folded under it).
A page that answers the query must come first, ahead of pages that merely mention its
words (with Material's default tokenizer, every API page matched any query containing
"attention" by its title and buried the tutorials and concepts).
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest

pytestmark = [pytest.mark.site, pytest.mark.browser]

# query -> pages (URLs relative to the site root) any of which is a right answer.
EXPECTED = {
    "flash attention": {
        "tutorials/11_efficient_attention_from_scratch/",
        "performance/",
        "reference/efficient/",
    },
    "kv cache": {
        "tutorials/10_generating_with_a_kv_cache/",
        "reference/kv_cache/",
        "how-to/kv-cache-decoder-loop/",
    },
    "causal mask": {
        "concepts/masks/",
        "tutorials/03_causal_and_padding_masks/",
        "reference/masks/",
    },
    "rope": {
        "concepts/rope/",
        "concepts/positional-information/",
        "reference/positional/",
        "tutorials/05_positional_encoding/",
        "concepts/variants/",  # its section "Biased scores: ALiBi and RoPE"
    },
    "padding mask": {
        "concepts/masks/",
        "tutorials/03_causal_and_padding_masks/",
        "reference/masks/",
    },
    "multi-head attention": {
        "concepts/multi-head-attention/",
        "tutorials/04_multi_head_attention/",
        "reference/multi_head/",
    },
    "kernel regression": {"concepts/kernel-regression/"},
    "softmax overflow": {"concepts/softmax-stability/", "how-to/fix-nans/"},  # its float16 recipe
    "cross attention": {
        "concepts/self-cross-causal/",
        "tutorials/06_cross_attention/",
        "reference/multi_head/",  # CrossAttention
    },
}

RESULT_LINKS = ".md-search-result__list > .md-search-result__item > a.md-search-result__link"


def _terms(text: str) -> set[str]:
    return set(re.split(r"[\s\-]+", text.lower())) - {""}


def _top_pages(page, site_url: str, query: str, n: int = 3) -> list[str]:
    """The first ``n`` result pages for ``query``, as paths relative to the site root."""
    box = page.locator(".md-search__input")
    # Material searches on key events (keyup), not on a programmatic value change. A
    # reader's every key sends the text so far to the search worker; here only the last
    # key does, so exactly one search runs per query (lunr's prefix searches for "s",
    # "so", ... cost seconds each on a busy machine and prove nothing).
    box.fill("")
    box.press("Backspace")
    page.wait_for_function(f"document.querySelectorAll('{RESULT_LINKS}').length === 0")
    box.fill(query[:-1])
    box.press(query[-1])
    page.wait_for_selector(RESULT_LINKS, timeout=15_000)
    # The list is final once it stops changing and its first result was matched on
    # terms of the whole query (the ?h= parameter Material adds for highlighting), not
    # on a stale answer to an earlier text.
    previous: list[str] = []
    stable = 0
    deadline = time.monotonic() + 15
    while stable < 3 and time.monotonic() < deadline:
        page.wait_for_timeout(200)
        hrefs = page.locator(RESULT_LINKS).evaluate_all("els => els.map(e => e.href)")
        highlighted = parse_qs(urlsplit(hrefs[0]).query).get("h", [""])[0] if hrefs else ""
        final = bool(hrefs) and _terms(highlighted) <= _terms(query)
        stable = stable + 1 if final and hrefs == previous else 0
        previous = hrefs
    pages: list[str] = []
    for href in previous:
        path = urlsplit(href).path.removeprefix(urlsplit(site_url).path)
        if path not in pages:
            pages.append(path)
    return pages[:n]


def test_queries_find_the_right_page(browser, site_url: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(site_url)
        page.wait_for_load_state("networkidle")
        page.keyboard.press("/")  # Material's shortcut: open search, focus the box
        misses = {}
        for query, answers in EXPECTED.items():
            top = _top_pages(page, site_url, query)
            if not top or top[0] not in answers:
                misses[query] = top
        assert not misses, f"the first result does not answer the query: {misses}"
    finally:
        page.close()


INDEX = "search/search_index.json"


@pytest.mark.parametrize("intent", ["key", "click"])  # Material's "/" key; the search field
def test_the_index_is_fetched_only_when_the_reader_is_about_to_search(
    browser, site_url: str, intent: str
) -> None:
    """A page opened fresh fetches no search index (1.6 MB, indexed in a worker on every
    load); pressing Material's search key or clicking the search button fetches it, and
    search then works (``docs/assets/javascripts/lazy-search.js``). On a phone the search
    button is a label for Material's ``__search`` toggle: the script listens for that
    toggle's change too."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    try:
        page.goto(site_url + "concepts/masks/", wait_until="load")
        page.wait_for_load_state("networkidle")
        assert not [url for url in asked if url.endswith(INDEX)], "fetched before any search"
        with page.expect_request(lambda request: request.url.endswith(INDEX)):
            if intent == "key":
                page.keyboard.press("/")
            else:
                page.locator(".md-search__input").click()
        assert _top_pages(page, site_url, "kv cache")[0] in EXPECTED["kv cache"]
    finally:
        page.close()


def test_a_page_opened_from_a_result_fetches_the_index_to_highlight(browser, site_url: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        with page.expect_request(lambda request: request.url.endswith(INDEX)):
            page.goto(site_url + "concepts/masks/?h=causal", wait_until="load")
        page.wait_for_selector("mark[data-md-highlight]", state="attached", timeout=15_000)
    finally:
        page.close()

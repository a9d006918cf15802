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

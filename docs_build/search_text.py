"""Build step: the search index reads each code block as plain text.

Material's search plugin builds its index in ``on_page_context`` by feeding every page's
HTML to Python's ``HTMLParser``. A highlighted code block carries a dozen tags per line
(a ``<span>`` per token, a line anchor, a line wrapper), and the plugin keeps only their
text (and the ``<pre>``/``<code>`` around it): parsing those tags was a tenth of the
whole build's time. So the plugin is handed each ``<pre>`` with its inner tags removed
and its text as it was, which makes the same index, and the page gets its markup back:

1. :func:`reduce_code`, in ``on_page_context`` before the search plugin's (after
   ``on_env``, where mkdocs-autorefs writes the cross-references into the pages): the
   inside of each ``<pre>`` in ``page.content`` is reduced to its text (character
   references untouched, ``<code>`` kept), and the original insides are kept aside, in
   order.
2. The search plugin indexes the page, then removes the ``data-search-*`` attributes
   from ``page.content`` (so the reduced content cannot simply be swapped back whole).
3. :func:`restore_code`, in ``on_page_context`` after the search plugin's: the inside of
   each ``<pre>`` gets its original back.

This depends on how Material's search plugin parses a page (mkdocs-material 9.8:
``material.plugins.search.plugin.Parser`` keeps the text of a code block and its
``<pre>``/``<code>``, and drops every other tag). No public API promises that:
``tests/docs/test_search_text.py`` feeds that parser a page with and without the
markup and fails if the two indexes ever differ.
"""

from __future__ import annotations

import re

# <pre> elements do not nest, and Markdown writes no "<pre" inside one: code text is
# escaped ("&lt;pre").
_PRE = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", re.S)
# Every tag but <code ...> and </code>, which the search plugin keeps in code blocks.
_OTHER_TAG = re.compile(r"<(?!/?code\b)[^>]*>")


def reduce_code(html: str) -> tuple[str, list[str]]:
    """``html`` with every tag inside a ``<pre>`` removed but ``<code>``, and the
    original inside of each ``<pre>``, in order.
    """
    insides: list[str] = []

    def reduce(match: re.Match[str]) -> str:
        insides.append(match[2])
        return match[1] + _OTHER_TAG.sub("", match[2]) + match[3]

    return _PRE.sub(reduce, html), insides


def restore_code(html: str, insides: list[str]) -> str:
    """Put back the inside of each ``<pre>`` of ``html``, in order.

    Raises:
        ValueError: If ``html`` has another number of ``<pre>`` elements.
    """
    found = len(_PRE.findall(html))
    if found != len(insides):
        raise ValueError(f"{len(insides)} code blocks were reduced, the page now has {found}")
    remaining = iter(insides)
    return _PRE.sub(lambda m: m[1] + next(remaining) + m[3], html)

"""MkDocs hook: the search index reads each code block as plain text.

Material's search plugin builds its index in ``on_page_context`` by feeding every page's
HTML to Python's ``HTMLParser``. A highlighted code block carries a dozen tags per line
(a ``<span>`` per token, a line anchor, a line wrapper), and the plugin keeps only their
text (and the ``<pre>``/``<code>`` around it): parsing those tags was a tenth of the
whole build's time. So the plugin is handed each ``<pre>`` with its inner tags removed
and its text as it was, which makes the same index, and the page gets its markup back:

1. ``on_page_context``, first (after ``on_env``, where mkdocs-autorefs writes the
   cross-references into the pages): the inside of each ``<pre>`` in ``page.content``
   is reduced to its text (character references untouched, ``<code>`` kept), and the
   original insides are kept aside, in order.
2. The search plugin indexes the page, then removes the ``data-search-*`` attributes
   from ``page.content`` (so the reduced content cannot simply be swapped back whole).
3. ``on_page_context``, last: the inside of each ``<pre>`` gets its original back.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import CombinedEvent, event_priority

# <pre> elements do not nest, and Markdown writes no "<pre" inside one: code text is
# escaped ("&lt;pre").
_PRE = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", re.S)
# Every tag but <code ...> and </code>, which the search plugin keeps in code blocks.
_OTHER_TAG = re.compile(r"<(?!/?code\b)[^>]*>")

_insides: dict[str, list[str]] = {}  # page URL -> the original inside of each <pre>


def reduce_code(html: str) -> tuple[str, list[str]]:
    """``html`` with every tag inside a ``<pre>`` removed but ``<code>``, and the
    original inside of each ``<pre>``, in order."""
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


@event_priority(1000)
def _reduce_before_indexing(context: Any, page: Any, **kwargs: Any) -> Any:
    if page.content and "<pre" in page.content:
        page.content, _insides[page.url] = reduce_code(page.content)
    return context


@event_priority(-1000)
def _restore_after_indexing(context: Any, page: Any, **kwargs: Any) -> Any:
    insides = _insides.pop(page.url, None)
    if insides is None:
        return context
    try:
        page.content = restore_code(page.content, insides)
    except ValueError as error:  # another plugin added or removed code blocks
        raise PluginError(
            f"search_hook: {page.file.src_uri}: {error} during on_page_context; "
            "their highlighting cannot be restored"
        ) from error
    return context


# One event, two handlers (a hook module has one name per event).
on_page_context = CombinedEvent(_reduce_before_indexing, _restore_after_indexing)

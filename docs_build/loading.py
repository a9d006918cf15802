"""Build step: Material's script no longer holds back the first paint.

Material ends every page with ``<script src=".../bundle.<hash>.min.js">``, a plain
script. A plain script is parser-blocking, and Lighthouse's mobile profile counts it
among the resources the first paint waits for (0.75-1 s on the audited pages). Nothing in
it is needed to show the page: the palette and the tabs are restored by Material's small
inline scripts before it, and everything the bundle does (search, instant navigation,
copy buttons, the table of contents) attaches to the page once it is parsed. So it is
marked ``defer``: it still runs before ``DOMContentLoaded``, in document order before the
deferred scripts after it (``instant-anywhere.js`` and GLightbox's, which look for what
the bundle defines), and the init script that ``lightbox.py`` wraps in a
``DOMContentLoaded`` listener still finds Material's ``document$``.

Deferred scripts run in document order, so ``lazy-search.js``, placed just before the
bundle, runs first: it holds back the bundle's request for the search index until the
reader is about to search (a page opened fresh no longer fetches and indexes 1.6 MB).
"""

from __future__ import annotations

import re

BUNDLE = re.compile(r'<script src="([^"]*assets/javascripts/bundle\.[0-9a-f]+\.min\.js)"></script>')


# Runs before the bundle and holds its request for the search index back until the
# reader is about to search (the script says why and how).
LAZY_SEARCH = "assets/javascripts/lazy-search.js"


def defer_bundle(html: str) -> str:
    """Mark Material's bundle ``defer`` (the first one only: there is one per page), with
    ``lazy-search.js`` deferred just before it, from the same folder."""

    def deferred(match: re.Match[str]) -> str:
        lazy = match[1][: match[1].index("assets/javascripts/")] + LAZY_SEARCH
        return f'<script src="{lazy}" defer></script><script src="{match[1]}" defer></script>'

    return BUNDLE.sub(deferred, html, count=1)

"""MkDocs hook: Material's script no longer holds back the first paint.

Material ends every page with ``<script src=".../bundle.<hash>.min.js">``, a plain
script. A plain script is parser-blocking, and Lighthouse's mobile profile counts it
among the resources the first paint waits for (0.75-1 s on the audited pages). Nothing in
it is needed to show the page: the palette and the tabs are restored by Material's small
inline scripts before it, and everything the bundle does (search, instant navigation,
copy buttons, the table of contents) attaches to the page once it is parsed. So it is
marked ``defer``: it still runs before ``DOMContentLoaded``, in document order before the
deferred scripts after it (``instant-anywhere.js`` and GLightbox's, which look for what
the bundle defines), and the init script that scripts/glightbox_hook.py wraps in a
``DOMContentLoaded`` listener still finds Material's ``document$``.
"""

from __future__ import annotations

import re
from typing import Any

BUNDLE = re.compile(r'<script src="([^"]*assets/javascripts/bundle\.[0-9a-f]+\.min\.js)"></script>')


def defer_bundle(html: str) -> str:
    return BUNDLE.sub(lambda m: f'<script src="{m[1]}" defer></script>', html, count=1)


def on_post_page(output: str, page: Any, **kwargs: Any) -> str:
    return defer_bundle(output)


def on_post_template(output_content: str, template_name: str, **kwargs: Any) -> str:
    """The static templates rendered as pages: 404.html."""
    return defer_bundle(output_content) if template_name.endswith(".html") else output_content

"""Build step: two changes to Material's header that its templates have no block for.

- **The search dialog gets a name.** Material's ``<div class="md-search">`` has
  ``role="dialog"`` and no accessible name, so a screen reader announces only "dialog"
  (axe: aria-dialog-name, serious).
- **No call to GitHub's API.** The repository link in the header carries
  ``data-md-component="source"``, and that component fetches the repository's stars,
  forks and latest release on a reader's first visit: a request to another site on
  every fresh session, which fails offline. Without the attribute the link is a link.

Both were copies of whole partials in ``overrides/``, which drift from Material's with
every upgrade. Here they are edits of the markup Material 9.8 writes
(``partials/search.html``, ``partials/source.html``); if a later Material writes it
otherwise, :func:`header_fixes` raises instead of letting the page through unchanged.
"""

from __future__ import annotations

import re

from docs_build import BuildError

SEARCH_DIALOG = re.compile(r'(<div class="md-search" data-md-component="search" role="dialog")>')
SOURCE_COMPONENT = ' data-md-component="source"'
SOURCE_LINK = re.compile(r'(<a href="[^"]*" title="[^"]*" class="md-source")' + SOURCE_COMPONENT)


def header_fixes(html: str, search_name: str = "Search") -> str:
    """Name the search dialog ``search_name`` and drop the repository link's component.

    Raises:
        BuildError: If the page has Material's search or repository link in markup
            this step does not recognise (a Material upgrade changed it).
    """
    if 'class="md-search"' in html:
        html, named = SEARCH_DIALOG.subn(rf'\1 aria-label="{search_name}">', html, count=1)
        if not named:
            raise BuildError(
                "docs_build/theme.py: Material's search dialog is not written as in "
                "mkdocs-material 9.8; update SEARCH_DIALOG so that it gets its name"
            )
    html = SOURCE_LINK.sub(r"\1", html)  # the header's link, and the navigation drawer's
    if SOURCE_COMPONENT in html:
        raise BuildError(
            "docs_build/theme.py: Material's repository link is not written as in "
            "mkdocs-material 9.8; update SOURCE_LINK, or readers' browsers call GitHub's API"
        )
    return html

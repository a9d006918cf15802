"""Build step: three changes to Material's header that its templates have no block for.

- **The search dialog gets a name.** Material's ``<div class="md-search">`` has
  ``role="dialog"`` and no accessible name, so a screen reader announces only "dialog"
  (axe: aria-dialog-name, serious).
- **No call to GitHub's API.** The repository link in the header carries
  ``data-md-component="source"``, and that component fetches the repository's stars,
  forks and latest release on a reader's first visit: a request to another site on
  every fresh session, which fails offline. Without the attribute the link is a link.
- **The reader's colour scheme from the first paint.** Material's inline script after the
  palette toggle applies the palette stored by an earlier visit; on a first visit there
  is none, so the page was parsed and styled in the light scheme, and Material's bundle
  switched it to the scheme of the reader's ``prefers-color-scheme`` only once it ran.
  A dark-mode reader's first page flashed light, and the blocks that content-visibility
  had not laid out yet kept their light styles until they were needed: styled again,
  their links faded from the light link colour to the dark one (Material's ``transition:
  color``), and axe, run 300 ms after the load event, measured the light colour on the
  dark background (2.34:1). A few lines after Material's pick, when nothing is stored,
  the palette whose media query matches, as the bundle later does.

The first two were copies of whole partials in ``overrides/``, which drift from
Material's with every upgrade. Here all three are edits of the markup Material 9.8 writes
(``partials/search.html``, ``partials/source.html``, ``partials/javascripts/palette.html``);
if a later Material writes it otherwise, :func:`header_fixes` raises instead of letting
the page through unchanged.
"""

from __future__ import annotations

import re

from docs_build import BuildError

SEARCH_DIALOG = re.compile(r'(<div class="md-search" data-md-component="search" role="dialog")>')
SOURCE_COMPONENT = ' data-md-component="source"'
SOURCE_LINK = re.compile(r'(<a href="[^"]*" title="[^"]*" class="md-source")' + SOURCE_COMPONENT)
# Material's script that restores a stored palette, right after the palette's inputs.
STORED_PALETTE = re.compile(r'<script>var palette=__md_get\("__palette"\);.*?</script>')
# With no stored palette, the first input whose media query matches sets the body's
# attributes, as Material's bundle does once it runs (an automatic toggle, media
# "(prefers-color-scheme)", is left to Material).
MATCHING_PALETTE = (
    '<script>if(!__md_get("__palette"))for(var input of document.querySelectorAll('
    '"input[data-md-color-media]")){var media=input.getAttribute("data-md-color-media");'
    'if(media!=="(prefers-color-scheme)"&&matchMedia(media).matches){'
    'for(var key of["media","scheme","primary","accent"])document.body.setAttribute('
    '"data-md-color-"+key,input.getAttribute("data-md-color-"+key));break}}</script>'
)


def header_fixes(html: str, search_name: str = "Search") -> str:
    """Name the search dialog ``search_name``, drop the repository link's component and
    apply the reader's colour scheme before the page is styled.

    Raises:
        BuildError: If the page has Material's search, repository link or palette in
            markup this step does not recognise (a Material upgrade changed it).
    """
    if "data-md-color-media=" in html and MATCHING_PALETTE not in html:
        html, found = STORED_PALETTE.subn(lambda m: m[0] + MATCHING_PALETTE, html, count=1)
        if not found:
            raise BuildError(
                "docs_build/theme.py: Material's palette script is not written as in "
                "mkdocs-material 9.8; update STORED_PALETTE, or a dark-mode reader's first "
                "page is styled light"
            )
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

"""What the browser tests share: the URL of every page of the built site."""

from __future__ import annotations

from pathlib import Path


def site_pages(site: Path) -> list[str]:
    """Relative URLs of every page (directory URLs: foo/index.html is served as foo/)."""
    pages = []
    for html in sorted(site.rglob("index.html")):
        rel = html.parent.relative_to(site).as_posix()
        pages.append("" if rel == "." else rel + "/")
    return pages


# site.css lays out each block of a page only when it comes near the viewport
# (content-visibility: auto), and clips each block to its box (overflow: hidden, which
# paints what content-visibility paints). A test that measures the layout of a whole page
# at once (overflow, figure sizes, contrast, visible text) first switches both off, so
# that every block is laid out as it will be when a reader scrolls to it, and content
# wider than its block shows as wider (the phone test reports it) instead of clipped.
# The blocks site.css makes lazy: the page's, and an API page's members.
_LAZY = (".md-content__inner > ", ".md-content__inner .doc-children > ")
LAY_OUT_EVERYTHING = "\n".join(
    f"{blocks}* {{ content-visibility: visible !important; }}\n"
    f"{blocks}:not(.md-typeset__scrollwrap, table, div.arithmatex)"
    " { overflow: visible !important; }"
    for blocks in _LAZY
)


def lay_out_everything(page) -> None:  # type: ignore[no-untyped-def]
    """Lay out every block of the loaded page now (call it after each navigation).

    A plain ``evaluate``, not Playwright's ``add_style_tag``: that one waits for the
    page's own scripts, and hangs on a page loaded with JavaScript off."""
    page.evaluate(
        "css => document.head.appendChild(document.createElement('style')).textContent = css",
        LAY_OUT_EVERYTHING,
    )

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

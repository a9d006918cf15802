"""No page of the built site scrolls sideways on a phone (390 x 844 CSS pixels).

Wide content (a table, a long code line, a formula, an API signature) must scroll
inside its own box. When anything pokes out of the page instead, the whole page pans
sideways under the reader's thumb and the text column no longer fits the screen.

On failure the test names the elements that stick out: those whose right edge passes the
viewport and that no scrolling or clipping box contains. The pages are loaded by the
``phone_walk`` session fixture, with JavaScript on, side by side with test_math.py's
load of each page with JavaScript off (``_phone.py`` holds the probe, ``SIDEWAYS``).
"""

from __future__ import annotations

import pytest

from tests.docs._phone import PHONE, PhoneWalk

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]


def test_no_page_scrolls_sideways_on_a_phone(phone_walk: PhoneWalk) -> None:
    assert len(phone_walk.pages) > 30, f"expected every page of the site: {phone_walk.pages}"
    failures = []
    for record in phone_walk.with_js:
        result = record.sideways
        assert result["width"] == PHONE["width"], (
            f"/{record.page}: laid out {result['width']} px wide, not at the phone's width"
        )
        if result["scrollWidth"] > result["width"]:
            offenders = "\n    ".join(result["offenders"]) or "(none found)"
            failures.append(
                f"/{record.page}: {result['scrollWidth']} px wide on a {result['width']} px "
                f"screen; sticking out:\n    {offenders}"
            )
    assert not failures, "pages that scroll sideways on a phone:\n" + "\n".join(failures)

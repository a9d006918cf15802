"""No page of the built site scrolls sideways on a phone (390 x 844 CSS pixels).

Wide content (a table, a long code line, a formula, an API signature) must scroll
inside its own box. When anything pokes out of the page instead, the whole page pans
sideways under the reader's thumb and the text column no longer fits the screen.

On failure the test names the elements that stick out: those whose right edge passes the
viewport and that no scrolling or clipping box contains.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs._pages import lay_out_everything, site_pages

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]

PHONE = {"width": 390, "height": 844}

# Runs in the page. The document scrolls sideways when its scroll width exceeds the
# layout viewport (clientWidth: the window less any vertical scrollbar).
#
# An element is reported only if it causes that: its box passes the right edge and no
# ancestor that clips it (overflow other than visible) holds it. Which ancestors clip an
# element depends on its containing block: an absolutely positioned element escapes every
# overflow box between it and its nearest positioned (or transformed) ancestor, which is
# how KaTeX's hidden MathML used to escape a table's scroll box. Of a chain of offenders
# only the outermost is reported.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const establishesContainingBlock = (s) =>
    s.position !== 'static' || s.transform !== 'none' || s.contain.includes('paint');
  const clipped = (el) => {
    const style = getComputedStyle(el);
    if (style.position === 'fixed') return true;  // moves with the screen, never scrolls it
    let onlyPositioned = style.position === 'absolute';
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (onlyPositioned && !establishesContainingBlock(s)) continue;
      if (s.overflowX !== 'visible') return true;
      if (s.position === 'fixed') return true;
      onlyPositioned = s.position === 'absolute';
    }
    return false;
  };
  const describe = (el) => {
    const classes = [...el.classList].slice(0, 3).map((c) => '.' + c).join('');
    const section = el.closest('[id]');
    const where = section ? ` in #${section.id}` : '';
    const text = (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 50);
    const right = Math.round(el.getBoundingClientRect().right);
    return `<${el.tagName.toLowerCase()}${classes}>${where} right edge ${right}px: "${text}"`;
  };
  const offenders = [...document.body.querySelectorAll('*')].filter((el) => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.right > width + 1 && !clipped(el);
  });
  const outermost = offenders.filter((el) => !offenders.includes(el.parentElement));
  return {
    width,
    scrollWidth: document.documentElement.scrollWidth,
    offenders: outermost.slice(0, 8).map(describe),
  };
}"""


def test_no_page_scrolls_sideways_on_a_phone(browser, built_site: Path, site_url: str) -> None:
    pages = site_pages(built_site)
    assert len(pages) > 30, f"expected every page of the site, found {len(pages)}"
    # A phone: touch, no hover, the page laid out at the device width (Material's
    # <meta name="viewport" content="width=device-width,initial-scale=1">).
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
    page = context.new_page()
    failures = []
    try:
        for rel in pages:
            page.goto(site_url + rel, wait_until="load")
            lay_out_everything(page)
            result = page.evaluate(OVERFLOW)
            assert result["width"] == PHONE["width"], (
                f"/{rel}: laid out {result['width']} px wide, not at the phone's width"
            )
            if result["scrollWidth"] > result["width"]:
                offenders = "\n    ".join(result["offenders"]) or "(none found)"
                failures.append(
                    f"/{rel}: {result['scrollWidth']} px wide on a {result['width']} px "
                    f"screen; sticking out:\n    {offenders}"
                )
    finally:
        context.close()
    assert not failures, "pages that scroll sideways on a phone:\n" + "\n".join(failures)

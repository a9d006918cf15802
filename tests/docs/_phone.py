"""One walk through every page of the built site on a phone, with JavaScript on and off
side by side, recording what the phone tests assert on.

Both load every page at 390 x 844 CSS pixels, lay out every block (``_pages.py``) and
measure; ``test_mobile.py`` and ``test_math.py`` assert on the records. The two used to
load the site one after the other, a page at a time; here each has its own browser
context, hence its own renderer, and the walks take turns (``_walk.side_by_side``): the
page with JavaScript on loads and is measured in the page itself while the other walk's
page loads on the second core.

- **JavaScript on** (``test_mobile.py``): a phone (touch, no hover, the page laid out at
  the device width), off-site requests cut. The probe ``SIDEWAYS`` measures how wide
  the document is and which elements stick out.
- **JavaScript off** (``test_math.py``): math typeset at build must be there and fit.
  ``MATH_WIDTH`` measures the width the formulas add, then ``VISIBLE_TEXT`` takes the
  text outside code (it removes the code from the page, so it comes last). With
  JavaScript off a page cannot wait for its own load event, so this walk waits for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from tests.docs._pages import LAY_OUT_EVERYTHING, lay_out_everything, site_pages
from tests.docs._walk import side_by_side

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
SIDEWAYS = """() => {
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

# Called as soon as the page's document exists: once the page has loaded, every block
# laid out, then SIDEWAYS; the result is parked on `window` for the walk to collect.
MEASURE_WHEN_LOADED = f"""(css) => {{
  const loaded = document.readyState === 'complete' ? Promise.resolve() : new Promise(
    (resolve, reject) => {{
      addEventListener('load', resolve, {{ once: true }});
      setTimeout(() => reject(new Error('no load event after 60 s')), 60000);
    }});
  window.__sideways = loaded.then(() => {{
    document.head.appendChild(document.createElement('style')).textContent = css;
    return ({SIDEWAYS})();
  }});
}}"""

# Runs in the page. Width the math adds beyond what the page needs without it: on a
# 390 px screen no formula may make the page scroll sideways. KaTeX's fonts set the
# widths, so they must have loaded first.
MATH_WIDTH = """async () => {
  await document.fonts.ready;
  const width = () => document.documentElement.scrollWidth;
  const withMath = width();
  const style = document.createElement('style');
  style.textContent = '.arithmatex { display: none !important }';
  document.head.append(style);
  const withoutMath = width();
  style.remove();
  return {
    formulas: document.querySelectorAll('.katex').length,
    widths: { withMath, withoutMath, viewport: document.documentElement.clientWidth },
  };
}"""

# Runs in the page: the text a reader sees, less code (where TeX may be shown on purpose).
VISIBLE_TEXT = """() => {
  document.querySelectorAll('pre, code').forEach((el) => el.remove());
  return document.body.innerText;
}"""


@dataclass
class PhoneRecord:
    """What one page showed on a phone, with JavaScript on (``sideways``) or off."""

    page: str  # relative URL, as site_pages gives it
    sideways: dict[str, Any] = field(default_factory=dict)  # SIDEWAYS, JavaScript on
    math: dict[str, Any] = field(default_factory=dict)  # MATH_WIDTH, JavaScript off
    text: str = ""  # VISIBLE_TEXT, JavaScript off


@dataclass
class PhoneWalk:
    """Every page of the site, with JavaScript on and off."""

    pages: list[str]
    with_js: list[PhoneRecord]
    without_js: list[PhoneRecord]


def walk_phones(browser, site: Path, site_url: str) -> PhoneWalk:  # type: ignore[no-untyped-def]
    """Load every page of ``site`` on a phone with JavaScript on and off."""
    pages = site_pages(site)
    with_js = [PhoneRecord(rel) for rel in pages]
    without_js = [PhoneRecord(rel) for rel in pages]

    def walk_with_js(context) -> Iterator[None]:  # type: ignore[no-untyped-def]
        page = context.new_page()
        for record in with_js:
            try:
                page.goto(urljoin(site_url, record.page), wait_until="commit")
                page.evaluate(MEASURE_WHEN_LOADED, LAY_OUT_EVERYTHING)
                yield
                record.sideways = page.evaluate("() => window.__sideways")
            except Exception as error:  # a page that never loads names itself
                raise RuntimeError(f"/{record.page} (JavaScript on): {error}") from error

    def walk_without_js(context) -> Iterator[None]:  # type: ignore[no-untyped-def]
        page = context.new_page()
        for record in without_js:
            try:
                page.goto(urljoin(site_url, record.page), wait_until="load")
                lay_out_everything(page)
                record.math = page.evaluate(MATH_WIDTH)
                record.text = page.evaluate(VISIBLE_TEXT)
            except Exception as error:
                raise RuntimeError(f"/{record.page} (JavaScript off): {error}") from error
            yield

    # A phone: touch, no hover, the page laid out at the device width (Material's
    # <meta name="viewport" content="width=device-width,initial-scale=1">).
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    phone.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
    no_js = browser.new_context(java_script_enabled=False, viewport=PHONE, service_workers="block")
    try:
        side_by_side([walk_with_js(phone), walk_without_js(no_js)])
    finally:
        phone.close()
        no_js.close()
    return PhoneWalk(pages, with_js, without_js)

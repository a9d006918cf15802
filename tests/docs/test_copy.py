"""The copy button gives code a reader can paste and run.

For every console example on the site (``>>>`` blocks: mkdocstrings renders docstring
Examples this way), the test clicks Material's copy button in headless Chromium and reads
the clipboard: the text must compile and hold no prompt and no output line. On the pages
it loads it also clicks the other Python blocks (not the API's long "Source code"
listings). For every block clicked, the clipboard must equal what
``_codeblocks.copied_text`` computes from the HTML, the text ``test_built_snippets``
runs: the browser, the copy section of ``site.css`` and the tests agree on what "as copied" means.

One page load per page, then one click per block.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urljoin

import pytest

from tests.docs._codeblocks import (
    CodeBlock,
    built_code_blocks,
    copied_text,
    in_api_source,
    parse_html,
    site_pages,
)

pytestmark = pytest.mark.browser

# Each block's copy button (Material 9.8: button.md-code__button[data-md-type=copy]), in
# document order, marked with a data attribute to find it again. Collapsed <details>
# are opened so that the buttons inside can be clicked.
MARK_BUTTONS = """() => {
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  const blocks = [...document.querySelectorAll(
    'div.highlight.language-python:not(.doc-signature), div.highlight.language-pycon')];
  return blocks.map((block, i) => {
    const button = block.querySelector('button[data-md-type="copy"]');
    if (button) button.setAttribute('data-test-copy', String(i));
    return Boolean(button);
  });
}"""

SENTINEL = "<clipboard not written>"

# Before each click: put a sentinel on the clipboard (so a button that copies nothing is
# caught), and if the block sits in a content tab other than the selected one, select
# that tab by clicking its label, as a reader would. Then bring the button on screen and
# wait until it stays put for three frames, as it has for a reader who sees it: the
# blocks around it are laid out only as they come near the screen (site.css), one level
# down on API pages, and a click at once hit where the button was before they moved it.
PREPARE = """async ([index, sentinel]) => {
  await navigator.clipboard.writeText(sentinel);
  const button = document.querySelector(`[data-test-copy="${index}"]`);
  for (let el = button; el; el = el.parentElement) {
    if (el.classList.contains('tabbed-block')) {
      const position = [...el.parentElement.children].indexOf(el);
      const set = el.closest('.tabbed-set');
      set.querySelectorAll(':scope > .tabbed-labels > label')[position].click();
    }
  }
  button.scrollIntoView({ block: 'center' });
  const frame = () => new Promise((resolve) => requestAnimationFrame(resolve));
  let last = '', still = 0;
  for (let i = 0; i < 120 && still < 3; i++) {
    await frame();
    const box = JSON.stringify(button.getBoundingClientRect());
    still = box === last ? still + 1 : 0;
    last = box;
  }
}"""


def copy_via_button(page, index: int) -> str:
    page.evaluate(PREPARE, [index, SENTINEL])
    page.locator(f'[data-test-copy="{index}"]').click()  # a real click: a user gesture
    return page.evaluate("() => navigator.clipboard.readText()")


def test_copying_gives_the_code_without_prompts_or_output(
    browser, built_site: Path, site_url: str
) -> None:
    # A console block is a div of class language-pycon: only pages whose HTML holds that
    # class are parsed (parsing all of them took 4.6 s).
    all_blocks = {
        page: built_code_blocks(built_site, page)
        for page in site_pages(built_site)
        if "language-pycon" in page.read_text(encoding="utf-8")
    }
    pages = {
        page: blocks for page, blocks in all_blocks.items() if any(b.doctest_style for b in blocks)
    }
    consoles = sum(b.doctest_style for blocks in pages.values() for b in blocks)
    # The API reference alone has dozens of examples; a parser that stopped finding them
    # would make this test pass vacuously.
    assert consoles >= 40, f"only {consoles} console blocks found"

    context = browser.new_context(
        permissions=["clipboard-read", "clipboard-write"], service_workers="block"
    )
    page = context.new_page()
    problems: list[str] = []
    for html, blocks in pages.items():
        page.goto(urljoin(site_url, html.relative_to(built_site).as_posix()))
        # Material adds the buttons from JavaScript once the page has loaded.
        page.wait_for_selector('button[data-md-type="copy"]', state="attached")
        has_button = page.evaluate(MARK_BUTTONS)
        if len(has_button) != len(blocks):
            problems.append(
                f"{html}: {len(has_button)} blocks in the browser, {len(blocks)} parsed"
            )
            continue
        for block, clickable in zip(blocks, has_button, strict=True):
            if in_api_source(block):
                continue  # long, and not an example: test_built_snippets skips them too
            if not clickable:
                problems.append(f"{block.id}: no copy button")
                continue
            problems += check_copied(block, copy_via_button(page, block.index))
    context.close()
    assert not problems, "\n\n".join(problems)


def check_copied(block: CodeBlock, text: str) -> list[str]:
    head = f"{block.id} ({block.lang}), first lines:\n{block.head()}\n"
    if text == SENTINEL:
        return [f"{head}the copy button did not write the clipboard"]
    if text != block.copied:
        return [
            f"{head}clipboard:\n{text}\n\nexpected (as the snippet tests run it):\n{block.copied}"
        ]
    if not block.doctest_style:
        return []
    problems = []
    if ">>>" in text or any(line.startswith("...") for line in text.splitlines()):
        problems.append(f"{head}prompts left in the copied text:\n{text}")
    try:
        compile(text, "copied", "exec")
    except SyntaxError as error:
        problems.append(f"{head}copied text does not compile: {error}\n{text}")
    return problems


# A console block as pymdownx.highlight writes it with `line_spans` (mkdocs.yml): one
# <span> per line, the newline inside it; outputs `.go`, prompts `.gp`.
CONSOLE_HTML = (
    '<div class="language-pycon highlight"><pre><span></span><code>'
    '<span id="__span-0-1"><a id="__codelineno-0-1"></a><span class="gp">&gt;&gt;&gt; </span>'
    '<span class="k">for</span> i <span class="ow">in</span> range(2):\n</span>'
    '<span id="__span-0-2"><a id="__codelineno-0-2"></a><span class="gp">... </span>'
    "    print(i &lt; 1)\n</span>"
    '<span id="__span-0-3"><a id="__codelineno-0-3"></a><span class="gp">...</span>\n</span>'
    '<span id="__span-0-4"><a id="__codelineno-0-4"></a><span class="go">True</span>\n</span>'
    '<span id="__span-0-5"><a id="__codelineno-0-5"></a><span class="go">False</span>\n</span>'
    '<span id="__span-0-6"><a id="__codelineno-0-6"></a><span class="gp">&gt;&gt;&gt; </span>'
    "x = 1\n</span>"
    "</code></pre></div>"
)


def test_copied_text_of_a_console_block_keeps_code_lines_and_their_indentation():
    code = next(e for e in parse_html(CONSOLE_HTML).iter() if e.tag == "code")
    assert copied_text(code, console=True) == "for i in range(2):\n    print(i < 1)\n\nx = 1"
    # A Python block is copied as it is shown.
    assert copied_text(code, console=False).startswith(">>> for i in range(2):\n... ")


def test_copied_text_without_line_spans_drops_output_lines_too():
    # The same block as pymdownx.highlight writes it without `line_spans`: newlines are
    # bare text between the lines. The copy must not depend on that setting.
    html = CONSOLE_HTML.replace("\n</span>", "</span>\n")
    code = next(e for e in parse_html(html).iter() if e.tag == "code")
    assert copied_text(code, console=True) == "for i in range(2):\n    print(i < 1)\n\nx = 1"

"""The build hands Material's indexer code blocks without their markup
(docs_build/search_text.py): the index must be the same, and the page must get its
markup back.

No public API promises how Material's search parser treats the tags inside a code
block (written against mkdocs-material 9.8): the first test fails loudly if a new
version indexes the reduced page differently from the page itself."""

from __future__ import annotations

import pytest
from material.plugins.search.plugin import Parser

from docs_build import search_text

# As pymdownx.highlight writes a block (line anchors, a span per token), with an
# output block and prose around them.
PAGE = """<h1 id="t">Title</h1>
<p>Prose with <code>inline</code> code &amp; an entity.</p>
<div class="language-python highlight"><pre><span></span><code tabindex="0"><span \
id="__span-0-1"><a id="__codelineno-0-1" name="__codelineno-0-1" \
href="#__codelineno-0-1"></a><span class="kn">import</span><span class="w"> </span>\
<span class="nn">torch</span>
</span><span id="__span-0-2"><a id="__codelineno-0-2" name="__codelineno-0-2" \
href="#__codelineno-0-2"></a><span class="n">x</span> <span class="o">=</span> \
<span class="s2">&quot;a &lt;b&gt;&quot;</span>
</span></code></pre></div>
<h2 id="s">Section</h2>
<pre class="nb-output no-copy" data-search-exclude><code>tensor([1., 2.])</code></pre>
<p>After.</p>
"""


def _sections(html: str) -> list[tuple[str | None, str, str]]:
    parser = Parser()
    parser.feed(html)
    parser.close()
    return [(s.id, "".join(s.title), "".join(s.text)) for s in parser.data]


def test_the_index_is_the_same_without_the_code_markup() -> None:
    reduced, insides = search_text.reduce_code(PAGE)
    assert len(insides) == 2
    assert "<span" not in reduced and "<a " not in reduced
    assert '<code tabindex="0">import torch' in reduced  # <code> and the text stay
    assert "&quot;a &lt;b&gt;&quot;" in reduced  # character references untouched
    assert _sections(reduced) == _sections(PAGE)


def test_the_page_gets_its_markup_back() -> None:
    reduced, insides = search_text.reduce_code(PAGE)
    assert search_text.restore_code(reduced, insides) == PAGE
    # The search plugin strips data-search-* attributes in between: the blocks'
    # insides still come back, each to its own <pre>.
    stripped = reduced.replace(" data-search-exclude", "")
    assert search_text.restore_code(stripped, insides) == PAGE.replace(" data-search-exclude", "")


def test_a_page_that_lost_a_code_block_is_refused() -> None:
    reduced, insides = search_text.reduce_code(PAGE)
    with pytest.raises(ValueError, match="2 code blocks were reduced, the page now has 1"):
        search_text.restore_code(reduced.split("<h2")[0], insides)

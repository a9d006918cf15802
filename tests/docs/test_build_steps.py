"""Each step of the site's build (docs_build/) on its own, on HTML written here.

The built site's tests check the steps' results on every page; these pin what each
step does and does not touch, and the rules that keep the build one package: one
module imports MkDocs, nothing edits ``sys.path``, the order of the page steps.
"""

from __future__ import annotations

import ast
import base64
import re
from pathlib import Path

import pytest

from docs_build import (
    BuildError,
    accessibility,
    figures,
    lightbox,
    llms,
    loading,
    math,
    pages,
    plugin,
    theme,
)
from tests.conftest import ROOT

# --- the steps on every finished page, in the plugin's order -------------------------


def test_the_bundle_is_deferred_after_the_lazy_search_script_and_nothing_else() -> None:
    page = (
        '<script src="../../assets/javascripts/bundle.0123abcd.min.js"></script>'
        '<script src="../../assets/javascripts/other.js"></script>'
    )
    assert loading.defer_bundle(page) == (
        '<script src="../../assets/javascripts/lazy-search.js" defer></script>'
        '<script src="../../assets/javascripts/bundle.0123abcd.min.js" defer></script>'
        '<script src="../../assets/javascripts/other.js"></script>'
    )


GLIGHTBOX_PAGE = (
    "<head>"
    '<link href="../assets/stylesheets/glightbox.min.css" rel="stylesheet">'
    '<style id="glightbox-style">.x{}</style>'
    '<script src="../assets/javascripts/glightbox.min.js"></script>'
    "</head><body>"
    '<script id="init-glightbox">const lightbox = GLightbox({});</script>'
    "</body>"
)


def test_glightbox_waits_for_the_page_and_pairs_are_fixed() -> None:
    out = lightbox.load_lazily(GLIGHTBOX_PAGE)
    assert 'glightbox.min.css" rel' not in out  # the blocking stylesheet is gone...
    assert 'css.href = "../assets/stylesheets/glightbox.min.css"' in out  # ...added later
    assert '<script src="../assets/javascripts/glightbox.min.js" defer></script>' in out
    assert 'addEventListener("DOMContentLoaded"' in out
    assert '#only-dark"]' in out and ".x{}" in out  # the pair rules, before the plugin's


def test_a_page_without_glightbox_is_left_alone() -> None:
    page = "<head></head><body><p>no figures here</p></body>"
    assert lightbox.load_lazily(page) == page


def test_scroll_boxes_get_a_tabindex_once() -> None:
    page = (
        '<pre><span></span><code class="python">x = 1</code></pre>'
        "<table><tr><td>1</td></tr></table>"
        '<table class="highlighttable"><tr><td>1</td></tr></table>'
        '<div class="arithmatex">formula</div>'
        '<pre><code tabindex="-1">already</code></pre>'
    )
    out = accessibility.focusable_scroll_boxes(page)
    assert '<code class="python" tabindex="0">' in out
    assert '<table tabindex="0">' in out
    assert '<table class="highlighttable">' in out  # layout, not a scroll box
    assert '<div class="arithmatex" tabindex="0">' in out
    assert '<code tabindex="-1">' in out and out.count("tabindex") == 4
    assert accessibility.focusable_scroll_boxes(out) == out


def test_code_line_ids_are_numbered_in_page_order() -> None:
    block = (
        '<code><span id="__span-0-1"><a id="__codelineno-0-1" '
        'href="#__codelineno-0-1"></a>x</span></code>'
    )
    out = accessibility.unique_line_ids(block + "<p>between</p>" + block)
    assert re.findall(r'id="(__span-\d+-1)"', out) == ["__span-0-1", "__span-1-1"]
    assert 'href="#__codelineno-1-1"' in out


def test_section_menus_are_named_after_their_section_or_the_build_stops() -> None:
    menu = (
        '<nav class="md-nav" data-md-level="1" aria-labelledby="__nav_4_label"'
        ' aria-expanded="true">\n  <label class="md-nav__title" for="__nav_4">\n'
        '    <span class="md-nav__icon md-icon"></span>\n    API "reference"\n  </label>'
    )
    out = accessibility.named_section_menus(menu)
    assert out.startswith(
        '<nav class="md-nav" data-md-level="1" aria-label="API &quot;reference&quot;"'
        ' aria-expanded="true">'
    )
    assert accessibility.named_section_menus(out) == out
    with pytest.raises(BuildError, match="section's menu"):
        accessibility.named_section_menus('<nav class="md-nav" aria-labelledby="__nav_2_label">')


def test_empty_header_cells_become_ordinary_cells() -> None:
    row = '<tr><th></th><th style="text-align: right;"> </th><th>row 0</th></tr>'
    assert accessibility.no_empty_header_cells(row) == (
        '<tr><td></td><td style="text-align: right;"> </td><th>row 0</th></tr>'
    )


def _typesetter_knowing(tex: str, display: bool, typeset_html: str) -> math.Typesetter:
    """A typesetter whose cache already holds one formula: no Node.js process needed."""
    typesetter = math.Typesetter(ROOT / "docs" / math.KATEX_JS)
    key = math._key(tex, display)
    typesetter.cache[key] = math.Rendered(typeset_html, "x")
    return typesetter


def test_the_page_steps_run_math_first() -> None:
    typesetter = _typesetter_knowing("x", True, '<span class="katex-display">x</span>')
    placeholder = typesetter.keyed("div", math._key("x", True))
    in_order = placeholder
    for _, step in plugin.POST_PAGE_STEPS:
        in_order = (step or typesetter.typeset)(in_order)
    assert '<span class="katex-display">x</span>' in in_order
    assert in_order.startswith('<div class="arithmatex" tabindex="0">')
    # The other way round, the placeholder no longer matches and stays text.
    wrong_order = typesetter.typeset(accessibility.accessible(placeholder))
    assert "katex-display" not in wrong_order and 'data-katex="' in wrong_order
    names = [name.split(":")[0] for name, _ in plugin.POST_PAGE_STEPS]
    assert names == ["math", "loading", "theme", "lightbox", "accessibility"]


def test_the_header_is_fixed_or_the_build_stops() -> None:
    link = (
        '<a href="https://github.com/x/y" title="Go to repository" class="md-source"'
        ' data-md-component="source"><div></div></a>'
    )
    header = (
        '<div class="md-search" data-md-component="search" role="dialog"><p></p></div>'
        + link  # in the header
        + link  # in the navigation drawer
    )
    fixed_link = link.replace(' data-md-component="source"', "")
    assert theme.header_fixes(header) == (
        '<div class="md-search" data-md-component="search" role="dialog" aria-label="Search">'
        "<p></p></div>" + fixed_link + fixed_link
    )
    assert theme.header_fixes("<p>a page without a header</p>") == (
        "<p>a page without a header</p>"
    )
    with pytest.raises(BuildError, match="search dialog"):
        theme.header_fixes('<div role="dialog" class="md-search">')
    with pytest.raises(BuildError, match="repository link"):
        theme.header_fixes('<a class="md-source" data-md-component="source">')


def test_the_readers_palette_applies_before_the_page_is_styled() -> None:
    palette = (
        '<input class="md-option" data-md-color-media="(prefers-color-scheme: dark)">'
        '<script>var palette=__md_get("__palette");if(palette){}</script><main></main>'
    )
    out = theme.header_fixes(palette)
    assert out == palette.replace("</script>", "</script>" + theme.MATCHING_PALETTE, 1)
    assert theme.header_fixes(out) == out
    with pytest.raises(BuildError, match="palette script"):
        theme.header_fixes('<input class="md-option" data-md-color-media="(x)"><script>')


# --- figures, Markdown, llms.txt -----------------------------------------------------


def test_inline_figures_become_files_with_their_size(tmp_path: Path) -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="72pt" height="36pt"></svg>'
    data = base64.b64encode(svg).decode()
    page = f'<img src="data:image/svg+xml;base64,{data}" data-scheme="dark" alt="a">'
    out = figures.figure_files(page, "concepts/masks", tmp_path)
    [written] = (tmp_path / figures.FIGURE_DIR).iterdir()
    assert written.read_bytes() == svg
    assert out == (
        f'<img src="../../assets/figures/{written.name}#only-dark" loading="lazy" '
        'decoding="async" width="96" height="48" alt="a">'
    )
    assert figures.figure_files("<p>no figure</p>", "x", tmp_path) == "<p>no figure</p>"


def test_each_executed_block_starts_from_a_fresh_state() -> None:
    markdown = (
        '```python exec="on"\na = 1\n```\n\n'
        '!!! note\n    ```py exec="true" session="s"\n    b = 2\n    ```\n\n'
        '```python exec="on" session="s"\nprint(b)\n```\n\n'
        "```python\nnot executed\n```\n"
    )
    out = pages.from_a_fresh_state(markdown)
    assert out.count(pages.FRESH_STATE) == 2  # the session's second block continues it
    assert f'```python exec="on"\n{pages.FRESH_STATE}\na = 1' in out
    assert f'    ```py exec="true" session="s"\n    {pages.FRESH_STATE}\n    b = 2' in out


def test_a_tutorials_links_point_to_source_files() -> None:
    sources = {"concepts/masks.md", "tutorials/02_words.py", "index.md"}
    markdown = (
        "[masks](../../concepts/masks/#causal) [next](../02_words/) [home](../../) "
        "[gone](../../nowhere/)"
    )
    out, broken = pages.source_links(
        markdown, "tutorials/01_x.py", "tutorials/01_x/", sources.__contains__
    )
    assert out == (
        "[masks](../concepts/masks.md#causal) [next](02_words.py) [home](../index.md) "
        "[gone](../../nowhere/)"
    )
    assert broken == ["../../nowhere/"]


def test_llms_txt_lists_every_entry_with_its_line() -> None:
    html = (
        '<div class="admonition"><p>An aside, not the opening.</p></div>'
        "<p>The opening sentence, long enough to be an opening. And more.</p>"
    )
    description = llms.page_description(html, {})
    assert description == "The opening sentence, long enough to be an opening."
    assert llms.page_description(html, {"description": "From the front matter."}) == (
        "From the front matter."
    )
    text = llms.llms_txt(
        "Site",
        "What it is.",
        "https://example.org/site/",
        [
            ("Overview", [llms.Entry("Home", "", "Start here.")]),
            ("More", [llms.Entry("Repo", "https://github.com/x", external=True)]),
        ],
    )
    assert text.splitlines() == [
        "# Site",
        "",
        "> What it is.",
        "",
        "## Overview",
        "",
        "- [Home](https://example.org/site/): Start here.",
        "",
        "## More",
        "",
        "- [Repo](https://github.com/x)",
    ]


# --- rules that keep the build one package --------------------------------------------


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("module", sorted((ROOT / "docs_build").glob("*.py")), ids=lambda p: p.name)
def test_only_the_plugin_imports_mkdocs(module: Path) -> None:
    """The move to another site generator is one file's work (Material's end of life)."""
    coupled = _imports(module) & {"mkdocs", "material"}
    assert not coupled or module.name == "plugin.py", f"{module.name} imports {coupled}"


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def test_no_code_edits_sys_path() -> None:
    """Everything imports by package name. Two files may touch ``sys.path`` on purpose:
    ``kernel_state`` puts back the path a fresh kernel had, and the fork server runs each
    program as ``python program.py`` would, with the program's folder first."""
    allowed = {"docs_build/kernel_state.py", "tests/docs/_forkrun.py"}
    offenders = []
    for folder in ("attention", "docs_build", "tests", "scripts", "benchmarks", "docs"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if rel not in allowed and any(_is_sys_path(node) for node in ast.walk(tree)):
                offenders.append(rel)
    assert offenders == []


def test_the_tutorial_cache_key_covers_every_file_the_package_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tutorial 15's output inlines head_view.js and head_view.css: a key that hashed the
    package's modules alone kept a stale viewer in the cached notebook."""
    import shutil

    from docs_build import tutorials

    root = tmp_path / "repo"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(tutorials.PACKAGE, root / "attention", ignore=skip)
    for name in ("figures.py", "kernel_state.py"):
        (root / "docs_build").mkdir(exist_ok=True)
        shutil.copy(tutorials.HERE / name, root / "docs_build" / name)
    source = root / "docs" / "tutorials" / "15_hugging_face_model.py"
    source.parent.mkdir(parents=True)
    shutil.copy(tutorials.TUTORIALS / source.name, source)
    monkeypatch.setattr(tutorials, "ROOT", root)
    monkeypatch.setattr(tutorials, "HERE", root / "docs_build")
    monkeypatch.setattr(tutorials, "PACKAGE", root / "attention")

    before = tutorials.cache_key(source)
    assert tutorials.cache_key(source) == before  # the same files, the same key
    shipped = {p.name for p in tutorials.package_files()}
    assert {"head_view.js", "head_view.css", "py.typed"} <= shipped
    for name in ("head_view.js", "head_view.css"):
        data = root / "attention" / name
        original = data.read_bytes()
        data.write_bytes(original + b"\n/* changed */\n")
        assert tutorials.cache_key(source) != before, f"{name} changed, the key did not"
        data.write_bytes(original)
    assert tutorials.cache_key(source) == before

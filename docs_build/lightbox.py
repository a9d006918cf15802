"""Build step: figure zoom (mkdocs-glightbox) that neither delays the page nor breaks
the light/dark pairs of figures.

Loading. The plugin puts GLightbox's 56 KB script and its stylesheet into ``<head>``,
where both block the first paint of every page (Lighthouse's mobile profile charged the
script about 0.6 s on each audited page), although nothing needs them before a reader
clicks a figure. So the script is marked ``defer`` and the plugin's inline init script,
which cannot be deferred, waits for ``DOMContentLoaded`` (fired after deferred scripts
have run) and only then adds the stylesheet, which styles nothing but the lightbox. It
goes at the end of ``<body>``: Material's instant navigation removes from ``<head>``
whatever the next page's ``<head>`` does not list.

Light/dark pairs. Every figure is two renders, ``#only-light`` and ``#only-dark``, of
which Material's CSS hides one. The plugin links both, so the hidden render's link
stays in the tab order as an empty link with no name; and the zoomed image sits on
GLightbox's near-black overlay, where a light render with a transparent background
would be unreadable. The rules in ``PAIR_CSS`` fix both. They go into the plugin's
inline ``<style>`` rather than a stylesheet of their own: one request fewer per page.
"""

from __future__ import annotations

import json
import re

SCRIPT = re.compile(r'<script src="([^"]*assets/javascripts/glightbox\.min\.js)"></script>')
STYLESHEET = re.compile(
    r'<link href="([^"]*assets/stylesheets/glightbox\.min\.css)" rel="stylesheet">'
)
INIT = re.compile(r'<script id="init-glightbox">(.*?)</script>', re.DOTALL)
STYLE = '<style id="glightbox-style">'

PAIR_CSS = """
[data-md-color-scheme="default"] a.glightbox[href$="#only-dark"],
[data-md-color-scheme="slate"] a.glightbox[href$="#only-light"] { display: none; }
.gslide-image img[src$="#only-light"] { background: #fff; }
.gslide-image img[src$="#only-dark"] { background: var(--md-default-bg-color); }
"""


def load_lazily(output: str) -> str:
    """Defer GLightbox's script and stylesheet, and fix the light/dark pairs (module
    docstring). Runs after mkdocs-glightbox's own ``on_post_page`` has added its tags.
    """
    stylesheet = STYLESHEET.search(output)
    if not (SCRIPT.search(output) and stylesheet and INIT.search(output) and STYLE in output):
        return output  # a page the plugin skipped (front matter `glightbox: false`)
    output = output.replace(stylesheet[0], "", 1)
    output = output.replace(STYLE, STYLE + PAIR_CSS, 1)
    output = SCRIPT.sub(lambda m: f'<script src="{m[1]}" defer></script>', output, count=1)
    add_stylesheet = (
        'const css = document.createElement("link");\n'
        f'css.rel = "stylesheet"; css.href = {json.dumps(stylesheet[1])};\n'
        "document.body.append(css);\n"
    )
    return INIT.sub(
        lambda m: (
            '<script id="init-glightbox">document.addEventListener("DOMContentLoaded", () => {\n'
            f"{add_stylesheet}{m[1]}}})</script>"
        ),
        output,
        count=1,
    )

"""The build of this site: how a ``.py`` tutorial or a ``.md`` page becomes HTML.

One MkDocs plugin, ``attention-site`` (:mod:`docs_build.plugin`, the only module that
imports MkDocs), calls the steps below; each lives in a module of its own and works on
plain strings and files, so it can be tested, and moved to another site generator,
without MkDocs. "How this site is built" (``docs/contributing/how-this-site-is-built.md``)
walks through them in order.

- :mod:`~docs_build.tutorials`: execute the jupytext tutorials in Jupyter kernels (a step
  of its own: ``python -m docs_build.tutorials``, cached by content hash) and turn each
  executed notebook into the Markdown of its page.
- :mod:`~docs_build.pages`: what happens to a page's Markdown: executed blocks start from a
  fresh interpreter's state; a tutorial's links point to the files MkDocs checks.
- :mod:`~docs_build.figures`: matplotlib figures as a light and a dark SVG, then as files.
- :mod:`~docs_build.explorers`: the explorers' starting states and static figures.
- :mod:`~docs_build.math`: every formula typeset with KaTeX at build.
- :mod:`~docs_build.search_text`: the search index reads code blocks as plain text.
- :mod:`~docs_build.loading`, :mod:`~docs_build.lightbox`: nothing blocks the first paint.
- :mod:`~docs_build.theme`: the search dialog named; no call to GitHub's API.
- :mod:`~docs_build.accessibility`: every scroll box focusable, code-line ids unique.
- :mod:`~docs_build.llms`: ``/llms.txt``, the site's map for language models.
"""

from __future__ import annotations

# Loggers under "mkdocs." are MkDocs' own: their warnings are shown, counted, and fail
# `mkdocs build --strict`, as a warning from MkDocs itself does.
LOGGER = "mkdocs.plugins.attention_site"


class BuildError(RuntimeError):
    """A step cannot go on; the message says what is wrong and what to do.

    The plugin reports it as MkDocs reports a plugin's error: its message alone,
    without the build's stack around it.
    """

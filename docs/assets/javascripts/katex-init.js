// Typeset math with the vendored KaTeX (no network).
//
// Two kinds of page carry math:
// - Markdown pages and API docstrings: pymdownx.arithmatex (generic mode) wraps math in
//   <span|div class="arithmatex"> with \( \) and \[ \] delimiters.
// - Tutorial notebooks: mkdocs-jupyter renders Markdown cells itself, so their math
//   keeps the raw $...$ and $$...$$ delimiters of the notebook.
// Material swaps page content without a reload ("instant" navigation), so typesetting
// runs on every emission of its document$ observable, not once on load.

(function () {
  "use strict";

  function typesetArithmatex() {
    document.querySelectorAll(".arithmatex").forEach(function (el) {
      renderMathInElement(el, {
        delimiters: [
          { left: "\\(", right: "\\)", display: false },
          { left: "\\[", right: "\\]", display: true },
        ],
        throwOnError: true,
      });
    });
  }

  function typesetNotebooks() {
    document
      .querySelectorAll(".jupyter-wrapper .jp-RenderedMarkdown")
      .forEach(function (el) {
        renderMathInElement(el, {
          delimiters: [
            { left: "$$", right: "$$", display: true },
            { left: "$", right: "$", display: false },
          ],
          // Code spans and blocks in notebook cells must keep their dollar signs.
          ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code"],
          throwOnError: true,
        });
      });
  }

  function typeset() {
    typesetArithmatex();
    typesetNotebooks();
  }

  if (typeof document$ !== "undefined") {
    document$.subscribe(typeset);
  } else {
    document.addEventListener("DOMContentLoaded", typeset);
  }
})();

// Loads the interactive explorers (explorers.js) on the pages that have one, and only
// there: on every page load and after every instant navigation (Material's document$),
// it looks for elements marked data-explorer and mounts them.
;(() => {
  const here = document.currentScript.src
  const mountAll = () => {
    const roots = [...document.querySelectorAll("[data-explorer]:not([data-mounted])")]
    if (!roots.length) return
    import(new URL("explorers.js", here).href).then(module => roots.forEach(root => module.mount(root)))
  }
  if (window.document$) window.document$.subscribe(mountAll)
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll)
  else mountAll()
})()

// A code block's copy button is not a way to navigate the site.
//
// Material (9.8) puts the buttons of each code block in a <nav class="md-code__nav">: a
// navigation landmark with no name, one per code block, up to a few dozen on a page,
// each listed among the page's landmarks as "navigation" beside the site's real menus
// (axe: landmark-unique). Each gets role="none" (allowed on <nav>), which takes it out of
// the landmarks and leaves its buttons as they are. Material adds them on every page load
// and after every instant navigation, in its own document$ subscription, which runs
// before this one (the bundle subscribes first).
;(() => {
  const unlist = () => {
    for (const nav of document.querySelectorAll("nav.md-code__nav:not([role])")) {
      nav.setAttribute("role", "none")
    }
  }
  if (window.document$) window.document$.subscribe(unlist)
})()

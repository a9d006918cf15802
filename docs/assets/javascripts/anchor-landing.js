// A link to a heading keeps that heading under the header while the page settles.
//
// site.css lays out each block of a page only when it comes near the screen; until then
// a block has a placeholder height. The browser scrolls a link's heading under the header
// at once, and then the blocks above it take their real heights (the page's scripts
// measure them): on reference/latent one member's heading ended 3,233 px below the
// screen. For three seconds, or until the reader scrolls, clicks or types, each change
// of the page's height scrolls the heading back. Runs on a page load with a fragment,
// after each instant navigation to one, and when the fragment changes.
;(() => {
  const SETTLE_MS = 3000
  let release = null
  const land = () => {
    if (release) release()
    const id = decodeURIComponent(location.hash.slice(1))
    const target = id && document.getElementById(id)
    if (!target) return
    const observer = new ResizeObserver(() => target.scrollIntoView())
    const kinds = ["wheel", "touchstart", "keydown", "mousedown"]
    const timer = setTimeout(() => release(), SETTLE_MS)
    release = () => {
      observer.disconnect()
      clearTimeout(timer)
      for (const kind of kinds) removeEventListener(kind, release)
      release = null
    }
    for (const kind of kinds) addEventListener(kind, release, { passive: true })
    observer.observe(document.body)
  }
  if (window.document$) window.document$.subscribe(land)
  else land()
  addEventListener("hashchange", land)
})()

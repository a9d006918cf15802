// The search index is fetched when the reader is about to search, not on every page.
//
// Material's bundle requests search/search_index.json as soon as it runs, on every page
// a reader opens (every full load: instant navigation keeps the index it has): 1.6 MB,
// 430 KB gzipped, parsed on the main thread, then indexed by lunr in a worker, 0.5 s of
// CPU per load on the machine the site is built on. A reader who never searches paid
// for it on every page. This script runs before the bundle (both are deferred, in
// document order) and holds that one request back until the reader shows they are
// about to search: focus in the search form, a click or tap on the search button, or
// one of Material's keys that open search (/, s, f). Material shows "Initializing
// search" for the moment the index takes to arrive, then searches as before.
//
// A page opened from a search result with ?h= (search.highlight) asks at once: its
// terms are highlighted from the index. A page opened from a file:// URL is not
// affected: Material loads the index there as a script, not with a request.
;(() => {
  const INDEX = /\/search\/search_index\.json$/
  const { open, send } = XMLHttpRequest.prototype
  const held = []
  let wanted = new URLSearchParams(location.search).has("h")

  const release = () => {
    if (wanted) return
    wanted = true
    for (const go of held.splice(0)) go()
  }

  XMLHttpRequest.prototype.open = function (method, url, ...rest) {
    this.searchIndex = INDEX.test(new URL(url, location.href).pathname)
    return open.call(this, method, url, ...rest)
  }
  XMLHttpRequest.prototype.send = function (...args) {
    if (this.searchIndex && !wanted) {
      held.push(() => send.apply(this, args))
      return
    }
    return send.apply(this, args)
  }

  const SEARCH = '.md-search, label[for="__search"]'
  addEventListener("focusin", (event) => { if (event.target.closest?.(SEARCH)) release() })
  addEventListener("pointerdown", (event) => { if (event.target.closest?.(SEARCH)) release() })
  addEventListener("keydown", (event) => { if (["/", "s", "f"].includes(event.key.toLowerCase())) release() })
  addEventListener("change", (event) => { if (event.target.id === "__search" && event.target.checked) release() })
})()

// Instant navigation wherever the site is served.
//
// Material swaps pages in without a reload only for links whose URL it finds in
// sitemap.xml. Those URLs are absolute, built from `site_url`, and Material maps just
// their scheme and host name onto the page's (integrations/sitemap in Material 9.8), not
// the port or the path the site lives under. Served anywhere else (a local copy on
// another port, a preview under another path), every click silently becomes a full
// page load.
//
// This script takes over exactly the clicks Material leaves alone for that reason:
// same-origin links to a page listed in the sitemap, compared by their path relative to
// the site root. It then does what Material does with its own (integrations/instant):
// remember the scroll position, push the history entry and hand the URL to Material's
// `location$`, which fetches the page and swaps it in; back and forward buttons are
// Material's already. Where `site_url` matches the address (the published site,
// `mkdocs serve`), Material handles every click itself and this script stays idle.
(() => {
  const config = document.getElementById("__config")
  if (!config || location.protocol === "file:" || !window.location$) return
  // The site root as served; `base` is relative to the page this script first ran on,
  // which is why it is read once, here, and not after a page swap.
  const root = new URL(JSON.parse(config.textContent).base, location.href)

  let pages = null  // site-relative paths of the sitemap's pages, once we take over

  fetch(new URL("sitemap.xml", root))
    .then(response => (response.ok ? response.text() : ""))
    .then(text => {
      const xml = new DOMParser().parseFromString(text, "text/xml")
      const urls = [...xml.getElementsByTagName("loc")].map(el => el.textContent.trim())
      if (!urls.length) return
      // The root the sitemap was built for: the longest common prefix, up to a "/".
      let built = urls.reduce((a, b) => {
        let i = 0
        while (i < a.length && a[i] === b[i]) i++
        return a.slice(0, i)
      })
      built = built.slice(0, built.lastIndexOf("/") + 1)
      // Material's own mapping; if it already lands on our root, Material has it.
      const mapped = new URL(built)
      mapped.protocol = root.protocol
      mapped.hostname = root.hostname
      if (mapped.href === root.href) return
      pages = new Set(urls.map(url => url.slice(built.length)))
    })
    .catch(() => {})  // no sitemap: plain links, as Material does

  // Bubbling to `document` runs after Material's listener on `document.body`, so a
  // click Material has taken (default prevented) is never handled twice.
  document.addEventListener("click", ev => {
    if (!pages || ev.defaultPrevented || ev.button !== 0) return
    if (ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return  // new tab/window
    const link = ev.target instanceof Element ? ev.target.closest("a[href]") : null
    if (!link || link.target || link.hasAttribute("download")) return
    const url = new URL(link.href)
    if (url.origin !== root.origin || !url.pathname.startsWith(root.pathname)) return
    if (!pages.has(url.pathname.slice(root.pathname.length))) return
    if (url.pathname === location.pathname) return  // an anchor on this page: native
    ev.preventDefault()
    history.replaceState({ x: window.scrollX, y: window.scrollY }, "")
    history.pushState(null, "", url)
    window.location$.next(url)
  })
})()

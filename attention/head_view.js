// The head view of attention.viz.HeadView: every layer and head of a model's attention
// over one input, in the browser. Plain DOM and SVG, no library and no network: the
// same file runs on the documentation site (loaded by its explorers) and inlined into
// the standalone page that HeadView.save() writes.
//
// state = { tokens: [...], keyTokens: [...], layers: ["layer 0", ...], heads: H,
//           weights: [layer][head][query][key] }

const SVG_NS = "http://www.w3.org/2000/svg"
const ROW = 22 // pixels between two tokens
const WIDTH = 300 // one pane
const GAP = 16 // between two panes in a saved picture

function node(tag, attrs = {}, ...children) {
  const el = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag)
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") el.textContent = value
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value)
    else if (value !== null && value !== undefined && value !== false) el.setAttribute(key, value)
  }
  el.append(...children.filter(c => c !== null && c !== undefined))
  return el
}

let counter = 0

function download(name, blob) {
  const a = node("a", { href: URL.createObjectURL(blob), download: name })
  document.body.append(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(a.href), 1000)
}

/** The panes side by side as one SVG file, colours written in, so it looks the same anywhere. */
function standaloneSvg(panes, height) {
  const width = panes.length * WIDTH + (panes.length - 1) * GAP
  const outer = node("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}` })
  outer.append(node("svg:rect", { width: "100%", height: "100%", fill: getComputedStyle(panes[0]).backgroundColor || "#fff" }))
  panes.forEach((svg, p) => {
    const copy = svg.cloneNode(true)
    const source = [...svg.querySelectorAll("*")]
    ;[...copy.querySelectorAll("*")].forEach((el, i) => {
      const style = getComputedStyle(source[i])
      for (const prop of ["display", "fill", "stroke", "stroke-width", "stroke-opacity", "opacity", "font-size", "font-family", "font-weight"]) {
        el.style.setProperty(prop, style.getPropertyValue(prop))
      }
    })
    copy.setAttribute("x", p * (WIDTH + GAP))
    outer.append(copy)
  })
  return { width, text: new XMLSerializer().serializeToString(outer) }
}

export function mountHeadView(root, state) {
  const { tokens, weights, heads } = state
  const keyTokens = state.keyTokens || tokens
  const layerNames = state.layers
  const height = Math.max(tokens.length, keyTokens.length) * ROW + 30
  let layer = 0
  let focused = null // the query whose lines are shown alone, if any
  const panes = [{ head: 0 }, { head: Math.min(1, heads - 1) }]

  const status = node("p", { class: "head-view-status", "aria-live": "polite" })

  const describe = (pane, i) => {
    const row = weights[layer][pane.head][i]
    const best = row.indexOf(Math.max(...row))
    return `query ${i} "${tokens[i]}" in ${layerNames[layer]}, head ${pane.head}: most weight on key ${best} "${keyTokens[best]}" (${row[best].toFixed(2)})`
  }

  const drawPane = pane => {
    const svg = node("svg:svg", {
      class: "head-view-pane",
      viewBox: `0 0 ${WIDTH} ${height}`,
      width: WIDTH,
      height,
      role: "group",
      "aria-label": `${layerNames[layer]}, head ${pane.head}: queries on the left, keys on the right`,
    })
    svg.append(node("svg:text", { x: WIDTH / 2, y: 14, class: "head-view-title", "text-anchor": "middle", text: `${layerNames[layer]}, head ${pane.head}` }))
    const y = i => 34 + i * ROW
    const lines = node("svg:g", { class: "head-view-lines", "aria-hidden": "true" })
    const matrix = weights[layer][pane.head]
    matrix.forEach((row, i) => row.forEach((w, j) => {
      if (w < 0.005) return // invisible anyway; keeps the SVG small
      lines.append(node("svg:line", {
        x1: 80, y1: y(i) - 4, x2: WIDTH - 80, y2: y(j) - 4,
        "stroke-opacity": w.toFixed(3), "stroke-width": 2,
        "data-query": i, "data-key": j, "data-weight": w,
        class: focused !== null && focused !== i ? "hidden" : null,
      }))
    }))
    svg.append(lines)
    tokens.forEach((token, i) => {
      const label = node("svg:text", {
        x: 74, y: y(i), "text-anchor": "end", class: `head-view-token query${focused === i ? " active" : ""}`,
        tabindex: 0, role: "button", "data-query": i,
        "aria-label": describe(pane, i),
        text: token,
      })
      const show = () => select(i)
      label.addEventListener("mouseenter", show)
      label.addEventListener("focus", show)
      label.addEventListener("keydown", event => {
        const step = { ArrowDown: 1, ArrowUp: -1 }[event.key]
        if (step === undefined) return
        event.preventDefault()
        const next = Math.max(0, Math.min(tokens.length - 1, i + step))
        root.querySelector(`.head-view-pane [data-query="${next}"].head-view-token`)?.focus()
      })
      svg.append(label)
    })
    keyTokens.forEach((token, j) => {
      const w = focused === null ? null : matrix[focused][j]
      svg.append(node("svg:text", {
        x: WIDTH - 74, y: y(j), class: "head-view-token key", "data-key": j,
        text: w === null ? token : `${token} ${w.toFixed(2)}`,
      }))
    })
    return svg
  }

  const figures = node("div", { class: "head-view-panes" })
  const render = () => {
    figures.replaceChildren(...panes.map(pane => drawPane(pane)))
    root.dataset.layer = String(layer)
    root.dataset.heads = JSON.stringify(panes.map(p => p.head))
    root.dataset.focused = focused === null ? "" : String(focused)
    status.textContent = focused === null
      ? "Hover over or focus a query token (left) to see where it looks."
      : panes.map(p => describe(p, focused)).join("; ")
  }
  const select = i => {
    if (focused === i) return
    focused = i
    const active = document.activeElement
    const refocus = active && active.classList?.contains("head-view-token") ? Number(active.dataset.query) : null
    render()
    if (refocus !== null) root.querySelector(`.head-view-pane [data-query="${refocus}"].head-view-token`)?.focus()
  }

  const choose = (label, options, value, onChange) => {
    const id = `head-view-${++counter}`
    const select = node("select", { id, onchange: e => { onChange(Number(e.target.value)); render() } })
    options.forEach((text, v) => select.append(node("option", { value: v, text, selected: v === value || null })))
    return node("span", { class: "head-view-control" }, node("label", { for: id, text: label }), select)
  }
  const headNames = Array.from({ length: heads }, (_, h) => `head ${h}`)
  const button = (text, onclick) => node("button", { type: "button", class: "md-button", text, onclick })
  const fileName = ext => `head-view-layer${layer}-heads${panes.map(p => p.head).join("-")}.${ext}`
  const picture = () => standaloneSvg([...figures.querySelectorAll("svg")], height)
  const exportSvg = () => download(fileName("svg"), new Blob([picture().text], { type: "image/svg+xml" }))
  const exportPng = () => {
    const { width, text } = picture()
    const image = new Image()
    image.onload = () => {
      const canvas = node("canvas", { width: width * 2, height: height * 2 })
      const context = canvas.getContext("2d")
      context.scale(2, 2)
      context.drawImage(image, 0, 0)
      canvas.toBlob(blob => download(fileName("png"), blob), "image/png")
    }
    image.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(text)
  }
  root.append(
    node("div", { class: "head-view-controls" },
      choose("layer", layerNames, layer, v => { layer = v }),
      choose("head", headNames, panes[0].head, v => { panes[0].head = v }),
      choose("beside it, head", headNames, panes[1].head, v => { panes[1].head = v }),
      button("Save as SVG", exportSvg),
      button("Save as PNG", exportPng)),
    figures,
    status,
  )
  render()
}

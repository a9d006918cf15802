// The interactive explorers: each one mounts on an element `data-explorer="name"`,
// reads its starting state from the element's `data-state` (written at build by the
// same Python block that draws the static figure shown without JavaScript), and
// computes everything with ./attention.js, the package's arithmetic.
import {
  attend,
  causalMask,
  combineMasks,
  defaultScale,
  normals,
  onlineSoftmax,
  paddingMask,
  randomMatrix,
  slidingWindowMask,
  softmax,
  scores as scoreMatrix,
} from "./attention.js"

const SVG = "http://www.w3.org/2000/svg"

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag)
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = value
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value)
    else if (value !== false && value !== null && value !== undefined) node.setAttribute(key, value)
  }
  node.append(...children.filter(c => c !== null && c !== undefined))
  return node
}

const fmt = (x, digits = 3) => (Number.isFinite(x) ? x.toFixed(digits) : x > 0 ? "∞" : "−∞")
let uid = 0
const nextId = prefix => `${prefix}-${++uid}`

function control(label, input) {
  const id = input.id || (input.id = nextId("ctl"))
  return el("div", { class: "explorer-control" }, el("label", { for: id, text: label }), input)
}

function slider(min, max, step, value, onInput) {
  return el("input", { type: "range", min, max, step, value, oninput: onInput })
}

function select(options, value, onChange) {
  const node = el("select", { onchange: onChange })
  for (const [v, text] of options) node.append(el("option", { value: v, text, selected: String(v) === String(value) }))
  return node
}

// --- 1. Scaled dot-product attention, with points to drag --------------------------

const LIMIT = 3 // the planes span [-3, 3] in both coordinates

function plane(title) {
  const svg = el("svg:svg", {
    viewBox: `${-LIMIT} ${-LIMIT} ${2 * LIMIT} ${2 * LIMIT}`,
    class: "explorer-plane",
    role: "group",
    "aria-label": title,
  })
  svg.append(
    el("svg:line", { x1: -LIMIT, y1: 0, x2: LIMIT, y2: 0, class: "axis" }),
    el("svg:line", { x1: 0, y1: -LIMIT, x2: 0, y2: LIMIT, class: "axis" }),
  )
  return svg
}

/** A point on a plane that the pointer can drag and the arrow keys can move. */
function draggable(svg, name, point, kind, onMove) {
  const group = el("svg:g", {
    class: `point ${kind}`,
    tabindex: 0,
    role: "button",
    "aria-roledescription": "draggable point",
  })
  const dot = el("svg:circle", { r: 0.16 })
  const label = el("svg:text", { class: "point-label", dx: 0.22, dy: -0.22, text: name })
  group.append(dot, label)
  const place = () => {
    group.setAttribute("transform", `translate(${point[0]} ${-point[1]})`)
    group.setAttribute("aria-label", `${name} at (${fmt(point[0], 1)}, ${fmt(point[1], 1)}); arrow keys move it`)
    group.dataset.x = point[0]
    group.dataset.y = point[1]
  }
  const clamp = v => Math.max(-LIMIT, Math.min(LIMIT, Math.round(v * 100) / 100))
  const moveTo = (x, y) => {
    point[0] = clamp(x)
    point[1] = clamp(y)
    place()
    onMove()
  }
  group.addEventListener("pointerdown", event => {
    group.setPointerCapture(event.pointerId)
    group.classList.add("dragging")
    event.preventDefault()
  })
  group.addEventListener("pointermove", event => {
    if (!group.hasPointerCapture(event.pointerId)) return
    const at = new DOMPoint(event.clientX, event.clientY).matrixTransform(svg.getScreenCTM().inverse())
    moveTo(at.x, -at.y)
  })
  group.addEventListener("pointerup", () => group.classList.remove("dragging"))
  group.addEventListener("keydown", event => {
    const step = event.shiftKey ? 0.5 : 0.1
    const moves = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] }
    const move = moves[event.key]
    if (!move) return
    event.preventDefault()
    moveTo(point[0] + move[0], point[1] + move[1])
  })
  place()
  svg.append(group)
  return group
}

function sdpaPlayground(root, state) {
  const query = [...state.query]
  const keys = state.keys.map(k => [...k])
  const values = state.values.map(v => [...v])
  let scaling = state.scaling // "none" or "sqrt"
  let D = state.D
  let temperature = 1
  const extraSeed = 7

  const qkPlane = plane("query and keys: drag them")
  const vPlane = plane("values and the output: drag the values")
  const outputDot = el("svg:g", { class: "point output", "aria-hidden": "true" },
    el("svg:rect", { x: -0.15, y: -0.15, width: 0.3, height: 0.3 }),
    el("svg:text", { class: "point-label", dx: -0.2, dy: 0.5, text: "output" }))
  vPlane.append(outputDot)

  const rows = keys.map((_, j) => {
    const bar = el("span", { class: "explorer-bar" })
    const row = el("tr", {},
      el("th", { scope: "row", text: `k${j + 1}` }),
      el("td", { class: "num score" }),
      el("td", { class: "num weight" }),
      el("td", { class: "bar-cell" }, bar))
    return { row, bar }
  })
  const table = el("table", { class: "explorer-table" },
    el("caption", { text: "Scores and softmax weights of the query against each key" }),
    el("thead", {}, el("tr", {},
      el("th", { scope: "col", text: "key" }),
      el("th", { scope: "col", text: "score" }),
      el("th", { scope: "col", text: "weight" }),
      // The bars repeat the weights: their column has no header of its own (an empty
      // <th> is a blank header a screen reader announces for every bar).
      el("td", {}))),
    el("tbody", {}, ...rows.map(r => r.row)))
  const summary = el("p", { class: "explorer-summary", "aria-live": "polite" })

  // Components 3..D of the query and keys: fixed standard normal draws, the same for
  // a given D, so that changing D is the only thing that changes them.
  const extra = () => {
    const next = normals(extraSeed + D)
    return { q: randomMatrix(1, D - 2, next)[0], K: randomMatrix(keys.length, D - 2, next) }
  }
  let hidden = extra()

  const update = () => {
    const scale = (scaling === "sqrt" ? defaultScale(D) : 1) / temperature
    const Q = [[...query, ...hidden.q]]
    const K = keys.map((k, j) => [...k, ...hidden.K[j]])
    const result = attend(Q, K, values, { scale })
    const w = result.weights[0]
    rows.forEach(({ row, bar }, j) => {
      row.querySelector(".score").textContent = fmt(result.scores[0][j])
      row.querySelector(".weight").textContent = fmt(w[j])
      bar.style.width = `${(100 * w[j]).toFixed(1)}%`
    })
    const [ox, oy] = result.output[0]
    outputDot.setAttribute("transform", `translate(${ox} ${-oy})`)
    const top = Math.max(...w)
    root.dataset.weights = JSON.stringify(w)
    root.dataset.output = JSON.stringify(result.output[0])
    root.dataset.scale = String(scale)
    summary.textContent =
      `scale ${fmt(scale, 4)}; the largest weight is ${fmt(top)}` +
      (top > 0.99 ? " (saturated: the softmax is almost one-hot)" : "") +
      `; output (${fmt(ox, 2)}, ${fmt(oy, 2)})`
  }

  draggable(qkPlane, "q", query, "query", update)
  keys.forEach((k, j) => draggable(qkPlane, `k${j + 1}`, k, "key", update))
  values.forEach((v, j) => draggable(vPlane, `v${j + 1}`, v, "value", update))

  const scalingControl = select([["sqrt", "1/√D (as in the paper)"], ["none", "1 (unscaled)"]], scaling, e => {
    scaling = e.target.value
    update()
  })
  const dimension = select([2, 8, 32, 128, 512].map(d => [d, String(d)]), D, e => {
    D = Number(e.target.value)
    hidden = extra()
    update()
  })
  const temperatureOut = el("output", { text: "1.00" })
  const temperatureSlider = slider(0.25, 4, 0.05, 1, e => {
    temperature = Number(e.target.value)
    temperatureOut.textContent = temperature.toFixed(2)
    update()
  })
  root.append(
    el("div", { class: "explorer-controls" },
      control("scale", scalingControl),
      control("dimension D", dimension),
      el("div", { class: "explorer-control" },
        el("label", { for: temperatureSlider.id = nextId("ctl"), text: "temperature τ (scale ÷ τ)" }),
        temperatureSlider, temperatureOut)),
    el("div", { class: "explorer-planes" },
      el("figure", {}, qkPlane, el("figcaption", { text: "Query q and keys k1…k4 (their first two components)" })),
      el("figure", {}, vPlane, el("figcaption", { text: "Values v1…v4 and the output, their weighted mean" }))),
    table,
    summary,
  )
  update()
}

// --- 2. Masks ------------------------------------------------------------------------

function heatmap(L, S, cell, label) {
  const svg = el("svg:svg", {
    viewBox: `0 0 ${S} ${L}`,
    class: "explorer-grid",
    role: "img",
    "aria-label": label,
    style: `aspect-ratio: ${S} / ${Math.max(L, 1)}`,
  })
  for (let i = 0; i < L; i++) {
    for (let j = 0; j < S; j++) svg.append(cell(i, j))
  }
  return svg
}

function pythonForMask(s) {
  const args = `${s.L}, ${s.S}`
  const align = s.alignment === "top_left" ? "" : `, alignment="${s.alignment}"`
  const names = ["combine_masks", "padding_mask"]
  const parts = []
  if (s.window > 0) {
    names.push("sliding_window_mask")
    const causal = s.causal ? "" : ", causal=False"
    parts.push(`    sliding_window_mask(${args}, window=${s.window}${causal}${align}),  # (L, S)`)
  } else if (s.causal) {
    names.push("causal_mask")
    parts.push(`    causal_mask(${args}${align}),  # (L, S)`)
  }
  parts.push(`    padding_mask([${s.lengths.join(", ")}], max_length=${s.S})[:, None, :],  # (B, 1, S)`)
  return [
    `from attention import ${names.sort().join(", ")}`,
    "",
    "mask = combine_masks(",
    ...parts,
    ")  # (B, L, S): True where query i may attend to key j",
    "print(mask.int())",
  ].join("\n")
}

function maskExplorer(root, state) {
  const s = { ...state, lengths: [...state.lengths] }
  let shown = 0 // which sequence of the batch the pictures show
  const qk = normals(state.seed)
  const D = 4
  const Q = randomMatrix(10, D, qk) // enough rows and columns for the largest L and S
  const K = randomMatrix(10, D, qk)

  const pictures = el("div", { class: "explorer-pictures" })
  const note = el("p", { class: "explorer-summary", "aria-live": "polite" })
  const code = el("code", {})
  const copy = el("button", {
    type: "button",
    class: "md-button explorer-copy",
    text: "Copy the code",
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(code.textContent)
        copy.textContent = "Copied"
      } catch {
        copy.textContent = "Select the code and copy it"
      }
      setTimeout(() => (copy.textContent = "Copy the code"), 1500)
    },
  })

  const masks = () => {
    const parts = []
    if (s.window > 0) parts.push(slidingWindowMask(s.L, s.S, { window: s.window, causal: s.causal, alignment: s.alignment }))
    else if (s.causal) parts.push(causalMask(s.L, s.S, s.alignment))
    return s.lengths.map(n => {
      const padding = Array.from({ length: s.L }, () => paddingMask([n], s.S)[0])
      return combineMasks(...parts, padding)
    })
  }

  let previousS = s.S
  const update = () => {
    // A sequence that filled every key slot still does after S changes.
    s.lengths = s.lengths.map(n => (n === previousS ? s.S : Math.min(n, s.S)))
    previousS = s.S
    lengthInputs.forEach((input, b) => {
      input.max = s.S
      input.value = s.lengths[b]
      lengthOutputs[b].textContent = String(s.lengths[b])
    })
    s.window = Math.min(s.window, s.S) // a window wider than S keeps what S keeps
    windowInput.max = s.S
    windowInput.value = s.window
    win.out.textContent = s.window === 0 ? "off" : String(s.window)
    const batch = masks()
    const mask = batch[shown]
    const P = softmax(scoreMatrix(Q.slice(0, s.L), K.slice(0, s.S), { mask }))
    const empty = mask.map(row => !row.some(Boolean))
    const maskSvg = heatmap(s.L, s.S, (i, j) =>
      el("svg:rect", { x: j + 0.06, y: i + 0.06, width: 0.88, height: 0.88, class: mask[i][j] ? "kept" : "masked" }),
      `Mask of sequence ${shown + 1}: ${s.L} queries by ${s.S} keys, filled where the query may attend`)
    const weightSvg = heatmap(s.L, s.S, (i, j) =>
      el("svg:rect", {
        x: j + 0.04, y: i + 0.04, width: 0.92, height: 0.92,
        class: empty[i] ? "empty-row" : "weight",
        style: `--w: ${(100 * P[i][j]).toFixed(1)}%`,
      }, el("svg:title", { text: `query ${i}, key ${j}: weight ${fmt(P[i][j])}` })),
      `Attention weights of sequence ${shown + 1} under that mask; rows whose keys are all masked are zero`)
    pictures.replaceChildren(
      el("figure", {}, maskSvg, el("figcaption", { text: "mask (rows: queries, columns: keys)" })),
      el("figure", {}, weightSvg, el("figcaption", { text: "softmax weights under the mask" })))
    root.dataset.mask = JSON.stringify(batch)
    root.dataset.weights = JSON.stringify(P)
    const emptyRows = empty.map((e, i) => (e ? i : -1)).filter(i => i >= 0)
    note.textContent =
      `Sequence ${shown + 1}: ${mask.flat().filter(Boolean).length} of ${s.L * s.S} pairs kept. ` +
      (emptyRows.length
        ? `Queries ${emptyRows.join(", ")} have no key left: their weights are all zero, not NaN.`
        : "Every query has at least one key.")
    code.textContent = pythonForMask(s)
  }

  const range = (label, key, min, max, describe = v => String(v)) => {
    const out = el("output", { text: describe(s[key]) })
    const input = slider(min, max, 1, s[key], e => {
      s[key] = Number(e.target.value)
      out.textContent = describe(s[key])
      update()
    })
    return { node: el("div", { class: "explorer-control" }, el("label", { for: input.id = nextId("ctl"), text: label }), input, out), input, out }
  }
  const L = range("queries L", "L", 1, 10)
  const S = range("keys S", "S", 1, 10)
  const win = range("sliding window w", "window", 0, state.S, v => (v === 0 ? "off" : String(v)))
  const windowInput = win.input
  const causal = el("input", { type: "checkbox", checked: s.causal || null, onchange: e => { s.causal = e.target.checked; update() } })
  const alignment = select([["top_left", "top-left (is_causal=True)"], ["bottom_right", "bottom-right (KV cache)"]], s.alignment, e => {
    s.alignment = e.target.value
    update()
  })
  const lengthOutputs = s.lengths.map(n => el("output", { text: String(n) }))
  const lengthInputs = s.lengths.map((n, b) => slider(0, s.S, 1, n, e => {
    s.lengths[b] = Number(e.target.value)
    update()
  }))
  const which = select(s.lengths.map((_, b) => [b, `sequence ${b + 1}`]), 0, e => {
    shown = Number(e.target.value)
    update()
  })
  root.append(
    el("div", { class: "explorer-controls" },
      L.node, S.node,
      el("div", { class: "explorer-control" }, el("label", { for: causal.id = nextId("ctl"), text: "causal" }), causal),
      control("alignment", alignment),
      win.node,
      ...lengthInputs.map((input, b) => el("div", { class: "explorer-control" },
        el("label", { for: input.id = nextId("ctl"), text: `real keys in sequence ${b + 1}` }), input, lengthOutputs[b])),
      control("show", which)),
    pictures,
    note,
    el("div", { class: "explorer-code" }, el("pre", { tabindex: 0 }, code), copy),
  )
  update()
}

// --- 3. Online softmax, one key block at a time ----------------------------------------

function onlineSoftmaxStepper(root, state) {
  let seed = state.seed
  let blockSize = state.blockSize
  let step = 0
  let data = null
  let steps = []
  const S = state.S

  const keysRow = el("div", { class: "explorer-keys", role: "list", "aria-label": "the keys, by block" })
  const stateTable = el("table", { class: "explorer-table" })
  const status = el("p", { class: "explorer-summary", "aria-live": "polite" })

  const recompute = () => {
    const next = normals(seed)
    data = {
      Q: randomMatrix(1, state.D, next),
      K: randomMatrix(S, state.D, next),
      V: randomMatrix(S, 2, next),
    }
    steps = onlineSoftmax(data.Q, data.K, data.V, { blockSize })
    step = 0
  }

  const render = () => {
    const dense = attend(data.Q, data.K, data.V)
    const current = step > 0 ? steps[step - 1] : null
    const zAll = scoreMatrix(data.Q, data.K)[0]
    keysRow.replaceChildren(...zAll.map((z, j) => {
      const seen = current && j < current.keys[1]
      const now = current && j >= current.keys[0] && j < current.keys[1]
      return el("div", {
        role: "listitem",
        class: `explorer-key${seen ? " seen" : ""}${now ? " current" : ""}${j % blockSize === 0 ? " block-start" : ""}`,
      }, el("span", { class: "key-name", text: `k${j + 1}` }), el("span", { class: "num", text: seen ? fmt(z, 2) : "·" }))
    }))
    const row = (name, value) => el("tr", {}, el("th", { scope: "row", text: name }), el("td", { class: "num", text: value }))
    const vec = v => `(${v.map(x => fmt(x, 4)).join(", ")})`
    const before = step > 1 ? steps[step - 2] : { m: [-Infinity], l: [0] }
    stateTable.replaceChildren(
      el("caption", { text: current ? `After block ${step} of ${steps.length} (keys ${current.keys[0] + 1}–${current.keys[1]})` : "Before the first block" }),
      el("tbody", {},
        row("running max m", current ? fmt(current.m[0], 4) : "−∞"),
        row("rescale e^(m_old − m)", current ? fmt(Math.exp(before.m[0] - current.m[0]), 4) : "—"),
        row("running sum ℓ", current ? fmt(current.l[0], 4) : "0"),
        row("accumulator Õ", current ? vec(current.acc[0]) : "(0, 0)"),
        row("output so far Õ / ℓ", current ? vec(current.output[0]) : "—"),
        row("dense softmax(qKᵀ/√D) V", vec(dense.output[0]))))
    const done = step === steps.length
    const gap = current ? Math.max(...current.output[0].map((x, d) => Math.abs(x - dense.output[0][d]))) : NaN
    root.dataset.step = String(step)
    root.dataset.output = JSON.stringify(current ? current.output[0] : null)
    root.dataset.dense = JSON.stringify(dense.output[0])
    status.textContent = done
      ? `All ${steps.length} blocks seen: the online result differs from the dense one by ${gap.toExponential(1)}, rounding only.`
      : `${steps.length - step} block${steps.length - step === 1 ? "" : "s"} to go.`
    back.disabled = step === 0
    forward.disabled = done
  }

  const button = (text, onclick) => el("button", { type: "button", class: "md-button", text, onclick })
  const back = button("Back", () => { step = Math.max(0, step - 1); render() })
  const forward = button("Next block", () => { step = Math.min(steps.length, step + 1); render() })
  const reset = button("Start over", () => { step = 0; render() })
  const toEnd = button("Run to the end", () => { step = steps.length; render() })
  const fresh = button("New numbers", () => { seed += 1; recompute(); render() })
  const block = select([1, 2, 4, 8].filter(b => b <= S).map(b => [b, String(b)]), blockSize, e => {
    blockSize = Number(e.target.value)
    recompute()
    render()
  })
  root.append(
    el("div", { class: "explorer-controls" }, control("key block size", block), back, forward, toEnd, reset, fresh),
    keysRow,
    stateTable,
    status,
  )
  recompute()
  render()
}

// -------------------------------------------------------------------------------------

// --- 4. The head view of a trained model (attention.viz.HeadView) ----------------------

async function headView(root, state) {
  const styled = addStylesheet("head_view.css")
  const { mountHeadView } = await import("./head_view.js")
  await styled
  mountHeadView(root, state)
}

const EXPLORERS = {
  sdpa: sdpaPlayground,
  masks: maskExplorer,
  "online-softmax": onlineSoftmaxStepper,
  "head-view": headView,
}

/** Load a stylesheet of the explorers once; resolves when it applies (or failed). An
 * explorer is shown only then: shown before, its buttons took Material's colours (the
 * light scheme's indigo, 2.3:1 on the dark background) and faded to their own. */
function addStylesheet(name = "explorers.css") {
  const href = new URL(name, import.meta.url).href
  let link = document.querySelector(`link[href="${href}"]`)
  if (!link) {
    link = el("link", { rel: "stylesheet", href })
    link.loaded = new Promise(resolve => {
      link.addEventListener("load", resolve, { once: true })
      link.addEventListener("error", resolve, { once: true })
    })
    document.head.append(link)
  }
  return link.loaded ?? Promise.resolve()
}

/** Build the explorer for `root` (once), hiding the static figure it replaces. */
export async function mount(root) {
  if (root.dataset.mounted) return
  root.dataset.mounted = "starting"
  const styled = addStylesheet()
  const build = EXPLORERS[root.dataset.explorer]
  if (!build) throw new Error(`no explorer named ${root.dataset.explorer}`)
  const live = el("div", { class: "explorer-live" })
  await build(live, JSON.parse(root.dataset.state))
  await styled
  root.querySelector(".explorer-static")?.setAttribute("hidden", "")
  root.append(live)
  root.dataset.mounted = "true"
}


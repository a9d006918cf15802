// The attention arithmetic of the `attention` package, in the page.
//
// Every explorer on the site computes with these functions, and nothing else: the
// browser tests run them on cases the build computed with the package in float64
// (assets/explorers/cases.json) and require agreement to 1e-12. They follow the
// package's definitions step by step:
//
//   scores  Z = Q K^T * scale            scale defaults to 1/sqrt(D)
//   mask    True = may attend             a masked pair's score is -inf
//   softmax row max subtracted first      a row with every key masked gives zeros
//   output  O = P V
//
// and the online softmax of the tiled loop (attention/_tiled.py), one key block at a
// time: m' = max(m, rowmax Z_j), l = e^(m - m') l + rowsum e^(Z_j - m'),
// acc = e^(m - m') acc + e^(Z_j - m') V_j, and at the end O = acc / l.
//
// Matrices are arrays of rows (arrays of numbers); masks arrays of rows of booleans.

export function defaultScale(D) {
  return D > 0 ? 1 / Math.sqrt(D) : 1 // as attention._kernels.default_scale
}

function dot(a, b) {
  let sum = 0
  for (let i = 0; i < a.length; i++) sum += a[i] * b[i]
  return sum
}

/** Z[i][j] = (q_i . k_j) * scale, or -Infinity where mask[i][j] is false. */
export function scores(Q, K, { scale = defaultScale(Q[0]?.length ?? 0), mask = null } = {}) {
  return Q.map((q, i) =>
    K.map((k, j) => (mask && !mask[i][j] ? -Infinity : dot(q, k) * scale)),
  )
}

/** Softmax of each row; a row of only -Infinity (every key masked) gives zeros. */
export function softmax(Z) {
  return Z.map(row => {
    const max = Math.max(...row)
    if (max === -Infinity) return row.map(() => 0)
    const e = row.map(z => Math.exp(z - max))
    const sum = e.reduce((a, b) => a + b, 0)
    return e.map(x => x / sum)
  })
}

/** O = P V: each output row the weighted sum of the value rows. */
export function weightedSum(P, V) {
  const Dv = V[0]?.length ?? 0
  return P.map(p => {
    const out = new Array(Dv).fill(0)
    p.forEach((w, j) => {
      for (let d = 0; d < Dv; d++) out[d] += w * V[j][d]
    })
    return out
  })
}

/** Scores, weights and output, as attention.scaled_dot_product_attention computes them. */
export function attend(Q, K, V, options = {}) {
  const Z = scores(Q, K, options)
  const P = softmax(Z)
  return { scores: Z, weights: P, output: weightedSum(P, V) }
}

function positions(L, S, alignment) {
  if (alignment !== "top_left" && alignment !== "bottom_right") {
    throw new Error(`alignment must be 'top_left' or 'bottom_right'; got ${alignment}`)
  }
  return alignment === "bottom_right" ? S - L : 0 // query i sits at position i + offset
}

function grid(L, S, keep) {
  return Array.from({ length: L }, (_, i) => Array.from({ length: S }, (_, j) => keep(i, j)))
}

/** attention.causal_mask(L, S, alignment=...). */
export function causalMask(L, S = L, alignment = "top_left") {
  const offset = positions(L, S, alignment)
  return grid(L, S, (i, j) => j <= i + offset)
}

/** attention.sliding_window_mask(L, S, window=..., causal=..., alignment=...). */
export function slidingWindowMask(L, S = L, { window, causal = true, alignment = "top_left" }) {
  if (!(window >= 1)) throw new Error(`window must be >= 1; got ${window}`)
  const offset = positions(L, S, alignment)
  return grid(L, S, (i, j) => {
    const p = i + offset
    return j > p - window && (causal ? j <= p : j < p + window)
  })
}

/** attention.padding_mask(lengths, S): row b keeps the first lengths[b] keys. */
export function paddingMask(lengths, S) {
  return lengths.map(n => Array.from({ length: S }, (_, j) => j < n))
}

/** Keep a pair only where every mask keeps it (attention.combine_masks, for (L, S) masks). */
export function combineMasks(...masks) {
  const present = masks.filter(Boolean)
  return present[0].map((row, i) => row.map((_, j) => present.every(m => m[i][j])))
}

/**
 * The tiled loop's online softmax, one key block at a time. Returns the state after
 * every block: the block's key range, its scores, and per query the running maximum
 * m, the running sum l, the unnormalised output acc and the output so far acc / l.
 */
export function onlineSoftmax(Q, K, V, { blockSize, scale = defaultScale(Q[0]?.length ?? 0), mask = null }) {
  if (!(blockSize >= 1)) throw new Error(`blockSize must be >= 1; got ${blockSize}`)
  const Dv = V[0]?.length ?? 0
  let m = Q.map(() => -Infinity)
  let l = Q.map(() => 0)
  let acc = Q.map(() => new Array(Dv).fill(0))
  const steps = []
  for (let j0 = 0; j0 < K.length; j0 += blockSize) {
    const j1 = Math.min(j0 + blockSize, K.length)
    const Z = scores(Q, K.slice(j0, j1), {
      scale,
      mask: mask && mask.map(row => row.slice(j0, j1)),
    })
    const next = Q.map((_, i) => {
      const mNew = Math.max(m[i], ...Z[i])
      if (mNew === -Infinity) return { m: m[i], l: l[i], acc: acc[i] } // nothing seen yet
      const alpha = Math.exp(m[i] - mNew) // rescales what was summed against the old max
      const e = Z[i].map(z => Math.exp(z - mNew))
      const out = acc[i].map((a, d) => alpha * a + e.reduce((s, w, t) => s + w * V[j0 + t][d], 0))
      return { m: mNew, l: alpha * l[i] + e.reduce((a, b) => a + b, 0), acc: out }
    })
    m = next.map(s => s.m)
    l = next.map(s => s.l)
    acc = next.map(s => s.acc)
    steps.push({
      keys: [j0, j1],
      scores: Z,
      m: [...m],
      l: [...l],
      acc: acc.map(a => [...a]),
      output: acc.map((a, i) => a.map(x => (l[i] > 0 ? x / l[i] : 0))),
    })
  }
  return steps
}

/** A seeded generator of standard normal numbers (mulberry32 and Box-Muller). */
export function normals(seed) {
  let state = seed >>> 0
  const uniform = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return () => Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform())
}

export function randomMatrix(rows, cols, next) {
  return Array.from({ length: rows }, () => Array.from({ length: cols }, next))
}

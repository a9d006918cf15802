"""The interactive explorers, used as a reader uses them, and held to the package.

- **Exact**: the page's own arithmetic (``assets/explorers/attention.js``) runs in
  Chromium on cases computed here by ``attention`` in float64: scores, masks (causal in
  both alignments, sliding windows, padding, rows with every key masked), softmax
  weights, outputs and every step of the online softmax agree to 1e-12.
- **Used**: Playwright drags a key, moves the query with the arrow keys, changes the
  scale, the dimension and the temperature, builds masks with the sliders and runs the
  Python code the mask explorer shows, and steps through the online softmax; after each
  action the numbers on the page are the package's for the new state.
- **Everywhere**: after instant navigation, without JavaScript (the static figure),
  keyboard only, and light (only the pages that have an explorer load its code).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attention
from docs_build import explorers

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.site, pytest.mark.browser]

PAGES = {
    "sdpa": "concepts/scaled-dot-product-attention/",
    "masks": "concepts/masks/",
    "online-softmax": "concepts/complexity/",
}
TOLERANCE = 1e-12


@pytest.fixture
def page(browser, site_url: str):
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, errors


# Why an element is not shown, for a failure message: its box, and the display,
# visibility and content-visibility of it and of each ancestor.
DESCRIBE_VISIBILITY = """el => {
  const box = el.getBoundingClientRect();
  const chain = [];
  for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
    const style = getComputedStyle(node);
    chain.push(`${node.tagName.toLowerCase()}.${node.className}: ${style.display}`
      + ` ${style.visibility} ${style.contentVisibility}`);
  }
  return {box: [box.x, box.y, box.width, box.height],
          checkVisibility: el.checkVisibility(), chain};
}"""


def open_explorer(page, site_url: str, name: str):
    """Open the page of explorer `name`, wait for it to mount, scroll to it."""
    page.goto(site_url + PAGES[name], wait_until="load")
    root = page.locator(f'[data-explorer="{name}"][data-mounted="true"]')
    root.wait_for(state="attached", timeout=30_000)
    # As a reader does: a block far down the page is laid out as it comes near
    # (content-visibility: auto in site.css).
    root.evaluate("el => el.scrollIntoView({block: 'center'})")
    live = root.locator(".explorer-live")
    try:
        live.wait_for(timeout=15_000)
    except sync_api.TimeoutError:
        why = live.evaluate(DESCRIBE_VISIBILITY)
        raise AssertionError(f"the {name} explorer mounted but is not shown: {why}") from None
    return live


def data(live, key: str):
    return json.loads(live.get_attribute(f"data-{key}"))


def close(a, b, tolerance: float = TOLERANCE) -> bool:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(((a - b).abs() <= tolerance).all())


# --- exactness ---------------------------------------------------------------------


def _mask_cases() -> list[dict]:
    """(L, S) masks of every kind, with what the package makes of their parameters."""
    cases = []
    for L, S in [(1, 1), (3, 3), (3, 5), (5, 3), (4, 7), (6, 2)]:
        for alignment in ("top_left", "bottom_right"):
            cases.append(
                {
                    "kind": "causal",
                    "args": [L, S, alignment],
                    "mask": attention.causal_mask(L, S, alignment=alignment).tolist(),
                }
            )
            for window in (1, 2, 4):
                for causal in (True, False):
                    mask = attention.sliding_window_mask(
                        L, S, window=window, causal=causal, alignment=alignment
                    )
                    cases.append(
                        {
                            "kind": "window",
                            "args": [
                                L,
                                S,
                                {"window": window, "causal": causal, "alignment": alignment},
                            ],
                            "mask": mask.tolist(),
                        }
                    )
    lengths = [0, 2, 5]
    cases.append(
        {
            "kind": "padding",
            "args": [lengths, 5],
            "mask": attention.padding_mask(lengths, 5).tolist(),
        }
    )
    return cases


def _attention_cases() -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    cases = []
    for n in range(40):
        L, S, D, Dv = (int(x) for x in torch.randint(1, 7, (4,), generator=generator))
        q, k = (
            torch.randn(L, D, generator=generator, dtype=torch.float64),
            torch.randn(S, D, generator=generator, dtype=torch.float64),
        )
        v = torch.randn(S, Dv, generator=generator, dtype=torch.float64) * 3
        scale = [None, 0.37, 2.5][n % 3]
        kind = n % 4
        if kind == 0:
            mask = None
        elif kind == 1:
            mask = attention.causal_mask(L, S, alignment="bottom_right")  # L > S: empty rows
        elif kind == 2:
            mask = attention.sliding_window_mask(L, S, window=2, causal=False)
        else:
            mask = torch.rand(L, S, generator=generator) > 0.4
            mask[0] = False  # a query with every key masked
        q = q * 4  # large scores: the max subtraction matters
        used = 1 / math.sqrt(D) if scale is None else scale
        cases.append(
            {
                "Q": q.tolist(),
                "K": k.tolist(),
                "V": v.tolist(),
                "scale": used,
                "mask": None if mask is None else mask.tolist(),
                "defaultScale": scale is None,
                "weights": attention.attention_weights(q, k, attn_mask=mask, scale=scale).tolist(),
                "output": attention.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, scale=scale
                ).tolist(),
                "scores": (q @ k.T * used).tolist(),
                "steps": _online_steps(q, k, v, mask, scale, used, block=1 + n % 3),
                "block": 1 + n % 3,
            }
        )
    return cases


def _online_steps(q, k, v, mask, scale, used, block):
    """After each key block: attention over the keys seen so far (the package), the
    running maximum and the running sum of the scores seen so far."""
    steps = []
    for end in range(block, k.shape[0] + block, block):
        end = min(end, k.shape[0])
        seen = None if mask is None else mask[:, :end]
        z = q @ k[:end].T * used
        if seen is not None:
            z = z.masked_fill(~seen, float("-inf"))
        m = z.amax(dim=-1)
        lse = torch.logsumexp(z, dim=-1)
        steps.append(
            {
                "output": attention.scaled_dot_product_attention(
                    q, k[:end], v[:end], attn_mask=seen, scale=scale
                ).tolist(),
                "m": [None if math.isinf(x) else x for x in m.tolist()],
                "l": torch.where(m.isinf(), 0.0, torch.exp(lse - m)).tolist(),
            }
        )
    return steps


RUN_CASES = """async ([moduleUrl, attentionCases, maskCases, seeds]) => {
  const A = await import(moduleUrl);
  const finite = (x) => (x === -Infinity ? null : x);
  return {
    attention: attentionCases.map((c) => {
      const options = c.defaultScale ? { mask: c.mask } : { scale: c.scale, mask: c.mask };
      const r = A.attend(c.Q, c.K, c.V, options);
      const steps = A.onlineSoftmax(c.Q, c.K, c.V, { ...options, blockSize: c.block });
      return {
        scores: r.scores.map((row) => row.map(finite)),
        weights: r.weights,
        output: r.output,
        steps: steps.map((s) => ({ output: s.output, m: s.m.map(finite), l: s.l })),
      };
    }),
    masks: maskCases.map((c) => {
      if (c.kind === 'causal') return A.causalMask(...c.args);
      if (c.kind === 'window') return A.slidingWindowMask(...c.args);
      return A.paddingMask(...c.args);
    }),
    normals: seeds.map((seed) => {
      const next = A.normals(seed);
      return Array.from({ length: 50 }, next);
    }),
  };
}"""


def test_the_pages_arithmetic_is_the_packages_to_1e_12(page, site_url: str) -> None:
    open_explorer(page, site_url, "masks")
    attention_cases, mask_cases, seeds = _attention_cases(), _mask_cases(), [1, 3, 7, 519]
    module = site_url + "assets/explorers/attention.js"
    got = page.evaluate(RUN_CASES, [module, attention_cases, mask_cases, seeds])

    for n, (want, have) in enumerate(zip(attention_cases, got["attention"], strict=True)):
        assert close(have["weights"], want["weights"]), f"case {n}: weights"
        assert close(have["output"], want["output"]), f"case {n}: output"
        kept = torch.tensor(want["mask"]) if want["mask"] is not None else None
        scores = torch.tensor(want["scores"])
        js_scores = torch.tensor(
            [[float("-inf") if x is None else x for x in row] for row in have["scores"]]
        )
        if kept is not None:
            assert bool(js_scores[~kept].isneginf().all()), f"case {n}: masked scores"
            scores, js_scores = scores[kept], js_scores[kept]
        assert close(js_scores, scores), f"case {n}: scores"
        assert len(have["steps"]) == len(want["steps"]), f"case {n}: number of blocks"
        for s, (w, h) in enumerate(zip(want["steps"], have["steps"], strict=True)):
            assert close(h["output"], w["output"]), f"case {n}, block {s}: output so far"
            assert h["m"] == [
                None if x is None else pytest.approx(x, abs=TOLERANCE) for x in w["m"]
            ]
            assert close(h["l"], w["l"], 1e-12 * max(1.0, max(w["l"]))), f"case {n}, block {s}: sum"
        assert close(have["steps"][-1]["output"], want["output"]), f"case {n}: online = dense"

    for want, have in zip(mask_cases, got["masks"], strict=True):
        assert have == want["mask"], f"{want['kind']} mask {want['args']}"
    for seed, draws in zip(seeds, got["normals"], strict=True):
        draw = explorers.normals(seed)
        assert close(draws, [draw() for _ in range(50)]), f"normals({seed})"


# --- the scaled dot-product attention playground ------------------------------------


def _playground_points(live) -> tuple[list[float], list[list[float]], list[list[float]]]:
    def xy(locator):
        return [
            [float(p.get_attribute("data-x")), float(p.get_attribute("data-y"))]
            for p in locator.all()
        ]

    return (
        xy(live.locator(".point.query"))[0],
        xy(live.locator(".point.key")),
        xy(live.locator(".point.value")),
    )


def _package_playground(query, keys, values, D: int, scale: float):
    """The playground's numbers, by the package: components 3..D as the page draws them."""
    draw = explorers.normals(7 + D)
    extra_q = explorers.random_matrix(1, D - 2, draw)
    extra_k = explorers.random_matrix(len(keys), D - 2, draw)
    q = torch.cat([torch.tensor([query], dtype=torch.float64), extra_q], dim=-1)
    k = torch.cat([torch.tensor(keys, dtype=torch.float64), extra_k], dim=-1)
    v = torch.tensor(values, dtype=torch.float64)
    weights = attention.attention_weights(q, k, scale=scale)[0]
    return weights, attention.scaled_dot_product_attention(q, k, v, scale=scale)[0]


def _assert_playground_is_the_package(live, D: int, scale: float) -> torch.Tensor:
    query, keys, values = _playground_points(live)
    weights, output = _package_playground(query, keys, values, D, scale)
    assert float(live.get_attribute("data-scale")) == pytest.approx(scale, rel=1e-15)
    assert close(data(live, "weights"), weights)
    assert close(data(live, "output"), output)
    shown = [float(t) for t in live.locator("td.weight").all_text_contents()]
    assert shown == pytest.approx(weights.tolist(), abs=5.01e-4)  # what the table says
    return weights


def test_sdpa_playground_drag_keys_and_sliders(page, site_url: str) -> None:
    live = open_explorer(page, site_url, "sdpa")
    state = explorers.SDPA_STATE
    start = _assert_playground_is_the_package(live, 2, 1 / math.sqrt(2))
    assert _playground_points(live) == (state["query"], state["keys"], state["values"])

    # Drag k2 with the mouse: the key moves, and every number follows it.
    # hover() scrolls the key into view and waits until it is the element under the
    # pointer (not the sticky header, not a block still being laid out lazily).
    k2 = live.locator(".point.key circle").nth(1)
    k2.hover()
    box = k2.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 80, y + 30, steps=5)
    page.mouse.up()
    moved = _playground_points(live)[1][1]
    assert moved[0] > state["keys"][1][0] + 0.5 and moved[1] < state["keys"][1][1] - 0.2
    after_drag = _assert_playground_is_the_package(live, 2, 1 / math.sqrt(2))
    assert not close(after_drag, start, 1e-3)

    # The query, by keyboard alone: Tab to it, arrows move it by 0.1 (Shift: 0.5).
    query = live.locator(".point.query")
    query.focus()
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Shift+ArrowLeft")
    assert _playground_points(live)[0] == pytest.approx([1.0, 0.2])
    _assert_playground_is_the_package(live, 2, 1 / math.sqrt(2))

    # Saturation: unscaled scores at D = 512 make the softmax one-hot; 1/sqrt(D) does not.
    live.locator("select").nth(1).select_option("512")
    live.locator("select").nth(0).select_option("none")
    unscaled = _assert_playground_is_the_package(live, 512, 1.0)
    assert unscaled.max() > 0.99
    assert "saturated" in live.locator(".explorer-summary").text_content()
    live.locator("select").nth(0).select_option("sqrt")
    scaled = _assert_playground_is_the_package(live, 512, 1 / math.sqrt(512))
    assert scaled.max() < 0.99
    assert "saturated" not in live.locator(".explorer-summary").text_content()

    # The temperature divides the scale.
    live.locator('input[type="range"]').fill("2")
    _assert_playground_is_the_package(live, 512, 1 / math.sqrt(512) / 2)


# --- the mask explorer -------------------------------------------------------------


def _set_range(live, label: str, value: int) -> None:
    live.get_by_label(label, exact=True).fill(str(value))


def _run_shown_code(live) -> torch.Tensor:
    """Run the Python the explorer shows, as a reader who copied it would."""
    code = live.locator(".explorer-code code").text_content()
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<explorer code>", "exec"), namespace)
    return namespace["mask"]


def test_mask_explorer_builds_the_masks_its_code_builds(page, site_url: str) -> None:
    live = open_explorer(page, site_url, "masks")
    state = explorers.MASK_STATE
    assert _run_shown_code(live).tolist() == data(live, "mask")

    _set_range(live, "queries L", 4)
    _set_range(live, "keys S", 7)
    live.get_by_label("alignment").select_option("bottom_right")
    _set_range(live, "sliding window w", 3)
    _set_range(live, "real keys in sequence 2", 2)
    built = _run_shown_code(live)
    expected = attention.combine_masks(
        attention.sliding_window_mask(4, 7, window=3, alignment="bottom_right"),
        attention.padding_mask([7, 2], max_length=7)[:, None, :],
    )
    assert built.tolist() == expected.tolist() == data(live, "mask")

    # Sequence 2 keeps keys 0 and 1 only, and its queries sit at positions 3..6 with a
    # window of 3 (keys p - 2 .. p): query 0 keeps key 1, queries 1 to 3 keep nothing.
    live.get_by_label("show").select_option("1")
    draw = explorers.normals(state["seed"])
    q = explorers.random_matrix(10, 4, draw)[:4]
    k = explorers.random_matrix(10, 4, draw)[:7]
    weights = attention.attention_weights(q, k, attn_mask=expected[1])
    assert close(data(live, "weights"), weights)
    assert weights[1:].abs().sum() == 0 and weights[0, 1] == 1
    assert "Queries 1, 2, 3 have no key left" in live.locator(".explorer-summary").text_content()

    # Non-causal windows and the code that says so.
    live.get_by_label("causal").uncheck()
    built = _run_shown_code(live)
    assert "causal=False" in live.locator(".explorer-code code").text_content()
    assert built.tolist() == data(live, "mask")

    # The code runs on its own, as copied into a fresh interpreter.
    code = live.locator(".explorer-code code").text_content()
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("[") >= 4 * 2 + 2  # the (2, 4, 7) mask, printed


# --- the online softmax stepper -------------------------------------------------------


def test_online_softmax_steps_are_attention_over_the_keys_seen(page, site_url: str) -> None:
    live = open_explorer(page, site_url, "online-softmax")
    state = explorers.ONLINE_STATE
    draw = explorers.normals(state["seed"])
    q = explorers.random_matrix(1, state["D"], draw)
    K = explorers.random_matrix(state["S"], state["D"], draw)
    V = explorers.random_matrix(state["S"], 2, draw)
    dense = attention.scaled_dot_product_attention(q, K, V)[0]
    assert close(data(live, "dense"), dense)

    forward = live.get_by_role("button", name="Next block")
    forward.focus()
    seen = 0
    while forward.is_enabled():
        page.keyboard.press("Enter")  # keyboard alone
        seen = min(seen + state["blockSize"], state["S"])
        expected = attention.scaled_dot_product_attention(q, K[:seen], V[:seen])[0]
        assert close(data(live, "output"), expected), f"after {seen} keys"
    assert seen == state["S"]
    assert close(data(live, "output"), dense)
    assert "rounding only" in live.locator(".explorer-summary").text_content()

    live.get_by_label("key block size").select_option("4")
    assert live.get_attribute("data-step") == "0"
    live.get_by_role("button", name="Run to the end").click()
    assert live.get_attribute("data-step") == "2"
    assert close(data(live, "output"), dense)


# --- everywhere -----------------------------------------------------------------------


def test_explorers_mount_after_instant_navigation(page, site_url: str) -> None:
    """Arrive as a reader does, by a link, with no reload: the explorers still start."""
    page.goto(site_url, wait_until="load")
    page.wait_for_load_state("networkidle")
    page.evaluate("() => { window.__sameDocument = true }")
    for name, path in PAGES.items():
        page.evaluate(
            """url => {
                const a = Object.assign(document.createElement("a"), { href: url, id: "next" });
                a.textContent = "next";
                document.querySelector("article").append(a);
            }""",
            site_url + path,
        )
        page.click("#next")
        page.wait_for_function("path => location.pathname.endsWith(path)", arg=path)
        live = page.locator(f'[data-explorer="{name}"][data-mounted="true"] .explorer-live')
        live.wait_for(timeout=15_000)
        assert page.evaluate("() => window.__sameDocument === true"), "a full reload"
        assert page.locator(f'[data-explorer="{name}"] .explorer-static').is_hidden()


def test_without_javascript_each_explorer_shows_its_figure(browser, site_url: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        for name, path in PAGES.items():
            page.goto(site_url + path)
            figure = page.locator(f'[data-explorer="{name}"] .explorer-static img').first
            figure.scroll_into_view_if_needed()
            assert figure.is_visible(), name
            assert figure.get_attribute("alt"), name
    finally:
        context.close()


FOCUSABLE = """root => [...root.querySelectorAll('button, input, select, [tabindex], a')]
  .filter(el => !el.disabled)
  .map(el => ({ tag: el.tagName, tabIndex: el.tabIndex, label:
    el.getAttribute('aria-label') || (el.labels && el.labels[0] && el.labels[0].textContent)
    || el.textContent.trim() }))"""


@pytest.mark.parametrize("name", list(PAGES))
def test_every_control_is_reachable_and_named(page, site_url: str, name: str) -> None:
    live = open_explorer(page, site_url, name)
    controls = live.evaluate(FOCUSABLE)
    assert len(controls) >= 4
    for control in controls:
        assert control["tabIndex"] >= 0, control
        assert control["label"], control


# Whether the focused element shows that it has the focus: an outline, or for the
# points of the playground a ring drawn on the point, or for a head view token its
# highlight (focusing a token selects it).
FOCUS_SHOWN = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  if (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0) return true;
  if (el.matches('.point')) {
    return parseFloat(getComputedStyle(el.querySelector('circle')).strokeWidth) > 0;
  }
  if (el.matches('.head-view-token')) return el.classList.contains('active');
  return false;
}"""


@pytest.mark.parametrize("name", [*PAGES, "head-view"])
def test_keyboard_focus_is_visible_on_every_control(page, site_url: str, name: str) -> None:
    if name == "head-view":
        page.goto(site_url + HEAD_VIEW_TUTORIAL, wait_until="load")
        live = page.locator('[data-explorer="head-view"][data-mounted="true"] .explorer-live')
        live.wait_for(timeout=15_000)
    else:
        live = open_explorer(page, site_url, name)
    selector = "button:not([disabled]), input, select, [tabindex]"
    count = live.locator(selector).count()
    assert count >= 4
    page.keyboard.press("Tab")  # the reader is using the keyboard
    hidden = []
    for index in range(count):
        control = live.locator(selector).nth(index)
        control.focus()
        if not page.evaluate(FOCUS_SHOWN):
            hidden.append(control.evaluate("el => el.outerHTML.slice(0, 80)"))
    assert not hidden, f"focus not visible on: {hidden}"


def test_only_pages_with_an_explorer_load_its_code(page, site_url: str, built_site: Path) -> None:
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(site_url + "concepts/notation/", wait_until="networkidle")
    assert not [url for url in requested if "explorers/explorers.js" in url]
    page.goto(site_url + PAGES["masks"], wait_until="networkidle")
    assert [url for url in requested if "explorers/explorers.js" in url]

    code = (
        "attention.js",
        "explorers.js",
        "explorers.css",
        "loader.js",
        "head_view.js",
        "head_view.css",
    )
    size = sum(len(gzip.compress((built_site / "assets/explorers" / f).read_bytes())) for f in code)
    assert size < 100_000, f"explorer code {size} bytes gzipped"


# --- the head view ------------------------------------------------------------------

HEAD_VIEW_TUTORIAL = "tutorials/09_train_a_tiny_transformer/"


def _lines_shown(view) -> dict[int, float]:
    """Key -> weight of the lines drawn in the first pane (hidden ones excluded)."""
    lines = view.locator(".head-view-pane").first.locator("line:not(.hidden)")
    return {
        int(line.get_attribute("data-key")): float(line.get_attribute("data-weight"))
        for line in lines.all()
    }


def _check_head_view(page, view, state: dict) -> None:
    """Layer and heads chosen, a token hovered and one reached by keyboard: the lines
    drawn are that query's weights in the chosen head, and only those."""
    layers, heads = len(state["layers"]), state["heads"]
    layer, head = layers - 1, heads - 1
    view.get_by_label("layer", exact=True).select_option(str(layer))
    view.get_by_label("head", exact=True).select_option(str(head))
    tokens = view.locator(".head-view-pane").first.locator(".head-view-token.query")
    tokens.nth(1).scroll_into_view_if_needed()
    tokens.nth(1).hover()
    row = state["weights"][layer][head][1]
    assert _lines_shown(view) == {j: w for j, w in enumerate(row) if w >= 0.005}
    assert view.get_attribute("data-focused") == "1"

    tokens.nth(1).focus()
    page.keyboard.press("ArrowDown")
    assert view.get_attribute("data-focused") == "2"
    row = state["weights"][layer][head][2]
    assert _lines_shown(view) == {j: w for j, w in enumerate(row) if w >= 0.005}
    best = max(range(len(row)), key=row.__getitem__)
    status = view.locator(".head-view-status").text_content()
    assert f'most weight on key {best} "{state["keyTokens"][best]}"' in status


def test_head_view_of_the_trained_model(page, site_url: str) -> None:
    page.goto(site_url + HEAD_VIEW_TUTORIAL, wait_until="load")
    root = page.locator('[data-explorer="head-view"][data-mounted="true"]')
    root.wait_for(timeout=15_000)
    state = json.loads(root.get_attribute("data-state"))
    view = root.locator(".explorer-live")
    assert state["heads"] == 2 and len(state["layers"]) == 2 and len(state["tokens"]) == 10
    _check_head_view(page, view, state)

    # Saved as files a reader can keep: an SVG with the lines, and a PNG.
    with page.expect_download() as svg_download:
        view.get_by_role("button", name="Save as SVG").click()
    svg = Path(svg_download.value.path()).read_text()
    assert svg.startswith("<svg") and svg.count("<line") >= 2
    assert svg.count("<svg") == 3  # the two panes on view, side by side in one picture
    assert svg_download.value.suggested_filename == "head-view-layer1-heads1-1.svg"
    with page.expect_download() as png_download:
        view.get_by_role("button", name="Save as PNG").click()
    assert Path(png_download.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "tokens",
    [list("abcde"), ["<!--<script>", "</script>", "<!--", "]]>", "a & b"]],
    ids=["plain", "hostile-labels"],
)
def test_head_view_saved_by_the_package_opens_offline(
    browser, tmp_path: Path, tokens: list[str]
) -> None:
    """`HeadView.save` writes a page that works from the disk, with no network, whatever
    the labels hold: a label such as "<!--<script>" must not change how the page parses."""
    weights = torch.softmax(torch.randn(2, 2, 5, 5, generator=torch.Generator().manual_seed(1)), -1)
    head_view = attention.HeadView(weights, tokens)
    path = head_view.save(tmp_path / "heads.html")
    context = browser.new_context()
    context.route(lambda url: not url.startswith("file:"), lambda route: route.abort())
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        view = page.locator(".head-view")
        view.locator(".head-view-pane").first.wait_for()
        _check_head_view(page, view, head_view.data)
        labels = view.locator(".head-view-pane").first.locator(".head-view-token.query")
        assert labels.all_text_contents() == tokens
        assert not errors, errors
    finally:
        context.close()

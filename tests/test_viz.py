import json
import math
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attention import attention_weights, scaled_dot_product_attention
from attention.viz import (
    HeadView,
    attention_entropy,
    plot_activation_norms,
    plot_attention,
    plot_attention_entropy,
    plot_attention_heads,
    plot_positional_encoding,
)

# Off-screen rendering: no test may open a window, whatever the environment says.
matplotlib.use("Agg")

# Pairwise-distinct sizes, so that a transposed axis cannot pass by accident.
H, L, S, D = 3, 5, 7, 11
QUERY_TOKENS = ["the", "cat", "sat", "on", "mats"]
KEY_TOKENS = ["<s>", "a", "cat", "sat", "on", "the", "mat"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def random_weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(*shape, generator=g), dim=-1)


def texts(ax):
    return [t.get_text() for t in ax.texts]


def tick_texts(labels):
    return [t.get_text() for t in labels]


def entropy_by_hand(row):
    """-sum p log p over the positive entries, one Python float at a time."""
    return -sum(float(p) * math.log(float(p)) for p in row if p > 0)


# plot_attention ----------------------------------------------------------------------


@pytest.mark.parametrize("convert", [lambda w: w, lambda w: w.numpy()], ids=["torch", "numpy"])
def test_heatmap_shows_the_weights_with_queries_as_rows(convert):
    w = random_weights(L, S)
    ax = plot_attention(convert(w), query_labels=QUERY_TOKENS, key_labels=KEY_TOKENS)
    assert isinstance(ax, Axes)
    assert len(ax.images) == 1
    np.testing.assert_array_equal(ax.images[0].get_array(), w.numpy())
    assert tick_texts(ax.get_xticklabels()) == KEY_TOKENS
    assert tick_texts(ax.get_yticklabels()) == QUERY_TOKENS
    assert ax.get_xlabel() == "key (attended to)"
    assert ax.get_ylabel() == "query (attending)"


def test_every_cell_is_annotated_with_its_formatted_value_in_row_major_order():
    w = random_weights(L, S)
    ax = plot_attention(w)
    assert len(ax.texts) == L * S
    assert texts(ax) == [f"{w[i, j].item():.2f}" for i in range(L) for j in range(S)]
    # Each annotation sits on its own cell: x is the key index, y the query index.
    assert [t.get_position() for t in ax.texts] == [(j, i) for i in range(L) for j in range(S)]


def test_annotations_follow_fmt_and_can_be_switched_off():
    w = random_weights(L, S)
    assert texts(plot_attention(w, fmt=".0%"))[:2] == [f"{w[0, 0].item():.0%}", f"{w[0, 1]:.0%}"]
    assert len(plot_attention(w, annotate=False).texts) == 0


def test_annotation_colour_contrasts_with_the_cell():
    w = torch.tensor([[0.0, 1.0]])  # viridis: 0 is dark purple, 1 is light yellow
    ax = plot_attention(w)
    assert [t.get_color() for t in ax.texts] == ["white", "black"]
    ax = plot_attention(w, cmap="gray_r")  # reversed: 0 is white, 1 is black
    assert [t.get_color() for t in ax.texts] == ["black", "white"]


def test_nan_cells_are_annotated_in_black_on_the_blank_cell():
    w = torch.tensor([[float("nan"), 0.0]])
    assert [(t.get_text(), t.get_color()) for t in plot_attention(w).texts] == [
        ("nan", "black"),
        ("0.00", "white"),
    ]


def test_colour_scale_is_fixed_to_probabilities_unless_overridden():
    w = random_weights(L, S) * 0.5  # nothing reaches 1: autoscaling would stretch it
    assert plot_attention(w).images[0].get_clim() == (0.0, 1.0)
    assert plot_attention(w, vmin=-2.0, vmax=3.0).images[0].get_clim() == (-2.0, 3.0)
    clim = plot_attention(w, vmin=None, vmax=None).images[0].get_clim()
    assert clim == pytest.approx((w.min().item(), w.max().item()))


def test_colorbar_title_and_cmap():
    ax = plot_attention(random_weights(L, S), title="Causal", cmap="magma")
    assert ax.get_title() == "Causal"
    assert ax.images[0].get_cmap().name == "magma"
    assert ax.images[0].colorbar is not None
    assert ax.images[0].colorbar.ax.get_ylabel() == "weight"
    assert len(ax.figure.axes) == 2  # the heatmap and its colorbar
    ax = plot_attention(random_weights(L, S), colorbar=False)
    assert ax.images[0].colorbar is None
    assert len(ax.figure.axes) == 1


def test_draws_into_the_given_axes_without_making_a_figure():
    fig, (left, right) = plt.subplots(1, 2)
    ax = plot_attention(random_weights(L, S), ax=right)
    assert ax is right
    assert plt.get_fignums() == [fig.number]
    assert len(right.images) == 1
    assert len(left.images) == 0


def test_without_ax_a_new_pyplot_figure_is_made():
    figures_before = len(plt.get_fignums())
    ax = plot_attention(random_weights(L, S))
    assert len(plt.get_fignums()) == figures_before + 1
    assert ax.figure is plt.gcf()


def test_one_label_list_labels_both_axes_of_a_square_matrix():
    w = random_weights(L, L)
    for ax in (
        plot_attention(w, query_labels=QUERY_TOKENS),
        plot_attention(w, key_labels=QUERY_TOKENS),
    ):
        assert tick_texts(ax.get_xticklabels()) == QUERY_TOKENS
        assert tick_texts(ax.get_yticklabels()) == QUERY_TOKENS


def test_one_label_list_of_a_rectangular_matrix_labels_its_own_axis_only():
    ax = plot_attention(random_weights(L, S), key_labels=KEY_TOKENS)
    assert tick_texts(ax.get_xticklabels()) == KEY_TOKENS
    ticks = ax.get_yticks()
    assert all(t == int(t) for t in ticks)  # positions, never 0.5


def test_long_key_labels_are_rotated_and_short_ones_are_not():
    short = plot_attention(random_weights(L, S), key_labels=KEY_TOKENS).get_xticklabels()
    assert {(t.get_rotation(), t.get_horizontalalignment()) for t in short} == {(0.0, "center")}
    long_tokens = ["attention", *KEY_TOKENS[1:]]
    rotated = plot_attention(random_weights(L, S), key_labels=long_tokens).get_xticklabels()
    assert {(t.get_rotation(), t.get_horizontalalignment()) for t in rotated} == {(45.0, "right")}


# plot_attention_heads ----------------------------------------------------------------


def visible_panels(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.images]


def test_grid_has_one_visible_panel_per_head_showing_that_head():
    w = random_weights(H, L, S)
    fig = plot_attention_heads(w, ncols=2, query_labels=QUERY_TOKENS, key_labels=KEY_TOKENS)
    assert isinstance(fig, Figure)
    panels = visible_panels(fig)
    assert len(panels) == H
    for h, ax in enumerate(panels):
        np.testing.assert_array_equal(ax.images[0].get_array(), w[h].numpy())
        assert ax.get_title() == f"head {h}"
        assert tick_texts(ax.get_xticklabels()) == KEY_TOKENS
        assert tick_texts(ax.get_yticklabels()) == QUERY_TOKENS
        assert len(ax.texts) == 0  # not annotated by default


def test_unused_grid_cells_are_hidden_and_there_is_one_colorbar():
    fig = plot_attention_heads(random_weights(H, L, S), ncols=2)  # 2 x 2 grid for 3 heads
    grid, colorbars = fig.axes[:4], fig.axes[4:]
    assert [ax.get_visible() for ax in grid] == [True, True, True, False]
    assert len(colorbars) == 1
    assert colorbars[0].get_ylabel() == "weight"


def test_default_grid_has_at_most_four_columns():
    fig = plot_attention_heads(random_weights(6, L, S))
    grid = fig.axes[0].get_subplotspec().get_gridspec()
    assert (grid.nrows, grid.ncols) == (2, 4)
    assert sum(ax.get_visible() for ax in fig.axes[:8]) == 6


def test_heads_share_one_colour_scale_even_when_autoscaled():
    w = random_weights(H, L, S)
    w[1] *= 0.1  # a head with small weights must not get its own stretched scale
    fig = plot_attention_heads(w, vmin=None, vmax=None)
    clims = {ax.images[0].get_clim() for ax in visible_panels(fig)}
    assert clims == {(w.min().item(), w.max().item())}  # exact: float32 widens losslessly
    assert {ax.images[0].get_clim() for ax in visible_panels(plot_attention_heads(w))} == {
        (0.0, 1.0)
    }


def test_axis_titles_appear_once_per_grid_row_and_column():
    fig = plot_attention_heads(random_weights(H, L, S), ncols=2)
    panels = visible_panels(fig)
    assert [ax.get_ylabel() for ax in panels] == ["query (attending)", "", "query (attending)"]
    # head 1 has no panel below it (the cell is hidden), so it keeps its x axis title
    assert [ax.get_xlabel() for ax in panels] == ["", "key (attended to)", "key (attended to)"]


def test_grid_accepts_a_batch_of_one_custom_titles_and_annotations():
    w = random_weights(1, H, L, S)
    fig = plot_attention_heads(w.numpy(), titles=["a", "b", "c"], annotate=True)
    panels = visible_panels(fig)
    assert [ax.get_title() for ax in panels] == ["a", "b", "c"]
    assert [len(ax.texts) for ax in panels] == [L * S] * H
    np.testing.assert_array_equal(panels[2].images[0].get_array(), w[0, 2].numpy())


def test_grid_draws_into_the_given_figure():
    fig = Figure()
    assert plot_attention_heads(random_weights(H, L, S), fig=fig) is fig
    assert len(visible_panels(fig)) == H
    assert plt.get_fignums() == []


# plot_positional_encoding ------------------------------------------------------------


def sinusoidal(L, D):
    position = torch.arange(L, dtype=torch.float64)[:, None]
    angle = position / 10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)[:, :D]  # (L, D)


def test_positional_encoding_heatmap_has_positions_down_and_a_centred_scale():
    pe = sinusoidal(L, D)
    ax = plot_positional_encoding(pe, title="sinusoidal")
    assert isinstance(ax, Axes)
    np.testing.assert_array_equal(ax.images[0].get_array(), pe.numpy())  # (L, D), not transposed
    assert ax.images[0].get_array().shape == (L, D)
    assert (ax.get_ylabel(), ax.get_xlabel(), ax.get_title()) == (
        "position",
        "dimension",
        "sinusoidal",
    )
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    assert ax.images[0].get_cmap().name == "RdBu_r"
    assert ax.images[0].colorbar is not None


def test_positional_encoding_scale_stays_centred_when_autoscaled():
    pe = 3.0 * sinusoidal(L, D).numpy() + 0.5  # values in about [-2.5, 3.5]
    ax = plot_positional_encoding(pe, vmax=None)
    largest = np.abs(pe).max()
    assert ax.images[0].get_clim() == (-largest, largest)


def test_positional_encoding_uses_the_given_axes():
    ax = Figure().subplots()
    assert plot_positional_encoding(sinusoidal(L, D), ax=ax, colorbar=False) is ax
    assert len(ax.figure.axes) == 1


# attention_entropy -------------------------------------------------------------------


@pytest.mark.parametrize("convert", [lambda w: w, lambda w: w.numpy()], ids=["torch", "numpy"])
def test_entropy_of_uniform_one_hot_and_fully_masked_rows(convert):
    w = torch.zeros(3, S)
    w[0] = 1.0 / S  # uniform: the maximum, log S
    w[1, 4] = 1.0  # one-hot: 0
    # w[2] stays all zeros: a fully masked query
    entropy = attention_entropy(convert(w))
    assert type(entropy) is type(convert(w))
    assert entropy.dtype == convert(w).dtype
    np.testing.assert_allclose(np.asarray(entropy), [math.log(S), 0.0, 0.0], atol=1e-6)
    assert not np.isnan(np.asarray(entropy)).any()
    # 0.0, not -0.0: a reader sees "0." rather than "-0."
    assert [math.copysign(1.0, float(e)) for e in entropy] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("convert", [lambda w: w, lambda w: w.numpy()], ids=["torch", "numpy"])
def test_entropy_matches_a_computation_by_hand_on_batched_weights(convert):
    w = random_weights(2, H, L, S, seed=1).double()
    w[0, 0, 1] = 0.0  # a fully masked row among the others
    w[1, 2, 3, :4] = 0.0  # zeros inside a row
    entropy = attention_entropy(convert(w))
    assert tuple(entropy.shape) == (2, H, L)
    expected = [entropy_by_hand(row) for row in w.reshape(-1, S).tolist()]
    np.testing.assert_allclose(np.asarray(entropy).reshape(-1), expected, rtol=1e-12)


def test_entropy_matches_torch_categorical():
    w = random_weights(H, L, S, seed=2).double()
    expected = torch.distributions.Categorical(probs=w).entropy()
    torch.testing.assert_close(attention_entropy(w), expected)


def test_entropy_of_a_masked_attention_row_is_zero_with_no_nan_gradient():
    q, k = torch.randn(L, D, dtype=torch.float64), torch.randn(S, D, dtype=torch.float64)
    mask = torch.ones(L, S, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing: its weights are all zero
    q.requires_grad_(True)
    entropy = attention_entropy(attention_weights(q, k, attn_mask=mask))
    assert entropy[2].item() == 0.0
    entropy.sum().backward()
    assert q.grad is not None and not q.grad.isnan().any()


def test_entropy_keeps_the_dtype_and_takes_a_single_distribution():
    for dtype in (torch.float16, torch.float32, torch.float64):
        assert attention_entropy(torch.full((S,), 1.0 / S, dtype=dtype)).dtype == dtype
    single = attention_entropy(np.array([0.5, 0.5]))
    assert isinstance(single, np.ndarray)
    assert single.shape == ()
    assert single == pytest.approx(math.log(2))


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(1, 6),
    keys=st.integers(1, 9),
    zeros=st.integers(0, 8),
    seed=st.integers(0, 2**16),
)
def test_entropy_lies_between_zero_and_log_s(rows, keys, zeros, seed):
    w = random_weights(rows, keys, seed=seed).double()
    w[:, : min(zeros, keys - 1)] = 0.0
    w = w / w.sum(dim=-1, keepdim=True)
    entropy = attention_entropy(w)
    assert torch.all(entropy >= 0)
    assert torch.all(entropy <= math.log(keys) + 1e-12)


def test_entropy_rejects_scores_and_non_float_inputs():
    with pytest.raises(ValueError, match=r"weights must be non-negative .*got a minimum of -1"):
        attention_entropy(torch.tensor([[-1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"weights must be non-negative"):
        attention_entropy(np.array([[0.5, -0.5]]))
    with pytest.raises(
        TypeError, match=r"weights must have a floating-point dtype .*got torch.int64"
    ):
        attention_entropy(torch.tensor([[1, 0]]))
    with pytest.raises(TypeError, match=r"weights must have a floating-point dtype .*got int64"):
        attention_entropy(np.array([[1, 0]], dtype=np.int64))
    with pytest.raises(
        TypeError, match=r"weights must be a torch.Tensor or a numpy.ndarray; got list"
    ):
        attention_entropy([[0.5, 0.5]])
    with pytest.raises(ValueError, match=r"at least 1 dimension.*got shape \(\)"):
        attention_entropy(np.array(1.0))


# plot_attention_entropy, plot_activation_norms ---------------------------------------


def test_entropy_bars_match_attention_entropy_and_the_line_sits_at_log_s():
    w = random_weights(L, S)
    ax = plot_attention_entropy(w, query_labels=QUERY_TOKENS, title="spread")
    assert isinstance(ax, Axes)
    heights = [bar.get_height() for bar in ax.patches]
    np.testing.assert_allclose(heights, attention_entropy(w.double()).numpy(), rtol=1e-12)
    (line,) = ax.lines
    assert line.get_label() == "uniform (log S)"
    assert line.get_linestyle() == "--"
    assert list(line.get_ydata()) == [math.log(S)] * 2
    assert ax.get_legend() is not None
    assert tick_texts(ax.get_xticklabels()) == QUERY_TOKENS
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == (
        "query (attending)",
        "entropy (nats)",
        "spread",
    )


def test_entropy_bars_of_a_causal_map_start_at_zero():
    q, k = torch.randn(L, D), torch.randn(L, D)
    ax = plot_attention_entropy(attention_weights(q, k, is_causal=True))
    # Query 0 may read only key 0: a one-hot row, entropy 0.
    assert ax.patches[0].get_height() == 0.0
    assert ax.get_ylim()[0] == 0.0
    assert ax.get_ylim()[1] > math.log(L)


def test_activation_bars_are_the_row_norms_of_the_output():
    q, k, v = torch.randn(L, D), torch.randn(S, D), torch.randn(S, 4)
    out = scaled_dot_product_attention(q, k, v)  # (L, Dv)
    ax = plot_activation_norms(out, labels=QUERY_TOKENS, title="strength")
    assert isinstance(ax, Axes)
    heights = [bar.get_height() for bar in ax.patches]
    np.testing.assert_allclose(heights, torch.linalg.vector_norm(out, dim=-1).numpy(), rtol=1e-6)
    assert tick_texts(ax.get_xticklabels()) == QUERY_TOKENS
    assert ax.get_ylabel() == "L2 norm of output row"
    assert ax.get_title() == "strength"


def test_bar_charts_draw_into_the_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    assert plot_attention_entropy(random_weights(L, S), ax=left) is left
    assert plot_activation_norms(torch.randn(L, 4), ax=right) is right
    assert len(left.patches) == L and len(right.patches) == L
    assert plt.get_fignums() == [fig.number]


# Behaviour common to every function -----------------------------------------------


def draw_everything():
    w = random_weights(H, L, S)
    yield plot_attention(w[0], query_labels=QUERY_TOKENS, key_labels=KEY_TOKENS).figure
    yield plot_attention_heads(w[None], annotate=True)
    yield plot_positional_encoding(sinusoidal(L, D)).figure
    yield plot_attention_entropy(w[0]).figure
    yield plot_activation_norms(torch.randn(L, 4)).figure


def test_nothing_is_shown_or_saved(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a plotting function must not show or save a figure")

    monkeypatch.setattr(plt, "show", refuse)
    monkeypatch.setattr(Figure, "show", refuse)
    monkeypatch.setattr(Figure, "savefig", refuse)
    assert len(list(draw_everything())) == 5


def test_tensors_with_gradients_in_any_dtype_draw_without_warnings():
    w = random_weights(L, S).requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for weights in (w, w.to(torch.bfloat16), w.to(torch.float16), w * 1):
            plot_attention(weights).figure.canvas.draw()
            plot_attention_entropy(weights.detach()).figure.canvas.draw()
        plot_attention_heads(torch.stack([w] * H)).canvas.draw()
        plot_positional_encoding(sinusoidal(L, D).requires_grad_(True)).figure.canvas.draw()
        plot_activation_norms(torch.randn(L, 4, requires_grad=True)).figure.canvas.draw()
        for fig in draw_everything():
            fig.canvas.draw()


def test_boolean_and_integer_matrices_are_drawn_as_numbers():
    mask = torch.ones(L, S, dtype=torch.bool).tril()
    ax = plot_attention(mask)
    np.testing.assert_array_equal(ax.images[0].get_array(), mask.numpy().astype(float))
    assert texts(ax)[:2] == ["1.00", "0.00"]
    assert plot_activation_norms(np.array([[3, 4]])).patches[0].get_height() == 5.0


# Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((S,), r"weights must be a non-empty 2-D matrix \(L, S\); got shape \(7\)$"),
        ((H, L, S), r"got shape \(3, 5, 7\) \(for several heads use plot_attention_heads"),
        ((0, S), r"non-empty 2-D matrix \(L, S\); got shape \(0, 7\)"),
    ],
)
def test_plot_attention_rejects_shapes_other_than_l_by_s(shape, message):
    with pytest.raises(ValueError, match=message):
        plot_attention(torch.rand(shape))


def test_label_counts_must_match_the_matrix():
    w = random_weights(L, S)
    with pytest.raises(
        ValueError, match=r"query_labels must have one label per query \(L\): expected 5; got 4"
    ):
        plot_attention(w, query_labels=QUERY_TOKENS[:4])
    with pytest.raises(
        ValueError, match=r"key_labels must have one label per key \(S\): expected 7; got 5"
    ):
        plot_attention(w, key_labels=QUERY_TOKENS)
    with pytest.raises(
        TypeError, match=r"key_labels must be a sequence of strings.*got a single str"
    ):
        plot_attention(w, key_labels="abcdefg")
    with pytest.raises(
        ValueError, match=r"query_labels must have one label per query \(L\): expected 5; got 7"
    ):
        plot_attention_entropy(w, query_labels=KEY_TOKENS)
    with pytest.raises(
        ValueError, match=r"labels must have one label per query \(L\): expected 5; got 2"
    ):
        plot_activation_norms(torch.randn(L, 4), labels=["a", "b"])


def test_inputs_must_be_real_tensors_or_arrays():
    with pytest.raises(
        TypeError, match=r"weights must be a torch.Tensor or a numpy.ndarray; got list"
    ):
        plot_attention([[1.0, 0.0]])
    with pytest.raises(TypeError, match=r"weights must hold real numbers; got torch.complex64"):
        plot_attention(torch.ones(2, 2, dtype=torch.complex64))
    with pytest.raises(TypeError, match=r"encoding must hold real numbers; got dtype <U1"):
        plot_positional_encoding(np.array([["a"]]))
    with pytest.raises(
        ValueError,
        match=r"encoding must be a non-empty 2-D matrix \(L, D\); got shape \(1, 5, 11\)",
    ):
        plot_positional_encoding(sinusoidal(L, D)[None])
    with pytest.raises(
        ValueError, match=r"output must be a non-empty 2-D matrix \(L, Dv\); got shape \(5\)"
    ):
        plot_activation_norms(torch.randn(L))


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((2, H, L, S), r"\(H, L, S\) or \(1, H, L, S\).*got \(2, 3, 5, 7\) \(select one sequence"),
        ((L, S), r"got \(5, 7\) \(for a single \(L, S\) matrix use plot_attention\)"),
        ((0, L, S), r"with no empty dimension; got \(0, 5, 7\)"),
    ],
)
def test_plot_attention_heads_rejects_other_shapes(shape, message):
    with pytest.raises(ValueError, match=message):
        plot_attention_heads(torch.rand(shape))


def test_plot_attention_heads_checks_its_other_arguments():
    w = random_weights(H, L, S)
    with pytest.raises(ValueError, match=r"ncols must be >= 1; got 0"):
        plot_attention_heads(w, ncols=0)
    with pytest.raises(TypeError, match=r"ncols must be an int; got float"):
        plot_attention_heads(w, ncols=2.0)
    with pytest.raises(
        ValueError, match=r"titles must have one label per head \(H\): expected 3; got 2"
    ):
        plot_attention_heads(w, titles=["a", "b"])
    with pytest.raises(
        ValueError, match=r"key_labels must have one label per key \(S\): expected 7; got 5"
    ):
        plot_attention_heads(w, key_labels=QUERY_TOKENS)


# --- HeadView ------------------------------------------------------------------------


def _maps(layers=2, heads=3, L=4, S=4, seed=0):
    scores = torch.randn(layers, heads, L, S, generator=torch.Generator().manual_seed(seed))
    return torch.softmax(scores, dim=-1)


def test_head_view_keeps_every_weight_to_the_decimals_asked():
    maps = _maps()
    view = HeadView(maps, list("abcd"), decimals=3)
    assert view.data["layers"] == ["layer 0", "layer 1"] and view.data["heads"] == 3
    assert view.data["tokens"] == view.data["keyTokens"] == list("abcd")
    kept = torch.tensor(view.data["weights"], dtype=torch.float64)
    assert kept.shape == (2, 3, 4, 4)
    assert (kept - maps.double()).abs().max() <= 0.0005 + 1e-12


def test_head_view_takes_a_list_of_layers_and_arrays_and_cross_attention():
    maps = _maps(L=2, S=5)
    view = HeadView(
        [maps[0], maps[1].numpy()],
        ["x", "y"],
        key_tokens=list("vwxyz"),
        layer_names=["encoder-decoder 1", "encoder-decoder 2"],
    )
    assert view.data["keyTokens"] == list("vwxyz")
    assert view.data["layers"] == ["encoder-decoder 1", "encoder-decoder 2"]
    assert repr(view) == "HeadView(layers=2, heads=3, L=2, S=5)"


@pytest.mark.parametrize(
    ("weights", "tokens", "kwargs", "error", "message"),
    [
        (torch.ones(3, 4, 4), list("abcd"), {}, ValueError, r"4-D matrix \(layers, H, L, S\)"),
        (-_maps(), list("abcd"), {}, ValueError, "non-negative"),
        (_maps() * float("nan"), list("abcd"), {}, ValueError, "finite"),
        (_maps(), list("abc"), {}, ValueError, r"one label per query \(L\): expected 4; got 3"),
        (_maps(S=5), list("abcd"), {}, ValueError, "key_tokens is needed"),
        (_maps(), "abcd", {}, TypeError, "single str"),
        ([_maps()[0], _maps(S=5)[0]], list("abcd"), {}, ValueError, "layers of one shape"),
        ("weights", list("abcd"), {}, TypeError, "torch.Tensor or a numpy.ndarray"),
        (_maps(), list("abcd"), {"layer_names": ["one"]}, ValueError, "one label per layer"),
    ],
)
def test_head_view_refuses_bad_input_by_name(weights, tokens, kwargs, error, message):
    with pytest.raises(error, match=message):
        HeadView(weights, tokens, **kwargs)


def test_head_view_page_is_standalone_and_escapes_the_tokens(tmp_path):
    view = HeadView(_maps(), ["</script>", "<b>", "a", "b"])
    page = view.save(tmp_path / "view.html").read_text()
    assert page.startswith("<!doctype html>") and "http" not in page.replace(
        "http://www.w3.org/2000/svg", ""
    )  # nothing fetched: the viewer and its style are inline
    assert page.count("</script>") == 1  # the token's "</" is escaped inside the script
    bundle = view._repr_mimebundle_()
    assert bundle["application/vnd.attention.head-view+json"] is view.data
    assert "mountHeadView(" in bundle["text/html"]


HOSTILE_LABELS = ["<!--<script>", "</script>", "<!--", "]]>", "a & b > c", "\u2028\u2029"]


@pytest.mark.parametrize("view_html", ["saved", "notebook"])
def test_head_view_embeds_hostile_labels_as_inert_json(tmp_path, view_html):
    """No label can change how the page parses: the JSON in the <script> holds no "<"
    (so no "<!--", "<script" or "</script>"), no ">" or "&", no line separators, and
    reads back as the same labels."""
    view = HeadView(_maps(L=6, S=6), HOSTILE_LABELS)
    if view_html == "saved":
        page = view.save(tmp_path / "view.html").read_text(encoding="utf-8")
    else:
        page = view._repr_mimebundle_()["text/html"]
    start = page.index("mountHeadView(document.getElementById(")
    data = page[page.index(", ", start) + 2 : page.rindex(")</script>")]
    assert not set("<>&\u2028\u2029") & set(data), data
    assert page.count("<script") == 1 and page.count("</script>") == 1
    assert json.loads(data) == view.data
    assert json.loads(data)["tokens"] == HOSTILE_LABELS

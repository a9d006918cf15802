"""attention.examples: the hand-built heads do the jobs the multi-head page says."""

from __future__ import annotations

import pytest
import torch

from attention.examples import hand_built_heads


def weights(demo, num_heads):
    with torch.no_grad():
        return demo.layer(num_heads)(
            demo.x, demo.x, demo.x, need_weights=True, average_attn_weights=False
        )[1]  # (num_heads, L, S)


def test_each_head_does_its_job():
    demo = hand_built_heads()
    p = weights(demo, 4)
    i = demo.tokens.index
    assert p[0, i("it"), i("apple")] == pytest.approx(p[0, i("it"), i("orange")].item())
    assert p[1, i("less"), i("orange")] > 0.8
    assert p[2, i("less"), i("apple")] > 0.8
    assert p[3, i("because")].argmax() == i("prefer")


@pytest.mark.parametrize("num_heads", [1, 2])
def test_merged_heads_score_the_sum_of_their_parts(num_heads):
    """One softmax over the summed scores of the heads it merges, nothing else."""
    demo = hand_built_heads()
    scores = []
    for h in range(4):
        cols = slice(2 * h, 2 * h + 2)
        q, k = demo.x @ demo.w_q[:, cols], demo.x @ demo.w_k[:, cols]
        scores.append(q @ k.T / 2**0.5)
    per_merged = 4 // num_heads
    expected = torch.stack(
        [
            torch.softmax(sum(scores[m * per_merged : (m + 1) * per_merged]), dim=-1)
            for m in range(num_heads)
        ]
    )
    torch.testing.assert_close(weights(demo, num_heads), expected)


def test_gain_sharpens_and_every_call_is_fresh():
    soft, sharp = hand_built_heads(gain=1.0), hand_built_heads(gain=12.0)
    it = soft.tokens.index("it")
    assert weights(sharp, 4)[0, it].max() > weights(soft, 4)[0, it].max()
    soft.w_q.zero_()
    assert hand_built_heads(gain=1.0).w_q.abs().sum() > 0


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: hand_built_heads(gain=0.0), ValueError, "gain must be positive"),
        (lambda: hand_built_heads(gain=float("nan")), ValueError, "gain must be positive"),
        (lambda: hand_built_heads(gain="6"), TypeError, "gain must be a real number; got str"),
        (lambda: hand_built_heads().layer(3), ValueError, "num_heads must be 4, 2 or 1; got 3"),
        (lambda: hand_built_heads().layer(2.0), TypeError, "num_heads"),
        (
            lambda: hand_built_heads().layer(4, w_o=torch.eye(4)),
            ValueError,
            r"w_o must have shape \(8, 8\); got \(4, 4\)",
        ),
        (lambda: hand_built_heads().layer(4, w_o=[[1.0]]), TypeError, "w_o must be a torch"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()

r"""Attention heads built by hand, for pages that study what a head can do.

A trained model's heads are found, not designed, so a page that wants to show *how*
a head can do a job (find the fruit a pronoun refers to, say) builds one whose job is
known. [`hand_built_heads`][attention.examples.hand_built_heads] is the construction
the [multi-head attention page](../concepts/multi-head-attention.md) derives step by
step, packaged so that each of the page's figures can start from it in one line (and
still run on its own when pasted) instead of repeating thirty lines of setup.

The sentence is *I prefer apple over orange because it is less acidic*. Each token
gets eight hand-made features ($E = 8$); $H = 4$ heads of width $D = 2$ each own two
of them, head $h$ features $2h$ and $2h + 1$. In every head the query projection reads
the feature that *asks* and the key projection the feature that *offers*:

| head | query reads | key reads |
|---|---|---|
| 0 | pronoun | fruit |
| 1 | property | acidity |
| 2 | compare | preferred |
| 3 | reason | claim |
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attention._checks import check_size
from attention.multi_head import MultiHeadAttention

__all__ = ["HandBuiltHeads", "hand_built_heads"]

_SENTENCE = "I prefer apple over orange because it is less acidic"
_FEATURES = ("pronoun", "fruit", "property", "acidity", "compare", "preferred", "reason", "claim")
_HAS = {  # the features each token has; "I" and "is" have none
    "prefer": {"compare": 1.0, "claim": 1.0},
    "apple": {"fruit": 1.0, "acidity": 0.3, "preferred": 1.0},
    "over": {"compare": 1.0},
    "orange": {"fruit": 1.0, "acidity": 1.0},
    "because": {"reason": 1.0},
    "it": {"pronoun": 1.0},
    "less": {"property": 1.0, "compare": 1.0},
    "acidic": {"property": 1.0},
}
_JOBS = (
    ("pronoun", "fruit"),
    ("property", "acidity"),
    ("compare", "preferred"),
    ("reason", "claim"),
)
_HEAD_SIZE = 2  # D: head h owns features 2h and 2h + 1


@dataclass(frozen=True)
class HandBuiltHeads:
    """A sentence, its token features and four heads' projections, each head one job.

    Made by [`hand_built_heads`][attention.examples.hand_built_heads]; the fields are
    plain tensors and lists, free to inspect or change before calling ``layer``.

    Args:
        tokens: The ``L = 10`` words of the sentence.
        features: The ``E = 8`` feature names, one per embedding dimension.
        jobs: ``(asks, offers)`` for each of the four heads: the feature its query reads
            and the feature its key reads.
        x: Token features, ``(L, E)``.
        w_q: Query projection, ``(E, E)`` in the paper's ``x @ W`` layout: feature
            ``asks`` of head ``h`` to column ``2h``, times ``gain``.
        w_k: Key projection, ``(E, E)``: feature ``offers`` of head ``h`` to column ``2h``.

    Examples:
        >>> from attention.examples import hand_built_heads
        >>> demo = hand_built_heads()
        >>> demo.tokens[6], [f for f, value in zip(demo.features, demo.x[6]) if value]
        ('it', ['pronoun'])
    """

    tokens: list[str]
    features: list[str]
    jobs: list[tuple[str, str]]
    x: Tensor
    w_q: Tensor
    w_k: Tensor

    def layer(self, num_heads: int = 4, w_o: Tensor | None = None) -> MultiHeadAttention:
        r"""A `MultiHeadAttention` with these projections, ``W^V`` the identity.

        With ``num_heads=4`` each head does its one job. With fewer, neighbouring heads
        are merged into wider ones **with the same projections**: a merged head's score
        is the sum of its parts' scores, its query being multiplied by
        $\sqrt{D' / D}$ to undo the gentler $1/\sqrt{D'}$ of the wider head $D'$, so
        the only difference left is one softmax where there were several.

        Args:
            num_heads: 4, 2 or 1.
            w_o: Output projection ``(E, E)`` in ``x @ W`` layout; the identity if
                ``None``, so that head ``h`` writes back into its own two features.

        Returns:
            The module, without biases, in evaluation mode.

        Raises:
            ValueError: If ``num_heads`` is not 4, 2 or 1, or ``w_o`` is not ``(E, E)``.
            TypeError: If ``w_o`` is not a tensor.

        Examples:
            >>> import torch
            >>> from attention.examples import hand_built_heads
            >>> demo = hand_built_heads()
            >>> x = demo.x[None]  # (1, L, E)
            >>> with torch.no_grad():
            ...     _, p = demo.layer(4)(x, x, x, need_weights=True, average_attn_weights=False)
            >>> p.shape  # (B, H, L, S)
            torch.Size([1, 4, 10, 10])
            >>> it = demo.tokens.index("it")
            >>> [demo.tokens[j] for j in p[0, 0, it].topk(2).indices]  # head 0: the fruits
            ['apple', 'orange']
        """
        heads = check_size("num_heads", num_heads, minimum=1)
        if heads not in (1, 2, 4):
            raise ValueError(
                f"num_heads must be 4, 2 or 1; got {heads} (heads merge in neighbours)"
            )
        E = len(self.features)
        if w_o is None:
            w_o = torch.eye(E)
        if not isinstance(w_o, Tensor):
            raise TypeError(f"w_o must be a torch.Tensor; got {type(w_o).__name__}")
        if w_o.shape != (E, E):
            raise ValueError(f"w_o must have shape ({E}, {E}); got {tuple(w_o.shape)}")
        width = E // heads  # D' of the merged heads
        mha = MultiHeadAttention(E, heads, bias=False)
        weights = (self.w_q * (width / _HEAD_SIZE) ** 0.5, self.w_k, torch.eye(E), w_o)
        with torch.no_grad():
            for proj, w in zip(
                (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj), weights, strict=True
            ):
                proj.weight.copy_(w.T)  # nn.Linear stores (out, in)
        return mha.eval()


def hand_built_heads(gain: float = 6.0) -> HandBuiltHeads:
    """The sentence, features and projections of the hand-built heads (module docstring).

    Args:
        gain: Multiplies the query projection: how sharp the heads are (a trained
            model learns its own). Must be positive.

    Returns:
        A fresh `HandBuiltHeads`: its tensors are new on every call.

    Raises:
        TypeError: If ``gain`` is not a real number.
        ValueError: If ``gain`` is not positive and finite.

    Examples:
        >>> from attention.examples import hand_built_heads
        >>> demo = hand_built_heads()
        >>> demo.x.shape, demo.w_q.shape
        (torch.Size([10, 8]), torch.Size([8, 8]))
        >>> demo.jobs[0]
        ('pronoun', 'fruit')
    """
    if isinstance(gain, bool) or not isinstance(gain, int | float):
        raise TypeError(f"gain must be a real number; got {type(gain).__name__}")
    if not 0 < gain < float("inf"):
        raise ValueError(f"gain must be positive and finite; got {gain}")
    tokens, features = _SENTENCE.split(), list(_FEATURES)
    x = torch.tensor([[_HAS.get(t, {}).get(f, 0.0) for f in features] for t in tokens])
    E = len(features)
    w_q, w_k = torch.zeros(E, E), torch.zeros(E, E)
    for h, (asks, offers) in enumerate(_JOBS):
        w_q[features.index(asks), h * _HEAD_SIZE] = float(gain)
        w_k[features.index(offers), h * _HEAD_SIZE] = 1.0
    return HandBuiltHeads(tokens, features, list(_JOBS), x, w_q, w_k)

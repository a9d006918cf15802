r"""Interleaved local and global layers: which layers of a model use a sliding window.

A sliding-window layer reads only the last $w$ positions, so its KV cache stops growing
at $w - 1$ positions; a global layer reads, and caches, everything. Current models mix
the two in a fixed pattern, one global layer every $k$:

| model | pattern | window $w$ | source |
|---|---|---|---|
| Mistral 7B | every layer local | 4,096 | [Jiang et al. 2023](https://arxiv.org/abs/2310.06825) |
| Gemma 2 | 1 local, 1 global | 4,096 | [Gemma Team 2024](https://arxiv.org/abs/2408.00118) |
| gpt-oss | 1 local, 1 global | 128 | [OpenAI 2025](https://arxiv.org/abs/2508.10925) |
| Gemma 3 | 5 local, 1 global | 1,024 | [Gemma Team 2025](https://arxiv.org/abs/2503.19786) |

The global layers keep the model's reach over the whole context; the local ones cost
$O(w)$ memory each when decoding. `interleaved_layer_types` writes a pattern as
Transformers writes it (``config.layer_types``), and `kv_cache_positions` counts what
the cache then holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from attention._checks import check_flag, check_size

__all__ = ["interleaved_layer_types", "kv_cache_positions"]

SLIDING = "sliding_attention"
FULL = "full_attention"


def interleaved_layer_types(
    num_layers: int, *, global_every: int | None, global_first: bool = False
) -> list[str]:
    r"""Each layer's attention, ``"sliding_attention"`` or ``"full_attention"``.

    The layers form groups of ``global_every``, one of them global. By default the
    global layer closes its group: layer $i$ (counted from 0) is global when $(i + 1)$
    is a multiple of ``global_every``, the rule of Transformers' Gemma 2
    (``global_every=2``), gpt-oss (2), Cohere 2 (4) and Gemma 3 (6) configurations,
    whose ``layer_types`` this equals. With ``global_first=True`` it opens its group:
    layer $i$ is global when $i$ is a multiple of ``global_every``, the order of
    Ministral 8B (one global layer, then three local ones: ``global_every=4``) and of
    Transformers' ModernBERT (3) and CWM (4) configurations.

    Args:
        num_layers: Number of layers, $\ge 0$.
        global_every: One global layer every this many layers, $\ge 1$ (1: every layer
            is global). ``None``: no global layer, every layer has a window (Mistral 7B).
        global_first: Whether the global layer is the first of its group rather than
            the last.

    Returns:
        A list of ``num_layers`` strings, as in ``config.layer_types``.

    Raises:
        TypeError: If a size is not an int (or ``None`` for ``global_every``), or
            ``global_first`` is not a bool.
        ValueError: If ``num_layers < 0`` or ``global_every < 1``.

    Examples:
        >>> from attention import interleaved_layer_types
        >>> [t[0] for t in interleaved_layer_types(12, global_every=6)]  # Gemma 3
        ['s', 's', 's', 's', 's', 'f', 's', 's', 's', 's', 's', 'f']
        >>> [t[0] for t in interleaved_layer_types(8, global_every=4, global_first=True)]
        ['f', 's', 's', 's', 'f', 's', 's', 's']
        >>> interleaved_layer_types(2, global_every=None)  # Mistral 7B
        ['sliding_attention', 'sliding_attention']
    """
    num_layers = check_size("num_layers", num_layers)
    global_first = check_flag("global_first", global_first)
    if global_every is None:
        return [SLIDING] * num_layers
    global_every = check_size("global_every", global_every, minimum=1)
    shift = 0 if global_first else 1  # the global layer opens or closes its group
    return [FULL if (i + shift) % global_every == 0 else SLIDING for i in range(num_layers)]


def kv_cache_positions(layer_types: Sequence[str], *, window: int, length: int) -> int:
    r"""Positions held in the KV cache, summed over layers, after ``length`` tokens.

    A global layer holds every position. A sliding-window layer holds at most the
    last $w - 1$: the next query sees those and itself, $w$ keys in all, and nothing
    older. (Transformers' ``DynamicSlidingWindowLayer`` keeps the same $w - 1$.)
    Multiply by $2 H_{kv} D$ numbers for the keys and values of one position.

    Args:
        layer_types: Each layer's ``"sliding_attention"`` or ``"full_attention"``.
        window: The window $w \ge 1$, in keys, the query's own included.
        length: Tokens seen so far, $\ge 0$.

    Returns:
        The sum over the layers of ``length`` (global) or $\min(\text{length}, w - 1)$
            (sliding).

    Raises:
        TypeError: If ``window`` or ``length`` is not an int.
        ValueError: If a layer type is neither of the two, ``window < 1`` or
            ``length < 0``.

    Examples:
        >>> from attention import interleaved_layer_types, kv_cache_positions
        >>> gemma3 = interleaved_layer_types(6, global_every=6)
        >>> kv_cache_positions(gemma3, window=1024, length=32768)  # 5 * 1023 + 32768
        37883
        >>> kv_cache_positions(["full_attention"] * 6, window=1024, length=32768)
        196608
    """
    window = check_size("window", window, minimum=1)
    length = check_size("length", length)
    total = 0
    for i, kind in enumerate(layer_types):
        if kind == FULL:
            total += length
        elif kind == SLIDING:
            total += min(length, window - 1)
        else:
            raise ValueError(f"layer_types[{i}] must be {SLIDING!r} or {FULL!r}; got {kind!r}")
    return total

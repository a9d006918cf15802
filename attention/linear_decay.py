r"""Linear attention with decay: one recurrence behind RetNet, Lightning, GLA and Mamba-2.

Causal linear attention without a normaliser keeps one matrix, the state
$S_t = \sum_{j \le t} k_j v_j^\top$, and reads it with each query. Give the state a
*forget gate* $\gamma_t \in (0, 1]$ and old keys fade:

$$
S_t = \gamma_t \, S_{t-1} + k_t v_t^\top, \qquad o_t = \text{scale} \cdot S_t^\top q_t .
$$

Models differ only in what $\gamma$ is:

- **None**: no decay, plain causal linear attention (Katharopoulos et al., 2020,
  [arXiv:2006.16236](https://arxiv.org/abs/2006.16236)) without its denominator;
- **a fixed number per head**: RetNet's retention
  ([Sun et al. 2023](https://arxiv.org/abs/2307.08621)) and MiniMax-01's Lightning
  attention ([MiniMax 2025](https://arxiv.org/abs/2501.08313)), $\gamma_h = e^{-s_h}$;
- **a number per step and head, computed from the input**: Mamba-2
  ([Dao and Gu 2024](https://arxiv.org/abs/2405.21060)), $\gamma_t = e^{\Delta_t A_h}$
  (see [`ssd`][attention.state_space.ssd]);
- **a vector per step, one gate per key channel**: Gated Linear Attention
  ([Yang et al. 2023](https://arxiv.org/abs/2312.06635)),
  $S_t = \operatorname{diag}(\gamma_t)\, S_{t-1} + k_t v_t^\top$.

Unrolled, $o_i = \text{scale} \sum_{j \le i} \big(\sum_d q_{id}\, k_{jd}\, D_{ijd}\big)
v_j$ with $D_{ijd} = \prod_{j < m \le i} \gamma_{md}$: masked attention whose mask is a
product of decays instead of 0 or 1, a *1-semiseparable* matrix in Mamba-2's words. So
the same function can be computed three ways, all exact:

- **parallel**: the quadratic form $O = \text{scale}\,(Q K^\top \odot D)\, V$, $L \times L$
  work and memory, like softmax attention;
- **recurrent**: the recurrence above, one token at a time, $O(D\,D_v)$ memory: decoding;
- **chunked**: the parallel form inside chunks of $C$ positions, the recurrence between
  them, $O(L\,C\,D + L\,D\,D_v)$ work: training and prefill.

$D_{ij}$ is computed in log space, as a sum of $\log\gamma$ over the segment $(j, i]$,
never as a ratio of cumulative products, which underflow (MiniMax's and Mamba-2's
kernels do the same).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, overload

import torch
from torch import Tensor

from attention._checks import check_linear_recurrence_call
from attention._heads import repeat_heads
from attention._kernels import default_scale, working_dtype

__all__ = ["decayed_linear_attention"]

Form = Literal["parallel", "recurrent", "chunked"]
FORMS: tuple[Form, ...] = ("parallel", "recurrent", "chunked")


@overload
def decayed_linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    decay: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    scale: float | None = None,
    enable_gqa: bool = False,
    initial_state: Tensor | None = None,
    return_state: Literal[False] = False,
) -> Tensor: ...


@overload
def decayed_linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    decay: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    scale: float | None = None,
    enable_gqa: bool = False,
    initial_state: Tensor | None = None,
    return_state: Literal[True],
) -> tuple[Tensor, Tensor]: ...


def decayed_linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    decay: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    scale: float | None = None,
    enable_gqa: bool = False,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Causal linear attention whose state decays by $\gamma_t \in (0, 1]$ per step.

    $$
    S_t = \gamma_t \odot S_{t-1} + k_t v_t^\top, \qquad
    o_t = \text{scale} \cdot S_t^\top q_t ,
    $$

    with $S_{-1}$ = ``initial_state`` (zeros by default) and $\gamma_t \odot S$ scaling
    row $d$ of the $D \times D_v$ state by $\gamma_{td}$ (all rows alike for a scalar
    decay). Equivalently $O = \text{scale}\,(Q K^\top \odot \mathcal{D})\,V$ plus the
    initial state's share $\text{scale}\,(q_i \odot \prod_{m \le i} \gamma_m)^\top S_{-1}$,
    where $\mathcal{D}_{ij} = \prod_{j < m \le i} \gamma_m$ for $j \le i$ and 0 above the
    diagonal (for a per-channel decay the product stays inside the sum over $d$:
    $\sum_d q_{id} k_{jd} \prod_{j<m\le i} \gamma_{md}$). Top-left causal: query $i$
    sees keys $0..i$ of the same sequence. No softmax and no normaliser.

    The three ``form`` values compute the same numbers (to rounding) and share their
    step: the state update $S \leftarrow \gamma \odot S + K^\top V$ is one function,
    applied per token by the recurrent form and per chunk (with keys decayed to the
    chunk's end) by the others, and the parallel form is the chunked form with one
    chunk.

    Args:
        query: ``(B, H, L, D)``.
        key: ``(B, H, L, D)``, or ``(B, Hkv, L, D)`` with ``enable_gqa``.
        value: ``(B, H, L, Dv)``, or ``(B, Hkv, L, Dv)`` with ``enable_gqa``.
        decay: $\gamma$, every value in $(0, 1]$ (1 keeps the state whole; 0, forgetting
            all at once, is refused, since its logarithm is $-\infty$), one of:
            ``None``, no decay; ``(H,)``, a fixed decay per head (RetNet, Lightning);
            ``(B, H, L)``, per step and head (Mamba-2); ``(B, H, L, D)``, per step and
            key channel (GLA). The query's dtype, or float32.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"``.
        chunk_size: Positions per chunk of the chunked form, $\ge 1$. ``L`` need not be
            a multiple: the last chunk is shorter (nothing is padded).
        scale: Factor applied to $q^\top k$; defaults to $1/\sqrt{D}$ as in
            ``F.scaled_dot_product_attention``. RetNet, Lightning attention and Mamba-2
            use 1: pass ``scale=1.0`` to reproduce them.
        enable_gqa: Grouped heads, as in PyTorch: ``Hkv`` (key and value may differ)
            divides ``H`` and each key/value head serves ``H / Hkv`` consecutive query
            heads. The state stays per query head (the decay may differ per head).
        initial_state: $S_{-1}$, ``(B, H, D, Dv)``, as returned by an earlier call with
            ``return_state=True``: running a sequence's first part and then the rest
            from its state equals running the whole. The query's dtype, or float32.
        return_state: Also return the state after the last position.

    Returns:
        The output ``(B, H, L, Dv)`` in the query's dtype; with ``return_state``, the
            pair (output, state ``(B, H, D, Dv)`` in the working dtype). float16/bfloat16
            inputs are computed in float32.

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ (the decay
            and the state may also be float32), ``chunk_size`` is not an int, ``scale``
            not a real number, or a flag not a bool.
        ValueError: If a tensor is not 4-D, shapes do not fit together (each message
            shows the shapes expected and received), head counts do not divide ``H``,
            the decay has none of the accepted shapes or a value outside $(0, 1]$,
            ``form`` is unknown, ``chunk_size < 1``, or tensors are on different
            devices.

    Examples:
        With $D = 1$, $q = k = 1$ and the values the identity, the output is the decay
        matrix $\mathcal{D}$ itself: $0.5^{i - j}$ below the diagonal for $\gamma = 0.5$.

        >>> import torch
        >>> from attention import decayed_linear_attention
        >>> ones = torch.ones(1, 1, 4, 1)  # (B, H, L, D)
        >>> identity = torch.eye(4).view(1, 1, 4, 4)  # (B, H, L, Dv)
        >>> decayed_linear_attention(ones, ones, identity, torch.tensor([0.5]), scale=1.0)[0, 0]
        tensor([[1.0000, 0.0000, 0.0000, 0.0000],
                [0.5000, 1.0000, 0.0000, 0.0000],
                [0.2500, 0.5000, 1.0000, 0.0000],
                [0.1250, 0.2500, 0.5000, 1.0000]])

        The three forms agree, here with a GLA-style gate per step and key channel, and
        a prefix's state continues the sequence:

        >>> import torch
        >>> from attention import decayed_linear_attention
        >>> _ = torch.manual_seed(0)
        >>> q, k = torch.randn(2, 2, 3, 10, 8, dtype=torch.float64)  # (B, H, L, D) each
        >>> v = torch.randn(2, 3, 10, 5, dtype=torch.float64)  # (B, H, L, Dv)
        >>> gate = torch.rand(2, 3, 10, 8, dtype=torch.float64)  # (B, H, L, D), in (0, 1)
        >>> outs = [decayed_linear_attention(q, k, v, gate, form=f, chunk_size=4)
        ...         for f in ("parallel", "recurrent", "chunked")]
        >>> all(torch.allclose(o, outs[0], rtol=0, atol=1e-12) for o in outs)
        True
        >>> first, state = decayed_linear_attention(
        ...     q[:, :, :6], k[:, :, :6], v[:, :, :6], gate[:, :, :6], return_state=True)
        >>> rest = decayed_linear_attention(
        ...     q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], gate[:, :, 6:], initial_state=state)
        >>> torch.allclose(torch.cat([first, rest], dim=2), outs[0], rtol=0, atol=1e-12)
        True
    """
    chunk_size, checked_scale = check_linear_recurrence_call(
        query,
        key,
        value,
        decay,
        forms=FORMS,
        form=form,
        chunk_size=chunk_size,
        scale=scale,
        enable_gqa=enable_gqa,
        initial_state=initial_state,
        return_state=return_state,
    )
    call = _prepare(query, key, value, decay, checked_scale, initial_state)
    if call.q.shape[-2] == 0:
        out, state = call.q.new_zeros(*call.q.shape[:-1], call.v.shape[-1]), call.state
    elif form == "recurrent":
        out, state = _recurrent(call.q, call.k, call.v, call.log_decay, call.state)
    else:
        size = call.q.shape[-2] if form == "parallel" else chunk_size
        out, state = _chunked(call.q, call.k, call.v, call.log_decay, call.state, size)
    out = out.to(query.dtype)
    return (out, state) if return_state else out


class _Call(NamedTuple):
    """One checked call, in the working dtype: what the forms compute from."""

    q: Tensor  # (B, H, L, D), already multiplied by the scale
    k: Tensor  # (B, H, L, D)
    v: Tensor  # (B, H, L, Dv)
    log_decay: Tensor  # (B, H, L, 1) for a scalar decay, (B, H, L, D) per channel
    state: Tensor  # (B, H, D, Dv)


def _prepare(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    decay: Tensor | None,
    scale: float | None,
    initial_state: Tensor | None,
) -> _Call:
    """Lay a checked call out as the forms read it (`check_linear_recurrence_call`)."""
    B, H, L, D = query.shape
    dtype = working_dtype(query.dtype)
    q = query.to(dtype) * default_scale(query, scale)
    k = repeat_heads(key.to(dtype), H)  # (B, H, L, D): one state per query head
    v = repeat_heads(value.to(dtype), H)  # (B, H, L, Dv)
    if decay is None:
        log_decay = q.new_zeros(B, H, L, 1)
    else:
        log_decay = decay.to(dtype).log()
        if decay.ndim == 1:
            log_decay = log_decay.view(1, H, 1, 1).expand(B, H, L, 1)
        elif decay.ndim == 3:
            log_decay = log_decay.unsqueeze(-1)  # (B, H, L, 1)
    state = q.new_zeros(B, H, D, v.shape[-1]) if initial_state is None else initial_state.to(dtype)
    return _Call(q, k, v, log_decay, state)


def _advance(state: Tensor, log_decay: Tensor, key: Tensor, value: Tensor) -> Tensor:
    r"""The step every form takes: $S \leftarrow \gamma \odot S + K^\top V$.

    ``state`` ``(B, H, D, Dv)``, ``log_decay`` ``(B, H, 1 or D)`` (one $\log\gamma$ per
    state row), ``key`` ``(B, H, n, D)``, ``value`` ``(B, H, n, Dv)``: one token
    (``n = 1``) or a chunk whose keys are already decayed to its end.
    """
    return state * log_decay.exp().unsqueeze(-1) + key.transpose(-2, -1) @ value


def _recurrent(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """One `_advance` per token, each followed by the query's read of the state."""
    outs = []
    for t in range(q.shape[-2]):
        state = _advance(state, log_decay[:, :, t], k[:, :, t : t + 1], v[:, :, t : t + 1])
        outs.append(q[:, :, t : t + 1] @ state)  # (B, H, 1, Dv)
    return torch.cat(outs, dim=-2), state


def _chunked(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, state: Tensor, size: int
) -> tuple[Tensor, Tensor]:
    """`_chunk` on consecutive chunks of ``size`` positions, carrying the state."""
    outs = []
    for c0 in range(0, q.shape[-2], size):
        chunk = slice(c0, c0 + size)  # the last chunk may be shorter
        out, state = _chunk(
            q[:, :, chunk], k[:, :, chunk], v[:, :, chunk], log_decay[:, :, chunk], state
        )
        outs.append(out)
    return torch.cat(outs, dim=-2), state


def _chunk(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    r"""The parallel form on one chunk of ``n`` positions that starts from ``state``.

    Output $o_i = \sum_{j \le i} (q_i^\top \mathcal{D}_{ij} k_j)\, v_j
    + (q_i \odot \Gamma_i)^\top S$, with $\Gamma_i = \prod_{m \le i} \gamma_m$ the decay
    from the chunk's start; the state at the chunk's end is
    $\Gamma_{n-1} \odot S + \sum_j (\mathcal{D}_{n-1,j} \odot k_j) v_j^\top$.
    """
    seg = _segment_sum(log_decay)  # (B, H, n, n, 1 or D): log D_ij, -inf above the diagonal
    within = seg.exp()  # (B, H, n, n, 1 or D)
    if log_decay.shape[-1] == 1:  # one decay for every channel: a mask on Q Kᵀ
        scores = (q @ k.transpose(-2, -1)) * within.squeeze(-1)  # (B, H, n, n)
    else:  # per channel: the decay enters each product q_id k_jd
        scores = torch.einsum("bhid,bhjd,bhijd->bhij", q, k, within)
    from_start = log_decay.cumsum(dim=-2)  # (B, H, n, 1 or D): log Γ_i
    out = scores @ v + (q * from_start.exp()) @ state  # (B, H, n, Dv)
    to_end = within[:, :, -1]  # (B, H, n, 1 or D): D_{n-1, j}, decay from j to the end
    return out, _advance(state, from_start[:, :, -1], k * to_end, v)


def _segment_sum(log_decay: Tensor) -> Tensor:
    r"""$\sum_{j < m \le i} \log\gamma_m$ for $j \le i$, $-\infty$ above the diagonal.

    ``(B, H, n, G) -> (B, H, n, n, G)``, indexed ``[..., i, j, g]``. A cumulative sum
    over a masked copy, as Transformers' Mamba-2 ``segment_sum`` does, rather than a
    difference of cumulative sums: no cancellation between two large sums.
    """
    n = log_decay.shape[-2]
    steps = log_decay.unsqueeze(-2).expand(*log_decay.shape[:-2], n, n, log_decay.shape[-1])
    # steps[..., m, j, g] = log γ_mg; keep m > j, the steps after j
    after_j = torch.ones(n, n, dtype=torch.bool, device=log_decay.device).tril(-1)
    seg = steps.masked_fill(~after_j[..., None], 0.0).cumsum(dim=-3)  # sum over j < m <= i
    causal = torch.ones(n, n, dtype=torch.bool, device=log_decay.device).tril()
    return seg.masked_fill(~causal[..., None], float("-inf"))

r"""The delta rule: linear attention whose state corrects what it stores.

Causal linear attention keeps a state $S_t = S_{t-1} + k_t v_t^\top$ of $D \times D_v$
numbers and reads it with a query, $o_t = S_t^\top q_t$. Writing only adds: a value
written at a key lands on top of whatever the state already returns for that key, so
keys that are not orthogonal blur into one another, and nothing is ever forgotten.

The **delta rule** ([Schlag et al. 2021](https://arxiv.org/abs/2102.11174); DeltaNet,
[Yang et al. 2024](https://arxiv.org/abs/2406.06484)) first reads what the state holds
at the key, $v^{\text{old}}_t = S_{t-1}^\top k_t$, and writes only the difference:

$$S_t = S_{t-1} + \beta_t\, k_t \big(v_t - S_{t-1}^\top k_t\big)^\top
      = \big(I - \beta_t k_t k_t^\top\big) S_{t-1} + \beta_t k_t v_t^\top.$$

It is one step of **online regression**: gradient descent with step $\beta_t$ on the
loss $\tfrac12 \lVert S^\top k_t - v_t \rVert^2$, whose gradient is
$k_t (S^\top k_t - v_t)^\top$. The state is a memory trained on the fly to map each key
to its value. With a unit key and $\beta_t = 1$ the old value at $k_t$ is erased and
$v_t$ written in its place, $S_t^\top k_t = v_t$ exactly; directions orthogonal to
$k_t$ are untouched.

**Stability.** $I - \beta k k^\top$ scales the direction of $k$ by
$1 - \beta \lVert k \rVert^2$ and leaves the others alone: the update is non-expansive
only while $0 \le \beta \lVert k \rVert^2 \le 2$. The models L2-normalise queries and
keys and take $\beta = \sigma(\cdot) \in (0, 1)$; $\beta \in (1, 2]$ with unit keys
gives the negative eigenvalues of [Grazzi et al. 2024](https://arxiv.org/abs/2411.12537).
A key of norm above $\sqrt{2/\beta}$ makes the step expansive, and the state can grow
without bound: normalise the keys (this module does not do it for you).

**Gates.** Gated DeltaNet ([Yang, Kautz and Hatamizadeh 2025](https://arxiv.org/abs/2412.06464);
Qwen3-Next, Qwen3.5) multiplies the state by a forget gate $\gamma_t \in (0, 1]$ per head
before the update; Kimi Delta Attention ([Kimi Team 2025](https://arxiv.org/abs/2510.26692))
gives every key channel (row of $S$) its own gate. With $\Gamma_t = I$, $\gamma_t I$ or
$\operatorname{diag}(\gamma_t)$:

$$S_t = \big(I - \beta_t k_t k_t^\top\big)\, \Gamma_t S_{t-1} + \beta_t k_t v_t^\top,
\qquad o_t = \text{scale} \cdot S_t^\top q_t.$$

The gate acts first and the read comes after it, $v^{\text{old}}_t = (\Gamma_t
S_{t-1})^\top k_t$: the order of Transformers' code for both models.

**Chunks: the WY / UT representation.** The recurrence is sequential, one
$D \times D_v$ update per token. Within a chunk of $C$ positions starting from the
state $S_0$, write $G_r = \sum_{s \le r} \log \gamma_s$ (a number per head, or a vector
over the key channels), $\Lambda_r = \operatorname{diag}(e^{G_r})$, and
$u_r = \beta_r \big(v_r - (\Gamma_r S_{r-1})^\top k_r\big)$ for the correction position
$r$ writes, $S_r = \Gamma_r S_{r-1} + k_r u_r^\top$. Unrolled,
$S_r = \Lambda_r S_0 + \sum_{s \le r} \Lambda_r \Lambda_s^{-1} k_s u_s^\top$, so the
corrections solve one unit lower-triangular system,

$$(I + A)\, U = \operatorname{diag}(\beta) V - \operatorname{diag}(\beta)(K \odot e^G) S_0,
\qquad A_{rs} = \beta_r\, k_r^\top \Lambda_r \Lambda_s^{-1} k_s \ (s < r),$$

which $T = (I + A)^{-1}$ splits into **pseudo-values** $\tilde U = T \operatorname{diag}(\beta) V$
and **pseudo-keys** $W = T \operatorname{diag}(\beta) (K \odot e^G)$, neither of which
needs the state: $U = \tilde U - W S_0$. The chunk's outputs and the next state follow
by matrix products,

$$O = (Q \odot e^G) S_0 + (P \odot M)\, U, \quad
P_{rs} = q_r^\top \Lambda_r \Lambda_s^{-1} k_s, \quad M_{rs} = [s \le r];
\qquad S_C = \Lambda_C S_0 + (K \odot e^{G_C - G})^\top U.$$

Without gates, $I - K^\top W = \prod_r (I - \beta_r k_r k_r^\top)$: the WY form of a
product of generalised Householder matrices (Bischof and Van Loan 1987), and $T$ is
the UT transform (Joffrain et al. 2006). Only the $L / C$ chunks remain sequential.

References:
    - Schlag, Irie and Schmidhuber, "Linear Transformers Are Secretly Fast Weight
      Programmers", 2021. [arXiv:2102.11174](https://arxiv.org/abs/2102.11174)
    - Yang, Wang, Zhang, Shen and Kim, "Parallelizing Linear Transformers with the Delta
      Rule over Sequence Length", 2024. [arXiv:2406.06484](https://arxiv.org/abs/2406.06484)
    - Yang, Kautz and Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta
      Rule", 2025. [arXiv:2412.06464](https://arxiv.org/abs/2412.06464)
    - Kimi Team, "Kimi Linear: An Expressive, Efficient Attention Architecture", 2025.
      [arXiv:2510.26692](https://arxiv.org/abs/2510.26692)
    - Grazzi, Siems, Zela, Franke, Hutter and Pontil, "Unlocking State-Tracking in
      Linear RNNs Through Negative Eigenvalues", 2024.
      [arXiv:2411.12537](https://arxiv.org/abs/2411.12537)
    - Joffrain, Low, Quintana-Ortí, van de Geijn and Van Zee, "Accumulating Householder
      Transformations, Revisited", ACM TOMS 32(2), 2006.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

import torch
from torch import Tensor

from attention._checks import (
    check_choice,
    check_companion,
    check_decay,
    check_flag,
    check_same_dtype_and_device,
    check_scale,
    check_shape,
    check_size,
    check_tensor,
    shape_str,
)
from attention._kernels import default_scale, working_dtype
from attention.linear_decay import FORMS, Form  # one family of forms, one home

__all__ = ["delta_rule_attention"]


_Step = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
"""``step(state, q, k, v, beta, decay) -> (state, out)`` over a block of positions."""


@overload
def delta_rule_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    beta: Tensor,
    decay: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    return_state: Literal[False] = False,
) -> Tensor: ...
@overload
def delta_rule_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    beta: Tensor,
    decay: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    return_state: Literal[True],
) -> tuple[Tensor, Tensor]: ...
def delta_rule_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    beta: Tensor,
    decay: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""The (gated) delta rule: DeltaNet, Gated DeltaNet and Kimi Delta Attention.

    A state $S \in \mathbb{R}^{D \times D_v}$ per batch element and head, from
    $S_0$ (``initial_state``, zeros by default):

    $$S_t = \big(I - \beta_t k_t k_t^\top\big)\, \Gamma_t S_{t-1} + \beta_t k_t v_t^\top,
    \qquad o_t = \text{scale} \cdot S_t^\top q_t,$$

    with $\Gamma_t = I$ without ``decay`` (DeltaNet), $\gamma_t I$ for a decay per step
    and head (Gated DeltaNet: Qwen3-Next, Qwen3.5) and $\operatorname{diag}(\gamma_t)$
    for a decay per step and key channel (Kimi Delta Attention). Read as online
    regression: the gate forgets, then the state is read at the key,
    $v^{\text{old}}_t = (\Gamma_t S_{t-1})^\top k_t$, and moved a step $\beta_t$
    towards writing $v_t$ there, $S_t = \Gamma_t S_{t-1} + \beta_t k_t (v_t -
    v^{\text{old}}_t)^\top$. The module docstring has the derivation of the chunked form.

    Queries and keys are used as given: the models L2-normalise them first (Transformers'
    ``use_qk_l2norm_in_kernel=True``). A key of norm above $\sqrt{2/\beta_t}$ makes the
    update expansive ($|1 - \beta_t \lVert k_t \rVert^2| > 1$ along $k_t$).

    Transformers' ``torch_chunk_gated_delta_rule`` / ``chunk_kimi_delta_attention``
    take ``(B, L, H, ·)`` tensors and the log of the gate, ``g``: pass the tensors
    transposed to ``(B, H, L, ·)`` and ``decay = g.exp()``; their scale is the default
    here, $1/\sqrt{D}$. In float32 ``g.exp()`` rounds to 0, which is refused, below
    $g \approx -103$: ``g.clamp(min=-80).exp()`` keeps a factor $e^{-80} \approx 10^{-35}$
    instead, which float32 cannot tell from 0 next to the update.
    Computed in float32 for float16/bfloat16 inputs.

    Args:
        query: ``(B, H, L, D)``.
        key: ``(B, H, L, D)``.
        value: ``(B, H, L, Dv)``.
        beta: ``(B, H, L)``, the writing strength $\beta_t$ of each step and head: any
            finite number. The models use $\sigma(\cdot) \in (0, 1)$; with unit keys the
            update is non-expansive for $\beta_t \in [0, 2]$.
        decay: The forget gate $\gamma_t \in (0, 1]$: ``None`` (no gate), ``(B, H, L)``
            per step and head, or ``(B, H, L, D)`` per step and key channel.
        form: ``"chunked"`` (the WY / UT form: matrix products within chunks of
            ``chunk_size`` positions, the state carried between them), ``"parallel"``
            (one chunk over the whole sequence: an ``L x L`` triangular solve) or
            ``"recurrent"`` (one step per position). They agree up to rounding.
        chunk_size: Positions per chunk of the chunked form, $\ge 1$. It need not divide
            ``L``: the last chunk is shorter (nothing is padded).
        scale: Factor applied to the queries; defaults to $1/\sqrt{D}$.
        initial_state: ``(B, H, D, Dv)``, the state $S_0$ before the first position
            (a previous call's final state, to continue a sequence).
        return_state: Also return the final state $S_L$.

    Returns:
        The output ``(B, H, L, Dv)`` in the query's dtype; with ``return_state``, the
            tuple ``(output, state)`` where ``state`` is ``(B, H, D, Dv)`` in the
            working dtype (float32 for float16/bfloat16 inputs, as the models keep it).

    Raises:
        TypeError: If an input is not a floating-point tensor, query, key and value
            differ in dtype, ``beta``, ``decay`` or ``initial_state`` has neither the
            query's dtype nor float32, ``chunk_size`` is not an int, or ``return_state``
            is not a bool.
        ValueError: If a shape does not fit ``(B, H, L, D)``, a tensor is on another
            device, ``beta`` is not finite, ``decay`` lies outside (0, 1], ``form`` is
            unknown, ``chunk_size < 1`` or ``scale`` is not finite.

    Examples:
        The three forms agree, and a split sequence continued from its state equals the
        whole:

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from attention import delta_rule_attention
        >>> _ = torch.manual_seed(0)
        >>> B, H, L, D, Dv = 2, 3, 50, 8, 4
        >>> q, k = F.normalize(torch.randn(2, B, H, L, D), dim=-1).unbind(0)  # unit norm
        >>> v, beta = torch.randn(B, H, L, Dv), torch.rand(B, H, L)
        >>> decay = torch.empty(B, H, L).uniform_(0.8, 1.0)  # Gated DeltaNet: per head
        >>> chunked = delta_rule_attention(q, k, v, beta, decay, chunk_size=16)
        >>> recurrent = delta_rule_attention(q, k, v, beta, decay, form="recurrent")
        >>> parallel = delta_rule_attention(q, k, v, beta, decay, form="parallel")
        >>> chunked.shape
        torch.Size([2, 3, 50, 4])
        >>> torch.allclose(chunked, recurrent, atol=1e-5)
        True
        >>> torch.allclose(parallel, recurrent, atol=1e-5)
        True
        >>> first, state = delta_rule_attention(
        ...     q[:, :, :20], k[:, :, :20], v[:, :, :20], beta[..., :20], decay[..., :20],
        ...     return_state=True)
        >>> rest = delta_rule_attention(
        ...     q[:, :, 20:], k[:, :, 20:], v[:, :, 20:], beta[..., 20:], decay[..., 20:],
        ...     initial_state=state)
        >>> torch.allclose(torch.cat([first, rest], dim=2), chunked, atol=1e-5)
        True

        With $\beta = 1$ and a unit key, one step stores the value at the key, whatever
        the state held there before:

        >>> import torch
        >>> from attention import delta_rule_attention
        >>> k1 = torch.tensor([0.6, 0.8]).view(1, 1, 1, 2)  # (B, H, L, D), unit norm
        >>> v1 = torch.tensor([3.0, -1.0]).view(1, 1, 1, 2)
        >>> _, S = delta_rule_attention(
        ...     k1, k1, v1, torch.ones(1, 1, 1), initial_state=torch.randn(1, 1, 2, 2),
        ...     return_state=True)
        >>> (k1 @ S).flatten().round(decimals=4)  # S^T k
        tensor([ 3., -1.])
    """
    run, checked_form, size, with_state = _prepare(
        query, key, value, beta, decay, form, chunk_size, scale, initial_state, return_state
    )
    if checked_form == "recurrent":
        out, state = _scan(_token_step, run, 1)
    else:  # the parallel form is the chunked form with one chunk
        whole = max(run.query.shape[-2], 1)
        out, state = _scan(_chunk_step, run, size if checked_form == "chunked" else whole)
    out = out.to(query.dtype)
    return (out, state) if with_state else out


@dataclass(frozen=True)
class _Run:
    """Validated inputs in the working dtype, laid out as the steps read them."""

    query: Tensor  # (B, H, L, D), already times the scale
    key: Tensor  # (B, H, L, D)
    value: Tensor  # (B, H, L, Dv)
    beta: Tensor  # (B, H, L, 1)
    decay: Tensor  # (B, H, L, 1): ones (no gate) or one per head; (B, H, L, D) per channel
    state: Tensor  # (B, H, D, Dv), S_0


def _scan(step: _Step, run: _Run, size: int) -> tuple[Tensor, Tensor]:
    """Both forms: ``step`` over blocks of ``size`` positions, carrying the state."""
    state, outputs = run.state, []
    L = run.query.shape[-2]
    for t0 in range(0, L, size):
        t = slice(t0, t0 + size)  # the last block may be shorter
        state, out = step(
            state,
            run.query[..., t, :],
            run.key[..., t, :],
            run.value[..., t, :],
            run.beta[..., t, :],
            run.decay[..., t, :],
        )
        outputs.append(out)  # (B, H, size, Dv)
    if not outputs:  # L == 0
        return run.value.clone(), state
    return torch.cat(outputs, dim=-2), state  # (B, H, L, Dv)


def _token_step(
    state: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, decay: Tensor
) -> tuple[Tensor, Tensor]:
    r"""The recurrent form's step: one position, each tensor ``(B, H, 1, ·)``.

    Vectors are rows: ``k @ state`` is $(S^\top k)^\top$.
    """
    state = state * decay.mT  # Γ_t S_{t-1}: (B, H, Dg, 1) scales the rows (key channels)
    v_old = k @ state  # (Γ_t S_{t-1})ᵀ k_t, what the state holds at k_t: (B, H, 1, Dv)
    state = state + k.mT @ (beta * (v - v_old))  # + β_t k_t (v_t - v_old)ᵀ: (B, H, D, Dv)
    return state, q @ state  # o_t = S_tᵀ q_t: (B, H, 1, Dv)


def _chunk_step(
    state: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, decay: Tensor
) -> tuple[Tensor, Tensor]:
    """The chunked form's step: ``C`` positions, each tensor ``(B, H, C, ·)``.

    The equations are the module docstring's; ``G`` is $G_r$, ``u`` is $U$.
    """
    C = q.shape[-2]
    G = decay.log().cumsum(dim=-2)  # G_r = Σ_{s≤r} log γ_s, from the chunk's start: (B, H, C, Dg)
    k_beta = beta * k  # β_r k_r: (B, H, C, D)
    # A_rs = β_r k_rᵀ Λ_r Λ_s⁻¹ k_s for s < r: how writing at s changes what r reads.
    A = _gated_products(k_beta, k, G).tril(-1)  # (B, H, C, C)
    system = torch.eye(C, dtype=A.dtype, device=A.device) + A  # I + A, unit lower-triangular
    # T = (I + A)⁻¹, applied by forward substitution rather than formed.
    pseudo_values = _solve_unit_lower(system, beta * v)  # Ũ = T β V: (B, H, C, Dv)
    pseudo_keys = _solve_unit_lower(system, k_beta * G.exp())  # W = T β (K ⊙ e^G): (B, H, C, D)
    u = pseudo_values - pseudo_keys @ state  # U = Ũ - W S_0, β_r (v_r - v_old_r): (B, H, C, Dv)
    # O = (Q ⊙ e^G) S_0 + (P ⊙ M) U: the earlier chunks through the state, this one directly.
    out = (q * G.exp()) @ state + _gated_products(q, k, G) @ u  # (B, H, C, Dv)
    G_C = G[..., -1:, :]  # the gate over the whole chunk: (B, H, 1, Dg)
    # S_C = Λ_C S_0 + (K ⊙ e^{G_C - G})ᵀ U
    state = state * G_C.exp().mT + (k * (G_C - G).exp()).mT @ u  # (B, H, D, Dv)
    return state, out


def _gated_products(a: Tensor, b: Tensor, G: Tensor) -> Tensor:
    r"""$a_r^\top \Lambda_r \Lambda_s^{-1} b_s$ for $s \le r$, 0 above the diagonal.

    ``a``, ``b`` ``(B, H, C, D)``; ``G`` ``(B, H, C, 1)`` (a gate per head: the
    products are $e^{G_r - G_s}\, a_r^\top b_s$) or ``(B, H, C, D)`` (per channel:
    the gate sits inside the sum, a ``(B, H, C, C, D)`` intermediate). The exponent is
    masked to $-\infty$ above the diagonal before ``exp``: there $G_r - G_s \ge 0$ can
    overflow, and ``inf * 0`` would put NaN in the gradients.
    """
    C = a.shape[-2]
    future = torch.ones(C, C, dtype=torch.bool, device=a.device).triu(1)  # s > r
    if G.shape[-1] == 1:
        gap = (G - G.mT).masked_fill(future, float("-inf"))  # G_r - G_s: (B, H, C, C)
        return (a @ b.mT) * gap.exp()
    gap = G.unsqueeze(-2) - G.unsqueeze(-3)  # G_r - G_s per channel: (B, H, C, C, D)
    gap = gap.masked_fill(future.unsqueeze(-1), float("-inf"))
    return (a.unsqueeze(-2) * b.unsqueeze(-3) * gap.exp()).sum(dim=-1)  # (B, H, C, C)


def _solve_unit_lower(system: Tensor, rhs: Tensor) -> Tensor:
    """``system⁻¹ @ rhs`` for a unit lower-triangular ``system``."""
    solution: Tensor = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    return solution


def _prepare(
    query: object,
    key: object,
    value: object,
    beta: object,
    decay: object,
    form: object,
    chunk_size: object,
    scale: object,
    initial_state: object,
    return_state: object,
) -> tuple[_Run, str, int, bool]:
    """Check every argument once, and lay the inputs out for the steps."""
    query = check_tensor("query", query, min_ndim=4)
    key = check_tensor("key", key, min_ndim=4)
    value = check_tensor("value", value, min_ndim=4)
    check_same_dtype_and_device(query=query, key=key, value=value)
    if query.ndim != 4:
        raise ValueError(f"query must be (B, H, L, D); got {shape_str(query)}")
    B, H, L, D = query.shape
    if key.shape != query.shape:
        raise ValueError(
            f"key must have the query's shape (B, H, L, D) = {tuple(query.shape)}; "
            f"got query {shape_str(query)}, key {shape_str(key)}"
        )
    if value.ndim != 4 or value.shape[:3] != query.shape[:3]:
        raise ValueError(
            f"value must be (B, H, L, Dv) with the query's (B, H, L) = {(B, H, L)}; "
            f"got query {shape_str(query)}, value {shape_str(value)}"
        )
    Dv = value.shape[-1]

    beta = check_shape("beta", beta, (B, H, L), "(B, H, L)")
    check_companion("beta", beta, "the query", query)
    if not torch.isfinite(beta).all():
        raise ValueError("beta must be finite: the writing strength of each step and head")
    if decay is not None:
        shapes = {"per step and head": (B, H, L), "per step and key channel": (B, H, L, D)}
        decay = check_decay("decay", decay, shapes)
        check_companion("decay", decay, "the query", query)
    if initial_state is not None:
        initial_state = check_shape("initial_state", initial_state, (B, H, D, Dv), "(B, H, D, Dv)")
        check_companion("initial_state", initial_state, "the query", query)
    check_choice("form", form, FORMS)
    chunk_size = check_size("chunk_size", chunk_size, minimum=1)
    scale = default_scale(query, check_scale(scale))
    return_state = check_flag("return_state", return_state)

    dtype = working_dtype(query.dtype)
    if decay is None:
        gate = query.new_ones(B, H, L, 1, dtype=dtype)  # Γ_t = I
    elif decay.ndim == 3:
        gate = decay.to(dtype).unsqueeze(-1)  # (B, H, L, 1)
    else:
        gate = decay.to(dtype)  # (B, H, L, D)
    state = (
        query.new_zeros(B, H, D, Dv, dtype=dtype)
        if initial_state is None
        else initial_state.to(dtype)
    )
    run = _Run(
        query=query.to(dtype) * scale,
        key=key.to(dtype),
        value=value.to(dtype),
        beta=beta.to(dtype).unsqueeze(-1),
        decay=gate,
        state=state,
    )
    return run, str(form), chunk_size, return_state

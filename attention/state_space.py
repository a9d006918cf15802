r"""Mamba-2's state-space duality: a selective SSM is masked linear attention.

Mamba-2 ([Dao and Gu 2024](https://arxiv.org/abs/2405.21060)) runs, per head $h$, the
recurrence ("scan")

$$
h_t = e^{\Delta_t A_h}\, h_{t-1} + \Delta_t\, x_t B_t^\top, \qquad
y_t = h_t C_t + D_h\, x_t ,
$$

with state $h_t \in \mathbb{R}^{P \times N}$, input $x_t \in \mathbb{R}^P$ (one head's
channels), step size $\Delta_t > 0$, scalar $A_h < 0$ and input-dependent
$B_t, C_t \in \mathbb{R}^N$ shared by the heads of a group. Unrolled,

$$
y_i = \sum_{j \le i} \Big(C_i^\top B_j \prod_{j < m \le i} e^{\Delta_m A_h}\Big)
\Delta_j x_j + D_h x_i :
$$

causal attention with queries $C$, keys $B$, values $\Delta x$ and, instead of a
softmax, a mask of decays $\prod_{j<m\le i} \gamma_m$, a *1-semiseparable* matrix: the
"state space duality" (SSD). It is exactly
[`decayed_linear_attention`][attention.linear_decay.decayed_linear_attention] with

| Mamba-2 | ``decayed_linear_attention`` |
|---|---|
| $C_t$ | query |
| $B_t$ | key |
| $\Delta_t x_t$ | value |
| $e^{\Delta_t A_h}$ | decay, per step and head |
| $h_t^\top$ | state $S_t$ (``(N, P)``: key size by value size) |
| (none) | ``scale=1`` |

and [`ssd`][attention.state_space.ssd] is that call, plus the skip term $D_h x_t$, with
Mamba-2's shapes. The scan is the recurrent form, and Mamba-2's "chunked" algorithm the
chunked form.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor

from attention._checks import (
    check_companion,
    check_flag,
    check_same_dtype_and_device,
    check_shape,
    check_tensor,
    shape_str,
)
from attention._heads import repeat_heads
from attention._kernels import working_dtype
from attention.linear_decay import Form, decayed_linear_attention

__all__ = ["ssd"]


@overload
def ssd(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: Literal[False] = False,
) -> Tensor: ...


@overload
def ssd(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: Literal[True],
) -> tuple[Tensor, Tensor]: ...


def ssd(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    *,
    form: Form = "chunked",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Mamba-2's SSM core, as its scan or as masked attention (state space duality).

    $h_t = e^{\Delta_t A_h} h_{t-1} + \Delta_t\, x_t B_t^\top$,
    $y_t = h_t C_t + D_h x_t$ per head $h$, computed by
    [`decayed_linear_attention`][attention.linear_decay.decayed_linear_attention] with
    query $C$, key $B$, value $\Delta x$, decay $e^{\Delta A}$ and ``scale=1``: the
    ``"recurrent"`` form is the scan, ``"parallel"`` the attention form with the
    $L \times L$ semiseparable mask, ``"chunked"`` Mamba-2's chunked algorithm.
    Shapes follow Mamba-2 (and Transformers' ``Mamba2Mixer``): batch, then length, then
    heads. The heads are split into ``G`` groups of ``H / G`` consecutive heads sharing
    one $B$ and one $C$ (``n_groups``). (Mamba-2's names clash with the shape letters:
    the argument ``B`` is the input matrix, the letter ``B`` in a shape the batch size.)
    The computation runs in x's dtype (float32 for float16/bfloat16), where
    Transformers' torch path casts to float32 whatever the model's dtype.

    The layer around this core computes its inputs: Transformers' ``Mamba2Mixer`` takes
    $x$, $B$, $C$ from its in-projection and causal convolution (with SiLU), and
    ``dt = softplus(dt_raw + dt_bias).clamp(*time_step_limit)``,
    ``A = -exp(A_log)``; ``ssd`` takes these final values. The mixer then gates $y$
    with SiLU($z$), normalises and projects it.

    Args:
        x: ``(B, L, H, P)``, the input of each head (``P`` = ``head_dim``).
        dt: ``(B, L, H)``, the step sizes $\Delta \ge 0$ (after softplus and clamp).
        A: ``(H,)``, $A_h \le 0$, so that the decay $e^{\Delta A}$ lies in $(0, 1]$.
        B: ``(B, L, G, N)``, the input matrix (keys), ``G`` dividing ``H``;
            ``N`` = ``state_size``.
        C: ``(B, L, G, N)``, the output matrix (queries).
        D: ``(H,)``, the skip connection $D_h x_t$; ``None`` for none.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"``, as in
            ``decayed_linear_attention``.
        chunk_size: Positions per chunk of the chunked form (``L`` need not be a
            multiple).
        initial_state: $h_{-1}$, ``(B, H, P, N)``: the layout of Transformers' Mamba-2
            cache and of the state this function returns. In x's dtype, or float32.
        return_state: Also return $h$ after the last position.

    Returns:
        $y$, ``(B, L, H, P)`` in x's dtype; with ``return_state``, the pair ($y$,
            state ``(B, H, P, N)`` in the working dtype).

    Raises:
        TypeError: If an input is not a floating-point tensor, dtypes differ (``A``,
            ``D`` and ``initial_state`` may also be float32), or a flag is not a bool.
        ValueError: If a shape does not fit (each message shows the expected and the
            received shapes), ``G`` does not divide ``H``, ``dt`` is negative or not
            finite, ``A`` is positive or not finite, a tensor is on another device, or
            a ``decayed_linear_attention`` argument (``form``, ``chunk_size``) is
            refused.

    Examples:
        One head, $N = 1$, $B = C = 1$, $\Delta = 1$ and $A = \log 0.5$: each step
        halves the state. With the values the identity, $y$ is the mask itself, the
        semiseparable matrix $0.5^{i-j}$:

        >>> import torch
        >>> from attention import ssd
        >>> L = 4
        >>> x = torch.eye(L).view(1, L, 1, L)  # (B, L, H, P): position i holds e_i
        >>> dt, ones = torch.ones(1, L, 1), torch.ones(1, L, 1, 1)  # (B, L, H), (B, L, G, N)
        >>> A = torch.tensor([0.5]).log()
        >>> ssd(x, dt, A, ones, ones)[0, :, 0]
        tensor([[1.0000, 0.0000, 0.0000, 0.0000],
                [0.5000, 1.0000, 0.0000, 0.0000],
                [0.2500, 0.5000, 1.0000, 0.0000],
                [0.1250, 0.2500, 0.5000, 1.0000]])

        The scan and the attention form agree, for 4 heads in 2 groups:

        >>> import torch
        >>> from attention import ssd
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(2, 30, 4, 3, dtype=torch.float64)  # (B, L, H, P)
        >>> dt = torch.rand(2, 30, 4, dtype=torch.float64)  # (B, L, H)
        >>> A = -torch.rand(4, dtype=torch.float64)  # (H,)
        >>> B, C = torch.randn(2, 2, 30, 2, 5, dtype=torch.float64)  # (B, L, G, N) each
        >>> scan = ssd(x, dt, A, B, C, form="recurrent")
        >>> attention = ssd(x, dt, A, B, C, form="parallel")
        >>> scan.shape, torch.allclose(scan, attention, rtol=0, atol=1e-12)
        (torch.Size([2, 30, 4, 3]), True)
    """
    x = check_tensor("x", x, min_ndim=4)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D, (B, L, H, P); got {shape_str(x)}")
    batch, L, H, P = x.shape
    dt = check_shape("dt", dt, (batch, L, H), "(B, L, H)")
    A = check_shape("A", A, (H,), "(H,)")
    B = check_tensor("B", B, min_ndim=1)
    if B.ndim != 4 or B.shape[:2] != (batch, L):
        raise ValueError(
            f"B must have shape (B, L, G, N) = ({batch}, {L}, G, N); got {shape_str(B)}"
        )
    G, N = B.shape[2:]
    C = check_shape("C", C, tuple(B.shape), "(B, L, G, N) like B")
    if G == 0 or H % G:
        raise ValueError(
            f"the number of groups G must divide the number of heads H = {H}; "
            f"got B {shape_str(B)}, x {shape_str(x)}"
        )
    check_same_dtype_and_device(x=x, dt=dt, B=B, C=C)
    check_companion("A", A, "x", x)  # A and D: parameters, often float32 beside a half x
    if D is not None:
        D = check_shape("D", D, (H,), "(H,)")
        check_companion("D", D, "x", x)
    check_flag("return_state", return_state)
    if not bool(torch.isfinite(dt).all() and (dt >= 0).all()):
        raise ValueError("dt must hold finite step sizes >= 0 (after softplus)")
    if not bool(torch.isfinite(A).all() and (A <= 0).all()):
        raise ValueError(f"A must hold finite values <= 0 (A = -exp(A_log)); got {A.tolist()}")
    if initial_state is not None:
        initial_state = check_shape(
            "initial_state", initial_state, (batch, H, P, N), "(B, H, P, N)"
        )
        check_companion("initial_state", initial_state, "x", x)
        initial_state = initial_state.transpose(-2, -1)  # (B, H, N, P), the (D, Dv) layout

    dtype = working_dtype(x.dtype)
    log_decay = dt.to(dtype) * A.to(dtype)  # (B, L, H): Δ_t A_h <= 0
    # A step that forgets everything, e^{ΔA} below the smallest normal number, is kept
    # as that number rather than 0 (refused, its log being -inf): times the state, it is
    # far below the rounding of the new term Δ x Bᵀ.
    decay = log_decay.exp().clamp(min=torch.finfo(dtype).tiny).transpose(1, 2)  # (B, H, L)
    query = repeat_heads(C.transpose(1, 2), H)  # (B, L, G, N) -> (B, G, L, N) -> (B, H, L, N)
    key = repeat_heads(B.transpose(1, 2), H)  # (B, H, L, N)
    value = (x * dt.unsqueeze(-1)).transpose(1, 2)  # (B, H, L, P): Δ_t x_t
    y, state = decayed_linear_attention(
        query,
        key,
        value,
        decay,
        form=form,
        chunk_size=chunk_size,
        scale=1.0,
        initial_state=initial_state,
        return_state=True,
    )
    y = y.transpose(1, 2)  # (B, L, H, P)
    if D is not None:
        y = (y.to(dtype) + D.to(dtype).unsqueeze(-1) * x.to(dtype)).to(x.dtype)
    state = state.transpose(-2, -1)  # (B, H, N, P) -> (B, H, P, N), Mamba-2's layout
    return (y, state) if return_state else y

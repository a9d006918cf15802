r"""Position information: sinusoidal, learned, rotary (RoPE) and linear biases (ALiBi).

Attention by itself is blind to order: permuting the keys and values permutes nothing
in the output. Each scheme here tells the model where a token sits, in a different
place in the computation.

**Sinusoidal encoding** (added to the token embeddings). Position $p$ gets the vector

$$
\mathrm{PE}_{p,\,2i} = \sin(p\,\omega_i), \qquad
\mathrm{PE}_{p,\,2i+1} = \cos(p\,\omega_i), \qquad
\omega_i = \text{base}^{-2i/E},
$$

with frequencies falling geometrically from $1$ to about $1/\text{base}$. Moving
$k$ positions rotates every pair $(\mathrm{PE}_{p,2i}, \mathrm{PE}_{p,2i+1})$ by the
angle $k\,\omega_i$, whatever $p$ is, so a fixed linear map relates each position to
the one $k$ steps away.

**Learned embedding** (added to the token embeddings): one trained vector per
position, as in BERT and GPT-2. It cannot represent positions beyond the table.

**Rotary embedding, RoPE** (applied to queries and keys inside each head). The
pair $(x_{2i}, x_{2i+1})$ of a query or key at position $p$ is rotated by $p\,\theta_i$
with $\theta_i = \text{base}^{-2i/D}$. Rotations preserve dot products up to the
difference of their angles, so

$$
\langle R_m q,\; R_n k \rangle = \langle q,\; R_{n-m}\, k \rangle
$$

and the attention score depends on the positions only through $m - n$.
Pairs are adjacent features in the paper; Llama-style checkpoints pair feature $i$ with
$i + D/2$ instead (``pairing="half"``). [`rope_frequencies`][attention.positional.rope_frequencies]
implements the rules that stretch a trained RoPE to longer contexts (position
interpolation, dynamic NTK, YaRN, Llama 3, LongRoPE).

**ALiBi** (added to the attention scores). Head $h$ adds
$-m_h \cdot |p_i - j|$ to the score of query $i$ for key $j$: the farther the key, the
smaller the score, with a head-specific slope $m_h$. There are no position vectors at
all, and models trained on short sequences extrapolate to longer ones.

**T5's relative position bias** (added to the attention scores). Each head learns one
number per *bucket* of relative positions: exact buckets for the nearest keys,
logarithmically wider ones farther away, one last bucket for every key beyond
``max_distance``. Like ALiBi it needs no position vectors and is defined at any length;
unlike ALiBi its shape is learned.

References:
    - Vaswani et al., "Attention Is All You Need", 2017 (sinusoidal and learned
      encodings). [arXiv:1706.03762](https://arxiv.org/abs/1706.03762)
    - Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021.
      [arXiv:2104.09864](https://arxiv.org/abs/2104.09864)
    - Chen et al., "Extending Context Window of Large Language Models via Positional
      Interpolation", 2023. [arXiv:2306.15595](https://arxiv.org/abs/2306.15595)
    - bloc97, "NTK-Aware Scaled RoPE", 2023 (a Reddit post, r/LocalLLaMA; its "dynamic"
      variant is by emozilla), summarised with YaRN in Peng et al., "YaRN: Efficient
      Context Window Extension of Large Language Models", 2023.
      [arXiv:2309.00071](https://arxiv.org/abs/2309.00071)
    - Meta, ``llama-models``, ``models/llama3/model.py``, ``apply_scaling`` (the
      ``"llama3"`` rule of Llama 3.1).
      [github.com/meta-llama/llama-models](https://github.com/meta-llama/llama-models/blob/main/models/llama3/model.py)
    - Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens",
      2024. [arXiv:2402.13753](https://arxiv.org/abs/2402.13753)
    - Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases
      Enables Input Length Extrapolation", 2021.
      [arXiv:2108.12409](https://arxiv.org/abs/2108.12409)
    - Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
      Text-to-Text Transformer", 2020 (T5, section 2.1: bucketed relative position
      bias). [arXiv:1910.10683](https://arxiv.org/abs/1910.10683)
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attention._checks import (
    check_base,
    check_buckets,
    check_choice,
    check_dtype,
    check_positions,
    check_rope_scaling,
    check_rotary_dim,
    check_same_dtype_and_device,
    check_size,
    check_tensor,
    shape_str,
)
from attention._kernels import working_dtype
from attention.masks import CausalAlignment, query_key_distance

__all__ = [
    "LearnedPositionalEmbedding",
    "RelativePositionBias",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "relative_position_buckets",
    "rope_frequencies",
    "sinusoidal_encoding",
]


def sinusoidal_encoding(
    length: int,
    dim: int,
    *,
    base: float = 10000.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""The fixed sinusoidal position encoding of "Attention Is All You Need".

    $$
    \mathrm{PE}_{p,\,2i} = \sin\!\left(\frac{p}{\text{base}^{2i/E}}\right), \qquad
    \mathrm{PE}_{p,\,2i+1} = \cos\!\left(\frac{p}{\text{base}^{2i/E}}\right)
    $$

    for positions $p = 0, \dots, L - 1$ and $E$ = ``dim``. Column pairs
    $(2i, 2i + 1)$ share one frequency; the wavelengths grow geometrically from
    $2\pi$ to $2\pi \cdot \text{base}$. The result is added to token embeddings of
    width $E$ before the first layer.

    An odd ``dim`` is supported: the formula is evaluated as written, with the same
    $E$ in the exponent, so the last column is a sine whose cosine partner would fall
    outside the table. (It is therefore not the first ``dim`` columns of the table for
    ``dim + 1``.)

    The angles are computed in float64 and rounded once to ``dtype``, so a float32
    table is accurate to float32 rounding even for positions in the tens of
    thousands, where the angle $p\,\omega_i$ rounded to float32 is already off by
    about $10^{-4}$.

    Args:
        length: Number of positions $L$.
        dim: Encoding width $E$ (the model width).
        base: The constant $10000$ of the paper; larger values give longer wavelengths.
        device: Device of the result.
        dtype: Floating dtype of the result; defaults to ``torch.get_default_dtype()``.

    Returns:
        Tensor of shape ``(L, E)`` with values in $[-1, 1]$.

    Raises:
        TypeError: If ``length`` or ``dim`` is not an int, ``base`` is not a real
            number, or ``dtype`` is not a floating dtype.
        ValueError: If ``length < 0``, ``dim < 1``, or ``base`` is not finite and
            positive.

    Examples:
        >>> from attention import sinusoidal_encoding
        >>> pe = sinusoidal_encoding(50, 8)
        >>> pe.shape  # (L, E)
        torch.Size([50, 8])
        >>> pe[0]  # sin(0) = 0, cos(0) = 1
        tensor([0., 1., 0., 1., 0., 1., 0., 1.])
        >>> pe[1, :2]  # the first pair has frequency 1: sin(1), cos(1)
        tensor([0.8415, 0.5403])

        An odd width ends with a lone sine column, here $\sin(p / 10000^{2/3})$:

        >>> from attention import sinusoidal_encoding
        >>> sinusoidal_encoding(2, 3)
        tensor([[0.0000, 1.0000, 0.0000],
                [0.8415, 0.5403, 0.0022]])
    """
    length = check_size("length", length, minimum=0)
    dim = check_size("dim", dim, minimum=1)
    base = check_base(base)
    dtype = check_dtype(dtype)
    positions = torch.arange(length, device=device, dtype=torch.float64)  # (L,)
    frequencies = _frequencies(dim, base, device)  # (ceil(E / 2),)
    angles = positions.unsqueeze(-1) * frequencies  # (L, ceil(E / 2))
    # Interleave: column 2i is sin, column 2i + 1 is cos of the same angle.
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (L, ceil(E / 2), 2)
    pe = pe.flatten(-2)[:, :dim]  # (L, E): an odd E drops the last cos
    return pe.to(dtype)


class LearnedPositionalEmbedding(nn.Module):
    r"""A trained vector for each position, added to the input: $y_p = x_p + W_p$.

    The table $W \in \mathbb{R}^{L_{\max} \times E}$ is a parameter, learned with the
    rest of the model (BERT, GPT-2). Unlike the sinusoidal encoding it has no rule
    for positions beyond ``max_length``: longer inputs are an error.

    It is initialised like ``torch.nn.Embedding``, with independent standard normal
    entries ($\mathcal{N}(0, 1)$). GPT-2 uses a smaller standard deviation
    ($0.01$); call ``nn.init.normal_(module.weight, std=0.01)`` for that.

    Args:
        max_length: Number of positions $L_{\max}$ in the table.
        embed_dim: Model width $E$.
        device: Device of the parameter.
        dtype: Dtype of the parameter.

    Raises:
        TypeError: If ``max_length`` or ``embed_dim`` is not an int.
        ValueError: If ``max_length`` or ``embed_dim`` is less than 1.

    Examples:
        >>> import torch
        >>> from attention import LearnedPositionalEmbedding
        >>> _ = torch.manual_seed(0)
        >>> embed = LearnedPositionalEmbedding(max_length=10, embed_dim=4)
        >>> embed.weight.shape  # (max_length, E)
        torch.Size([10, 4])
        >>> x = torch.zeros(2, 3, 4)  # (B, L, E)
        >>> y = embed(x)
        >>> y.shape
        torch.Size([2, 3, 4])
        >>> torch.equal(y[1], embed.weight[:3])  # zeros plus the first 3 rows
        True
    """

    weight: nn.Parameter

    def __init__(
        self,
        max_length: int,
        embed_dim: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.max_length = check_size("max_length", max_length, minimum=1)
        self.embed_dim = check_size("embed_dim", embed_dim, minimum=1)
        self.weight = nn.Parameter(torch.empty(max_length, embed_dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise like ``torch.nn.Embedding``: standard normal entries."""
        nn.init.normal_(self.weight)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        """Add the embeddings of positions ``offset, ..., offset + L - 1`` to ``x``.

        Args:
            x: ``(B, L, E)``, or any ``(..., L, E)``; the embedding broadcasts over
                the leading dimensions.
            offset: Position of the first row of ``x``: the number of tokens already
                processed when decoding one step at a time with a KV cache.

        Returns:
            ``x + weight[offset : offset + L]``, of the shape of ``x``.

        Raises:
            TypeError: If ``x`` is not a floating-point tensor, its dtype differs
                from the parameter's, or ``offset`` is not an int.
            ValueError: If the last dimension of ``x`` is not ``embed_dim``,
                ``offset`` is negative, or ``offset + L > max_length``.
        """
        x = check_tensor("x", x, min_ndim=2)
        offset = check_size("offset", offset, minimum=0)
        check_same_dtype_and_device(x=x, weight=self.weight)
        L = x.shape[-2]
        if x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x must have embed_dim={self.embed_dim} features in its last dimension "
                f"(..., L, E); got shape {shape_str(x)}"
            )
        if offset + L > self.max_length:
            raise ValueError(
                f"x must fit in the table of max_length={self.max_length} positions; "
                f"got offset={offset} and L={L} (x {shape_str(x)}), "
                f"which needs {offset + L}"
            )
        return x + self.weight[offset : offset + L]  # (..., L, E) + (L, E)

    def extra_repr(self) -> str:
        """Sizes shown by ``print(module)``.

        Returns:
            ``"max_length=..., embed_dim=..."``.
        """
        return f"max_length={self.max_length}, embed_dim={self.embed_dim}"


RotaryPairing = Literal["interleaved", "half"]


def apply_rotary(
    x: Tensor,
    positions: Tensor | None = None,
    *,
    base: float = 10000.0,
    pairing: RotaryPairing = "interleaved",
    scaling: dict[str, Any] | None = None,
) -> Tensor:
    r"""Rotary position embedding (RoPE): rotate feature pairs by position-dependent angles.

    Each pair of features of the vector at position $p$ is rotated by $p\,\theta_i$,
    with $\theta_i = \text{base}^{-2i/D}$ (or the scaled frequencies of
    [`rope_frequencies`][attention.positional.rope_frequencies]):

    $$
    \begin{pmatrix} y_{a} \\ y_{b} \end{pmatrix} =
    \begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\
                    \sin p\theta_i & \cos p\theta_i \end{pmatrix}
    \begin{pmatrix} x_{a} \\ x_{b} \end{pmatrix},
    \qquad i = 0, \dots, D/2 - 1,
    $$

    where the pair $(a, b)$ depends on ``pairing``:

    - ``"interleaved"`` (the default): adjacent features $(a, b) = (2i, 2i + 1)$, the
      paper's convention, as in RoFormer, GPT-J and Meta's original LLaMA code.
    - ``"half"``: feature $i$ with feature $i + D/2$, $(a, b) = (i, i + D/2)$, as
      Hugging Face's ``rotate_half`` (GPT-NeoX, Llama, Mistral, Qwen, Gemma, ...).

    The two are the same function after a fixed permutation of the features, which a
    trained model absorbs into its projection weights; scores $q \cdot k$ are equal
    when $q$ and $k$ are permuted alike. They do not mix: use the pairing the
    checkpoint was trained with.

    Apply it to the queries and the keys (not the values) of every head, after the
    projections and before the dot product. Since $R_m^\top R_n = R_{n-m}$, the score
    $\langle R_m q, R_n k \rangle$ depends on the positions $m$ and $n$ only through
    $m - n$: attention sees relative positions, while each vector still carries its
    absolute one. Vector norms are unchanged, and position $0$ is left as it is.

    With a ``scaling`` rule the output is also multiplied by the rule's attention
    factor ($1$ except for YaRN and LongRoPE), as Hugging Face multiplies its ``cos``
    and ``sin``; the ``"dynamic"`` and ``"longrope"`` rules use the length
    ``positions.max() + 1``, as Hugging Face does.

    float16 and bfloat16 inputs are rotated in float32 and rounded once; the angles
    are always computed in float64, so large positions lose no precision.

    Args:
        x: Queries or keys, ``(..., L, D)`` with an even head size $D$, e.g.
            ``(B, H, L, D)``.
        positions: Integer positions of the $L$ rows; defaults to ``0, ..., L - 1``.
            A ``(L,)`` tensor such as ``torch.arange(t, t + L)`` places the rows after
            ``t`` cached ones; any shape that broadcasts to ``x.shape[:-1]``, such as
            ``(B, 1, L)``, gives each sequence of a batch its own positions.
        base: The constant of $\theta_i$; $10000$ in the paper.
        pairing: ``"interleaved"`` (pairs $(2i, 2i + 1)$) or ``"half"``
            (pairs $(i, i + D/2)$).
        scaling: A context-extension rule and its parameters, as in
            [`rope_frequencies`][attention.positional.rope_frequencies]; ``None``
            for plain RoPE.

    Returns:
        Tensor of the shape and dtype of ``x``.

    Raises:
        TypeError: If ``x`` is not a floating-point tensor, ``positions`` is not an
            integer tensor, or ``base`` is not a real number.
        ValueError: If ``x`` has fewer than 2 dimensions or an odd $D$,
            ``positions`` does not broadcast to ``x.shape[:-1]``, ``base`` is not
            finite and positive, ``pairing`` is unknown, or ``scaling`` is invalid.

    Examples:
        >>> import torch
        >>> from attention import apply_rotary
        >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # (L, D) = (2, 2): one pair
        >>> apply_rotary(x)  # position 0 unchanged, position 1 rotated by 1 radian
        tensor([[1.0000, 0.0000],
                [0.5403, 0.8415]])

        The two pairings, on one vector at position 1 (frequencies $1$ and $0.01$):

        >>> import torch
        >>> from attention import apply_rotary
        >>> x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])  # (L, D)
        >>> apply_rotary(x)[1]  # pairs (1, 2) and (3, 4)
        tensor([-1.1426,  1.9221,  2.9599,  4.0298])
        >>> apply_rotary(x, pairing="half")[1]  # pairs (1, 3) and (2, 4)
        tensor([-1.9841,  1.9599,  2.4624,  4.0198])

        Scores depend only on the distance between query and key positions:

        >>> import math
        >>> import torch
        >>> from attention import apply_rotary
        >>> _ = torch.manual_seed(0)
        >>> q, k = torch.randn(1, 8), torch.randn(1, 8)  # (L, D), one row each
        >>> def score(m, n):
        ...     qm = apply_rotary(q, torch.tensor([m]))
        ...     kn = apply_rotary(k, torch.tensor([n]))
        ...     return (qm @ kn.T).item()
        >>> math.isclose(score(5, 2), score(105, 102), rel_tol=1e-5)
        True
    """
    x = check_tensor("x", x, min_ndim=2)
    base = check_base(base)
    check_choice("pairing", pairing, ("interleaved", "half"))
    L, D = x.shape[-2], x.shape[-1]
    if D % 2 != 0:
        raise ValueError(
            "x must have an even last dimension D (RoPE rotates pairs of features); "
            f"got shape {shape_str(x)}"
        )
    if positions is None:
        positions = torch.arange(L, device=x.device)
    positions = check_positions(positions, x)

    by_length = isinstance(scaling, dict) and scaling.get("rope_type") in ("dynamic", "longrope")
    # Only these rules depend on the length (and reading it syncs with the device).
    seq_len = int(positions.max()) + 1 if by_length and positions.numel() > 0 else None
    inv_freq, attention_factor = rope_frequencies(
        D, base=base, scaling=scaling, seq_len=seq_len, device=x.device
    )  # (D/2,) float64
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq  # (..., L, D/2)
    compute_dtype = working_dtype(x.dtype)
    cos = (angles.cos() * attention_factor).to(compute_dtype)  # (..., L, D/2)
    sin = (angles.sin() * attention_factor).to(compute_dtype)  # (..., L, D/2)

    dtype = x.dtype
    x = x.to(compute_dtype)
    if pairing == "interleaved":
        pairs = x.reshape(*x.shape[:-1], D // 2, 2)  # (..., L, D/2, 2)
        a, b = pairs[..., 0], pairs[..., 1]  # (..., L, D/2) each: features 2i, 2i + 1
    else:
        a, b = x[..., : D // 2], x[..., D // 2 :]  # (..., L, D/2) each: features i, i + D/2
    rotated_a, rotated_b = a * cos - b * sin, a * sin + b * cos
    if pairing == "interleaved":
        # (..., L, D/2, 2) -> (..., L, D): back to adjacent pairs
        y = torch.stack((rotated_a, rotated_b), dim=-1).flatten(-2)
    else:
        y = torch.cat((rotated_a, rotated_b), dim=-1)  # (..., L, D)
    return y.to(dtype)  # (..., L, D)


def rope_frequencies(
    dim: int,
    *,
    base: float = 10000.0,
    scaling: dict[str, Any] | None = None,
    seq_len: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, float]:
    r"""RoPE's frequencies $\theta_i$, plain or stretched to a longer context.

    Plain RoPE uses $\theta_i = \text{base}^{-2i/D}$, $i = 0, \dots, D/2 - 1$: a
    wavelength $\lambda_i = 2\pi/\theta_i$ from $2\pi$ to about $2\pi \cdot \text{base}$.
    A model trained on $L_0$ positions has never seen the angles $p\,\theta_i$ of
    positions $p \ge L_0$ for the slow (long-wavelength) pairs, and degrades beyond
    $L_0$. Each rule below changes the $\theta_i$ so that a longer context of
    $\gamma L_0$ positions (``factor`` $\gamma$, the extension factor of
    [RoPE, derived](../concepts/rope.md#stretching-the-context)) maps onto angles the
    model knows:

    - ``"default"``: no change.
    - ``"linear"``, position interpolation (Chen et al. 2023):
      $\theta_i' = \theta_i / \gamma$. Position $p$ gets the angle of $p/\gamma$: every
      position is squeezed into the trained range, at the cost of resolution between
      neighbours in the fast pairs.
    - ``"dynamic"``, dynamic NTK-aware scaling (bloc97, emozilla): keep the
      frequencies, change the base,
      $\text{base}' = \text{base} \cdot (\gamma\,\ell / L_0 - (\gamma - 1))^{D/(D - 2)}$ for the
      current length $\ell = \max(\text{seq\_len}, L_0)$. The fastest pair keeps its
      frequency (and its resolution), the slowest is divided by exactly
      $\alpha = \gamma\,\ell/L_0 - \gamma + 1$, and at $\ell = L_0$ nothing changes. Frozen at
      one length it is the static NTK-aware rule of bloc97's post,
      $\text{base}' = \text{base} \cdot \alpha^{D/(D-2)}$.
    - ``"yarn"``, YaRN (Peng et al. 2023), "NTK-by-parts": pairs that turn many times
      within $L_0$ (more than $\beta_\text{fast}$ rotations, default 32) are kept,
      pairs that turn less than $\beta_\text{slow}$ times (default 1) are interpolated
      ($\theta_i / \gamma$), and a linear ramp $\rho_i$ over the pair index mixes the
      two in between:
      $\theta_i' = (1 - \rho_i)\,\theta_i + \rho_i\,\theta_i / \gamma$. The ramp runs
      from $i_\text{low}$ to $i_\text{high}$, the (floored and ceiled, unless
      ``truncate=False``) indices where $L_0 / \lambda_i$ equals $\beta_\text{fast}$
      and $\beta_\text{slow}$. Interpolation makes the attention softmax flatter, so
      YaRN also scales the logits: the returned attention factor
      $\sqrt{1/t} = 0.1 \ln \gamma + 1$ multiplies ``cos`` and ``sin``, hence $q$ and $k$
      (DeepSeek's ``mscale`` / ``mscale_all_dim`` give the ratio
      $(0.1\,m \ln \gamma + 1) / (0.1\,m_\text{all} \ln \gamma + 1)$ instead; an explicit
      ``attention_factor`` wins over both).
    - ``"llama3"``, Llama 3.1 (``apply_scaling`` in Meta's
      [llama-models](https://github.com/meta-llama/llama-models/blob/main/models/llama3/model.py)
      code; the Llama 3 paper gives only the base): pairs with a wavelength shorter than
      $L_0 / \text{high\_freq\_factor}$ are kept, those longer than
      $L_0 / \text{low\_freq\_factor}$ are divided by $\gamma$, and in between
      $\theta_i' = (1 - \mu_i)\,\theta_i / \gamma + \mu_i\,\theta_i$ with the smooth
      factor $\mu_i = (L_0/\lambda_i - \text{low\_freq\_factor}) /
      (\text{high\_freq\_factor} - \text{low\_freq\_factor})$.
    - ``"longrope"``, LongRoPE (Ding et al. 2024, Phi-3): one searched factor per pair,
      $\theta_i' = \theta_i / r_i$, with $r$ = ``short_factor`` up to $L_0$ and
      ``long_factor`` beyond (``seq_len`` $> L_0$), and the attention factor
      $\sqrt{1 + \ln \gamma / \ln L_0}$ ($1$ for $\gamma \le 1$). Phi-3 configs leave
      ``factor`` out; it is ``max_position_embeddings / original_max_position_embeddings``.

    ``scaling`` is a dict like the ``rope_parameters`` (formerly ``rope_scaling``) of
    a Hugging Face config, with the key names of ``transformers.modeling_rope_utils``:
    ``{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}``;
    ``original_max_position_embeddings`` is $L_0$ (for ``"dynamic"`` Hugging Face
    reads it from the config's ``max_position_embeddings``). The base goes in ``base``,
    not in the dict. The frequencies are computed in float64; Hugging Face's, in
    float32, agree with them to float32 rounding.

    Args:
        dim: The rotated head size $D$ (even).
        base: The constant of $\theta_i$ (``rope_theta`` in Hugging Face configs).
        scaling: ``None`` (plain RoPE) or a dict with ``"rope_type"`` (one of
            ``"default"``, ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"``,
            ``"longrope"``) and that rule's parameters: ``factor`` (all but
            ``"default"``), ``original_max_position_embeddings`` (all but
            ``"default"`` and ``"linear"``), ``low_freq_factor`` and
            ``high_freq_factor`` (``"llama3"``), ``short_factor`` and
            ``long_factor``, lists of $D/2$ numbers (``"longrope"``), optionally
            ``attention_factor`` (``"yarn"``, ``"longrope"``) and ``beta_fast``,
            ``beta_slow``, ``mscale``, ``mscale_all_dim``, ``truncate`` (``"yarn"``).
        seq_len: The current length $\ell$, used by ``"dynamic"`` and
            ``"longrope"`` only; defaults to $L_0$.
        device: Device of the frequencies.

    Returns:
        ``(inv_freq, attention_factor)``: the ``(D/2,)`` float64 frequencies
            $\theta_i'$ and the float that multiplies ``cos`` and ``sin``
            ($1$ except for ``"yarn"`` and ``"longrope"``).

    Raises:
        TypeError: If ``dim`` is not an int, ``scaling`` is not a dict or a
            parameter has the wrong type.
        ValueError: If ``dim`` is odd or below 2, ``base`` is not finite and
            positive, the rule is unknown (the message lists the known ones), or a
            parameter is missing, unknown or out of range (the message names it).

    Examples:
        >>> from attention import rope_frequencies
        >>> inv_freq, factor = rope_frequencies(8, base=100.0)
        >>> inv_freq  # 100 ** (-2i / 8)
        tensor([1.0000, 0.3162, 0.1000, 0.0316], dtype=torch.float64)
        >>> rope_frequencies(8, base=100.0, scaling={"rope_type": "linear", "factor": 4.0})[0]
        tensor([0.2500, 0.0791, 0.0250, 0.0079], dtype=torch.float64)

        YaRN keeps the fastest pair, divides the slowest by $\gamma = 4$, ramps in between,
        and scales the logits:

        >>> from attention import rope_frequencies
        >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
        >>> inv_freq, factor = rope_frequencies(8, base=100.0, scaling=yarn)
        >>> inv_freq / rope_frequencies(8, base=100.0)[0]  # theta_i' / theta_i
        tensor([1.0000, 0.7500, 0.5000, 0.2500], dtype=torch.float64)
        >>> round(factor, 4)  # 0.1 ln 4 + 1
        1.1386
    """
    dim = check_rotary_dim(dim)
    base = check_base(base)
    rule, params = check_rope_scaling(scaling, dim)
    theta = _frequencies(dim, base, device)  # (D/2,)
    if rule == "default":
        return theta, 1.0
    factor = params["factor"]
    if rule == "linear":
        return theta / factor, 1.0
    trained = int(params["original_max_position_embeddings"])  # L_0
    if rule == "dynamic":
        length = max(seq_len if seq_len is not None else trained, trained)
        new_base = base * (factor * length / trained - (factor - 1)) ** (dim / (dim - 2))
        return _frequencies(dim, new_base, device), 1.0
    if rule == "llama3":
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        wavelength = 2 * math.pi / theta  # (D/2,)
        smooth = (trained / wavelength - low) / (high - low)  # 0 at the slow edge, 1 at the fast
        mixed = (1 - smooth) * theta / factor + smooth * theta
        kept_or_divided = torch.where(wavelength > trained / low, theta / factor, theta)
        between = (wavelength >= trained / high) & (wavelength <= trained / low)
        return torch.where(between, mixed, kept_or_divided), 1.0
    if rule == "longrope":
        long = seq_len is not None and seq_len > trained
        rescale = torch.tensor(
            params["long_factor" if long else "short_factor"], dtype=torch.float64, device=device
        )  # (D/2,)
        if "attention_factor" in params:
            attention_factor = float(params["attention_factor"])
        else:
            attention_factor = (
                math.sqrt(1 + math.log(factor) / math.log(trained)) if factor > 1 else 1.0
            )
        return theta / rescale, attention_factor
    return _yarn(theta, dim, base, trained, params)


def _yarn(
    theta: Tensor, dim: int, base: float, trained: int, params: dict[str, float]
) -> tuple[Tensor, float]:
    """YaRN's frequencies and attention factor; see ``rope_frequencies``."""
    factor = params["factor"]
    beta_fast, beta_slow = params.get("beta_fast", 32.0), params.get("beta_slow", 1.0)

    def pair_index(rotations: float) -> float:
        # The (fractional) pair index i whose wavelength fits `rotations` times in L_0.
        return dim * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(beta_fast), pair_index(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as the reference code: avoid dividing by zero
    i = torch.arange(dim // 2, device=theta.device, dtype=torch.float64)
    ramp = ((i - low) / (high - low)).clamp(0, 1)  # (D/2,): 0 = keep, 1 = interpolate
    inv_freq = (1 - ramp) * theta + ramp * theta / factor

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if "attention_factor" in params:
        attention_factor = float(params["attention_factor"])
    elif params.get("mscale") and params.get("mscale_all_dim"):
        attention_factor = mscale(factor, params["mscale"]) / mscale(
            factor, params["mscale_all_dim"]
        )
    else:
        attention_factor = mscale(factor)
    return inv_freq, attention_factor


def alibi_slopes(
    num_heads: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""The per-head slopes $m_h$ of ALiBi: a geometric sequence, one slope per head.

    For a power of two $H$ the slopes are

    $$
    m_h = 2^{-8h/H}, \qquad h = 1, \dots, H,
    $$

    so $H = 8$ gives $\tfrac12, \tfrac14, \dots, \tfrac1{256}$. For any other $H$ the
    paper's reference implementation takes the $H'$ slopes for $H'$ the largest power
    of two below $H$, then fills the remaining $H - H'$ heads with every other slope
    of the sequence for $2H'$ (its 1st, 3rd, 5th, ...), which fall between the ones
    already taken. Models such as BLOOM and MPT use exactly this rule.

    Args:
        num_heads: Number of heads $H \ge 1$.
        device: Device of the result.
        dtype: Floating dtype of the result; defaults to ``torch.get_default_dtype()``.

    Returns:
        Tensor of shape ``(H,)``, slopes in $(0, 1)$.

    Raises:
        TypeError: If ``num_heads`` is not an int or ``dtype`` is not a floating dtype.
        ValueError: If ``num_heads < 1``.

    Examples:
        >>> from attention import alibi_slopes
        >>> alibi_slopes(8) * 256
        tensor([128.,  64.,  32.,  16.,   8.,   4.,   2.,   1.])

        Six heads: the four slopes for $H' = 4$, then the 1st and 3rd for $H' = 8$:

        >>> from attention import alibi_slopes
        >>> alibi_slopes(6) * 256
        tensor([ 64.,  16.,   4.,   1., 128.,  32.])
    """
    num_heads = check_size("num_heads", num_heads, minimum=1)
    dtype = check_dtype(dtype)
    closest_power_of_two = 1 << (num_heads.bit_length() - 1)
    slopes = _geometric_slopes(closest_power_of_two)
    extra = _geometric_slopes(2 * closest_power_of_two)[0::2]
    slopes += extra[: num_heads - closest_power_of_two]
    return torch.tensor(slopes, dtype=torch.float64, device=device).to(dtype)


def alibi_bias(
    num_heads: int,
    L: int,
    S: int | None = None,
    *,
    alignment: CausalAlignment = "top_left",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""ALiBi's additive attention bias: $-m_h$ times the distance from query to key.

    $$
    \text{bias}_{h,i,j} = -m_h \, |p_i - j|
    $$

    with $m_h$ from [`alibi_slopes`][attention.positional.alibi_slopes] and $p_i$ the
    position of query $i$. Pass the result as a float ``attn_mask`` (it is added to
    the scaled scores $q_i \cdot k_j / \sqrt{D}$) to
    [`scaled_dot_product_attention`][attention.functional.scaled_dot_product_attention];
    it broadcasts over the batch.

    The paper's causal models use $-m_h (p_i - j)$ for keys at or before the query
    and never look further; this symmetric form agrees there, and the keys after the
    query are removed by the causal mask that such a model needs anyway, e.g.
    ``combine_masks(alibi_bias(H, L, S), causal_mask(L, S, alignment="bottom_right"))``
    (see [`combine_masks`][attention.masks.combine_masks]). Without a causal mask it
    is the usual bidirectional variant.

    Query positions follow [`causal_mask`][attention.masks.causal_mask]:
    ``alignment="top_left"`` (the default) puts query $i$ at position $p_i = i$;
    ``"bottom_right"`` at $p_i = i + S - L$, the *last* $L$ of the $S$ positions, as
    when decoding with a KV cache (pass the same alignment to both). The two agree
    when ``L == S``.

    Args:
        num_heads: Number of heads $H$.
        L: Number of queries.
        S: Number of keys; defaults to ``L``.
        alignment: ``"top_left"`` ($p_i = i$) or ``"bottom_right"``
            ($p_i = i + S - L$).
        device: Device of the result.
        dtype: Floating dtype of the result (use the query's dtype, as
            ``attn_mask`` requires); defaults to ``torch.get_default_dtype()``.

    Returns:
        Float tensor of shape ``(H, L, S)``, $0$ where query and key positions
            coincide and negative elsewhere.

    Raises:
        TypeError: If a size is not an int or ``dtype`` is not a floating dtype.
        ValueError: If ``num_heads < 1``, ``L`` or ``S`` is negative, or
            ``alignment`` is unknown.

    Examples:
        >>> from attention import alibi_bias
        >>> bias = alibi_bias(8, 3)  # (H, L, S), slopes 1/2, 1/4, ..., 1/256
        >>> bias.shape
        torch.Size([8, 3, 3])
        >>> bias[0]  # slope 1/2
        tensor([[ 0.0000, -0.5000, -1.0000],
                [-0.5000,  0.0000, -0.5000],
                [-1.0000, -0.5000,  0.0000]])

        Two new queries at positions 3 and 4 over five keys (KV-cache decoding):

        >>> from attention import alibi_bias
        >>> alibi_bias(8, 2, 5, alignment="bottom_right")[0]
        tensor([[-1.5000, -1.0000, -0.5000,  0.0000, -0.5000],
                [-2.0000, -1.5000, -1.0000, -0.5000,  0.0000]])
    """
    distance = query_key_distance(L, S, alignment, device)  # (L, S): p_i - j
    slopes = alibi_slopes(num_heads, device=device, dtype=torch.float64)  # (H,)
    dtype = check_dtype(dtype)
    # Negate the integers, not the product, so that the diagonal is 0 and not -0.
    minus_distance = -distance.abs()  # (L, S)
    bias = slopes[:, None, None] * minus_distance  # (H, 1, 1) * (L, S) -> (H, L, S)
    return bias.to(dtype)


def relative_position_buckets(
    L: int,
    S: int | None = None,
    *,
    num_buckets: int = 32,
    max_distance: int = 128,
    bidirectional: bool = True,
    alignment: CausalAlignment = "top_left",
    device: torch.device | str | None = None,
) -> Tensor:
    r"""T5's bucket of each query-key pair: which learned bias the pair's score gets.

    With $d = p_i - j$ the distance from query $i$ (at position $p_i$) back to key $j$:

    - **bidirectional** (an encoder): half of the buckets are for keys at or before the
      query ($d \ge 0$), half for keys after it; $n = |d|$.
    - **causal** (a decoder): every bucket is for keys at or before the query,
      $n = \max(d, 0)$ (keys after it share bucket 0; a causal mask removes them).

    Of the $B$ buckets on a side, the first $B/2$ hold one distance each,
    $n = 0, 1, \dots, B/2 - 1$; the rest cover $B/2 \le n <$ ``max_distance`` in
    logarithmically growing ranges,

    $$
    \text{bucket}(n) = \frac{B}{2} + \left\lfloor
    \frac{\log(2n / B)}{\log(2\,\text{max\_distance} / B)} \cdot \frac{B}{2}
    \right\rfloor,
    $$

    and every $n \ge$ ``max_distance`` falls in the last bucket, $B - 1$ (with the
    last stretch of distances below it). That is the formula of the T5 reference
    code, evaluated as it does, in float32.

    Args:
        L: Number of queries.
        S: Number of keys; defaults to ``L``.
        num_buckets: Total number of buckets (both sides, if bidirectional): even,
            with at least 2 on each side.
        max_distance: The distance from which all keys share the last bucket; greater
            than the exact buckets' range.
        bidirectional: Buckets for keys on both sides (True) or only before (False).
        alignment: ``"top_left"`` ($p_i = i$) or ``"bottom_right"``
            ($p_i = i + S - L$, new queries over a KV cache).
        device: Device of the result.

    Returns:
        ``int64`` tensor of shape ``(L, S)``, values in ``[0, num_buckets)``.

    Raises:
        TypeError: If a size is not an int or ``bidirectional`` is not a bool.
        ValueError: If ``num_buckets`` is odd or too small, ``max_distance`` is not
            beyond the exact buckets, a size is negative, or ``alignment`` is unknown.

    Examples:
        >>> from attention import relative_position_buckets
        >>> relative_position_buckets(1, 300, num_buckets=16, max_distance=64,
        ...     bidirectional=False, alignment="bottom_right")[0, -12:].tolist()[::-1]
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 9]

        Distances 0 to 7 get a bucket each; 8 to 10 share one, and the buckets widen
        further out. Encoder (bidirectional) buckets, keys after the query from 8 on:

        >>> from attention import relative_position_buckets
        >>> relative_position_buckets(4, num_buckets=16)
        tensor([[ 0,  9, 10, 11],
                [ 1,  0,  9, 10],
                [ 2,  1,  0,  9],
                [ 3,  2,  1,  0]])
    """
    num_buckets, max_distance, side, exact = check_buckets(num_buckets, max_distance, bidirectional)
    distance = query_key_distance(L, S, alignment, device)  # (L, S): p_i - j
    if bidirectional:
        offset = torch.where(distance < 0, side, 0)  # keys after the query: upper half
        n = distance.abs()
    else:
        offset = torch.zeros_like(distance)
        n = distance.clamp(min=0)
    # float32, as T5's code; clamp first so that log(0) is never taken (n < exact there).
    ratio = n.clamp(min=exact).to(torch.float32) / exact
    spread = torch.log(ratio) / math.log(max_distance / exact) * (side - exact)
    far = (exact + spread.to(torch.int64)).clamp(max=side - 1)
    return offset + torch.where(n < exact, n, far)


class RelativePositionBias(nn.Module):
    r"""T5's learned relative position bias: one number per head and bucket.

    ``forward(L, S)`` returns the ``(H, L, S)`` bias
    $b_{h,i,j} = W_{\text{bucket}(i, j),\,h}$ with buckets from
    [`relative_position_buckets`][attention.positional.relative_position_buckets]: add
    it to the scaled scores, as a float ``attn_mask``. T5 computes it once, in the first
    layer, and every layer reuses it; it has no $1/\sqrt{D}$ (T5 folds the scale into
    its initialisation), which this module leaves to the caller.

    Args:
        num_heads: Number of heads $H$.
        num_buckets: Buckets, as in ``relative_position_buckets``.
        max_distance: Distance from which all keys share the last bucket.
        bidirectional: An encoder's buckets (both sides) or a decoder's (before only).
        device: Device of the table.
        dtype: Dtype of the table; defaults to ``torch.get_default_dtype()``.

    Examples:
        >>> import torch
        >>> from attention import RelativePositionBias, causal_mask, combine_masks
        >>> from attention import scaled_dot_product_attention
        >>> _ = torch.manual_seed(0)
        >>> bias = RelativePositionBias(num_heads=4, bidirectional=False)
        >>> mask = combine_masks(bias(5), causal_mask(5))  # (H, L, S) float
        >>> q = k = v = torch.randn(1, 4, 5, 8)
        >>> scaled_dot_product_attention(q, k, v, attn_mask=mask).shape
        torch.Size([1, 4, 5, 8])
        >>> bias(3, 1000).shape  # any length: far keys share the last bucket
        torch.Size([4, 3, 1000])
    """

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_size("num_heads", num_heads, minimum=1)
        self.num_buckets, self.max_distance, _, _ = check_buckets(
            num_buckets, max_distance, bidirectional
        )
        self.bidirectional = bidirectional
        self.table = nn.Embedding(
            self.num_buckets, self.num_heads, device=device, dtype=check_dtype(dtype)
        )

    def forward(
        self, L: int, S: int | None = None, alignment: CausalAlignment = "top_left"
    ) -> Tensor:
        """The bias for ``L`` queries and ``S`` keys (default ``L``).

        Args:
            L: Number of queries.
            S: Number of keys; defaults to ``L``.
            alignment: Query positions, as in ``relative_position_buckets``.

        Returns:
            Tensor ``(H, L, S)`` in the table's dtype, differentiable in the table.
        """
        buckets = relative_position_buckets(
            L,
            S,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            bidirectional=self.bidirectional,
            alignment=alignment,
            device=self.table.weight.device,
        )  # (L, S)
        bias: Tensor = self.table(buckets)  # (L, S, H)
        return bias.permute(2, 0, 1)  # (H, L, S)

    def extra_repr(self) -> str:
        """The settings, shown in ``print(module)``.

        Returns:
            ``num_heads``, ``num_buckets``, ``max_distance`` and ``bidirectional``.
        """
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )


def _frequencies(dim: int, base: float, device: torch.device | str | None) -> Tensor:
    r"""``(ceil(dim / 2),)`` float64 angular frequencies $\text{base}^{-2i/\text{dim}}$."""
    exponents = torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim  # 2i / dim
    return torch.pow(base, -exponents)


def _geometric_slopes(n: int) -> list[float]:
    """ALiBi's slopes for a power of two ``n``: ``2 ** (-8 h / n)`` for ``h = 1..n``."""
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

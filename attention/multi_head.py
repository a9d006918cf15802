r"""Multi-head attention, and self-, cross- and causal self-attention built on it.

$$
\operatorname{MultiHead}(X_q, X_k, X_v) = \operatorname{Concat}(\text{head}_1, \dots,
\text{head}_H)\, W^O,
$$

$$
\text{head}_h = \operatorname{Attention}(X_q W_h^Q,\; X_k W_h^K,\; X_v W_h^V).
$$

Each head projects the inputs to a $D = E / H$ dimensional subspace of its own and
attends there, so different heads can match on different features; the output
projection $W^O$ mixes the heads back into the model width $E$. In code the $H$
per-head projections are one $E \times E$ linear layer whose output is split into
$H$ slices of width $D$. With ``num_kv_heads`` $H_{kv} < H$, keys and values get only
$H_{kv}$ heads, each shared by $H / H_{kv}$ query heads: grouped-query attention
($H_{kv} = 1$ is multi-query attention), which shrinks the KV cache by $H / H_{kv}$.

Masks follow the package convention (a boolean ``attn_mask`` is True where a query may
attend) except ``key_padding_mask``, which keeps PyTorch's meaning (True marks a
padding key) so that code written for ``torch.nn.MultiheadAttention`` ports unchanged.

References:
    - Vaswani et al., "Attention Is All You Need", 2017.
      [arXiv:1706.03762](https://arxiv.org/abs/1706.03762)
    - Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need", 2019.
      [arXiv:1911.02150](https://arxiv.org/abs/1911.02150)
    - Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from
      Multi-Head Checkpoints", 2023. [arXiv:2305.13245](https://arxiv.org/abs/2305.13245)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attention._checks import (
    check_attn_mask,
    check_flag,
    check_key_padding_mask,
    check_mask_or_causal,
    check_multi_head_inputs,
    check_probability,
    check_size,
)
from attention._heads import repeat_heads
from attention._kernels import default_scale
from attention.functional import _attention_weights
from attention.kv_cache import KVCache
from attention.masks import CausalAlignment, causal_mask, combine_masks

__all__ = ["CausalSelfAttention", "CrossAttention", "MultiHeadAttention", "SelfAttention"]


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with PyTorch's interface and exactly PyTorch's numbers.

    A readable counterpart of ``torch.nn.MultiheadAttention``: four linear layers
    (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``) around
    [`attention_weights`][attention.functional.attention_weights]. With the same
    weights ([`from_torch`][attention.multi_head.MultiHeadAttention.from_torch]) it
    returns the same outputs and weights as PyTorch's module.

    Differences from ``torch.nn.MultiheadAttention``, all deliberate:

    - ``batch_first=True`` and ``need_weights=False`` are the defaults (PyTorch:
      False and True): returned weights keep an $L \times S$ tensor per head alive.
    - A boolean ``attn_mask`` is True where a query **may attend** (PyTorch's module
      uses True = masked out); ``key_padding_mask`` keeps PyTorch's meaning.
    - ``attn_mask`` broadcasts to ``(B, H, L, S)``; PyTorch's 3-D ``(B * H, L, S)``
      layout must be reshaped to ``(B, H, L, S)``.
    - ``is_causal=True`` applies a causal mask by itself (PyTorch's module treats it
      as a hint and still needs ``attn_mask``).
    - A query whose keys are all masked or padded gets zero attention output, never
      NaN, with or without ``need_weights``.
    - ``num_kv_heads`` gives grouped-query and multi-query attention, and
      ``kv_cache`` incremental decoding.

    Args:
        embed_dim: Model width $E$; must be divisible by ``num_heads``.
        num_heads: Number of query heads $H$; each has size $D = E / H$.
        num_kv_heads: Number of key/value heads $H_{kv}$ (must divide $H$); defaults
            to $H$. $1$ gives multi-query attention.
        dropout: Dropout probability on the attention weights, active in training
            mode only.
        bias: Whether the four projections have biases.
        kdim: Width of the ``key`` input; defaults to ``embed_dim``.
        vdim: Width of the ``value`` input; defaults to ``embed_dim``.
        batch_first: Inputs are ``(B, L, E)`` if True, ``(L, B, E)`` if False.
        add_bias_kv: Append a learned key and value (``bias_k``, ``bias_v``) to every
            sequence's keys and values, as PyTorch's option does.
        add_zero_attn: Append a key and value of zeros, which every query may attend
            to (after the ``add_bias_kv`` ones), as PyTorch's option does.
        device: Device of the parameters.
        dtype: Dtype of the parameters.

    Raises:
        TypeError: If a size is not an int or a flag is not a bool.
        ValueError: If a size is not positive, ``embed_dim`` is not divisible by
            ``num_heads``, ``num_kv_heads`` does not divide ``num_heads``, or
            ``dropout`` is outside $[0, 1]$.

    Examples:
        >>> import torch
        >>> from attention import MultiHeadAttention
        >>> _ = torch.manual_seed(0)
        >>> mha = MultiHeadAttention(embed_dim=16, num_heads=4)
        >>> x = torch.randn(2, 5, 16)  # (B, L, E)
        >>> out, weights = mha(x, x, x, need_weights=True)
        >>> tuple(out.shape), tuple(weights.shape)  # weights averaged over heads
        ((2, 5, 16), (2, 5, 5))
        >>> torch.allclose(weights.sum(dim=-1), torch.ones(2, 5))
        True
        >>> torch_mha = mha.to_torch()  # PyTorch's module, with the same weights
        >>> expected, _ = torch_mha(x, x, x, need_weights=False)
        >>> torch.allclose(out, expected, atol=1e-6)
        True
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        for name, n in (
            ("embed_dim", embed_dim),
            ("num_heads", num_heads),
            ("num_kv_heads", num_kv_heads),
            ("kdim", kdim),
            ("vdim", vdim),
        ):
            check_size(name, n, minimum=1)
        if embed_dim % num_heads != 0:
            raise ValueError(
                "embed_dim must be divisible by num_heads (each head gets embed_dim / "
                f"num_heads features); got embed_dim={embed_dim}, num_heads={num_heads}"
            )
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                "num_kv_heads must divide num_heads (each key/value head serves a "
                f"group of query heads); got num_heads={num_heads}, num_kv_heads={num_kv_heads}"
            )
        embed_dim, num_heads, num_kv_heads = int(embed_dim), int(num_heads), int(num_kv_heads)
        kdim, vdim = int(kdim), int(vdim)  # NumPy integers included
        for name, flag in (
            ("bias", bias),
            ("add_bias_kv", add_bias_kv),
            ("add_zero_attn", add_zero_attn),
        ):
            check_flag(name, flag)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = kdim
        self.vdim = vdim
        self.dropout = check_probability("dropout", dropout)
        self.batch_first = check_flag("batch_first", batch_first)

        kv_width = num_kv_heads * self.head_dim
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(kdim, kv_width, bias=bias, **factory)
        self.v_proj = nn.Linear(vdim, kv_width, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        # add_bias_kv: one learned key and value appended to every sequence's keys and
        # values, which every query may attend to (PyTorch's option, from fairseq).
        self.bias_k: nn.Parameter | None = None
        self.bias_v: nn.Parameter | None = None
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty(kv_width, device=device, dtype=dtype))
            self.bias_v = nn.Parameter(torch.empty(kv_width, device=device, dtype=dtype))
        self.add_zero_attn = add_zero_attn
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise like PyTorch's module: Xavier-uniform projections, zero biases."""
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        for extra in (self.bias_k, self.bias_v):
            if extra is not None:
                nn.init.xavier_normal_(extra.view(1, 1, -1))  # as PyTorch, on (1, 1, E)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_attn_weights: bool = True,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value``.

        Shapes are for ``batch_first=True``; with ``batch_first=False`` swap the first
        two axes of the inputs and of the output. 2-D inputs ``(L, E)`` are treated as
        a batch of one and returned without the batch axis.

        Args:
            query: ``(B, L, E)``.
            key: ``(B, S, kdim)``.
            value: ``(B, S, vdim)``.
            attn_mask: Optional mask broadcastable to ``(B, H, L, S)``: bool (True =
                may attend), float (added to the scores), or PyTorch's
                ``causal_upper_left(L, S)`` / ``causal_lower_right(L, S)``.
            key_padding_mask: Optional ``(B, S)``; bool True marks a padding key
                (PyTorch's meaning), float is added to the scores. With a
                ``kv_cache`` it covers every cached key.
            is_causal: Apply a causal mask: top-left aligned like PyTorch, or
                bottom-right aligned when a ``kv_cache`` is given (the new queries
                are the last positions). Cannot be combined with ``attn_mask``.
            need_weights: Also return the attention weights.
            average_attn_weights: Average the returned weights over heads.
            kv_cache: Cache of earlier keys and values. The keys and values of this
                call are appended to it and attention runs over everything cached.

        Returns:
            ``(output, weights)``. ``output`` is ``(B, L, E)``. ``weights`` is ``None``
                unless ``need_weights``; then ``(B, L, S)`` averaged over heads or
                ``(B, H, L, S)`` per head, after dropout (as PyTorch returns them).

        Raises:
            TypeError: If inputs are not floating tensors of the parameters' dtype, a
                mask has an unsupported dtype, or a flag is not a bool.
            ValueError: If an input has the wrong width or rank, batch sizes or
                key/value lengths differ, a mask has the wrong shape, or
                ``is_causal`` is combined with ``attn_mask``.
        """
        # Each argument is validated once, here or in _combined_mask; the attention
        # weights then come from functional's unchecked core.
        query, key, value = check_multi_head_inputs(
            query,
            key,
            value,
            dtype=self.out_proj.weight.dtype,
            embed_dim=self.embed_dim,
            kdim=self.kdim,
            vdim=self.vdim,
            batch_first=self.batch_first,
        )
        is_causal = check_mask_or_causal(attn_mask, is_causal)
        check_flag("need_weights", need_weights)
        check_flag("average_attn_weights", average_attn_weights)
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))  # (1, *, *)
            if isinstance(key_padding_mask, Tensor) and key_padding_mask.ndim == 1:
                key_padding_mask = key_padding_mask.unsqueeze(0)  # (S,) -> (1, S), as PyTorch
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))  # (B, *, *)
        B, L, _ = query.shape
        S = key.shape[1]
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim

        q = self.q_proj(query).view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
        k = self.k_proj(key).view(B, S, Hkv, D).transpose(1, 2)  # (B, Hkv, S, D)
        v = self.v_proj(value).view(B, S, Hkv, D).transpose(1, 2)  # (B, Hkv, S, D)
        if kv_cache is not None:
            # Not stored yet: a call that fails below must leave the cache as it was.
            k, v = kv_cache.extended(k, v)  # (B, Hkv, S_total, D)
            extended = (k, v)

        mask = self._combined_mask(
            attn_mask, key_padding_mask, is_causal, q, k.shape[-2], kv_cache is not None
        )
        k, v, mask = self._extra_keys(k, v, mask, kv_cache is not None)
        scale = default_scale(q, None)  # 1 / sqrt(D), as in PyTorch's module
        weights = _attention_weights(q, k, mask, scale, Hkv != H).to(q.dtype)  # (B, H, L, S)
        if self.training and self.dropout > 0.0:
            weights = torch.dropout(weights, self.dropout, train=True)
        v = repeat_heads(v, H)  # (B, H, S, D): each group shares a head
        heads = weights @ v  # (B, H, L, D)
        out = self.out_proj(heads.transpose(1, 2).reshape(B, L, H * D))  # (B, L, E)
        if kv_cache is not None:
            kv_cache.key, kv_cache.value = extended  # the call succeeded: keep them

        if not self.batch_first:
            out = out.transpose(0, 1)  # (L, B, E)
        if unbatched:
            out = out.squeeze(1 if not self.batch_first else 0)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(dim=1)  # (B, L, S)
        return out, weights.squeeze(0) if unbatched else weights

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Build a module with the weights (and settings) of a ``torch.nn.MultiheadAttention``.

        Args:
            module: The PyTorch module.

        Returns:
            A ``MultiHeadAttention`` that computes what ``module`` computes, in the
                same training/eval mode, on the same device and dtype.

        Raises:
            TypeError: If ``module`` is not a ``torch.nn.MultiheadAttention``.

        Examples:
            >>> import torch
            >>> from attention import MultiHeadAttention
            >>> torch_mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
            >>> mha = MultiHeadAttention.from_torch(torch_mha)
            >>> x = torch.randn(3, 4, 8)
            >>> torch.allclose(mha(x, x, x)[0], torch_mha(x, x, x)[0], atol=1e-6)
            True
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be a torch.nn.MultiheadAttention; got {type(module).__name__}"
            )
        reference = module.out_proj.weight
        has_bias = module.in_proj_bias is not None
        new = cls(
            module.embed_dim,
            module.num_heads,
            dropout=module.dropout,
            bias=has_bias,
            kdim=module.kdim,
            vdim=module.vdim,
            batch_first=module.batch_first,
            add_bias_kv=module.bias_k is not None,
            add_zero_attn=module.add_zero_attn,
            device=reference.device,
            dtype=reference.dtype,
        )
        with torch.no_grad():
            for ours, theirs in new._torch_parameter_pairs(module):
                ours.copy_(theirs.reshape(ours.shape))
        return new.train(module.training)

    def to_torch(self) -> nn.MultiheadAttention:
        """Return a ``torch.nn.MultiheadAttention`` with this module's weights and settings.

        Returns:
            The PyTorch module, in the same training/eval mode, device and dtype.

        Raises:
            ValueError: If ``num_kv_heads != num_heads``: PyTorch's module has no
                grouped-query attention.

        Examples:
            >>> from attention import MultiHeadAttention
            >>> MultiHeadAttention(8, 2, batch_first=False).to_torch().batch_first
            False
        """
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                "torch.nn.MultiheadAttention has no grouped-query attention; got "
                f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}"
            )
        weight = self.out_proj.weight
        has_bias = self.out_proj.bias is not None
        module = nn.MultiheadAttention(
            self.embed_dim,
            self.num_heads,
            dropout=self.dropout,
            bias=has_bias,
            kdim=self.kdim,
            vdim=self.vdim,
            batch_first=self.batch_first,
            add_bias_kv=self.bias_k is not None,
            add_zero_attn=self.add_zero_attn,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            for ours, theirs in self._torch_parameter_pairs(module):
                theirs.copy_(ours.reshape(theirs.shape))
        return module.train(self.training)

    def _torch_parameter_pairs(self, module: nn.MultiheadAttention) -> list[tuple[Tensor, Tensor]]:
        """Each parameter of this module with the tensor of ``module`` that holds it.

        One table for both directions (``from_torch`` copies right to left,
        ``to_torch`` left to right). PyTorch packs the three input projections into one
        ``in_proj_weight`` when ``kdim == vdim == embed_dim``; ``chunk`` gives views of
        its three parts, so copying into them writes into the packed tensor.
        """
        if module.in_proj_weight is not None:
            weights = module.in_proj_weight.chunk(3)  # each (E, E)
        else:
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        pairs = [(p.weight, w) for p, w in zip(projections, weights, strict=True)]
        pairs.append((self.out_proj.weight, module.out_proj.weight))
        if module.in_proj_bias is not None:
            biases = module.in_proj_bias.chunk(3)  # each (E,)
            pairs += [(p.bias, b) for p, b in zip(projections, biases, strict=True)]
            pairs.append((self.out_proj.bias, module.out_proj.bias))
        if module.bias_k is not None and module.bias_v is not None:
            assert self.bias_k is not None and self.bias_v is not None
            pairs += [(self.bias_k, module.bias_k), (self.bias_v, module.bias_v)]  # (E,), (1, 1, E)
        return pairs

    def _extra_keys(
        self, k: Tensor, v: Tensor, mask: Tensor | None, cached: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Append the ``add_bias_kv`` key/value and the ``add_zero_attn`` zero key/value.

        Both are keys every query may attend to, appended after the sequence's own, in
        PyTorch's order; the mask gets a "may attend" column for each.
        """
        extra_k, extra_v = [], []
        B, Hkv, _, D = k.shape
        if self.bias_k is not None and self.bias_v is not None:
            extra_k.append(self.bias_k.view(1, Hkv, 1, D).expand(B, Hkv, 1, D))
            extra_v.append(self.bias_v.view(1, Hkv, 1, D).expand(B, Hkv, 1, D))
        if self.add_zero_attn:
            extra_k.append(k.new_zeros(B, Hkv, 1, D))
            extra_v.append(v.new_zeros(B, Hkv, 1, D))
        if not extra_k:
            return k, v, mask
        if cached:
            raise ValueError(
                "kv_cache cannot be combined with add_bias_kv or add_zero_attn: the extra "
                "keys would be appended to the cache at every step"
            )
        if mask is not None:
            mask = mask.expand(*mask.shape[:-1], k.shape[-2])
            attend = torch.ones if mask.dtype == torch.bool else torch.zeros
            pad = attend(*mask.shape[:-1], len(extra_k), dtype=mask.dtype, device=mask.device)
            mask = torch.cat([mask, pad], dim=-1)
        return torch.cat([k, *extra_k], dim=-2), torch.cat([v, *extra_v], dim=-2), mask

    def _combined_mask(
        self,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        q: Tensor,
        S: int,
        cached: bool,
    ) -> Tensor | None:
        """One validated mask for ``(B, H, L, S)`` scores from the three ways of masking.

        ``is_causal`` is checked already (``check_mask_or_causal``); the two masks are
        checked here.
        """
        B, H, L, _ = q.shape
        if attn_mask is not None:  # a CausalBias becomes the bool mask it stands for
            attn_mask = check_attn_mask(attn_mask, torch.Size((B, H, L, S)), q)
        if is_causal:
            alignment: CausalAlignment = "bottom_right" if cached else "top_left"
            attn_mask = causal_mask(L, S, alignment=alignment, device=q.device)
        padding = None  # (B, 1, 1, S), True = may attend (or a float bias)
        if key_padding_mask is not None:
            padding = check_key_padding_mask(key_padding_mask, B, S, q.dtype)
        if attn_mask is None and padding is None:
            return None
        return combine_masks(attn_mask, padding)


class _Wrapper(nn.Module):
    """The constructor the three wrappers below share: one inner ``MultiHeadAttention``.

    Each wrapper only fixes what its ``forward`` passes as query, key and value (and
    ``is_causal``); ``CrossAttention`` also sets the width of its keys and values.
    """

    _context_dim: int | None = None  # kdim = vdim of the inner module; None: embed_dim

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(
            embed_dim,
            num_heads,
            num_kv_heads=num_kv_heads,
            dropout=dropout,
            bias=bias,
            kdim=self._context_dim,
            vdim=self._context_dim,
            device=device,
            dtype=dtype,
        )


class SelfAttention(_Wrapper):
    """Self-attention: every position of ``x`` attends to every position of ``x``.

    The encoder's attention: queries, keys and values all come from the same
    sequence. A thin wrapper over [`MultiHeadAttention`][attention.multi_head.MultiHeadAttention].

    Args:
        embed_dim: Model width $E$.
        num_heads: Number of heads $H$.
        num_kv_heads: Key/value heads for grouped-query attention; defaults to $H$.
        dropout: Dropout on the attention weights in training mode.
        bias: Whether the projections have biases.
        device: Device of the parameters.
        dtype: Dtype of the parameters.

    Raises:
        ValueError: As [`MultiHeadAttention`][attention.multi_head.MultiHeadAttention].

    Examples:
        >>> import torch
        >>> from attention import SelfAttention
        >>> layer = SelfAttention(embed_dim=12, num_heads=3)
        >>> layer(torch.randn(2, 7, 12)).shape
        torch.Size([2, 7, 12])
    """

    def forward(
        self,
        x: Tensor,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Attend from ``x`` ``(B, L, E)`` to itself; returns ``(B, L, E)``.

        Args:
            x: ``(B, L, E)`` input sequence.
            attn_mask: Optional mask broadcastable to ``(B, H, L, L)`` (True = may attend).
            key_padding_mask: Optional ``(B, L)`` bool, True at padding positions.

        Returns:
            ``(B, L, E)``.
        """
        out: Tensor  # nn.Module.__call__ is untyped
        out, _ = self.attention(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
        return out


class CrossAttention(_Wrapper):
    r"""Cross-attention: queries from ``x``, keys and values from another sequence.

    The encoder-decoder attention of a translation model: each of the $L$ decoder
    positions reads from the $S$ encoder outputs (``context``), and $L \ne S$ in
    general. A thin wrapper over [`MultiHeadAttention`][attention.multi_head.MultiHeadAttention].

    Args:
        embed_dim: Width $E$ of ``x`` and of the output.
        num_heads: Number of heads $H$.
        context_dim: Width of ``context``; defaults to ``embed_dim``.
        num_kv_heads: Key/value heads for grouped-query attention; defaults to $H$.
        dropout: Dropout on the attention weights in training mode.
        bias: Whether the projections have biases.
        device: Device of the parameters.
        dtype: Dtype of the parameters.

    Raises:
        ValueError: As [`MultiHeadAttention`][attention.multi_head.MultiHeadAttention].

    Examples:
        >>> import torch
        >>> from attention import CrossAttention
        >>> layer = CrossAttention(embed_dim=8, num_heads=2, context_dim=6)
        >>> decoder, encoder = torch.randn(2, 3, 8), torch.randn(2, 9, 6)  # L=3, S=9
        >>> layer(decoder, encoder).shape
        torch.Size([2, 3, 8])
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        context_dim: int | None = None,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self._context_dim = context_dim  # read by the shared constructor
        super().__init__(
            embed_dim,
            num_heads,
            num_kv_heads=num_kv_heads,
            dropout=dropout,
            bias=bias,
            device=device,
            dtype=dtype,
        )

    def forward(
        self,
        x: Tensor,
        context: Tensor,
        attn_mask: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Attend from ``x`` ``(B, L, E)`` to ``context`` ``(B, S, context_dim)``.

        Args:
            x: ``(B, L, E)`` queries' sequence (e.g. the decoder).
            context: ``(B, S, context_dim)`` keys' and values' sequence (the encoder).
            attn_mask: Optional mask broadcastable to ``(B, H, L, S)`` (True = may attend).
            context_padding_mask: Optional ``(B, S)`` bool, True at padding positions
                of ``context``.

        Returns:
            ``(B, L, E)``.
        """
        out: Tensor  # nn.Module.__call__ is untyped
        out, _ = self.attention(
            x, context, context, attn_mask=attn_mask, key_padding_mask=context_padding_mask
        )
        return out


class CausalSelfAttention(_Wrapper):
    """Causal self-attention: each position attends to itself and earlier positions.

    The decoder's attention in a language model. Pass a
    [`KVCache`][attention.kv_cache.KVCache] to decode incrementally: each call then
    takes only the new positions, and the result equals running the layer over the
    whole sequence at once. A thin wrapper over
    [`MultiHeadAttention`][attention.multi_head.MultiHeadAttention].

    Args:
        embed_dim: Model width $E$.
        num_heads: Number of heads $H$.
        num_kv_heads: Key/value heads for grouped-query attention; defaults to $H$.
        dropout: Dropout on the attention weights in training mode.
        bias: Whether the projections have biases.
        device: Device of the parameters.
        dtype: Dtype of the parameters.

    Raises:
        ValueError: As [`MultiHeadAttention`][attention.multi_head.MultiHeadAttention].

    Examples:
        >>> import torch
        >>> from attention import CausalSelfAttention, KVCache
        >>> _ = torch.manual_seed(0)
        >>> layer = CausalSelfAttention(embed_dim=8, num_heads=2)
        >>> x = torch.randn(1, 5, 8)
        >>> full = layer(x)
        >>> cache = KVCache()
        >>> steps = [layer(x[:, t : t + 1], kv_cache=cache) for t in range(5)]
        >>> torch.allclose(torch.cat(steps, dim=1), full, atol=1e-6)
        True
    """

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
    ) -> Tensor:
        """Attend from each position of ``x`` to itself and the positions before it.

        Args:
            x: ``(B, L, E)``: the whole sequence, or with ``kv_cache`` only the new
                positions.
            key_padding_mask: Optional ``(B, S)`` bool, True at padding positions
                (``S`` counts cached positions too).
            kv_cache: Cache of the earlier positions' keys and values; updated in place.

        Returns:
            ``(B, L, E)``.
        """
        out: Tensor  # nn.Module.__call__ is untyped
        out, _ = self.attention(
            x, x, x, key_padding_mask=key_padding_mask, is_causal=True, kv_cache=kv_cache
        )
        return out

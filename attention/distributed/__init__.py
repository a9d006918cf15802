r"""Sequence-parallel attention: one sequence split across processes, attended exactly.

When a sequence is too long for one device, each of $W$ processes (*ranks*) keeps
$n / W$ of its $n$ positions: its own rows of $Q$, $K$ and $V$. Every query still has to
see every key, so the ranks must exchange something. Three ways, each a function that
takes the local shard of ``query``, ``key`` and ``value`` on each rank and returns the
local shard of the output, differentiable through the communication:

* [`ring_attention`][attention.distributed.ring_attention] (Liu et al., 2023): the
  key/value blocks travel around a ring of ranks, one hop per step; each rank attends
  its queries to the block it holds and merges the partial results with the online
  softmax's rule. Memory per rank stays $O(n / W)$; each rank sends $W - 1$ blocks.
* [`all_gather_attention`][attention.distributed.all_gather_attention] (the context
  parallelism of Llama 3's training): every rank gathers all keys and values, attends
  its queries to them, and the key/value gradients are reduce-scattered back.
  Same traffic, one collective, but $O(n)$ keys and values per rank.
* [`ulysses_attention`][attention.distributed.ulysses_attention] (DeepSpeed-Ulysses,
  Jacobs et al., 2023): an all-to-all re-shards $Q$, $K$, $V$ from "all heads, $n/W$
  positions" to "$H/W$ heads, all positions", each rank attends its heads over the
  whole sequence, and a second all-to-all re-shards the output back. Each rank sends
  $4 \cdot \frac{W-1}{W}$ of its shard: traffic falls as $W$ grows. Needs $H$ and
  $H_{kv}$ divisible by $W$.

Inside each rank, attention is the package's tiled loop (`flash_attention`'s): no
$L \times S$ matrix is built, forward or backward. Partial results over disjoint key
sets are merged by their log-sum-exps (`attention._tiled.merge_partials`), the same
rule the tiled loop applies tile by tile.

**Causal attention** needs the global position of every local row. With the
``"contiguous"`` layout, rank $r$ holds positions $rn/W$ to $(r+1)n/W - 1$, and the
first rank has almost nothing to attend to while the last attends to everything.
The ``"zigzag"`` layout cuts the sequence into $2W$ chunks and gives rank $r$ chunks
$r$ and $2W - 1 - r$: every rank then does the same work. Use
[`shard_sequence`][attention.distributed.shard_sequence] to split a full tensor and
[`gather_sequence`][attention.distributed.gather_sequence] to put it back together.

Every function here must be called by all ranks of the process group, with shards of
the same shape and the same arguments. Each attention call first checks that with one
all-gather of 96 bytes (the function, shapes, dtypes, whether a padding mask is given,
flags, scale, layout): where the ranks differ, or one rank refuses its arguments, every
rank raises a ``ValueError`` saying what differs on which ranks, instead of aborting or
waiting in a later transfer. Collectives wait at most the process group's ``timeout``
(`torch.distributed.init_process_group`); [`run_on_ranks`][attention.distributed.run_on_ranks]
starts a group on this machine (by forking this process where the platform allows it,
so a function defined in a notebook runs as it is) and fails cleanly when one rank
fails or hangs.

References:
    - Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for
      Near-Infinite Context", 2023. [arXiv:2310.01889](https://arxiv.org/abs/2310.01889)
    - Jacobs, Tanaka, Zhang, Zhang, Song, Rajbhandari and He, "DeepSpeed Ulysses:
      System Optimizations for Enabling Training of Extreme Long Sequence Transformer
      Models", 2023. [arXiv:2309.14509](https://arxiv.org/abs/2309.14509)
    - Llama Team, "The Llama 3 Herd of Models", 2024, section 3.3.2 (context
      parallelism by all-gather). [arXiv:2407.21783](https://arxiv.org/abs/2407.21783)
    - Brandon, Nrusimha, Qian, Ankner, Jin, Song and Ragan-Kelley, "Striped
      Attention: Faster Ring Attention for Causal Transformers", 2023 (load balance).
      [arXiv:2311.09431](https://arxiv.org/abs/2311.09431)
"""

# The package's modules, one job each: sharding (which positions each rank holds),
# strategies (ring, all-gather, Ulysses), _calls (each call checked and agreed on by
# every rank), traffic (bytes counted) and launch (run_on_ranks).
#
# LAYOUTS, Layout, chunk_ids and BLOCK are importable from here as they were when the
# package was one module, but not documented (not in __all__); the benchmark reads
# BLOCK, the tile size of the loop inside each rank.
from attention.distributed.launch import run_on_ranks
from attention.distributed.sharding import LAYOUTS as LAYOUTS
from attention.distributed.sharding import Layout as Layout
from attention.distributed.sharding import chunk_ids as chunk_ids
from attention.distributed.sharding import gather_sequence, shard_sequence, unshard_sequence
from attention.distributed.strategies import BLOCK as BLOCK
from attention.distributed.strategies import (
    all_gather_attention,
    ring_attention,
    ulysses_attention,
)
from attention.distributed.traffic import Traffic, count_traffic

__all__ = [
    "Traffic",
    "all_gather_attention",
    "count_traffic",
    "gather_sequence",
    "ring_attention",
    "run_on_ranks",
    "shard_sequence",
    "ulysses_attention",
    "unshard_sequence",
]

# Each public object says it lives here, where it is documented and imported from (as
# NumPy's set_module does): its repr, pickles of it, and the public-surface test
# (tests/test_api.py) see the package, not the module that defines it.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name

"""attention.distributed: each strategy, run on real processes, equals dense attention.

Every case starts no process of its own: one group of 2 ranks and one of 4 (gloo, on
127.0.0.1) each run all cases in one go (``_distributed_cases.run_cases``), and the
tests below read what rank 0 measured. The cases cover the three strategies, causal or
not, both layouts, key padding (including queries left with no key), grouped-query
heads, float64 (to 1e-10) and float32 (PyTorch's own tolerances, against its kernel),
outputs and the gradients of query, key and value. Each run has a timeout: a rank that
fails or hangs fails the test instead of hanging CI, which is itself tested, with the
rest of the launcher: forked ranks run functions defined anywhere, survive a parent
that used OpenMP threads, and report the failing rank with its traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from attention.distributed import (
    count_traffic,
    run_on_ranks,
    shard_sequence,
    unshard_sequence,
)
from tests import _distributed_cases as cases
from tests.conftest import DOCS

CASES = cases.all_cases()
WORLD_SIZES = (2, 4)
TIMEOUT = 300  # seconds for a whole run; each collective waits as long at most


# Where run_on_ranks forks its ranks by default (elsewhere it spawns them).
forks = pytest.mark.skipif(sys.platform != "linux", reason="ranks are forked on Linux only")


# Four ranks on two cores take twice as long per case: float64 only there (the
# float32 cases check tolerances, which do not depend on the number of ranks).
RUNS = [(2, case) for case in CASES] + [(4, case) for case in CASES if case.dtype == "float64"]


@pytest.fixture(scope="module")
def measured() -> dict[int, dict[str, Any]]:
    """Rank 0's differences for every case, for each number of ranks."""
    return {
        w: run_on_ranks(cases.run_cases, w, [c for ws, c in RUNS if ws == w], timeout=TIMEOUT)[0]
        for w in WORLD_SIZES
    }


@pytest.mark.parametrize(
    ("world_size", "case"), RUNS, ids=[f"{w}ranks-{case.name}" for w, case in RUNS]
)
def test_strategy_equals_dense_attention(
    measured: dict[int, dict[str, Any]], world_size: int, case: cases.Case
) -> None:
    errors = measured[world_size][case.name]
    assert errors["finite"] == 1.0, errors
    if case.dtype == "float64":
        assert max(errors[name] for name in ("out", "grad_q", "grad_k", "grad_v")) < 1e-10, errors
    else:
        # torch.testing's float32 tolerances (atol 1e-5, rtol 1.3e-6), on values of order 1.
        assert errors["out"] < 1e-5, errors
        assert max(errors[n] for n in ("grad_q", "grad_k", "grad_v")) < 2e-5, errors


def test_every_case_ran() -> None:
    names = {c.name for c in CASES}
    assert len(names) == len(CASES) == 3 * 2 * 2 * 2 * 2 * 2 + 3


def test_bad_calls_raise_on_every_rank_without_hanging() -> None:
    messages = run_on_ranks(cases.errors_raised, 2, timeout=60)[0]
    assert messages["ulysses_heads"].startswith("ValueError"), messages
    assert "divisible by the number of ranks (2)" in messages["ulysses_heads"]
    assert "(1, 3, 8, 8)" in messages["ulysses_heads"]
    # Rank 1 holds 10 positions, rank 0 holds 8: both ranks say so, none waits forever.
    assert "rank 0: query (1, 4, 8, 8)" in messages["uneven"]
    assert "rank 1: query (1, 4, 10, 8)" in messages["uneven"]
    assert messages["padding_dtype"].startswith("TypeError") and "bool" in messages["padding_dtype"]
    assert (
        "(B, n / W) = (1, 8)" in messages["padding_shape"] and "(1, 9)" in messages["padding_shape"]
    )
    assert "divisible by 2" in messages["zigzag_odd"] and "(1, 4, 7, 8)" in messages["zigzag_odd"]
    assert "layout must be one of" in messages["layout"] and "'striped'" in messages["layout"]
    assert "same length on this rank" in messages["cross"]


# Calls whose ranks disagree: what the message must name (the differing rank's value).
DISAGREEMENTS = {
    **{f"{s}-mask": "key_padding_mask (rank 0: None; rank 1: given)" for s in cases.STRATEGIES},
    **{
        f"{s}-dtype": "dtypes (rank 0: query torch.float32, key torch.float32, value "
        "torch.float32; rank 1: query torch.float64, key torch.float64, value torch.float64)"
        for s in cases.STRATEGIES
    },
    "is_causal": "is_causal (rank 0: True; rank 1: False)",
    "scale": "scale (rank 0: 0.35355339059327373; rank 1: 0.5)",
    "layout": "layout (rank 0: 'contiguous'; rank 1: 'zigzag')",
    "strategy": "function (rank 0: ring_attention; rank 1: ulysses_attention)",
    "enable_gqa": "enable_gqa (rank 0: True; rank 1: False)",
    "grad": "autograd (rank 0: records the graph for backward; rank 1: no graph",
    "heads": "shapes (rank 0: query (1, 4, 8, 8), key (1, 4, 8, 8), value (1, 4, 8, 8); "
    "rank 1: query (1, 2, 8, 8)",
}


def test_calls_that_differ_between_ranks_raise_the_same_error_on_every_rank() -> None:
    """A mask on one rank only, float32 against float64, different flags: each call is
    valid on its own rank, but the collectives would abort or hang. Every rank raises
    the same ValueError instead, naming what differs and on which ranks."""
    start = time.monotonic()
    ranks = run_on_ranks(cases.disagreements, 2, timeout=30)
    assert time.monotonic() - start < 30
    for name, expected in DISAGREEMENTS.items():
        message = ranks[0][name]
        assert ranks[1][name] == message, name  # the same error, word for word
        assert message.startswith("ValueError: sequence-parallel attention needs the same"), (
            name,
            message,
        )
        assert expected in message, (name, message)
    # A call that only rank 1 refuses: rank 1 says why, rank 0 says where to look.
    assert ranks[1]["invalid_on_rank_1"].startswith("TypeError: key_padding_mask must be")
    assert ranks[0]["invalid_on_rank_1"].startswith("ValueError: ring_attention")
    assert "rank 1" in ranks[0]["invalid_on_rank_1"]
    assert "divisible by the number of ranks (2)" in ranks[1]["ulysses_heads_on_rank_1"]
    assert "rank 1" in ranks[0]["ulysses_heads_on_rank_1"]


def test_key_and_value_head_counts_that_do_not_divide_each_other() -> None:
    """H = 12 query, 4 key, 6 value heads, as PyTorch's enable_gqa takes them."""
    differences = run_on_ranks(cases.grouped_heads_that_do_not_divide, 2, timeout=60)[0]
    assert set(differences) == set(cases.STRATEGIES)
    assert max(differences.values()) < 1e-10, differences


def test_a_failing_rank_fails_the_run_promptly_with_its_traceback() -> None:
    """Rank 0, left waiting in a barrier, fails too ("connection closed"), later: the
    error names rank 1 and shows its traceback, down to the line that raised."""
    start = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        run_on_ranks(cases.fail_on_rank_one, 2, timeout=60)
    message = str(raised.value)
    assert message.startswith("rank 1 of 2 failed:\nTraceback (most recent call last):")
    assert 'raise ArithmeticError("rank one gives up")' in message  # the line that raised
    assert "ArithmeticError: rank one gives up" in message
    assert time.monotonic() - start < 30  # rank 0, waiting in a barrier, was stopped


def test_a_rank_that_dies_without_an_exception_is_named() -> None:
    with pytest.raises(
        RuntimeError, match=r"^rank 1 of 2 failed: process 1 terminated with exit code 3"
    ):
        run_on_ranks(cases.exit_on_rank_one, 2, timeout=60)


def test_a_hanging_rank_times_out() -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] of 2 did not finish within 3 s"):
        run_on_ranks(cases.sleep_forever, 2, timeout=3)
    assert time.monotonic() - start < 20


def test_a_timeout_names_only_the_ranks_still_running() -> None:
    with pytest.raises(TimeoutError, match=r"^ranks \[1\] of 2 did not finish within 2 s"):
        run_on_ranks(cases.sleep_forever_on_rank_one, 2, timeout=2)


@forks
def test_a_function_defined_here_runs_on_forked_ranks() -> None:
    """A closure: no other process could import it by name, or unpickle it."""
    offset = 10

    def rank_plus_offset() -> tuple[int, int]:
        import torch.distributed as dist

        return dist.get_rank() + offset, dist.get_world_size()

    assert run_on_ranks(rank_plus_offset, 2, timeout=60) == [(10, 2), (11, 2)]


@forks
def test_a_function_defined_in_a_scripts_main_runs_on_forked_ranks(tmp_path: Path) -> None:
    """A script's ``__main__``, without an ``if __name__ == "__main__"`` guard: forked
    ranks neither import the function nor run the script again."""
    script = tmp_path / "ranks.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "from attention.distributed import run_on_ranks\n\n\n"
        "def rank_times(factor):\n"
        "    return dist.get_rank() * factor\n\n\n"
        "print(run_on_ranks(rank_times, 3, 7, timeout=60))\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["[0, 7, 14]"]


def _fail_to_join_on_rank_one(
    monkeypatch: pytest.MonkeyPatch, failures_left: Path, times: int
) -> None:
    """Rank 1's first ``times`` joins raise gloo's loopback handshake failure (forked
    ranks inherit the patch; the file counts across launches)."""
    import torch.distributed as dist

    join = dist.init_process_group
    failures_left.write_text(str(times))

    def flaky_join(*args: Any, **kwargs: Any) -> None:
        # Only rank 1 touches the file: rank 0 could read it half written.
        if kwargs["rank"] == 1 and (left := int(failures_left.read_text())) > 0:
            failures_left.write_text(str(left - 1))
            raise RuntimeError("Gloo connectFullMesh failed with [pair.cc:553] Connection closed")
        join(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", flaky_join)


@forks
def test_a_failure_to_join_starts_the_ranks_again_and_runs_fn_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Gloo's handshake fails now and then on loopback (the launcher's docstring): no
    rank has run ``fn`` yet, so the ranks start again, and ``fn`` runs once on each."""
    _fail_to_join_on_rank_one(monkeypatch, tmp_path / "failures-left", times=2)
    runs = tmp_path / "runs"

    def record_rank() -> int:
        import torch.distributed as dist

        with runs.open("a") as log:
            log.write(f"{dist.get_rank()}\n")
        return dist.get_rank()

    assert run_on_ranks(record_rank, 2, timeout=60) == [0, 1]
    assert sorted(runs.read_text().split()) == ["0", "1"]


@forks
def test_a_rank_that_never_joins_fails_with_its_traceback_and_the_attempts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fail_to_join_on_rank_one(monkeypatch, tmp_path / "failures-left", times=3)
    with pytest.raises(
        RuntimeError,
        match=r"(?s)^rank 1 of 2 failed:\nTraceback.*Connection closed.*joining failed 3 times",
    ):
        run_on_ranks(os.getpid, 2, timeout=60)


@forks
def test_a_result_that_cannot_be_pickled_fails_its_rank_with_the_reason() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)^rank \d of 2 failed:.*Can't pickle local"):
        run_on_ranks(lambda: lambda: None, 2, timeout=60)


@forks
def test_ranks_forked_after_multithreaded_work_do_not_hang() -> None:
    """GNU OpenMP does not survive a fork: once this process has run a parallel region
    on several threads, a forked child that opens one with more than one thread waits
    forever for threads that were not copied. The ranks run single-threaded instead."""
    saved = torch.get_num_threads()
    torch.set_num_threads(max(2, saved))
    try:
        a = torch.randn(1024, 1024)
        (a @ a).sum()  # the parent's OpenMP threads now exist
        torch.randn(1 << 22).exp().sum()
        start = time.monotonic()
        threads = run_on_ranks(cases.multithreaded_work, 2, timeout=30)
    finally:
        torch.set_num_threads(saved)
    assert threads == [1, 1]
    assert time.monotonic() - start < 20


def test_spawned_ranks_import_the_function_and_take_threads() -> None:
    """Where fork is not the method: new interpreters, with the threads asked for."""
    ranks = run_on_ranks(cases.world_and_threads, 2, timeout=120, threads=2, start_method="spawn")
    assert ranks == [(2, 2), (2, 2)]


@forks
def test_launcher_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"forked ranks run single-threaded.*'spawn' for 2"):
        run_on_ranks(cases.world_and_threads, 2, threads=2, start_method="fork")
    with pytest.raises(ValueError, match=r"start_method must be one of .*got 'thread'"):
        run_on_ranks(cases.world_and_threads, 2, start_method="thread")
    with pytest.raises(ValueError, match=r"world_size must be an int >= 1; got 0"):
        run_on_ranks(cases.world_and_threads, 0)


def test_traffic_matches_the_formulas() -> None:
    """Bytes each rank sends, one forward and backward, float32 (4 bytes), shard n = N / W.

    Ring: W - 1 hops of keys and values forward; backward, W - 1 hops of them again and
    W hops of their gradients. All-gather: its block to W - 1 ranks, keys and values;
    backward, reduce-scatter sends W - 1 blocks of gradients. Ulysses: (W - 1) / W of
    q, k, v and of the output forward, of their gradients backward. Plus the shape
    check (the ranks' agreement on the call: an all-gather of 24 int32 per call). In the
    ring and Ulysses' exchanges every rank receives what it sends.
    """
    W, N, H, D = 4, 64, 8, 16
    block = 4 * H * (N // W) * D  # one tensor's shard, bytes
    check = 24 * 4  # the agreement on the call, sent once per call
    expected = {
        "ring": (2 * (W - 1) * block + check, 2 * (W - 1) * block + 2 * W * block),
        "all_gather": (2 * block + check, 2 * (W - 1) * block),
        "ulysses": (4 * block * (W - 1) // W + check, 4 * block * (W - 1) // W),
    }
    for rank, counts in enumerate(run_on_ranks(cases.traffic, W, N, timeout=60)):
        for strategy, (forward, backward) in expected.items():
            got = counts[strategy]
            assert (got["forward_sent"], got["backward_sent"]) == (forward, backward), (rank, got)
            if strategy != "all_gather":  # an all-gather receives W - 1 blocks per block sent
                assert got["backward_received"] == got["backward_sent"], (rank, got)


def test_shard_and_unshard_are_inverse() -> None:
    x = torch.arange(2 * 24 * 3).view(2, 24, 3)
    for layout in ("contiguous", "zigzag"):
        shards = [shard_sequence(x, r, 3, layout=layout, dim=1) for r in range(3)]
        assert all(s.shape == (2, 8, 3) for s in shards)
        assert torch.equal(unshard_sequence(shards, layout=layout, dim=1), x)
    zigzag = [
        shard_sequence(torch.arange(8), r, 2, layout="zigzag", dim=0).tolist() for r in (0, 1)
    ]
    assert zigzag == [[0, 1, 6, 7], [2, 3, 4, 5]]


def test_shard_refuses_an_uneven_split() -> None:
    with pytest.raises(ValueError, match=r"length 10 .* cannot be split into 4 equal chunks"):
        shard_sequence(torch.zeros(1, 10, 2), 0, 2, layout="zigzag")
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\); got 2"):
        shard_sequence(torch.zeros(1, 8, 2), 2, 2)


def test_the_how_to_check_script_runs_under_torchrun(tmp_path: Path) -> None:
    """The GPU how-to's script, started as it says, on 2 CPU processes (gloo)."""
    page = DOCS / "how-to/run-sequence-parallel-on-gpus.md"
    script = re.findall(r"```python\n(.*?)\n```", page.read_text(encoding="utf-8"), re.S)[0]
    assert "torchrun --nproc-per-node" in script
    (tmp_path / "sp_check.py").write_text(script, encoding="utf-8")
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "sp_check.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "on 2 ranks" in line]
    assert len(lines) == 3, done.stdout  # ring, all-gather, ulysses: one line each


def test_nested_traffic_counters_each_count_what_ran_inside_them() -> None:
    from attention.distributed.traffic import _record  # what every transfer calls

    with count_traffic() as outer:
        with count_traffic() as inner:
            _record("send/recv", sent=8, received=8)
        _record("send/recv", sent=4, received=4)  # after inner closed: outer only
    assert (outer.sent_bytes, inner.sent_bytes) == (12, 8)

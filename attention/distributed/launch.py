"""Running a function on $W$ local processes joined in one gloo process group.

`run_on_ranks` starts the ranks with `torch.multiprocessing`, by forking this process
where the platform allows it: a rank then starts with everything this process has
defined, so a function written in a notebook or a script's ``__main__`` runs as it is,
and no rank imports torch again. Elsewhere (Windows, macOS) the ranks are spawned: new
interpreters, which import the function by name.

A fork copies only the thread that calls it, with every lock as it was at that
moment, held or not. Three things follow:

* **OpenMP.** The CPU build of PyTorch uses GNU OpenMP (libgomp), which does not
  survive a fork: once this process has run a multi-threaded operation, a forked child
  that starts a parallel region of more than one thread waits forever for threads that
  were not copied. So a forked rank runs single-threaded, as the workers of PyTorch's
  ``DataLoader`` do (they call ``torch.set_num_threads(1)`` for the same reason).
* **The rendezvous.** This process holds the ranks' `torch.distributed.TCPStore` on
  ``127.0.0.1``, on a port the system picks (port 0): nothing can take the port
  between choosing it and listening on it. It is started only after the last rank
  is forked, and the ranks wait for its port: its server thread, answering a rank
  that connected while the next was being forked, held glibc's resolver lock at the
  fork, and the new rank waited forever for it (seen in this package's tests).
* **Failures.** Each rank sends its outcome back through a pipe of its own before it
  leaves the group, stamped with the time: the first failure is the cause, and the
  ranks left waiting for the failed one fail after it.
* **Joining again.** Gloo's handshake on loopback fails now and then: a rank's
  ``init_process_group`` raises "Gloo connectFullMesh failed ... Connection closed by
  peer" though every rank is alive (2 launches in 360, measured with six launchers at
  once on two cores; PyTorch's own gloo tests flake the same way, pytorch/pytorch#53270).
  No rank runs ``fn`` before every rank has joined (a barrier on the store, not on
  gloo), so a failure while joining has run nothing of the caller's: the launcher then
  stops the ranks and starts them again, at most ``_JOIN_ATTEMPTS`` times in all.
"""

from __future__ import annotations

import contextlib
import datetime
import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import ProcessContext, ProcessException, start_processes

_HOST = "127.0.0.1"
# Launches in all when gloo fails while the ranks join (see the module docstring).
_JOIN_ATTEMPTS = 3
# torch.distributed exports TCPStore without declaring it (mypy's strict mode asks that).
_TCPStore = dist.TCPStore  # type: ignore[attr-defined]


def run_on_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    threads: int | None = None,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` in ``world_size`` new processes joined in one gloo process group.

    Each process is a rank of a `torch.distributed` group on ``127.0.0.1`` with the
    gloo backend, so ``dist.get_rank()`` tells it which it is. Returns what ``fn``
    returned on each rank, in rank order. If any rank raises, the others are stopped
    and a `RuntimeError` is raised here that names the rank and holds its traceback;
    if the ranks have not all finished after ``timeout`` seconds (a rank stuck in a
    collective), all are stopped and `TimeoutError` names the ranks still running.
    Joining the group and every collective also wait at most ``timeout`` seconds.

    The ranks are forked from this process where the platform allows it (Linux):
    ``fn`` may be defined anywhere, a notebook included, and each rank starts with
    this process's modules and variables. A forked rank runs single-threaded (see the
    module docstring: GNU OpenMP does not survive a fork). PyTorch refuses CUDA in a
    forked rank once this process has initialised it and, on a machine with a GPU,
    autograd once this process has run a backward pass (its note "Autograd and
    Fork"). Pass ``start_method="spawn"`` for ranks that start from a fresh
    interpreter: they can run several threads and use the GPU, but import ``fn`` by
    name, so it must live in a module (not a notebook or ``__main__``).

    Args:
        fn: The function each rank runs; with ``start_method="spawn"``, importable by
            name from a module.
        world_size: Number of processes.
        *args: Passed to ``fn`` on every rank (pickled when spawned).
        timeout: Seconds for the whole run, and for each collective.
        threads: Torch threads per rank. Forked ranks: 1, the only value allowed.
            Spawned ranks: by default this machine's cores divided among the ranks
            (at least one).
        start_method: ``"fork"`` or ``"spawn"`` (or ``"forkserver"``); by default
            ``"fork"`` where the platform allows it, else ``"spawn"``.

    Returns:
        ``[fn(*args) on rank 0, ..., on rank world_size - 1]``, each pickled by value
            (a tensor comes back as a copy).

    Raises:
        ValueError: If ``world_size`` is not a positive int, ``start_method`` is not
            available here, or ``threads`` is above 1 for forked ranks.
        RuntimeError: If a rank raised (the message names the first rank that failed
            and holds its traceback), died, or ended without returning.
        TimeoutError: If the ranks did not finish within ``timeout`` seconds.

    Examples:
        >>> import torch.distributed as dist
        >>> from attention.distributed import run_on_ranks
        >>> run_on_ranks(dist.get_world_size, 2)  # each rank's answer, rank 0 first
        [2, 2]
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1; got {world_size!r}")
    method = start_method or _default_start_method()
    if method not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"start_method must be one of {multiprocessing.get_all_start_methods()} on this "
            f"platform; got {method!r}"
        )
    threads = _threads(threads, world_size, method)
    deadline = time.monotonic() + timeout
    for attempt in range(1, _JOIN_ATTEMPTS + 1):
        try:
            return _launch(fn, world_size, args, timeout, deadline, threads, method)
        except _JoinError as failed:
            if attempt == _JOIN_ATTEMPTS or time.monotonic() >= deadline:
                raise RuntimeError(f"{failed} (joining failed {attempt} times)") from None
    raise AssertionError("unreachable")  # the last attempt returns or raises


class _Outcome(NamedTuple):
    """What a rank sends back: its result or its traceback, when, and whether it joined."""

    ok: bool
    when: float
    value: Any
    joined: bool


class _JoinError(RuntimeError):
    """The first rank to fail failed while joining the group: nothing of ``fn`` ran."""


def _launch(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...],
    timeout: float,
    deadline: float,
    threads: int,
    method: str,
) -> list[Any]:
    """One launch of the ranks (see `run_on_ranks`); raises `_JoinError` to be retried."""
    mp_context = multiprocessing.get_context(method)
    pipes = [mp_context.Pipe(duplex=False) for _ in range(world_size)]
    writers = [writer for _, writer in pipes]
    port, listening = mp_context.Value("i", 0), mp_context.Event()
    context = start_processes(  # type: ignore[no-untyped-call]
        _rank,
        args=(world_size, fn, args, port, listening, timeout, threads, writers),
        nprocs=world_size,
        join=False,
        start_method=method,
    )
    for writer in writers:  # the ranks hold them now: a dead rank's pipe then reads EOF
        writer.close()
    readers = {reader: rank for rank, (reader, _) in enumerate(pipes)}
    outcomes: dict[int, _Outcome] = {}
    store = None
    try:
        # After the last fork (see the module docstring).
        wait = datetime.timedelta(seconds=timeout)
        store = _TCPStore(_HOST, 0, is_master=True, wait_for_workers=False, timeout=wait)
        port.value = store.port
        listening.set()
        try:
            _supervise(context, readers, outcomes, deadline)
        except ProcessException as error:
            # Every rank is stopped now; read what the others sent before they were.
            _receive_ready(readers, outcomes)
            raise _rank_error(outcomes, world_size, error) from None
        running = [rank for rank, process in enumerate(context.processes) if process.is_alive()]
        if running:
            raise TimeoutError(
                f"ranks {running} of {world_size} did not finish within {timeout} s; "
                "all ranks were stopped"
            )
        _receive_ready(readers, outcomes)  # sent just before they exited
        if len(outcomes) < world_size or not all(outcome.ok for outcome in outcomes.values()):
            raise _rank_error(outcomes, world_size, None)
        return [outcomes[rank].value for rank in range(world_size)]
    finally:
        _stop(context.processes)
        for reader in readers:
            reader.close()
        del store  # stops its server now, though a traceback may hold this frame


def _default_start_method() -> str:
    """Fork where the platform allows it; macOS's system libraries are not fork-safe.

    CPython's own default on macOS is spawn for that reason (its multiprocessing docs).
    """
    if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin":
        return "fork"
    return "spawn"


def _threads(threads: int | None, world_size: int, method: str) -> int:
    """Torch threads per rank (see `run_on_ranks`)."""
    if method == "fork":
        if threads not in (None, 1):
            raise ValueError(
                "forked ranks run single-threaded: GNU OpenMP hangs in a forked child "
                "once the parent has used its threads; pass start_method='spawn' for "
                f"{threads} threads per rank"
            )
        return 1
    if threads is None:
        return max(1, (os.cpu_count() or 1) // world_size)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1 or None; got {threads!r}")
    return threads


def _supervise(
    context: ProcessContext,
    readers: dict[Connection, int],
    outcomes: dict[int, _Outcome],
    deadline: float,
) -> None:
    """Read the ranks' outcomes as they come, until every rank has exited or time is up.

    Read while the ranks run: a rank sending a large outcome waits until it is read.
    Raises `torch.multiprocessing.spawn.ProcessException` as soon as a rank exits with
    an error, once torch.multiprocessing has stopped the others.
    """
    while context.sentinels and time.monotonic() < deadline:
        ready = multiprocessing.connection.wait(
            [*readers, *context.sentinels], timeout=max(deadline - time.monotonic(), 0)
        )
        for reader in [r for r in readers if r in ready]:
            _receive(reader, readers, outcomes)
        context.join(timeout=0)  # reaps the ranks that exited; raises if one failed


def _receive(
    reader: Connection,
    readers: dict[Connection, int],
    outcomes: dict[int, _Outcome],
) -> None:
    """Read one rank's outcome, if it sent one (its pipe ends when the rank does)."""
    rank = readers.pop(reader)
    with contextlib.suppress(EOFError):  # it ended without a word: killed, os._exit
        outcomes[rank] = pickle.loads(reader.recv_bytes())
    reader.close()


def _receive_ready(
    readers: dict[Connection, int],
    outcomes: dict[int, _Outcome],
) -> None:
    """Read every outcome already sent (once the ranks have exited, none blocks)."""
    for reader in list(readers):
        if reader.poll():
            _receive(reader, readers, outcomes)


def _rank_error(
    outcomes: dict[int, _Outcome],
    world_size: int,
    error: ProcessException | None,
) -> RuntimeError:
    """The error for the first rank that failed, with its traceback.

    `_JoinError` when that rank failed while joining the group (nothing of ``fn`` ran).
    """
    failed = {rank: (o.when, o.value) for rank, o in outcomes.items() if not o.ok}
    if error is not None and error.error_index not in failed:
        # The first rank to exit with an error sent nothing: killed by a signal, a
        # crash in C, os._exit. The others' errors are about the rank that vanished.
        first, cause = error.error_index, f" {error.msg}"
    elif failed:
        first = min(failed, key=lambda rank: failed[rank][0])
        cause = f"\n{failed[first][1]}"
    else:
        missing = sorted(set(range(world_size)) - set(outcomes))
        return RuntimeError(f"ranks {missing} of {world_size} exited without returning (os._exit?)")
    others = sorted(set(failed) - {first})
    after = f"\n(after it, ranks {others} failed too)" if others else ""
    kind = _JoinError if first in failed and not outcomes[first].joined else RuntimeError
    return kind(f"rank {first} of {world_size} failed:{cause}{after}")


def _stop(processes: list[Any]) -> None:
    """Stop the ranks still running (after a timeout, or an interrupt here) and reap all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():  # stuck in C, where SIGTERM can wait
            process.kill()
            process.join()


def _rank(
    rank: int,
    world_size: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    port: Synchronized[int],
    listening: Event,
    timeout: float,
    threads: int,
    writers: list[Connection],
) -> None:
    """One rank: join the group, run ``fn``, send the outcome back, leave the group."""
    torch.set_num_threads(threads)  # before any operation: see the module docstring
    results = writers[rank]
    for other in writers:
        if other is not results:  # so that a rank's pipe ends when that rank does
            other.close()
    wait = datetime.timedelta(seconds=timeout)
    joined = False
    try:
        if not listening.wait(timeout):
            raise TimeoutError(f"the launcher's store did not start within {timeout} s")
        store = _TCPStore(_HOST, port.value, is_master=False, timeout=wait)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=wait)
        # No rank runs fn until all have joined: a failure to join then leaves nothing
        # of fn's done, and the launcher may start again (see the module docstring).
        # The barrier is the store's, which does not depend on gloo having connected.
        if store.add("attention/joined", 1) == world_size:
            store.set("attention/all-joined", "1")
        store.wait(["attention/all-joined"])
        joined = True
        returned = fn(*args)
        # Pickled by value here: a tensor sent through torch.multiprocessing would be
        # shared memory, which this process, about to exit, could not keep serving.
        outcome = pickle.dumps(_Outcome(True, time.time(), returned, joined))
    except BaseException:
        # Sent before leaving the group: the ranks this one leaves waiting fail after
        # it, and their errors ("connection closed") are stamped later than the cause.
        failure = _Outcome(False, time.time(), traceback.format_exc(), joined)
        results.send_bytes(pickle.dumps(failure))
        raise  # torch.multiprocessing sees the failure too, and stops the other ranks
    else:
        results.send_bytes(outcome)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        results.close()

"""Measuring memory: the peak resident memory a call adds, each point in a fresh process.

For each point a fresh process is forked from a server process that has only imported
the libraries (`multiprocessing`'s ``forkserver``), so nothing allocated for an
earlier point is still around. The child runs the same call once at a small size
(loading code and starting threads), builds the inputs, resets the kernel's
high-water mark of its resident memory (``/proc/self/clear_refs``), makes the call,
and reports ``VmHWM - VmRSS before the call``: the most memory the call held at once
on top of its inputs, output and gradients included. Resident memory sees NumPy's
allocations as well as PyTorch's (the profiler sees only PyTorch's), and glibc is told
to give every block of 128 KiB or more back to the system when freed
(``MALLOC_MMAP_THRESHOLD_``), so a buffer freed earlier cannot hide a new one. Where
``clear_refs`` cannot be written, the growth of ``ru_maxrss`` is used instead.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch

from attention_bench.cases import Config, Point, make_step
from attention_bench.machine import proc_bytes


def _maxrss_bytes() -> int:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # Linux reports KiB


def _reset_peak_rss() -> bool:
    """Set the high-water mark VmHWM to the current resident size (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def peak_extra_memory(call: Callable[[], object]) -> dict[str, Any]:
    """The most resident memory ``call()`` adds at once to what the process holds before it.

    Returns ``{"peak_extra_bytes": ..., "memory_method": ...}``: ``VmHWM`` after resetting
    it (``clear_refs``) minus ``VmRSS`` before the call, or the growth of ``ru_maxrss``
    (an upper bound) where the high-water mark cannot be reset.
    """
    before = proc_bytes("/proc/self/status", "VmRSS")
    if before is not None and _reset_peak_rss():
        call()
        peak, method = proc_bytes("/proc/self/status", "VmHWM"), "VmHWM after clear_refs"
    else:
        before, method = _maxrss_bytes(), "ru_maxrss growth (an upper bound)"
        call()
        peak = _maxrss_bytes()
    assert peak is not None and before is not None
    return {"peak_extra_bytes": max(peak - before, 0), "memory_method": method}


def measure_peak_memory(point: Point, config: Config) -> dict[str, Any]:
    """Peak resident memory a call adds on top of its inputs; meant for a fresh process."""
    torch.set_num_threads(config.threads)
    warm_up = replace(point, n=min(point.n, 128))
    make_step(warm_up, config)()  # code pages, thread pool, BLAS buffers: not the call's
    return peak_extra_memory(make_step(point, config))


def _memory_child(connection: Any, point: Point, config: Config) -> None:
    try:
        connection.send(measure_peak_memory(point, config))
    except BaseException as error:  # reported to the parent, which records it
        connection.send({"memory_error": f"{type(error).__name__}: {error}"})
    finally:
        connection.close()


@contextlib.contextmanager
def freed_memory_returned() -> Iterator[None]:
    """Processes started inside give every block of 128 KiB or more back when it is freed.

    glibc reads ``MALLOC_MMAP_THRESHOLD_`` when a process starts: blocks of that size or
    more are then mmapped and returned on free, so the resident size follows what is
    allocated, and a buffer freed earlier cannot hide a new one.
    """
    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved


@contextlib.contextmanager
def fresh_processes() -> Iterator[Any]:
    """A forkserver context whose children start from freshly imported libraries."""
    context = multiprocessing.get_context("forkserver")
    # The first backward pass imports symbolic_shapes (over a second): do it once, here.
    backward_import = "torch.fx.experimental.symbolic_shapes"
    context.set_forkserver_preload([__name__, "numpy", "torch", "attention", backward_import])
    with freed_memory_returned():  # read by glibc when the server starts
        yield context


def peak_memory_in_fresh_process(context: Any, point: Point, config: Config) -> dict[str, Any]:
    """Run `measure_peak_memory` in a new process and return its result."""
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_memory_child, args=(sender, point, config))
    process.start()
    sender.close()
    try:
        result: dict[str, Any] = receiver.recv()
    except EOFError:  # killed, e.g. by the out-of-memory killer
        result = {"memory_error": f"the process died (exit code {process.exitcode})"}
    process.join()
    if process.exitcode not in (0, None) and "memory_error" not in result:
        result["memory_error"] = f"exit code {process.exitcode}"
    return result

"""Run many small Python programs fast, each as if in a fresh interpreter.

A reader copies one code block and runs it in a new ``python``. Doing exactly that for
~200 blocks costs ~1.5 s each, almost all of it ``import torch``. So one *server*
process imports the heavy modules once (torch, numpy, matplotlib with Agg, attention)
and then ``os.fork()``\\ s one child per program. The child runs the program in a brand
new ``__main__`` module, so nothing any earlier program defined is visible: a block
that forgets ``import torch`` still fails with ``NameError``. The only thing shared is
``sys.modules``, a cache of modules whose import had no effect on the program's
namespace, so a program behaves as it would in a fresh interpreter, only sooner. For the
same reason the server also imports, before forking, every module the programs import
themselves (``torch.utils.flop_counter``...): each child then finds it cached.

Why a separate server and not a fork of the pytest process itself: the server must
never have *run* torch code before forking. Once torch's OpenMP thread pool exists,
a forked child that uses it can hang; pytest's process also holds threads (the test
HTTP server, Playwright) that a fork would copy half-alive. The server only imports.

A program is a list of chunks run one after the other in the same namespace, with each
chunk's standard output captured separately: one chunk for a standalone block, several
for blocks that deliberately share state (markdown-exec's ``session="..."``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from tests.conftest import ROOT

# Imported by the server before any fork: only the cost of importing, never state.
# torch.distributed.tensor is what torch.testing.assert_close imports on its first call
# (and sympy with it): about a second per program otherwise. The modules the programs
# import themselves are added to these (see _modules_imported_by).
PRELOAD = ("torch", "numpy", "matplotlib.pyplot", "attention", "torch.distributed.tensor")


@dataclass(frozen=True)
class Result:
    """What one program did: the output of each chunk that ran, and how it ended."""

    outputs: list[str]  # stdout of each chunk that ran (a failing chunk's is included)
    error: str | None  # the traceback (or how the process died); None on success

    @property
    def ok(self) -> bool:
        return self.error is None


# Results by program text, for the whole test session: a block that two tests run (the
# built-page snippets and the executed-output comparison) runs once.
_CACHE: dict[tuple[object, ...], Result] = {}


def run_programs(
    programs: list[list[str]],
    *,
    names: list[str] | None = None,
    jobs: int | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> list[Result]:
    """Run each program (a list of source chunks) in its own fresh namespace.

    Args:
        programs: one list of chunks per program; chunks of a program share a namespace.
        names: the file name each program's tracebacks show (default ``<program N>``).
        jobs: programs run at once (default: the number of CPUs).
        timeout: seconds one program may take before it is killed.
        env: variables set for the server, and so for every program, besides the
            caller's (``ATEN_CPU_CAPABILITY``: read when torch is imported).

    Returns:
        One :class:`Result` per program, in order. A program run before in this
        process (same chunks, up to blank lines around them) is not run again.
    """
    names = names or [f"<program {i}>" for i in range(len(programs))]
    extra = tuple(sorted((env or {}).items()))
    keys = [(extra, *(chunk.strip("\n").rstrip() + "\n" for chunk in p)) for p in programs]
    todo = list(dict.fromkeys(key for key in keys if key not in _CACHE))
    if todo:
        # A program listed twice runs once, under the name it was first listed with.
        first_name = dict(zip(reversed(keys), reversed(names), strict=True))
        request = {
            "programs": [list(key[1:]) for key in todo],
            "names": [first_name[key] for key in todo],
            "jobs": jobs or os.cpu_count() or 1,
            "timeout": timeout,
        }
        # Headless and like a fresh interpreter on CI: Agg, whatever the caller's backend.
        server_env = {**os.environ, "MPLBACKEND": "Agg", **dict(extra)}
        completed = subprocess.run(
            [sys.executable, "-m", "tests.docs._forkrun"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=server_env,
            timeout=timeout * len(todo) + 120,
        )
        if completed.returncode != 0:
            raise RuntimeError(f"fork server failed:\n{completed.stderr}")
        for key, result in zip(todo, json.loads(completed.stdout), strict=True):
            _CACHE[key] = Result(**result)
    return [_CACHE[key] for key in keys]


def _child(chunks: list[str], name: str, workdir: str, result_path: str, timeout: float) -> None:
    """Run one program in this forked process, write its Result as JSON, and exit."""
    import builtins
    import contextlib
    import io
    import signal
    import traceback
    import types

    signal.alarm(max(1, int(timeout)))  # default action: the process dies, reported below
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main  # pickle, dataclasses and the like look it up here
    sys.argv = [name]
    # As `python program.py` run in an empty directory: files a program writes land
    # there, and the server's own directory (tests/docs) is not importable.
    os.chdir(workdir)
    sys.path[0] = workdir
    outputs: list[str] = []
    error = None
    for chunk in chunks:
        buffer = io.StringIO()
        outputs.append("")
        try:
            code = compile(chunk, name, "exec")
            with contextlib.redirect_stdout(buffer):
                exec(code, main.__dict__)
        except BaseException as exception:
            # From the program's frames on: the one of _child running it is noise.
            trace = exception.__traceback__
            error = "".join(
                traceback.format_exception(exception, value=exception, tb=trace and trace.tb_next)
            )
        outputs[-1] = buffer.getvalue()
        if error is not None:
            break
    with open(result_path, "w", encoding="utf-8") as file:
        json.dump({"outputs": outputs, "error": error}, file)
    os._exit(0)  # no atexit handlers, no flushing of buffers the parent owns


def _modules_imported_by(programs: list[list[str]]) -> list[str]:
    """Absolute module names in the programs' ``import`` statements, in order."""
    import ast

    modules: dict[str, None] = {}
    for chunk in (chunk for program in programs for chunk in program):
        try:
            tree = ast.parse(chunk)
        except SyntaxError:
            continue  # reported when the program runs
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(dict.fromkeys(alias.name for alias in node.names))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules[node.module] = None
    return list(modules)


def _serve() -> None:
    import importlib
    import signal

    request = json.loads(sys.stdin.read())
    programs, names = request["programs"], request["names"]
    # The reply goes on a private copy of stdout; fd 1 is pointed at stderr so that a
    # program writing to the real stdout (C code, os.write) cannot corrupt the reply.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for module in (*PRELOAD, *_modules_imported_by(programs)):
        try:
            importlib.import_module(module)
        except Exception:  # the program that imports it reports the error
            continue
    timeout, jobs = request["timeout"], request["jobs"]
    results: list[dict[str, object] | None] = [None] * len(programs)
    scratch = tempfile.mkdtemp(prefix="forkrun-")  # results and the programs' workdirs
    running: dict[int, int] = {}  # pid -> index of its program

    def collect() -> None:
        pid, status = os.wait()
        index = running.pop(pid)
        path = os.path.join(scratch, f"{index}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as file:
                results[index] = json.load(file)
            return
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
            died = f"timed out after {timeout} s"
        else:
            died = f"the process died (wait status {status})"
        results[index] = {"outputs": [], "error": f"{names[index]}: {died}"}

    # No program asserts on a timing (test_claims), so none needs the cores to itself.
    for index, chunks in enumerate(programs):
        while len(running) >= jobs:
            collect()
        sys.stdout.flush()
        sys.stderr.flush()
        workdir = os.path.join(scratch, f"{index}")
        os.mkdir(workdir)
        pid = os.fork()
        if pid == 0:
            try:
                _child(chunks, names[index], workdir, f"{workdir}.json", timeout)
            finally:
                os._exit(1)
        running[pid] = index
    while running:
        collect()
    shutil.rmtree(scratch, ignore_errors=True)
    json.dump(results, reply)
    reply.close()


if __name__ == "__main__":
    _serve()

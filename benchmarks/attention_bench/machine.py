"""The machine: CPU, caches, memory and versions, read from ``/proc`` and ``/sys``."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

import attention


def proc_bytes(path: str, key: str) -> int | None:
    """A size in bytes from a ``/proc`` file of ``key: value kB`` lines, or None."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    """CPU, caches, memory, and the versions of everything that sets the speed."""
    cpu_model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    caches: dict[str, dict[str, str]] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        with contextlib.suppress(OSError):
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text()
            name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind.strip(), "")
            caches[name] = {
                "size": (index / "size").read_text().strip(),
                "cpus": (index / "shared_cpu_list").read_text().strip(),  # sharing it
            }
    total = proc_bytes("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "caches": caches,
        "memory_gib": None if total is None else round(total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "attention": attention.__version__,
        "torch_threads": torch.get_num_threads(),
    }

"""Return a Jupyter kernel to the state a fresh one has, between two tutorials.

The build runs several tutorials in one kernel (``notebooks.py``): a fresh kernel and
``import torch`` cost ~3 s of CPU each. :func:`snapshot` records, right after the kernel
is set up, every piece of global state a tutorial can change and a later one could
notice; :func:`restore` puts it back (after ``%reset -f`` has emptied the namespace).
Imported modules stay imported: that is the point.
"""

from __future__ import annotations

import copy
import os
import sys
import warnings
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch

_saved: dict[str, Any] = {}


def snapshot(once: bool = False) -> None:
    """Record the state of a freshly set-up kernel (``once``: unless already recorded,
    as in a ``mkdocs serve`` rebuild, after blocks have run).
    """
    if once and _saved:
        return
    _saved.update(
        seed=torch.initial_seed(),  # torch's start-up seed: unseeded draws match a fresh run
        dtype=torch.get_default_dtype(),
        threads=torch.get_num_threads(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        anomaly=torch.is_anomaly_enabled(),
        torch_print=copy.copy(vars(torch._tensor_str.PRINT_OPTS)),
        numpy_print=np.get_printoptions(),
        numpy_errors=np.geterr(),
        rc=mpl.rcParams.copy(),
        filters=list(warnings.filters),
        path=list(sys.path),
        cwd=os.getcwd(),
        environ=dict(os.environ),
    )


def restore() -> None:
    """Put back what :func:`snapshot` recorded."""
    restore_computation()
    sys.path[:] = _saved["path"]
    os.chdir(_saved["cwd"])
    os.environ.clear()
    os.environ.update(_saved["environ"])


def restore_computation() -> None:
    """Put back what decides what code computes and prints: random state, defaults,
    print options, figures, style, warnings. Not the process's paths, directory or
    environment: the site's build runs each executed block after this, in its own
    process, and needs those as they are.
    """
    if not _saved:
        raise RuntimeError("kernel_state.restore() before snapshot()")
    plt.close("all")
    torch.manual_seed(_saved["seed"])
    torch.set_default_dtype(_saved["dtype"])
    torch.set_num_threads(_saved["threads"])
    torch.set_grad_enabled(True)
    torch.use_deterministic_algorithms(_saved["deterministic"])
    torch.autograd.set_detect_anomaly(_saved["anomaly"])
    vars(torch._tensor_str.PRINT_OPTS).update(_saved["torch_print"])
    np.set_printoptions(**_saved["numpy_print"])
    np.seterr(**_saved["numpy_errors"])
    with warnings.catch_warnings():  # some rcParams warn when merely set
        warnings.simplefilter("ignore")
        mpl.rcParams.update(_saved["rc"])
    warnings.filters[:] = _saved["filters"]

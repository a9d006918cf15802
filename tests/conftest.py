"""What every test module shares: the repository's paths, and the session's setup.

Test modules import the paths (``from tests.conftest import ROOT``) and use the
fixtures by name. The fixtures of one part of the suite live beside it:
``tests/docs/conftest.py`` builds and serves the site.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = DOCS / "tutorials"
BUILD = ROOT / "build"  # what the tests build and write (ignored by git)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Run a module's tests on one intra-op thread (``pytestmark =
    pytest.mark.usefixtures("one_thread")``), and give the count back after.

    For tests of many small operations: on a busy 2-core machine each one waits for both
    threads to be scheduled (measured on the tiled loops: 50x slower than one thread).
    Only for tests whose results do not depend on the thread count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

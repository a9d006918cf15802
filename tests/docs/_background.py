"""The site's build and both browser walks, in a process of their own, beside the suite.

Most of the suite is one thread of Python at a time: a torch test, then the next. The
site's build and the two browser walks (``_walk.py``, ``_phone.py``) are most of the
suite's time, and they need none of it: they need the site. Run one after the other,
the two cores of the machine the suite was written for were busy 0.85 of the time on
average (a fresh clone's ``make test``: 11.4 min of CPU in 13.5 min). So when the
session collects a test that needs the site, ``conftest.py`` starts this module as a
process of its own at once (:class:`Background`), and orders the suite so that every
test that needs neither the site nor a walk runs first, while it works:

1. **build**: ``mkdocs build --strict`` exactly as ``make docs`` does (the environment is
   ``conftest.build_env``), its result written to ``build.json`` as soon as it ends, so
   that the tests that need only the site start before the walks are done;
2. **walks**: the site served on 127.0.0.1, one Chromium, then the desktop walk (light
   and dark side by side) and the phone walk (JavaScript on and off side by side), each
   only if a collected test asks for it, their records pickled to ``walks.pickle``.

The fixtures (``built_site``, ``site_walk``, ``phone_walk``) wait for the file they need.
Nothing is asserted here: a failed build or walk is written down, and the fixture that
reads it fails the tests that needed it, with the build's output or the walk's traceback.

Run by hand: ``python -m tests.docs._background OUT SITE [--prebuilt] [desktop] [phone]``.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

BUILD_RESULT = "build.json"
WALKS_RESULT = "walks.pickle"
# A build or walk that takes this long is stuck; the waiting fixture fails instead of
# hanging the session (the walks took 6 min on an idle machine, 14 on a loaded one).
BUILD_TIMEOUT_S = 900
WALKS_TIMEOUT_S = 2400


def build(site: Path, env: dict[str, str]) -> dict[str, Any]:
    """``mkdocs build --strict`` into ``site``; what the ``built_site`` fixture reports."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    return {
        "returncode": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "seconds": time.perf_counter() - start,
    }


def walks(site: Path, desktop: bool, phone: bool) -> dict[str, Any]:
    """The walks the session asked for, on ``site`` served here, in one Chromium."""
    from playwright.sync_api import sync_playwright

    from tests.docs._phone import walk_phones
    from tests.docs._walk import walk_site
    from tests.docs.conftest import CHROMIUM_ARGS, chromium_executable, serve

    records: dict[str, Any] = {}
    with serve(site) as site_url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        try:
            if desktop:
                records["desktop"] = walk_site(browser, site, site_url)
            if phone:
                records["phone"] = walk_phones(browser, site, site_url)
        finally:
            browser.close()
    return records


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a reader polling for it never sees half."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)


def main(argv: list[str]) -> int:
    out, site, wanted = Path(argv[0]), Path(argv[1]), set(argv[2:])
    out.mkdir(parents=True, exist_ok=True)
    if "--prebuilt" not in wanted:
        result = build(site, dict(os.environ))
        _write(out / BUILD_RESULT, json.dumps(result).encode())
        if result["returncode"] != 0:
            return 1
    if wanted:
        try:
            records = walks(site, "desktop" in wanted, "phone" in wanted)
        except Exception:  # the fixture that waits fails with this traceback
            records = {"error": traceback.format_exc()}
        _write(out / WALKS_RESULT, pickle.dumps(records))
    return 0


class Background:
    """This module, started as a process of its own, and the waits for its results."""

    def __init__(self, out: Path, site: Path, env: dict[str, str], options: list[str]) -> None:
        self.out, self.site = out, site
        for name in (BUILD_RESULT, WALKS_RESULT):
            (out / name).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.log = (out / "background.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.docs._background", str(out), str(site), *options],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_for(self, name: str, timeout: float) -> Path:
        """The result file ``name``, once written; raises if the process ended or timed
        out without writing it."""
        path = self.out / name
        deadline = time.monotonic() + timeout
        while not path.is_file():
            if self.process.poll() is not None and not path.is_file():
                self.log.flush()
                log = (self.out / "background.log").read_text()[-4000:]
                raise RuntimeError(
                    f"the background build and walks ended (exit {self.process.returncode}) "
                    f"without writing {name}:\n{log}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {name} from the background build after {timeout} s")
            time.sleep(0.5)
        return path

    def build_result(self) -> dict[str, Any]:
        path = self.wait_for(BUILD_RESULT, BUILD_TIMEOUT_S)
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    def walks_result(self) -> dict[str, Any]:
        timeout = BUILD_TIMEOUT_S + WALKS_TIMEOUT_S
        records: dict[str, Any] = pickle.loads(self.wait_for(WALKS_RESULT, timeout).read_bytes())
        return records

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A reader's install, tested where the reader is: a fresh venv outside the clone.

A reader of the hosted site has no repository. The site's build offers the wheel and the
sdist of its own commit under ``dist/`` and generates every install line from the wheel's
file name and ``site_url`` (``docs_build/dist.py``). This module installs the package the
way that reader does and runs the site's code with it:

1. the install lines are read from the built pages (the Install page, the home page, the
   Hugging Face how-to, the integrations reference) and the downloaded notebooks' first
   cells, and must all be the same two lines, with and without ``[hf]``;
2. the built site is served on 127.0.0.1, and the ``[hf]`` line is run, changed only in
   its host (the test build's ``site_url`` is ``make serve``'s address), in a venv made
   in a temporary folder, with the working directory outside the clone;
3. from there run: the README's example; ``attention.__version__``, which must equal the
   version in the pages' footer; the first Python block of several pages as a reader
   copies it, each in a fresh interpreter; and tutorial 01, downloaded from its page, as
   a script;
4. ``docs_build`` and ``attention_bench`` must not be importable there, every module of
   the package must import, and its data files must be there.

pip resolves the dependencies with ``constraints.txt`` as ``PIP_CONSTRAINT`` (the
environment, not the line): the versions this project is tested with, and torch's CPU
build from the machine's wheel folder, not the newest CUDA build. With
``ATTENTION_RELEASE_DIST=folder`` (the release workflow, ``make reader-test``), the site's
wheel must also equal, file by file, the wheel in that folder: the one to be published.
"""

from __future__ import annotations

import concurrent.futures
import html
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from docs_build import dist
from tests.conftest import ROOT
from tests.docs._codeblocks import built_code_blocks, in_api_source

pytestmark = pytest.mark.site

# The test build's site_url: mkdocs.yml's default, make serve's address.
BUILT_FOR = "http://127.0.0.1:8000/"
# Pages whose first Python (or >>> console) block a reader copies; the Hugging Face
# how-to needs [hf].
SAMPLED_PAGES = (
    "index.html",
    "install/index.html",
    "concepts/masks/index.html",
    "how-to/run-a-hugging-face-model/index.html",
    "how-to/kv-cache-decoder-loop/index.html",
    "reference/functional/index.html",
)
TUTORIAL = "01_attention_from_scratch"
LINE = re.compile(r'pip install "attention-by-running(?:\[hf\])? @ [^"\s]+"')
RUN_TIMEOUT_S = 300


def _bash_lines(page: Path) -> list[str]:
    """The ``pip install`` lines of a page's shell blocks, as the copy button yields them."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r'language-bash highlight"><pre>(.*?)</pre>', text, re.DOTALL)
    found = []
    for block in blocks:
        plain = html.unescape(re.sub(r"<[^>]+>", "", block))
        found += LINE.findall(plain)
    return found


def _footer_version(page: Path) -> str:
    footer = re.search(r'md-copyright__highlight">(.*?)</div>', page.read_text(), re.DOTALL)
    assert footer, f"{page}: no footer sentence"
    version = re.search(r"attention-by-running (\S+) \(", html.unescape(footer[1]))
    assert version, footer[1]
    return version[1]


@dataclass
class Reader:
    python: Path  # the venv's interpreter
    workdir: Path  # outside the clone
    line: str  # the [hf] line as the site shows it
    tested: str  # the line that ran: the same, its host the served one
    site_url: str

    def run(self, code: str, name: str) -> subprocess.CompletedProcess[str]:
        script = self.workdir / f"{name}.py"
        script.write_text(code, encoding="utf-8")
        return self.run_file(script)

    def run_file(self, script: Path) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env |= {"MPLBACKEND": "Agg", "PYTHONNOUSERSITE": "1"}
        return subprocess.run(
            [str(self.python), str(script)],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )


def _site_lines(site: Path) -> dict[str, list[str]]:
    pages = {
        "install/index.html": 2,
        "index.html": 1,
        "how-to/run-a-hugging-face-model/index.html": 1,
        "reference/integrations/index.html": 1,
    }
    found = {}
    for page, expected in pages.items():
        lines = _bash_lines(site / page)
        assert len(lines) == expected, f"{page}: {lines}"
        found[page] = lines
    for stem in (TUTORIAL, "15_hugging_face_model"):
        notebook = json.loads((site / "tutorials" / stem / f"{stem}.ipynb").read_text())
        first = "".join(notebook["cells"][0]["source"])
        found[f"{stem}.ipynb"] = LINE.findall(first)
    return found


@pytest.fixture(scope="module")
def reader(built_site: Path, site_url: str, tmp_path_factory: pytest.TempPathFactory) -> Reader:
    found = _site_lines(built_site)
    plain, with_hf = found["install/index.html"]
    assert "[hf]" in with_hf and "[hf]" not in plain
    expected = {
        "index.html": [plain],
        "how-to/run-a-hugging-face-model/index.html": [with_hf],
        "reference/integrations/index.html": [with_hf],
        f"{TUTORIAL}.ipynb": [plain],
        "15_hugging_face_model.ipynb": [with_hf],
    }
    for where, lines in expected.items():
        assert found[where] == lines, f"{where} shows {found[where]}, the Install page {lines}"
    wheel = next((built_site / dist.FOLDER).glob("*.whl"))
    assert with_hf == dist.install_line(BUILT_FOR, wheel.name, frozenset({"hf"}))

    home = tmp_path_factory.mktemp("reader")
    assert ROOT not in home.parents
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    python = home / "venv" / "bin" / "python"
    tested = with_hf.replace(BUILT_FOR, site_url)
    assert tested != with_hf or site_url == BUILT_FOR
    args = shlex.split(tested)
    assert args[:2] == ["pip", "install"]
    env = {**os.environ, "PIP_CONSTRAINT": str(ROOT / "constraints.txt")}
    env |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # --no-compile: pip would compile every module of torch and the rest on one core
    # (about 20 s); the runs below compile what they import, as they import it. What
    # resolves and installs is the line's own.
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", *args[2:]],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return Reader(python, home, with_hf, tested, site_url)


def _ok(result: subprocess.CompletedProcess[str], what: str) -> str:
    assert result.returncode == 0, f"{what} failed in the reader's venv:\n{result.stderr[-3000:]}"
    return result.stdout


def test_the_reader_gets_the_package_and_nothing_else(reader: Reader, built_site: Path) -> None:
    probe = """
import importlib, importlib.util, pkgutil
from importlib import resources
import attention
print(attention.__version__)
print(attention.__file__)
for name in ("docs_build", "attention_bench"):
    print(name, importlib.util.find_spec(name) is not None)
modules = [m.name for m in pkgutil.walk_packages(attention.__path__, "attention.")]
for name in modules:
    importlib.import_module(name)
print(len(modules))
for data in ("head_view.js", "head_view.css", "py.typed"):
    print(data, resources.files("attention").joinpath(data).is_file())
"""
    out = _ok(reader.run(probe, "probe"), "the import probe").split("\n")
    version, location = out[0], Path(out[1])
    assert version == _footer_version(built_site / "index.html")
    assert version in reader.line  # the wheel's file name carries it
    assert "site-packages" in location.parts and ROOT not in location.parents
    assert out[2:4] == ["docs_build False", "attention_bench False"]
    assert int(out[4]) >= 20  # every module imported, integrations.huggingface included
    assert out[5:8] == ["head_view.js True", "head_view.css True", "py.typed True"]


def test_the_site_and_readme_code_runs_in_the_reader_venv(reader: Reader, built_site: Path) -> None:
    readme = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert readme
    programs = {"README": readme[1]}
    for page in SAMPLED_PAGES:
        blocks = [
            block
            for block in built_code_blocks(built_site, built_site / page)
            if not in_api_source(block)  # excerpts, not programs
        ]
        assert blocks, f"{page} has no Python or console block to copy"
        programs[page] = blocks[0].copied
    tutorial_url = f"{reader.site_url}tutorials/{TUTORIAL}/{TUTORIAL}.py"
    with urllib.request.urlopen(tutorial_url, timeout=30) as response:  # the download button
        (reader.workdir / f"{TUTORIAL}.py").write_bytes(response.read())

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = {
            name: pool.submit(reader.run, code, f"block{n}")
            for n, (name, code) in enumerate(programs.items())
        }
        runs[TUTORIAL] = pool.submit(reader.run_file, reader.workdir / f"{TUTORIAL}.py")
        failures = [
            f"{name}:\n{run.result().stderr[-2000:]}"
            for name, run in runs.items()
            if run.result().returncode != 0
        ]
    assert not failures, "\n\n".join(failures)


def test_the_release_wheel_is_the_wheel_the_site_offers(built_site: Path) -> None:
    release = os.environ.get("ATTENTION_RELEASE_DIST")
    if not release:
        pytest.skip("ATTENTION_RELEASE_DIST is unset: no release is being checked")
    offered = next((built_site / dist.FOLDER).glob("*.whl"))
    published = next(Path(release).glob("*.whl"))
    assert offered.name == published.name
    assert dist.contents(offered) == dist.contents(published)

"""The distributions the site offers, and the install lines it generates for them.

The site's build makes the sdist and the wheel of its commit and puts them in ``dist/``;
every install line is generated from the wheel's name (``docs_build/dist.py``).
``test_reader_install`` installs them as a reader does; this module checks what a release
checks, and how the build fails.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from docs_build import BuildError, dist
from tests.conftest import ROOT
from tests.docs.conftest import TEST_REPO_URL

WHEEL = "attention_by_running-0.2.dev3+gabc1234-py3-none-any.whl"


def test_the_sites_distributions_pass_a_releases_checks(
    built_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The project URLs in the metadata come from the build's environment (setup.py): the
    # wheel built from the tree here must be built as the site's was.
    monkeypatch.setenv("REPO_URL", os.environ.get("REPO_URL", TEST_REPO_URL))
    folder = built_site / dist.FOLDER
    assert sorted(p.suffix for p in folder.iterdir()) == [".gz", ".whl"]  # one of each
    dists = dist.Distributions(next(folder.glob("*.whl")), next(folder.glob("*.tar.gz")))
    # twine check --strict, check-wheel-contents, the package alone, and the wheel built
    # from the tree equal to the wheel built from the sdist.
    assert dist.check(dists) == []
    names = set(dist.contents(dists.wheel))
    assert {"attention/py.typed", "attention/head_view.js", "attention/head_view.css"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_install_blocks_become_the_line_of_the_built_wheel(tmp_path: Path) -> None:
    dists = dist.Distributions(tmp_path / WHEEL, tmp_path / "x.tar.gz")
    for path in (dists.wheel, dists.sdist):
        path.write_bytes(b"x")
    page = (
        "Text\n\n```install\nattention-by-running[hf]\n```\n\n"
        "    ```install\n    attention-by-running\n    ```\n"  # inside an admonition
    )
    out = dist.install_blocks(page, "https://example.org/site/", dists)
    url = f"https://example.org/site/dist/{WHEEL}"
    assert f'```bash\npip install "attention-by-running[hf] @ {url}"\n```' in out
    assert f'    ```bash\n    pip install "attention-by-running @ {url}"\n    ```' in out
    table = dist.install_blocks("```dist-files\n```\n", "https://example.org/site/", dists)
    assert f"[`{WHEEL}`]({url})" in table and "SHA-256" in table


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("attention", "write the distribution's name"),
        ("attention-by-running==0.1", "write the distribution's name"),
        ("attention-by-running[docs]", "unknown extra ['docs']"),
        ("attention-by-running[", "is not a requirement"),
    ],
)
def test_an_install_block_for_anything_else_fails_the_build(body: str, message: str) -> None:
    dists = dist.Distributions(Path(WHEEL), Path("x.tar.gz"))
    with pytest.raises(BuildError, match=re.escape(message)):
        dist.install_blocks(f"```install\n{body}\n```\n", "/", dists)


def test_the_footer_says_whether_the_code_ran_on_a_release() -> None:
    dev = dist.executed_with("0.1.dev176+ge2e276c61.d20261128", "2.13.0+cpu", "3.11.7")
    assert "0.1.dev176+ge2e276c61.d20261128 (a development build of commit e2e276c61, with " in dev
    assert "uncommitted changes), PyTorch 2.13.0+cpu and Python 3.11.7." in dev
    clean = dist.executed_with("0.1.dev176+ge2e276c61", "2.13.0", "3.11.7")
    assert "of commit e2e276c61)" in clean
    assert "0.1.0 (a release)" in dist.executed_with("0.1.0", "2.13.0", "3.11.7")


def test_a_failed_build_fails_with_one_line_that_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "project"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[project\nname = 'x'\n")
    with pytest.raises(BuildError) as raised:
        dist.build(tmp_path / "out", root=broken)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("the package's wheel and sdist could not be built for the site: ")


def test_one_build_of_a_tree_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # setuptools writes into the tree it builds: two builds of one clone at once (the
    # suite's site build beside its timed-pages build) failed with "No such file or
    # directory". Each build holds the tree's lock while it runs.
    from filelock import FileLock, Timeout

    root, out = tmp_path / "tree", tmp_path / "out"
    root.mkdir()
    held = []

    def build_while_another_tries(command, **kwargs):  # type: ignore[no-untyped-def]
        try:
            with FileLock(root / "build" / "dist.lock", timeout=0):
                held.append(False)
        except Timeout:
            held.append(True)
        (out / "x-1-py3-none-any.whl").write_bytes(b"")
        (out / "x-1.tar.gz").write_bytes(b"")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(dist.subprocess, "run", build_while_another_tries)
    dist.build(out, root=root)
    assert held == [True]


def test_an_earlier_build_is_never_offered_beside_this_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "attention_by_running-0.0.1-py3-none-any.whl").write_bytes(b"old")
    with pytest.raises(BuildError, match="not empty"):
        dist.build(out)


def test_no_install_line_names_an_index_the_package_is_not_on() -> None:
    # Until the package is on PyPI, `pip install attention-by-running` cannot work: every
    # line names the wheel's URL (`name @ url`), generated at build.
    named = re.compile(r"""pip install\s+["']?attention-by-running""")
    by_url = re.compile(r"""^(\[[^\]]*\])?["']?\s*@""")  # [extras]" @ <url>, on any line

    def bare(line: str) -> bool:
        return any(not by_url.match(line[m.end() :]) for m in named.finditer(line))

    tracked = subprocess.run(
        ["git", "ls-files", "docs", "attention", "README.md", "docs_build", "overrides"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = [
        f"{path}:{n}: {line.strip()}"
        for path in tracked
        if path.endswith((".md", ".py", ".html", ".txt"))
        for n, line in enumerate((ROOT / path).read_text(encoding="utf-8").splitlines(), 1)
        if bare(line)
    ]
    assert not found, "\n".join(found)

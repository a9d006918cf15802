"""Lint and type checks run with the test suite, so CI enforces them too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_and_format_are_clean():
    lint = run("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run("ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_passes_on_the_package():
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("project", "top"),
    [(".", "attention"), ("docs_build", "docs_build"), ("benchmarks", "attention_bench")],
)
def test_every_package_folder_is_installed(project: str, top: str) -> None:
    """setuptools installs the packages it is told of, not their subfolders: a wheel
    without `attention.distributed` imports fine from a checkout and fails elsewhere.
    The reader's distribution (the root) lists the package alone; the site's build and
    the benchmark are distributions of their own."""
    import tomllib

    config = tomllib.loads((ROOT / project / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    where = ROOT / project / config.get("package-dir", {}).get(top, top)
    folders = {
        ".".join((top, *init.parent.relative_to(where).parts))
        for init in where.rglob("__init__.py")
        if "build" not in init.relative_to(where).parts  # setuptools' own scratch folder
    }
    assert folders and folders <= listed, f"not installed: {sorted(folders - listed)}"
    assert all(name.split(".")[0] == top for name in listed), listed


def editables() -> dict[str, set[str]]:
    """The distributions `make install` installs editable (the Makefile's ``EDITABLES``),
    by name, with the extras it asks for."""
    import shlex

    import tomllib

    makefile = (ROOT / "Makefile").read_text().splitlines()
    line = next(line for line in makefile if line.startswith("EDITABLES :="))
    found = {}
    for spec in shlex.split(line.split(":=", 1)[1]):
        if spec != "-e":
            path, _, extras = spec.partition("[")
            project = tomllib.loads((ROOT / path / "pyproject.toml").read_text())["project"]
            found[project["name"]] = set(extras.rstrip("]").split(",")) - {""}
    return found


def test_the_lock_holds_what_the_project_requires_and_nothing_else() -> None:
    """`make install` installs constraints.txt as it stands, without resolving it again
    (``--no-deps``), and ``pip check`` fails on a requirement it lacks. A distribution
    that nothing requires any more would stay in every new venv unseen: 10 did, after
    the build stopped using nbconvert."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    editable = editables()
    assert editable["attention-by-running"] == {"dev"}, editable  # guards the parsing
    required: dict[str, set[str]] = {}
    todo = list(editable.items())
    while todo:
        name, extras = todo.pop()
        known = required.setdefault(canonicalize_name(name), set())
        if known and extras <= known:
            continue
        known |= extras | {""}
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in known):
                todo.append((requirement.name, set(requirement.extras)))
    locked = {
        canonicalize_name(line.split("==")[0])
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert locked == set(required) - {canonicalize_name(n) for n in editable}, (
        f"locked, required by nothing: {sorted(locked - set(required))}; "
        f"required, not locked: {sorted(set(required) - locked - set(editable))} (make lock)"
    )

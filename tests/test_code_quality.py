"""Lint and type checks run with the test suite, so CI enforces them too."""

from __future__ import annotations

import subprocess
import sys

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


def test_every_package_folder_is_installed() -> None:
    """setuptools installs the packages it is told of, not their subfolders: a wheel
    without `attention.distributed` imports fine from a checkout and fails elsewhere."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for root in ("attention", "docs_build")
        for init in (ROOT / root).rglob("__init__.py")
    }
    assert folders <= listed, f"not installed: {sorted(folders - listed)}"

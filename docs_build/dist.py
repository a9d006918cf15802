"""Build step: the wheel and sdist of the commit being built, offered on the site.

A reader of the hosted site has no clone of the repository, and the package is not on
PyPI. So the site offers the distributions of the very commit its pages were executed
with, under ``dist/``, and every install line on the site is generated here from the real
file name and the site's address, never typed by hand:

- a fenced block ```` ```install ```` whose one line is the requirement
  (``attention-by-running`` or ``attention-by-running[hf]``) becomes a ``bash`` block with
  the ``pip install`` line that installs that wheel, and an empty ```` ```dist-files ````
  block the table of the files with their sizes and SHA-256 (:func:`install_blocks`);
- the notebooks readers download start with a cell that runs the same line
  (``docs_build.tutorials.install_cell``);
- the footer of every page names the package version and the torch version the code ran
  with (:func:`executed_with`).

The distributions are built without build isolation (no network at build time), by the
setuptools and setuptools-scm of the build's environment. The version comes from git: a
tag ``v1.2.3`` gives 1.2.3, any other commit a development version that names it.
``python -m docs_build.dist`` (``make dist``) builds them into ``dist/`` and runs the
checks a release runs (:func:`check`).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from docs_build import BuildError

ROOT = Path(__file__).resolve().parent.parent
DIST_NAME = "attention-by-running"
# The extras a reader may ask for on the site; each is declared in pyproject.toml.
READER_EXTRAS = frozenset({"hf"})
FOLDER = "dist"  # where the site offers them: <site_url>dist/<file>

_INSTALL_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```install[ \t]*\n(?P<body>.*?)\n(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
# An empty ```dist-files``` block: the table of the files in dist/.
_FILES_FENCE = re.compile(r"^```dist-files[ \t]*\n```[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Distributions:
    """The two files of one build, and the version they carry."""

    wheel: Path
    sdist: Path

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.wheel.name)[1])


def build(out: Path, root: Path = ROOT) -> Distributions:
    """Build the sdist, then the wheel from that sdist, into the empty folder ``out``.

    ``python -m build`` builds the wheel from the unpacked sdist, not from the tree: a file
    the sdist forgets is missing from the wheel too, and the suite sees it. Raises
    :class:`BuildError` with the build's own last line when it fails.
    """
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise BuildError(
            f"{out} is not empty: a stale distribution would be offered beside the new one"
        )
    result = _build_from(root, "--outdir", str(out))
    if result.returncode != 0:
        raise BuildError(
            f"the package's wheel and sdist could not be built for the site: {_why(result)}"
        )
    return _found(out)


def _build_from(root: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``python -m build --no-isolation`` of the tree ``root``, one at a time.

    setuptools writes the sdist's metadata into the tree itself (``*.egg-info``): two
    builds of one clone at once, say the test suite's two site builds or ``make serve``
    beside ``make docs``, remove each other's files, and one fails with "No such file or
    directory". The lock makes the second wait for the first (a few seconds).
    """
    (root / "build").mkdir(exist_ok=True)
    with FileLock(root / "build" / "dist.lock"):
        return subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", *options, str(root)],
            capture_output=True,
            text=True,
            cwd=root,
        )


def _why(result: subprocess.CompletedProcess[str]) -> str:
    """The line of a failed build that says why: its first error line, else its last."""
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines()]
    errors = [line for line in lines if line.lower().startswith("error")]
    last = next((line for line in reversed(lines) if line), f"exit status {result.returncode}")
    return errors[0] if errors else last


def _found(folder: Path) -> Distributions:
    wheels = sorted(folder.glob("*.whl"))
    sdists = sorted(folder.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        found = ", ".join(p.name for p in sorted(folder.iterdir())) or "nothing"
        raise BuildError(f"expected one wheel and one sdist in {folder}, found {found}")
    return Distributions(wheels[0], sdists[0])


def requirement(text: str) -> Requirement:
    """The requirement of an ``install`` block: this distribution, with reader extras."""
    try:
        wanted = Requirement(text.strip())
    except InvalidRequirement as error:
        raise BuildError(f"install block {text.strip()!r} is not a requirement: {error}") from None
    if canonicalize_name(wanted.name) != DIST_NAME or wanted.url or wanted.specifier:
        raise BuildError(
            f"install block {text.strip()!r}: write the distribution's name "
            f"({DIST_NAME}), with extras at most; the build adds the file"
        )
    if unknown := wanted.extras - READER_EXTRAS:
        raise BuildError(
            f"install block {text.strip()!r}: unknown extra {sorted(unknown)}; "
            f"known: {sorted(READER_EXTRAS)}"
        )
    return wanted


def wheel_url(site_url: str, wheel_name: str) -> str:
    return f"{site_url.rstrip('/')}/{FOLDER}/{wheel_name}"


def install_line(site_url: str, wheel_name: str, extras: frozenset[str] = frozenset()) -> str:
    """``pip install "attention-by-running[extras] @ <site>/dist/<wheel>"``.

    pip installs a wheel by URL, and the name with extras in front of it is what lets the
    extras resolve (a bare URL cannot carry them).
    """
    name = DIST_NAME + (f"[{','.join(sorted(extras))}]" if extras else "")
    return f'pip install "{name} @ {wheel_url(site_url, wheel_name)}"'


def install_blocks(markdown: str, site_url: str, dists: Distributions) -> str:
    """Each ```` ```install ```` block as the ``bash`` block of its ``pip install`` line,
    and a ```` ```dist-files ```` block as the table of the files offered."""

    def block(match: re.Match[str]) -> str:
        indent = match["indent"]
        extras = frozenset(requirement(match["body"]).extras)
        line = install_line(site_url, dists.wheel.name, extras)
        return f"{indent}```bash\n{indent}{line}\n{indent}```"

    markdown = _INSTALL_FENCE.sub(block, markdown)
    return _FILES_FENCE.sub(lambda _: files_table(site_url, dists), markdown)


def files_table(site_url: str, dists: Distributions) -> str:
    """The files as a Markdown table. Their links are absolute, like the install line's:
    MkDocs checks relative links against the pages, and these are not pages."""
    rows = ["| file | size | SHA-256 |", "|---|---|---|"]
    for path in (dists.wheel, dists.sdist):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        size = f"{path.stat().st_size / 1024:,.0f} KiB"
        url = f"{site_url.rstrip('/')}/{FOLDER}/{path.name}"
        rows.append(f"| [`{path.name}`]({url}) | {size} | `{digest}` |")
    return "\n".join(rows)


def executed_with(version: str, torch_version: str, python_version: str) -> str:
    """The footer's sentence: what the pages' code ran with, and whether it is a release."""
    parsed = Version(version)
    if parsed.is_devrelease or parsed.local:
        # setuptools-scm's local part: g<commit>, then d<date> if the tree had changes.
        local = (parsed.local or "").split(".")
        commit = next((part[1:] for part in local if part[:1] == "g"), None)
        of = f"commit {commit[:9]}" if commit else "an untagged commit"
        dirty = any(part[:1] == "d" and part[1:].isdigit() for part in local)
        status = f"a development build of {of}{', with uncommitted changes' if dirty else ''}"
    else:
        status = "a release"
    return (
        f"The code on these pages ran with attention-by-running {version} ({status}), "
        f"PyTorch {torch_version} and Python {python_version}."
    )


# --- the checks of a release ------------------------------------------------------------


def contents(wheel: Path) -> dict[str, str]:
    """A wheel's files and their SHA-256, RECORD aside (it lists these same hashes)."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith(".dist-info/RECORD")
        }


def check(dists: Distributions, root: Path = ROOT) -> list[str]:
    """What a release checks before it publishes; an empty list when all pass.

    - ``twine check --strict``: the metadata PyPI will render (README included);
    - ``check-wheel-contents``: no stray, duplicate or empty files in the wheel;
    - the wheel holds the package and nothing else (no ``docs_build``, no benchmark);
    - the wheel built from the tree equals the wheel built from the sdist, file by file.
    """
    problems: list[str] = []
    for tool in (["twine", "check", "--strict"], ["check_wheel_contents"]):
        files = [dists.wheel] if tool[0] == "check_wheel_contents" else [dists.wheel, dists.sdist]
        module = "twine" if tool[0] == "twine" else "check_wheel_contents"
        result = subprocess.run(
            [sys.executable, "-m", module, *tool[1:], *map(str, files)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            problems.append(f"{' '.join(tool)}: {(result.stdout + result.stderr).strip()}")
    tops = {name.split("/")[0] for name in contents(dists.wheel)}
    stray = sorted(t for t in tops if t != "attention" and not t.endswith(".dist-info"))
    if stray:
        problems.append(f"the wheel holds more than the package: {stray}")
    with tempfile.TemporaryDirectory() as tmp:
        from_tree = Path(tmp)
        result = _build_from(root, "--wheel", "--outdir", tmp)
        if result.returncode != 0:
            problems.append(f"the wheel could not be built from the tree: {_why(result)}")
        else:
            tree_wheel = next(from_tree.glob("*.whl"))
            if tree_wheel.name != dists.wheel.name:
                problems.append(
                    f"wheel names: {tree_wheel.name} (tree), {dists.wheel.name} (sdist)"
                )
            a, b = contents(tree_wheel), contents(dists.wheel)
            if differ := sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n)):
                problems.append(f"the wheels from the tree and from the sdist differ in {differ}")
    with tarfile.open(dists.sdist) as sdist:
        if not any(
            name.endswith("/PKG-INFO") and name.count("/") == 1 for name in sdist.getnames()
        ):
            problems.append("the sdist has no PKG-INFO at its top")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m docs_build.dist",
        description="Build the sdist and the wheel (from the sdist) and run a release's checks.",
    )
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    args = parser.parse_args(argv)
    shutil.rmtree(args.outdir, ignore_errors=True)  # never leave an older version beside
    try:
        dists = build(args.outdir)
    except BuildError as error:
        print(error, file=sys.stderr)
        return 1
    problems = check(dists)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{dists.sdist.name}\n{dists.wheel.name}\nall checks passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare two builds of the site page by page: what a change to the build changed.

    python scripts/compare_sites.py OLD_SITE NEW_SITE [--show N]

Lists every file only in one build, then every HTML page whose markup differs, with the
first ``N`` differing lines of each (a page is split at tags, so a diff line is one
element, not a whole minified line; whitespace between tags is ignored). Non-HTML files
are compared byte for byte.

Two builds of the same commit differ too: the pages that time code print what they
measured, and "Last update" falls back to the build date for uncommitted files. Run it
on two builds of the old commit first to see that noise, then on old against new.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

TAG_BREAK = re.compile(r"(?<=>)(?=<)")


def _lines(path: Path) -> list[str]:
    """The page split at tags, each piece stripped, blank ones dropped: indentation
    between tags (which templates change freely) is not a difference a reader sees."""
    text = TAG_BREAK.sub("\n", path.read_text(encoding="utf-8", errors="replace"))
    return [line.strip() for line in text.splitlines() if line.strip()]


def compare(old: Path, new: Path, show: int) -> int:
    """Print the differences; return how many files differ or exist in one build only."""
    old_files = {p.relative_to(old) for p in old.rglob("*") if p.is_file()}
    new_files = {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    differing = 0
    for label, only in (
        ("only in old", old_files - new_files),
        ("only in new", new_files - old_files),
    ):
        for path in sorted(only):
            print(f"{label}: {path}")
            differing += 1
    same = 0
    for path in sorted(old_files & new_files):
        a, b = old / path, new / path
        if a.read_bytes() == b.read_bytes():
            same += 1
            continue
        differing += 1
        if path.suffix != ".html":
            print(f"differs: {path} ({a.stat().st_size} -> {b.stat().st_size} bytes)")
            continue
        diff = [
            line
            for line in difflib.unified_diff(_lines(a), _lines(b), n=0, lineterm="")
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        if not diff:
            same += 1  # whitespace between tags only
            differing -= 1
            continue
        print(f"differs: {path} ({len(diff)} lines)")
        for line in diff[:show]:
            print(f"    {line[:200]}")
    print(f"{same} files identical, {differing} differ or exist in one build only")
    return differing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--show", type=int, default=6, help="differing lines shown per page")
    args = parser.parse_args()
    sys.exit(1 if compare(args.old, args.new, args.show) else 0)


if __name__ == "__main__":
    main()

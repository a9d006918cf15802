"""Lighthouse scores of the built site, mobile profile: one page of each kind and the heaviest.

Usage (``make audit`` builds the site first and installs Lighthouse)::

    python scripts/audit.py [--site site] [--out build/audit]

It builds nothing: it serves an already built ``site/`` on 127.0.0.1, runs the pinned
Lighthouse from ``scripts/audit/node_modules`` against Debian's chromium on each page,
keeps every JSON report under ``build/audit/`` and prints the four category scores per
page.

The pages: one of each kind (home, a tutorial, a concept page, an API page) and the
heaviest pages, chosen from the build, not by hand: the ``--heaviest`` pages (6 by
default) with the most elements and the ``--heaviest`` with the most bytes (gzip), since
style and layout grow with the first and the simulated network's time with the second.
``--every-page`` audits every page instead (about 15 s a page).

It exits non-zero when Lighthouse cannot produce a report, and when a page's
performance is below ``--min-performance`` (90). That is a measurement of time, so it is
not part of ``make test`` (which never asserts on a clock) but of ``make audit``, run on
an idle machine: on a busy one, performance moves by several points from run to run.

The local server imitates what GitHub Pages sends (gzip for text, a ten-minute cache
lifetime), so the transfer sizes that Lighthouse's simulated mobile network charges
for are the ones readers download, not the uncompressed bytes a bare
``http.server`` would send. Served uncompressed, the heaviest page (concepts/why-scale,
461 KB of HTML) scores about 69 instead of 96: its first paint waits for 2.5 MB on the
simulated 1.6 Mbit/s link (4.2 s). ``mkdocs serve`` serves uncompressed; the hosted site
does not.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIGHTHOUSE = ROOT / "scripts" / "audit" / "node_modules" / "lighthouse" / "cli" / "index.js"

# Home, one tutorial, one concept page and one API page: one of each kind of page.
PAGES = {
    "home": "",
    "tutorial": "tutorials/01_attention_from_scratch/",
    "concept": "concepts/scaled-dot-product-attention/",
    "api": "reference/functional/",
}
CATEGORIES = ("performance", "accessibility", "best-practices", "seo")

# Headless as root with no network (docs/TOOLCHAIN facts): nothing that phones home.
CHROME_FLAGS = (
    "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-quic "
    "--no-first-run --disable-background-networking --disable-component-update "
    "--disable-sync --disable-extensions"
)
# A page of this site loads in well under a second locally; a run that takes minutes
# is stuck (e.g. waiting for a network that is not there) and must fail, not hang.
MAX_WAIT_FOR_LOAD_MS = 45_000
RUN_TIMEOUT_S = 240

COMPRESSIBLE = {".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".map", ".py"}


class PagesLikeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files as GitHub Pages serves them: gzip for text and ``max-age=600``."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def send_head(self):  # type: ignore[no-untyped-def]
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            if not urllib.parse.urlsplit(self.path).path.endswith("/"):
                return super().send_head()  # the base class redirects "dir" to "dir/"
            path = path / "index.html"
        accepts_gzip = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts_gzip and path.suffix in COMPRESSIBLE and path.is_file()):
            return super().send_head()
        body = gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(PagesLikeHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def find_chrome() -> str:
    chrome = os.environ.get("CHROME_PATH") or next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    if not chrome:
        sys.exit("chromium is missing: run `make browser`, or set CHROME_PATH")
    return chrome


def lighthouse(url: str, report: Path, chrome: str) -> dict[str, int]:
    """Run Lighthouse on one URL, keep its JSON report, return the category scores."""
    # A fresh profile per run: nothing cached from a previous page or run.
    with tempfile.TemporaryDirectory(prefix="lighthouse-profile-") as profile:
        command = [
            "node",
            str(LIGHTHOUSE),
            url,
            # Both: JSON to read back, HTML to open offline in any browser.
            "--output=json",
            "--output=html",
            f"--output-path={report.with_name(report.name.removesuffix('.report.json'))}",
            f"--only-categories={','.join(CATEGORIES)}",
            f"--chrome-flags={CHROME_FLAGS} --user-data-dir={profile}",
            f"--max-wait-for-load={MAX_WAIT_FOR_LOAD_MS}",
            "--quiet",
        ]
        try:
            result = subprocess.run(
                command,
                env={**os.environ, "CHROME_PATH": chrome},
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            sys.exit(f"lighthouse did not finish within {RUN_TIMEOUT_S} s on {url}")
    if result.returncode != 0 or not report.is_file():
        sys.exit(f"lighthouse failed on {url}:\n{result.stdout}\n{result.stderr}")
    data = json.loads(report.read_text())
    if data.get("runtimeError"):
        sys.exit(f"lighthouse could not load {url}: {data['runtimeError']}")
    scores = {}
    for name in CATEGORIES:
        score = data["categories"][name]["score"]
        if score is None:  # Lighthouse's way of saying an audit errored
            sys.exit(f"lighthouse returned no {name} score for {url}; see {report}")
        scores[name] = round(score * 100)
    # Lighthouse's measure of this machine's speed: a busy machine scores well below
    # the ~1000+ of a typical desktop and its performance scores drop with it.
    scores["cpu index"] = round(data["environment"]["benchmarkIndex"])
    return scores


def failing_audits(report: Path) -> list[str]:
    """The scored audits of a report that did not pass, as 'category: audit id'."""
    data = json.loads(report.read_text())
    failed = []
    for name in CATEGORIES:
        for ref in data["categories"][name]["auditRefs"]:
            audit = data["audits"][ref["id"]]
            if ref["weight"] > 0 and audit["score"] is not None and audit["score"] < 0.9:
                failed.append(f"{name}: {ref['id']} ({audit['score']:.2f})")
    return failed


START_TAG = re.compile(rb"<[a-zA-Z]")


def heaviest_pages(site: Path, n: int) -> dict[str, str]:
    """The ``n`` pages of ``site`` with the most elements and the ``n`` with the most bytes
    (gzip), by name."""
    pages = {}
    for html in sorted(site.rglob("index.html")):
        rel = html.parent.relative_to(site).as_posix()
        rel = "" if rel == "." else rel + "/"
        data = html.read_bytes()
        pages[rel] = (len(START_TAG.findall(data)), len(gzip.compress(data)))
    by_elements = sorted(pages, key=lambda p: -pages[p][0])[:n]
    by_bytes = sorted(pages, key=lambda p: -pages[p][1])[:n]
    return {rel.strip("/") or "home": rel for rel in dict.fromkeys(by_elements + by_bytes)}


def every_page(site: Path) -> dict[str, str]:
    rels = [h.parent.relative_to(site).as_posix() for h in sorted(site.rglob("index.html"))]
    return {("home" if r == "." else r): ("" if r == "." else r + "/") for r in rels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "site", help="built site folder")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "audit")
    parser.add_argument("--verbose", action="store_true", help="list the audits below 0.9")
    parser.add_argument("--heaviest", type=int, default=6, help="heaviest pages, by each measure")
    parser.add_argument("--every-page", action="store_true", help="audit every page of the site")
    parser.add_argument("--min-performance", type=int, default=90)
    args = parser.parse_args()

    if not (args.site / "index.html").is_file():
        sys.exit(f"no built site in {args.site}: run `make docs` first")
    if not LIGHTHOUSE.is_file():
        sys.exit("lighthouse is not installed: run `npm ci --prefix scripts/audit`")
    chrome = find_chrome()
    args.out.mkdir(parents=True, exist_ok=True)

    if args.every_page:
        pages = every_page(args.site)
    else:
        pages = PAGES | {
            name: path
            for name, path in heaviest_pages(args.site, args.heaviest).items()
            if path not in PAGES.values()
        }
    server, base = serve(args.site.resolve())
    rows = {}
    try:
        for name, path in pages.items():
            report = args.out / f"{name.replace('/', '__')}.report.json"
            print(f"lighthouse {base}{path}", file=sys.stderr, flush=True)
            rows[name] = lighthouse(base + path, report, chrome)
            if args.verbose:
                for line in failing_audits(report):
                    print(f"    {line}", file=sys.stderr)
    finally:
        server.shutdown()
        server.server_close()

    summary = {name: {"path": pages[name], **scores} for name, scores in rows.items()}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    columns = (*CATEGORIES, "cpu index")
    width = max(map(len, rows)) + 2
    print(f"{'page':<{width}}" + "".join(f"{c:>16}" for c in columns))
    for name, scores in rows.items():
        print(f"{name:<{width}}" + "".join(f"{scores[c]:>16}" for c in columns))
    print(f"reports: {args.out}/<page>.report.html (and .report.json)")
    slow = [name for name, scores in rows.items() if scores["performance"] < args.min_performance]
    if slow:
        sys.exit(f"performance below {args.min_performance}: {', '.join(slow)}")


if __name__ == "__main__":
    main()

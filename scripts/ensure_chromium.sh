#!/usr/bin/env bash
# Make sure Debian's chromium is installed for the browser tests.
#
# Playwright's own `playwright install` downloads a browser build from a CDN, which is
# not reachable here; the Python package drives the system chromium instead.
set -euo pipefail

# Any of these will do (GitHub's runners ship Google Chrome, not chromium).
for browser in chromium chromium-browser google-chrome; do
    if command -v "$browser" >/dev/null 2>&1; then
        exit 0
    fi
done
echo "chromium is missing; installing it from Debian's packages" >&2
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "cannot install chromium without root: run 'sudo apt-get install -y chromium'" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends chromium; } >&2; then
    echo "could not install chromium with apt-get (no network or no Debian mirror?):" \
        "install chromium, chromium-browser or google-chrome, then run make test again" >&2
    exit 1
fi
command -v chromium >/dev/null

#!/usr/bin/env bash
# Re-vendor KaTeX from the npm registry into docs/assets/vendor/katex/.
#
# The site must render math with no network at all, so KaTeX is committed to the
# repository instead of loaded from a CDN. katex.min.js typesets every formula at
# build time (docs_build/math.py runs it in Node.js) and is kept out of the built
# site (exclude_docs in mkdocs.yml); readers get the CSS and fonts of the same
# version, which the typeset HTML needs. Run this only to change the version; the
# tarball's checksum is verified against the registry's published integrity.
set -euo pipefail

VERSION="0.16.22"
INTEGRITY="$(npm view "katex@${VERSION}" dist.integrity 2>/dev/null)"
DEST="docs/assets/vendor/katex"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "katex@${VERSION}" >/dev/null)
tarball="$work/katex-${VERSION}.tgz"

actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$actual" != "$INTEGRITY" ]; then
    echo "integrity mismatch for katex@${VERSION}: $actual != $INTEGRITY" >&2
    exit 1
fi

tar -xzf "$tarball" -C "$work"
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$work/package/dist/katex.min.js" "$work/package/dist/katex.min.css" "$DEST/"
# Only the woff2 fonts: every browser the site targets reads them, and they are
# a third of the size of woff + ttf.
mkdir -p "$DEST/fonts"
cp "$work/package/dist/fonts/"*.woff2 "$DEST/fonts/"
cp "$work/package/LICENSE" "$DEST/LICENSE"
echo "katex@${VERSION} ${INTEGRITY}" > "$DEST/VERSION"
echo "vendored katex@${VERSION} into $DEST"

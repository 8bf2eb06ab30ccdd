#!/bin/sh
# Install the official OpenAI client library for JavaScript (npm package `openai`, pinned) into
# .cache/openai-client/ for tests/test_server.c, which runs tests/openai_client.mjs with the
# machine's Node.js against `specula serve`. A cached install of the pinned version is reused.
# Exit status 0 only when the package is installed (no npm -> failure, not a skip).
set -u
cd "$(dirname "$0")/.." || exit 1
VERSION=6.30.1
DIR=.cache/openai-client
PKG=$DIR/node_modules/openai/package.json
if [ -f "$PKG" ] && grep -q "\"version\": \"$VERSION\"" "$PKG"; then exit 0; fi
if ! command -v npm >/dev/null 2>&1; then
    echo "fetch-openai: npm is not installed (sh tools/deps.sh installs it)" >&2
    exit 1
fi
mkdir -p "$DIR"
[ -f "$DIR/package.json" ] || echo '{"private": true}' >"$DIR/package.json"
echo "fetch-openai: npm install openai@$VERSION" >&2
if ! npm install --prefix "$DIR" --no-audit --no-fund --silent "openai@$VERSION" >&2; then
    echo "fetch-openai: npm install openai@$VERSION failed" >&2
    exit 1
fi
grep -q "\"version\": \"$VERSION\"" "$PKG"

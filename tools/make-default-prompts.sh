#!/bin/sh
# Held-out prompts for `specula run`: the opening of held-out corpus files (never trained on;
# chosen by tools/make-default-model.sh by a hash of the path), one JSONL line {"prompt": TEXT}
# each (docs/prompt-files.md). Usage: tools/make-default-prompts.sh EVAL_LIST OUT_FILE.jsonl [N]
set -eu
list=$1; out=$2; n=${3:-6}
: > "$out.tmp"
k=0
while IFS= read -r f && [ "$k" -lt "$n" ]; do
    # skip files that open with a long docstring or licence: take the first 10 lines of code after
    # the first "import" / "def" / "class" line
    start=$(grep -n -m1 -E '^(import|from|def|class) ' "$f" | cut -d: -f1) || continue
    [ -n "$start" ] || continue
    sed -n "${start},$((start + 9))p" "$f" | tr -d '\000-\010\013-\037' | awk 'BEGIN{printf "{\"prompt\": \""} {gsub(/\\/,"&&"); gsub(/"/,"\\\""); gsub(/\t/,"\\t"); printf "%s\\n", $0} END{printf "\"}\n"}' >> "$out.tmp"
    k=$((k + 1))
done < "$list"
mv "$out.tmp" "$out"
echo "make-default-prompts: $k prompts -> $out" >&2

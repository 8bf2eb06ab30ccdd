#!/bin/sh
# Held-out prompts for `specula run`: the opening of held-out corpus files (never trained on;
# chosen by tools/make-default-model.sh by a hash of the path), one prompt per line with newlines
# escaped as \n. Usage: tools/make-default-prompts.sh EVAL_LIST OUT_FILE [N]
set -eu
list=$1; out=$2; n=${3:-6}
: > "$out.tmp"
k=0
while IFS= read -r f && [ "$k" -lt "$n" ]; do
    # skip files that open with a long docstring or licence: take the first 10 lines of code after
    # the first "import" / "def" / "class" line
    start=$(grep -n -m1 -E '^(import|from|def|class) ' "$f" | cut -d: -f1) || continue
    [ -n "$start" ] || continue
    sed -n "${start},$((start + 9))p" "$f" | awk 'BEGIN{ORS="\\n"} {print}' >> "$out.tmp"
    printf '\n' >> "$out.tmp"
    k=$((k + 1))
done < "$list"
mv "$out.tmp" "$out"
echo "make-default-prompts: $k prompts -> $out" >&2

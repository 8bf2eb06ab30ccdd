#!/bin/sh
# draft_temps.json of the embedded drafter (docs/sampling.md, "Draft temperatures"): prompts from
# the held-out corpus files that `specula run`'s prompts (tools/make-default-prompts.sh: the
# first 6 files) do not use — a 10-line chunk from the middle of each of the others — then
# `specula calibrate --sampling` at 0.6, 0.8 and 1.0. Usage: tools/make-draft-temps.sh [--dry-run]
set -eu
SPECULA=${SPECULA:-build/specula}
D=${D:-models/default}
WORK=${WORK:-build/draft-temps}
SKIP=${SKIP:-6}
N_PROMPTS=${N_PROMPTS:-24}
GEN=${GEN:-96}
mkdir -p "$WORK"
: > "$WORK/prompts.jsonl.tmp"
k=0
tail -n +"$((SKIP + 1))" "$D/target/corpus-eval.txt" | while IFS= read -r f; do
    [ "$k" -lt "$N_PROMPTS" ] || break
    total=$(wc -l < "$f")
    [ "$total" -ge 40 ] || continue
    start=$((total / 2))
    sed -n "${start},$((start + 9))p" "$f" | tr -d '\000-\010\013-\037' | awk 'BEGIN{printf "{\"prompt\": \""} {gsub(/\\/,"&&"); gsub(/"/,"\\\""); gsub(/\t/,"\\t"); printf "%s\\n", $0} END{printf "\"}\n"}' >> "$WORK/prompts.jsonl.tmp"
    k=$((k + 1))
done
mv "$WORK/prompts.jsonl.tmp" "$WORK/prompts.jsonl"
"$SPECULA" calibrate --sampling -m "$D/target" -md "$D/drafter" --prompts "$WORK/prompts.jsonl" -n "$GEN" \
    --temps 0.6,0.8,1.0 "$@"

#!/bin/sh
# Issue 8, item 3: the DSpark drafter of the embedded default model, trained by specula.
#   1. prompts: 10-line chunks of the TRAINING corpus files (held-out files are never used);
#   2. regen: the target regenerates each response greedily (DeepSpec's recipe), taps recorded;
#   3. train: DSpark (block 7) on those shards, held-out tau monitored on held-out-file prompts;
#   4. held-out prompts for `specula run` from held-out files.
# Appends every command and figure to models/default/target/RECIPE.txt. Run after
# tools/make-default-model.sh (OUT=models/default/target).
set -eu
SPECULA=${SPECULA:-build/specula}
T=${T:-models/default/target}
OUT=${OUT:-models/default/drafter}
WORK=${WORK:-build/default-drafter}
N_TRAIN=${N_TRAIN:-320}
N_HELD=${N_HELD:-32}
GEN=${GEN:-96}
STEPS=${STEPS:-600}
LAYERS=${LAYERS:-2}
SEED=${SEED:-8}
RECIPE="$T/RECIPE.txt"
log() { printf '%s\n' "$*" >> "$RECIPE"; }
run() { log "\$ $*"; "$@"; }
rm -rf "$OUT"; mkdir -p "$WORK" "$OUT"
log "# --- drafter (tools/make-default-drafter.sh), $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# prompts: chunk i of file f = lines 10i+1 .. 10i+10; files taken in a seeded order
chunks() { # LIST N OUT
    : > "$3"
    n=0
    for f in $(awk -v s="$SEED" 'BEGIN{srand(s)} {print rand() "\t" $0}' "$1" | LC_ALL=C sort | cut -f2); do
        [ "$n" -lt "$2" ] || break
        total=$(wc -l < "$f")
        [ "$total" -ge 40 ] || continue
        start=$(( (n * 37) % (total - 20) + 1 ))
        sed -n "${start},$((start + 9))p" "$f" | tr -d '\000-\010\013-\037' | awk 'BEGIN{printf "{\"prompt\": \""} {gsub(/\\/,"&&"); gsub(/"/,"\\\""); gsub(/\t/,"\\t"); printf "%s\\n", $0} END{printf "\", \"response\": \"\"}\n"}' >> "$3"
        n=$((n + 1))
    done
}
chunks "$T/corpus-train.txt" "$N_TRAIN" "$WORK/train.jsonl"
chunks "$T/corpus-eval.txt" "$N_HELD" "$WORK/held.jsonl"
rm -rf "$WORK/shards" "$WORK/held"
run "$SPECULA" regen -m "$T" --data "$WORK/train.jsonl" -o "$WORK/shards" --generate "$GEN" -q
run "$SPECULA" regen -m "$T" --data "$WORK/held.jsonl" -o "$WORK/held" --generate "$GEN" -q
rm -rf "$WORK/run"
run "$SPECULA" train --arch dspark -m "$T" --data "$WORK/shards" --held-out "$WORK/held" -o "$WORK/run" \
    --steps "$STEPS" --layers "$LAYERS" --block-size 7 --ctx 256 --seed "$SEED" --eval-every 100 -q
# the embedded drafter: the published layout only (optimizer state stays in $WORK/run for --resume)
cp "$WORK/run/config.json" "$WORK/run/model.safetensors" "$WORK/run/train_log.csv" "$OUT/"
log "# drafter: $(du -b "$OUT/model.safetensors" | cut -f1) bytes in $OUT/model.safetensors"
log "# last log row (step,...,tau): $(tail -n 1 "$OUT/train_log.csv")"
if command -v gnuplot > /dev/null; then "$SPECULA" plot "$OUT/train_log.csv" -o "$OUT/plots" || true; fi
sh tools/make-default-prompts.sh "$T/corpus-eval.txt" "$(dirname "$T")/prompts.txt" 6
echo "make-default-drafter: wrote $OUT" >&2

#!/bin/sh
# The DSpark drafter of the embedded default model, trained by specula.
#   1. prompts: 10-line chunks of the TRAINING corpus files (held-out files are never used);
#   2. regen: the target regenerates each response greedily (DeepSpec's recipe), taps recorded;
#   3. train: DSpark (block 7) on those shards, the target's distributions at 0.6, 0.8 and 1.0
#      distilled beside the greedy targets, held-out tau monitored on held-out-file prompts;
#      the drafter's matrices shipped as Q8_0 blocks (QUANT);
#   4. held-out prompts for `specula run` from held-out files.
# Appends every command and figure to models/default/target/RECIPE.txt. Run after
# tools/make-default-model.sh (OUT=models/default/target).
set -eu
SPECULA=${SPECULA:-build/specula}
T=${T:-models/default/target}
OUT=${OUT:-models/default/drafter}
WORK=${WORK:-build/default-drafter}
N_TRAIN=${N_TRAIN:-3000}
N_HELD=${N_HELD:-32}
PER_FILE=${PER_FILE:-6}
GEN=${GEN:-96}
STEPS=${STEPS:-6000}
LAYERS=${LAYERS:-2}
CTX=${CTX:-256}
RANK=${RANK:-256}
BATCH=${BATCH:-32}
# the loss also distils the target's distribution at these temperatures (docs/TRAINING.md §7), so
# one drafter serves greedy and sampled requests; TRAIN_EXTRA=" " trains on the greedy targets only
TRAIN_EXTRA=${TRAIN_EXTRA:---temp 0.6,0.8,1.0 --kl-weight 0.5}
SAMPLED=${SAMPLED:-1280}
SAMPLE_TEMP=${SAMPLE_TEMP:-0.8}
SEED=${SEED:-8}
QUANT=${QUANT:-q8_0}
RECIPE=${RECIPE:-$T/RECIPE.txt}
log() { printf '%s\n' "$*" >> "$RECIPE"; }
run() { log "\$ $*"; "$@"; }
mkdir -p "$WORK"
log "# --- drafter (tools/make-default-drafter.sh), $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# prompts: up to PER_FILE 10-line chunks per file, evenly spaced through it (chunk j of a file
# of `total` lines starts at line 1 + j·(total − 10)/PER_FILE + (n·37 mod 7)); files taken in a
# seeded order, N chunks in all
chunks() { # LIST N OUT PER_FILE
    : > "$3"
    n=0
    for f in $(awk -v s="$SEED" 'BEGIN{srand(s)} {print rand() "\t" $0}' "$1" | LC_ALL=C sort | cut -f2); do
        [ "$n" -lt "$2" ] || break
        total=$(wc -l < "$f")
        [ "$total" -ge 40 ] || continue
        j=0
        while [ "$j" -lt "$4" ] && [ "$n" -lt "$2" ]; do
            start=$(( j * (total - 20) / $4 + (n * 37) % 7 + 1 ))
            sed -n "${start},$((start + 9))p" "$f" | tr -d '\000-\010\013-\037' | awk 'BEGIN{printf "{\"prompt\": \""} {gsub(/\\/,"&&"); gsub(/"/,"\\\""); gsub(/\t/,"\\t"); printf "%s\\n", $0} END{printf "\", \"response\": \"\"}\n"}' >> "$3"
            n=$((n + 1))
            j=$((j + 1))
        done
    done
}
# shards of the same prompts are kept (regen skips complete shards, so an interrupted regen
# resumes); new prompts start from scratch
fresh() { # NAME: rebuild $WORK/NAME.jsonl, drop its shards unless the prompts are unchanged
    if ! cmp -s "$WORK/$1.jsonl.new" "$WORK/$1.jsonl"; then rm -rf "$WORK/$2"; fi
    mv "$WORK/$1.jsonl.new" "$WORK/$1.jsonl"
}
chunks "$T/corpus-train.txt" "$N_TRAIN" "$WORK/train.jsonl.new" "$PER_FILE"
chunks "$T/corpus-eval.txt" "$N_HELD" "$WORK/held.jsonl.new" 1
fresh train shards
fresh held held
run "$SPECULA" regen -m "$T" --data "$WORK/train.jsonl" -o "$WORK/shards" --generate "$GEN" -q
run "$SPECULA" regen -m "$T" --data "$WORK/held.jsonl" -o "$WORK/held" --generate "$GEN" -q
# sampled continuations (temperature SAMPLE_TEMP) of the first SAMPLED prompts too, so the drafter
# also sees the contexts sampling produces; training reads both shard sets through $WORK/mix
DATA="$WORK/shards"
if [ "$SAMPLED" -gt 0 ]; then
    head -n "$SAMPLED" "$WORK/train.jsonl" > "$WORK/sampled.jsonl.new"
    fresh sampled shards-sampled
    run "$SPECULA" regen -m "$T" --data "$WORK/sampled.jsonl" -o "$WORK/shards-sampled" --generate "$GEN" \
        --temp "$SAMPLE_TEMP" --seed "$SEED" -q
    rm -rf "$WORK/mix"; mkdir -p "$WORK/mix"
    for d in "$WORK"/shards/shard_*; do cp -al "$d" "$WORK/mix/"; done
    for d in "$WORK"/shards-sampled/shard_*; do cp -al "$d" "$WORK/mix/shard_t$(basename "$d" | cut -c7-)"; done
    DATA="$WORK/mix"
fi
[ "$STEPS" -gt 0 ] || { echo "make-default-drafter: STEPS=0, regen only" >&2; exit 0; }
# RESUME=1 continues an interrupted run of the same arguments (bit-identical to an uninterrupted one)
if [ "${RESUME:-0}" = 1 ] && [ -f "$WORK/run/trainer_state.json" ]; then resume=--resume; else rm -rf "$WORK/run"; resume=; fi
run "$SPECULA" train --arch dspark -m "$T" --data "$DATA" --held-out "$WORK/held" -o "$WORK/run" \
    --steps "$STEPS" --layers "$LAYERS" --block-size 7 --ctx "$CTX" --markov-rank "$RANK" --batch "$BATCH" \
    --seed "$SEED" --eval-every 250 --save-every 250 $TRAIN_EXTRA $resume -q
rm -rf "$OUT"
# the embedded drafter: the published layout only (optimizer state stays in $WORK/run for --resume),
# its matrices as QUANT blocks (docs/QUANTIZE.md; the choice is measured in docs/BENCHMARKS.md);
# QUANT=bf16 ships the trained bf16 weights as they are
rm -rf "$WORK/export"; mkdir -p "$WORK/export"
cp "$WORK/run/config.json" "$WORK/run/model.safetensors" "$WORK/export/"
if [ "$QUANT" = bf16 ]; then cp -r "$WORK/export" "$OUT"
else run "$SPECULA" quantize --drafter -m "$WORK/export" -o "$OUT" --type "$QUANT" -q; fi
cp "$WORK/run/train_log.csv" "$OUT/"
# static temperature scaling of the confidence head (sts.json) on the held-out prompts, greedy as
# `specula run` decodes by default
head -n 16 "$WORK/held.jsonl" > "$WORK/calib.jsonl"
run "$SPECULA" calibrate -m "$T" -md "$OUT" --prompts "$WORK/calib.jsonl" -n 64 --temp 0
log "# drafter: $(du -b "$OUT/model.safetensors" | cut -f1) bytes in $OUT/model.safetensors"
log "# last log row (step,...,tau): $(tail -n 1 "$OUT/train_log.csv")"
if command -v gnuplot > /dev/null; then "$SPECULA" plot "$OUT/train_log.csv" -o "$OUT/plots" || true; fi
sh tools/make-default-prompts.sh "$T/corpus-eval.txt" "$(dirname "$T")/prompts.jsonl" 6
echo "make-default-drafter: wrote $OUT" >&2

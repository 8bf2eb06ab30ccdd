#!/bin/sh
# EAGLE-3 vs DSpark on the embedded target, trained with the same wall-clock budget on the same
# shards (docs/EAGLE3.md §7): regen with EAGLE-3's three taps; both drafters train at once (one
# thread each, so they share the machine's conditions) for BUDGET seconds, each run killed at the
# budget and its last checkpoint (every SAVE steps) kept; then `specula run` alternates the two,
# REPS times each, and prints τ and speedup over plain decoding per run plus their medians.
# Not run by CI. Usage: sh tools/bench-eagle3.sh (variables below override).
set -eu
SPECULA=${SPECULA:-build/specula}
T=${T:-models/default/target}
WORK=${WORK:-build/bench-eagle3}
N_TRAIN=${N_TRAIN:-128}
N_HELD=${N_HELD:-12}
GEN=${GEN:-48}
REC=${REC:-32}
RUN_N=${RUN_N:-48}
BUDGET=${BUDGET:-300}
SAVE=${SAVE:-10}
REPS=${REPS:-5}
SEED=${SEED:-8}
mkdir -p "$WORK"

# prompts: 10-line chunks of the training corpus files (held-out ones for the monitor)
chunks() { # LIST N OUT
    : > "$3"
    n=0
    for f in $(awk -v s="$SEED" 'BEGIN{srand(s)} {print rand() "\t" $0}' "$1" | LC_ALL=C sort | cut -f2); do
        [ "$n" -lt "$2" ] || break
        total=$(wc -l < "$f")
        [ "$total" -ge 40 ] || continue
        for j in 0 1 2; do
            [ "$n" -lt "$2" ] || break
            start=$(( j * (total - 20) / 3 + 1 ))
            sed -n "${start},$((start + 9))p" "$f" | tr -d '\000-\010\013-\037' | awk 'BEGIN{printf "{\"prompt\": \""} {gsub(/\\/,"&&"); gsub(/"/,"\\\""); gsub(/\t/,"\\t"); printf "%s\\n", $0} END{printf "\", \"response\": \"\"}\n"}' >> "$3"
            n=$((n + 1))
        done
    done
}
[ -s "$WORK/train.jsonl" ] || chunks "$T/corpus-train.txt" "$N_TRAIN" "$WORK/train.jsonl"
[ -s "$WORK/held.jsonl" ] || chunks "$T/corpus-eval.txt" "$N_HELD" "$WORK/held.jsonl"
"$SPECULA" regen -m "$T" --data "$WORK/train.jsonl" -o "$WORK/shards" --generate "$GEN" --taps eagle3 \
    --shard-records "$REC" -q
"$SPECULA" regen -m "$T" --data "$WORK/held.jsonl" -o "$WORK/held" --generate "$GEN" --taps eagle3 -q

train() { # NAME ARGS...
    name=$1
    shift
    rm -rf "$WORK/$name"
    timeout -s KILL "$BUDGET" "$SPECULA" train -m "$T" --data "$WORK/shards" --held-out "$WORK/held" \
        -o "$WORK/$name" --steps 100000 --warmup 20 --save-every "$SAVE" --eval-every "$SAVE" --eval-blocks 16 \
        --seed "$SEED" -t 1 -q "$@" 2> "$WORK/$name.err" || true
    echo "$name: $(grep -o '"step": [0-9]*' "$WORK/$name/trainer_state.json"), held-out tau $(grep -o '"tau": [0-9.]*' "$WORK/$name/trainer_state.json")"
}
train eagle3 --arch eagle3 --block-size 5 --window 32 --batch 8 --draft-vocab 4096 --lr 1e-3 &
train dspark --arch dspark --layers 2 --block-size 7 --ctx 256 --markov-rank 256 --batch 16 &
wait

i=0
: > "$WORK/runs.txt"
while [ "$i" -lt "$REPS" ]; do
    for k in eagle3 dspark; do
        "$SPECULA" run -m "$T" --spec "$k" -md "$WORK/$k" -n "$RUN_N" --json -q > "$WORK/run-$k-$i.json"
        printf '%s %s\n' "$k" "$(cat "$WORK/run-$k-$i.json")" >> "$WORK/runs.txt"
    done
    i=$((i + 1))
done
cat "$WORK/runs.txt"

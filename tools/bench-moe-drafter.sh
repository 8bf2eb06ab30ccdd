#!/bin/sh
# bench-moe-drafter.sh — a drafter trained for a few hundred steps against a mixture-of-experts
# target (docs/MOE.md), and its speculative speedup with and without the expert-aware length
# choice (SPECULA_POLICY_EXPERTS=0 leaves the expected distinct experts out of the policy's cost
# model, docs/ROUND_COST.md).
#
#   sh tools/bench-moe-drafter.sh WORK [ROUNDS]
#
# TARGET=qwen (default) builds in WORK once: the qwen3-moe-2b preset cut to 8 layers and a
# 32000-token vocabulary (random weights, 64 experts, 8 per token), quantized to Q4_K_M by
# `specula quantize`; 64 records of 32 random ids whose responses the target regenerates (96
# tokens, greedy); a DSpark drafter (LAYERS, default 1) trained STEPS (default 300) steps on them.
# A random target's text has no structure, so that drafter only memorises its training set.
# TARGET=gemma instead builds a Gemma-4 MoE target whose text has structure: the embedded dense
# target with random experts added (tools/make-moe-target.py: EXPERTS 16, TOPK 4, WIDTH 256,
# ALPHA 0.1), and a 2-layer DSpark drafter trained STEPS steps by tools/make-default-drafter.sh on
# N_TRAIN (default 640) chunks of the embedded target's training corpus that the MoE target
# continues; the prompts are the embedded model's held-out prompts, and each round also runs the
# embedded drafter (6000 steps against the dense target).
# Then ROUNDS (default 3) times, interleaved: bench-spec greedy (adaptive length, the default) with
# the expert term, and without it; every pass also runs plain decoding, and checks the outputs
# equal. THREADS (default 1) threads. Prints one line per run (speedup, tau).
set -eu
WORK=${1:?usage: bench-moe-drafter.sh WORK [ROUNDS]}
ROUNDS=${2:-3}
TH=${THREADS:-1}
STEPS=${STEPS:-300}
LAYERS=${LAYERS:-1}
N=${N:-96}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S=${SPECULA:-$ROOT/build/specula}
mkdir -p "$WORK"
if [ "${TARGET:-qwen}" = gemma ]; then
    M="$WORK/gmoe"
    [ -f "$M/config.json" ] || python3 "$ROOT/tools/make-moe-target.py" "$ROOT/models/default/target" "$M" \
        --experts "${EXPERTS:-16}" --top-k "${TOPK:-4}" --width "${WIDTH:-256}" --alpha "${ALPHA:-0.1}"
    cp "$ROOT/models/default/prompts.jsonl" "$WORK/prompts.jsonl"
    [ -f "$WORK/drafter/config.json" ] || SPECULA="$S" T="$M" OUT="$WORK/drafter" WORK="$WORK/dwork" \
        N_TRAIN="${N_TRAIN:-640}" N_HELD=16 STEPS="$STEPS" SAMPLED=0 TRAIN_EXTRA=" " RECIPE="$WORK/RECIPE.txt" \
        sh "$ROOT/tools/make-default-drafter.sh"
    DRAFTERS="$WORK/drafter $ROOT/models/default/drafter"
else
DRAFTERS="$WORK/drafter"
M="$WORK/moe-q4_k_m.gguf"
[ -f "$WORK/moe/config.json" ] || "$S" new-model --arch qwen3_moe --preset qwen3-moe-2b \
    --set num_hidden_layers=8 --set vocab_size=32000 --seed 1 -o "$WORK/moe"
[ -f "$M" ] || "$S" quantize -m "$WORK/moe" -o "$M" --type q4_k_m -q
ids() { # $1 records, $2 ids each, $3 seed: {"ids": [...], "resp_start": $2}
    awk -v n="$1" -v l="$2" -v s="$3" 'BEGIN { srand(s); for (i = 0; i < n; i++) {
        r = "{\"ids\": ["; for (t = 0; t < l; t++) r = r (t ? ", " : "") int(3 + rand() * 31990); print r "], \"resp_start\": " l "}" } }'
}
[ -f "$WORK/data.jsonl" ] || ids 64 32 11 > "$WORK/data.jsonl"
[ -f "$WORK/prompts.jsonl" ] || ids 4 32 29 | sed 's/"ids"/"prompt_ids"/; s/, "resp_start": [0-9]*//' > "$WORK/prompts.jsonl"
[ -f "$WORK/shards/shard_00000/shard.json" ] || "$S" regen -m "$M" --data "$WORK/data.jsonl" -o "$WORK/shards" --generate 96 -q
[ -f "$WORK/drafter/config.json" ] || "$S" train --arch dspark -m "$M" --data "$WORK/shards" -o "$WORK/drafter" \
    --steps "$STEPS" --layers "$LAYERS" --block-size 7 --batch 16 --ctx 128 --seed 1 -q 2>&1 | tail -2
fi
: > "$WORK/raw-t$TH.txt"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for d in $DRAFTERS; do
        for ex in 1 0; do
            out=$(SPECULA_POLICY_EXPERTS=$ex "$S" bench-spec -m "$M" --spec dspark -md "$d" \
                --draft-max 7 --prompts "$WORK/prompts.jsonl" -n "$N" -t "$TH" 2>/dev/null | grep '^overall')
            echo "drafter=$d experts=$ex round=$r $out" | tee -a "$WORK/raw-t$TH.txt"
        done
    done
    r=$((r + 1))
done

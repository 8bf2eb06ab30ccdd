#!/bin/sh
# The training benchmark: a DSpark drafter (5 layers, block 7) for a Qwen3-0.6B-shaped
# target (random bf16 weights, `new-model --preset qwen3-0.6b`): regen tokens/s, then training
# block tokens/s and GFLOP/s per step with shared contexts (--anchors-per-seq 4, the default) and
# without (1), and the GEMMs against this machine's measured peak (bench_train, OpenBLAS sgemm).
# Short runs; the machine is shared: compare ratios, and run it when the load is low.
set -eu
cd "$(dirname "$0")/.."
B=${SPECULA:-build/specula}
W=${W:-build/bench-train-q06}
STEPS=${STEPS:-6}
mkdir -p "$W"
[ -f "$W/target/config.json" ] || "$B" new-model --arch qwen3 --preset qwen3-0.6b --seed 1 -o "$W/target"
# pre-tokenized records: 8 sequences of 192 random ids, responses from 64 (regen --generate 128)
python3 - "$W/data.jsonl" <<'EOF'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write(json.dumps({"ids": [r.randrange(1000, 150000) for _ in range(64)], "resp_start": 64}) + "\n")
EOF
rm -rf "$W/shards"
t0=$(date +%s.%N)
"$B" regen -m "$W/target" --data "$W/data.jsonl" -o "$W/shards" --generate 128 -q
t1=$(date +%s.%N)
ntok=$(python3 -c "import json; print(json.load(open('$W/shards/shard_00000/shard.json'))['nTokens'])")
echo "regen: $ntok tokens in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s = $(python3 -c "print(f'{$ntok / ($t1 - $t0):.1f}')") tok/s (prefill + generation)"
for A in 4 1; do
    rm -rf "$W/run"
    "$B" train --arch dspark -m "$W/target" --data "$W/shards" -o "$W/run" --steps "$STEPS" --layers 5 --block-size 7 \
        --batch 16 --ctx 256 --anchors-per-seq "$A" --seed 1 -q 2>&1 | tail -1 | sed "s/^/anchors-per-seq $A: /"
done
if [ -x build/bench_train ] || make -s build/bench_train; then build/bench_train; fi

#!/bin/sh
# peer-check.sh LLAMA_BUILD_DIR [REPS] [N_PREDICT] — run specula's embedded pair in llama.cpp
# and in specula, side by side (docs/PEER_CHECK.md). Not part of CI: llama.cpp is not a
# dependency.
#
# 1. exports models/default/target with `specula export-gguf` and models/default/drafter with
#    `specula export-gguf --target` (the DSpark drafter as llama.cpp's arch "dflash");
# 2. starts two llama-server instances on free ports: plain (target only) and speculative
#    (-md drafter.gguf --spec-type draft-dspark --spec-draft-n-max = the drafter's block size,
#    so both engines verify the same block length; --metrics for acceptance per position);
# 3. tools/peer-check.mjs runs every held-out prompt of models/default/prompts.jsonl through
#    specula generate (plain and -md) and both servers, the same prompt token ids and greedy
#    decoding everywhere, REPS rounds interleaved (specula plain, specula spec, llama plain,
#    llama spec), and prints one table: identity (spec == plain in each engine, specula ==
#    llama.cpp), acceptance per draft position and tau in both, decode tok/s in both and the
#    ratio specula spec / llama.cpp spec (median and min-max over the rounds).
# THREADS (default 2) is -t for both engines; OUT=FILE also writes the table there.
set -u
[ $# -ge 1 ] || { echo "usage: tools/peer-check.sh LLAMA_BUILD_DIR [REPS] [N_PREDICT]" >&2; exit 2; }
LB=$1
cd "$(dirname "$0")/.." || exit 1
BIN=$LB/bin
[ -x "$BIN/llama-server" ] || BIN=$LB
[ -x "$BIN/llama-server" ] || { echo "peer-check: no llama-server under $LB" >&2; exit 2; }
[ -x build/specula ] || { echo "peer-check: build specula first (make)" >&2; exit 2; }
T=${THREADS:-2}
WORK=$(mktemp -d)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    for p in $PIDS; do wait "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

cp build/specula "$WORK/specula" || exit 1 # a rebuild while this runs does not touch the measured binary
. tools/bench-lib.sh
default_pair_gguf "$WORK/specula" "$WORK" || { echo "peer-check: exporting the embedded pair failed" >&2; exit 1; }
B=$(node -e 'console.log(require("./models/default/drafter/config.json").block_size)')

free_port() { node -e 'const s=require("net").createServer().listen(0,()=>{console.log(s.address().port);s.close()})'; }

# start_server NAME ARGS...: llama-server in the background; sets PORT
start_server() {
    name=$1; shift
    PORT=$(free_port)
    "$BIN/llama-server" -m "$WORK/target.gguf" -t "$T" -tb "$T" -c 4096 -np 1 --port "$PORT" --metrics "$@" \
        >"$WORK/$name.log" 2>&1 &
    PIDS="$PIDS $!"
    for _ in $(seq 1 200); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "peer-check: llama-server ($name) did not start:" >&2
    tail -20 "$WORK/$name.log" >&2
    exit 1
}
start_server plain
P_PLAIN=$PORT
start_server spec -md "$WORK/drafter.gguf" --spec-type draft-dspark --spec-draft-n-max "$B" -td "$T"
P_SPEC=$PORT

node tools/peer-check.mjs --specula "$WORK/specula" --target models/default/target --drafter models/default/drafter \
    --prompts models/default/prompts.jsonl --plain "http://127.0.0.1:$P_PLAIN" --spec "http://127.0.0.1:$P_SPEC" \
    --threads "$T" --draft-max "$B" --reps "${2:-5}" --n "${3:-128}" ${OUT:+--out "$OUT"}
rc=$?
if [ $rc -ne 0 ]; then
    for name in plain spec; do echo "--- llama-server ($name) log tail:" >&2; tail -15 "$WORK/$name.log" >&2; done
fi
exit $rc

#!/bin/sh
# bench-gguf.sh — quantized GGUF decoding, specula vs llama.cpp on the same files.
#
#   sh tools/bench-gguf.sh WORK LLAMA_BIN [ROUNDS] [TYPES]
#
# Builds the qwen3-0.6b preset (random weights; MODEL="new-model arguments" and NAME pick another,
# e.g. MODEL="--arch qwen3_moe --preset qwen3-moe-2b --set num_hidden_layers=8" NAME=moe) in WORK once, exports it to GGUF with the
# Qwen2 vocabulary of llama.cpp's models/ggml-vocab-qwen2.gguf (llama.cpp needs a vocabulary;
# 151936 tokens, as the preset), quantizes it with `specula quantize` to each type (default
# q8_0 q4_0 q4_k_m), then for ROUNDS rounds (default 3), interleaved per type:
#   specula bench-decode --json        (decode tok/s after a 16-token prompt, prefill 512, roofline)
#   llama-bench -p 0 -n 64 -r 3         (decode)  and  -p 512 -n 0 -r 3 (prefill)
#   specula bench-verify --json        (cost of an 8-token verify in decode steps)
#   llama-bench -p 8 -n 0 -r 3          (llama.cpp's own 8-token batch, in its decode steps)
# with THREADS threads (default 2) for both engines; LLAMA_REPS sets llama-bench -r; AVX2=1 also
# runs specula's AVX2 tier (SPECULA_CPU=avx2) in each round and prints its own table;
# and prints one line per type with the medians and the ratios. The roofline column is against
# the read bandwidth bench-decode measures at THREADS threads (bw, GB/s). Each timed command
# holds the lock file LOCK (default /tmp/specula-bench.lock; LOCK= runs without one) so runs of
# other benchmarks on a shared machine do not overlap it. LLAMA_BIN is llama.cpp's build/bin
# (never part of CI). tools/bench-peer.sh (`make bench-peer`) measures the same decode and prefill
# figures for docs/BENCHMARKS.md; this script adds the roofline, verify and AVX2-tier columns.
set -eu
WORK=${1:?usage: bench-gguf.sh WORK LLAMA_BIN [ROUNDS] [TYPES]}
LB=${2:?usage: bench-gguf.sh WORK LLAMA_BIN [ROUNDS] [TYPES]}
ROUNDS=${3:-3}
TYPES=${4:-q8_0 q4_0 q4_k_m}
TH=${THREADS:-2}      # threads of both engines
REPS=${LLAMA_REPS:-3} # llama-bench -r
S=${SPECULA:-$(pwd)/build/specula}
. "$(dirname "$0")/bench-lib.sh"
MODEL=${MODEL:---arch qwen3 --preset qwen3-0.6b}
NAME=${NAME:-q06}
LOCK=${LOCK-/tmp/specula-bench.lock}
gguf_models "$S" "$WORK" "$NAME" "$MODEL" "$LB/../../models/ggml-vocab-qwen2.gguf" "$TYPES"
: > "$WORK/raw-$NAME-t$TH.txt"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for t in $TYPES; do
        f="$WORK/$NAME-$t.gguf"
        js=$(locked "$S" bench-decode -m "$f" -t "$TH" --json 2>/dev/null)
        sd=$(echo "$js" | json_num decode_tps); sp=$(echo "$js" | json_num prefill_tps); rf=$(echo "$js" | json_num roofline_fraction)
        bw=$(echo "$js" | json_num read_bw_gbs)
        ld=$(locked "$LB/llama-bench" -m "$f" -t "$TH" -p 0 -n 64 -r "$REPS" -o csv 2>/dev/null | llama_bench_ts)
        lp=$(locked "$LB/llama-bench" -m "$f" -t "$TH" -p 512 -n 0 -r "$REPS" -o csv 2>/dev/null | llama_bench_ts)
        l8=$(locked "$LB/llama-bench" -m "$f" -t "$TH" -p 8 -n 0 -r "$REPS" -o csv 2>/dev/null | llama_bench_ts)
        v8=$(locked "$S" bench-verify -m "$f" -t "$TH" --k-max 8 --json 2>/dev/null | sed -n 's/.*"ratio": *\[\([^]]*\)\].*/\1/p' | awk -F, '{ print $NF }')
        ad=0 ap=0 af=0 av=0
        if [ "${AVX2:-0}" = 1 ]; then
            js=$(SPECULA_CPU=avx2 locked "$S" bench-decode -m "$f" -t "$TH" --json 2>/dev/null)
            ad=$(echo "$js" | json_num decode_tps); ap=$(echo "$js" | json_num prefill_tps); af=$(echo "$js" | json_num roofline_fraction)
            av=$(SPECULA_CPU=avx2 locked "$S" bench-verify -m "$f" -t "$TH" --k-max 8 --json 2>/dev/null | sed -n 's/.*"ratio": *\[\([^]]*\)\].*/\1/p' | awk -F, '{ print $NF }')
        fi
        echo "$t $r $sd $sp $rf $ld $lp $v8 $ad $ap $af $av $bw $l8" | tee -a "$WORK/raw-$NAME-t$TH.txt"
    done
    r=$((r + 1))
done
table() { # $1: the first column of specula's figures in raw-t*.txt (3: default tier, 9: AVX2)
echo "$TH threads; medians of $ROUNDS rounds; roofline against the read bandwidth bw (GB/s) at $TH threads;"
echo "verify8/step: an 8-token batch in decode steps (specula bench-verify k=8; llama.cpp 8 x pp8 time / tg time)"
echo "type   specula_decode llama_decode ratio | specula_prefill llama_prefill ratio | roofline   bw | verify8/step specula llama"
for t in $TYPES; do
    grep "^$t " "$WORK/raw-$NAME-t$TH.txt" | awk -v t="$t" -v c="$1" '
        { d[NR] = $c; p[NR] = $(c + 1); f[NR] = $(c + 2); ld[NR] = $6; lp[NR] = $7; v[NR] = c == 3 ? $8 : $12
          rd[NR] = d[NR] / $6; rp[NR] = p[NR] / $7; bw[NR] = $13; l8[NR] = $14 > 0 ? 8 * $6 / $14 : 0 }
        function med(a, n,   i, j, x) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x } return a[int((n + 1) / 2)] }
        END { printf "%-6s %8.2f %8.2f %5.2fx | %8.1f %8.1f %5.2fx | %5.3f %5.1f | %5.2f %5.2f\n", t, med(d, NR), med(ld, NR), med(rd, NR), med(p, NR), med(lp, NR), med(rp, NR), med(f, NR), med(bw, NR), med(v, NR), med(l8, NR) }'
done
}
table 3
if [ "${AVX2:-0}" = 1 ]; then echo "AVX2 tier (SPECULA_CPU=avx2):"; table 9; fi

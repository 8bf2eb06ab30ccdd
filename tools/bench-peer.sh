#!/bin/sh
# bench-peer.sh — specula against llama.cpp on the same GGUF files, at each thread count, in
# interleaved repetitions; writes WORK/BENCHMARKS.md (tables ready for docs/BENCHMARKS.md) and,
# with gnuplot, WORK/*.svg. `make bench-peer` runs it (docs/BENCHMARKS.md says what each
# column means).
#
#   sh tools/bench-peer.sh WORK [LLAMA_BIN]
#
# LLAMA_BIN is llama.cpp's build/bin (llama-bench, llama-completion, llama-speculative-simple;
# /work/shared/PEERS.md and docs/BENCHMARKS.md say how to build it). Without it every llama.cpp
# column is "n/a" and the specula columns are still measured. Nothing here builds llama.cpp.
#
# Sections (each repetition runs every cell once, specula then llama.cpp, before the next cell):
#   plain    decode (N_DEC tokens after a short prompt) and prefill (N_PRE tokens) tok/s of a
#            random-weight qwen3-0.6b (reduced: the qwen3 tiny preset) in each of TYPES:
#            specula bench-decode vs llama-bench -p 0 -n N_DEC / -p N_PRE -n 0
#   dspark   the embedded pair (models/default): specula generate -md DRAFTER --spec dspark vs
#            llama-speculative-simple -md drafter.gguf --spec-type draft-dspark (the same weights,
#            exported with `export-gguf --target`), each beside its own plain run (llama-completion)
#   draft    a draft model: the Q8_0 file as target, the Q4_0 file of the same model as drafter
#   ngram    copy-heavy prompts built from the embedded target's own output (code: a prompt, its
#            greedy continuation, the prompt again; chat: the same as `# user:` / `# assistant:`
#            turns with the context repeated), greedy and at T 0.8: specula plain / --spec ngram /
#            --spec suffix vs llama.cpp plain / --spec-type LLAMA_NGRAM modes
#   eagle3   a random-weight EAGLE-3 drafter (SpecForge layout) of that Q8_0 target, exported for
#            llama.cpp with `export-gguf --target`: what drafting and verifying cost, acceptance ~0
# Environment: ROUNDS (3), THREADS ("1 2"), TYPES ("q8_0 q4_0 q4_k_m"), REDUCED=1 (tiny model,
# few tokens: the CI form), N (tokens per generate run; 128, reduced 12), N_DRAFT (tokens of the
# draft-model and EAGLE-3 runs, on one prompt; 64), NPROMPTS (held-out prompts of the DSpark
# rows; 2), N_DEC / N_PRE (plain decode / prefill tokens; 64 / 512), SPEC_ARGS (flags of
# specula's speculative runs; default --spec-always, drafting every round as llama.cpp does),
# LLAMA_NGRAM ("ngram-simple ngram-mod ngram-cache"), LOCK (as tools/bench-gguf.sh), SPECULA.
# shellcheck disable=SC2086 # lists of flags ($SAMPLE_*, $SPEC_ARGS, $TG, $MODEL) are split on purpose
set -eu
# The rest is one brace group, left unindented: sh parses all of it before running any, so
# editing or checking out this file during a run (which takes minutes) does not change the run.
{
USAGE="usage: bench-peer.sh WORK [LLAMA_BIN]"
WORK=${1:?$USAGE}
LB=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/tools/bench-lib.sh"
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
[ -z "$LB" ] || LB=$(cd "$LB" && pwd) || { echo "bench-peer: no directory $LB" >&2; exit 2; }
SP_BIN=${SPECULA:-$ROOT/build/specula}
case $SP_BIN in /*) ;; *) SP_BIN=$(pwd)/$SP_BIN ;; esac
cd "$ROOT"
REDUCED=${REDUCED:-0}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-1 2}
TYPES=${TYPES:-q8_0 q4_0 q4_k_m}
LLAMA_NGRAM=${LLAMA_NGRAM:-ngram-simple ngram-mod ngram-cache}
SPEC_ARGS=${SPEC_ARGS---spec-always}
LOCK=${LOCK-/tmp/specula-bench.lock}
if [ "$REDUCED" = 1 ]; then
    N=${N:-12} N_DEC=${N_DEC:-8} N_PRE=${N_PRE:-64} NGEN=${NGEN:-16} NPROMPTS=${NPROMPTS:-1} N_DRAFT=${N_DRAFT:-12}
    NAME=tiny MODEL="--arch qwen3 --preset tiny"
else
    N=${N:-128} N_DEC=${N_DEC:-64} N_PRE=${N_PRE:-512} NGEN=${NGEN:-128} NPROMPTS=${NPROMPTS:-2} N_DRAFT=${N_DRAFT:-64}
    NAME=q06 MODEL="--arch qwen3 --preset qwen3-0.6b"
fi
rm -rf "$WORK/logs"
mkdir -p "$WORK/files" "$WORK/prompts" "$WORK/logs"
S=$WORK/files/specula
cp "$SP_BIN" "$S" # a rebuild while this runs does not touch the measured binary
RAW=$WORK/raw.tsv
: > "$RAW"
LLAMA=0
if [ -n "$LB" ]; then
    for b in llama-bench llama-completion llama-speculative-simple; do
        [ -x "$LB/$b" ] || { echo "bench-peer: no $b in $LB (build it: docs/BENCHMARKS.md)" >&2; exit 2; }
    done
    LLAMA=1
    LLAMA_VERSION=$("$LB/llama-completion" --version 2>&1 | sed -n 's/^version: *//p' | head -1)
else
    echo "bench-peer: no LLAMA_BIN given: the llama.cpp columns are skipped (n/a); specula's are measured" >&2
    LLAMA_VERSION=
fi
{
    echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine_before	$(machine_line)"
    echo "specula	$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), $("$S" --version)"
    echo "llama	${LLAMA_VERSION:-}"
    echo "rounds	$ROUNDS"; echo "threads	$THREADS"; echo "reduced	$REDUCED"; echo "n	$N"
    echo "n_dec	$N_DEC"; echo "n_pre	$N_PRE"; echo "n_draft	$N_DRAFT"; echo "nprompts	$NPROMPTS"
    echo "start	$(date +%s)"; echo "spec_args	$SPEC_ARGS"; echo "model	$NAME"
} > "$WORK/meta.tsv"

# ---- files: the plain section's model in TYPES (+ q4_0 as the draft model), the embedded pair
# the model carries llama.cpp's Qwen2 vocabulary when llama.cpp runs it, else the embedded
# tokenizer (a file set of its own, so a later run with LLAMA_BIN does not reuse it)
VOCAB=models/default/target/tokenizer.json
if [ "$REDUCED" != 1 ]; then
    if [ -n "$LB" ]; then VOCAB=$LB/../../models/ggml-vocab-qwen2.gguf; else NAME=$NAME-tok; fi
fi
DTYPES=$TYPES
case " $TYPES " in *" q4_0 "*) ;; *) DTYPES="$TYPES q4_0" ;; esac
case " $DTYPES " in *" q8_0 "*) ;; *) DTYPES="$DTYPES q8_0" ;; esac
gguf_models "$S" "$WORK/files" "$NAME" "$MODEL" "$VOCAB" "$DTYPES" >/dev/null
# a random EAGLE-3 drafter (SpecForge layout, the one llama.cpp's eagle3 graph runs) for that model
E3=$WORK/files/$NAME-eagle3
[ -f "$E3/config.json" ] || "$S" new-drafter --arch eagle3 --preset specforge -m "$WORK/files/$NAME" --seed 2 -o "$E3" >/dev/null
case $VOCAB in *.gguf) TG="--tokenizer-gguf $VOCAB" ;; *) TG= ;; esac
[ "$LLAMA" = 0 ] || [ -f "$E3.gguf" ] || "$S" export-gguf -m "$E3" --target "$WORK/files/$NAME" -o "$E3.gguf" $TG >/dev/null
if [ "$LLAMA" = 1 ]; then
    default_pair_gguf "$S" "$WORK/files"
else
    [ -f "$WORK/files/target.gguf" ] || "$S" export-gguf -m models/default/target -o "$WORK/files/target.gguf" >/dev/null
fi
TGT=$WORK/files/target.gguf
BLOCK=$(sed -n 's/.*"block_size": *\([0-9]*\).*/\1/p' models/default/drafter/config.json | head -1)

# ---- prompts: held-out prompts of the embedded pair; copy-heavy ones built from its own output
python3 - "$WORK/prompts" "$NPROMPTS" <<'EOF_PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open("models/default/prompts.jsonl") if l.strip()]
for i, r in enumerate(rows[:n]):
    open("%s/heldout-%d.txt" % (out, i + 1), "w").write(r["prompt"])
EOF_PY
gen_text() { # PROMPT_FILE N -> the embedded target's greedy continuation (text)
    "$S" generate -m "$TGT" -f "$1" -n "$2" -t 2 --json -q 2>/dev/null |
        python3 -c 'import json, sys; sys.stdout.write(json.load(sys.stdin)["text"])'
}
if [ ! -f "$WORK/prompts/copy-code.txt" ]; then
    # code: a function, the model's continuation of it, the function again (the answer can
    # copy the continuation); chat: a document and a first answer as turns, then the same
    # document asked about again
    gen_text "$WORK/prompts/heldout-1.txt" "$NGEN" > "$WORK/prompts/cont-1.txt"
    { cat "$WORK/prompts/heldout-1.txt" "$WORK/prompts/cont-1.txt"; printf '\n\n'; cat "$WORK/prompts/heldout-1.txt"; } \
        > "$WORK/prompts/copy-code.txt"
    h=$WORK/prompts/heldout-$NPROMPTS.txt
    { printf '# user: explain this code\n'; cat "$h"; printf '\n# assistant:\n'; } > "$WORK/prompts/chat-1.txt"
    gen_text "$WORK/prompts/chat-1.txt" "$NGEN" > "$WORK/prompts/chat-ans.txt"
    { cat "$WORK/prompts/chat-1.txt" "$WORK/prompts/chat-ans.txt"
      printf '\n# user: the same code again, explain it once more\n'; cat "$h"; printf '\n# assistant:\n'; } \
        > "$WORK/prompts/copy-chat.txt"
fi

# ---- measuring: each run appends one row to raw.tsv:
# section case threads round prompt engine mode decode_tps prefill_tps drafted accepted emitted
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$RAW"; }
LOGN=0
next_log() { LOGN=$((LOGN + 1)); lg=$WORK/logs/$LOGN-$1.log; } # sets lg

# sp_gen SECTION CASE TH R PROMPT MODE TARGET ARGS...: specula generate --json, one row
sp_gen() {
    sec=$1 cs=$2 th=$3 r=$4 pr=$5 mode=$6 tgt=$7
    shift 7
    next_log "specula-$sec-$mode"
    if locked "$S" generate -m "$tgt" -f "$WORK/prompts/$pr.txt" -n "$N" --ignore-eos -t "$th" --json -q "$@" \
        > "$lg.json" 2> "$lg"; then
        row "$sec" "$cs" "$th" "$r" "$pr" specula "$mode" "$(json_num decode_tps < "$lg.json")" "" \
            "$(json_num drafted < "$lg.json")" "$(json_num accepted < "$lg.json")" "$(json_num emitted < "$lg.json")"
    else
        echo "bench-peer: specula $sec $cs $mode -t $th failed (see $lg)" >&2
    fi
}

# llama.cpp's context: its default (the model's whole context, 40960 for Qwen3) makes it allocate
# and clear gigabytes of KV cache at every start; the prompts and outputs here fit in CTX
CTX=$((N + 2048))
# ll_gen SECTION CASE TH R PROMPT MODE TARGET ARGS...: llama-completion (MODE plain) or
# llama-speculative-simple (ARGS: --spec-type ...), one row
ll_gen() {
    sec=$1 cs=$2 th=$3 r=$4 pr=$5 mode=$6 tgt=$7
    shift 7
    [ "$LLAMA" = 1 ] || return 0
    next_log "llama-$sec-$mode"
    # a run that ends without its figures (it happens now and then on a loaded machine) runs again, once
    for attempt in 1 2; do
        rc=0
        if [ "$mode" = plain ]; then
            locked "$LB/llama-completion" -m "$tgt" -f "$WORK/prompts/$pr.txt" -n "$N" --ignore-eos -t "$th" -c "$CTX" \
                -no-cnv "$@" < /dev/null > "$lg" 2>&1 || rc=$?
            tps=$(sed -n 's/.* eval time = .* runs .*, *\([0-9.]*\) tokens per second).*/\1/p' "$lg" | tail -1)
            em=$N dr='' ac=''
        else
            locked "$LB/llama-speculative-simple" -m "$tgt" -f "$WORK/prompts/$pr.txt" -n "$N" --ignore-eos -t "$th" \
                -c "$CTX" "$@" > "$lg" 2>&1 || rc=$?
            tps=$(sed -n 's/.*decoded *[0-9]* tokens in .* speed: *\([0-9.]*\) t\/s.*/\1/p' "$lg" | tail -1)
            em=$(sed -n 's/.*decoded *\([0-9]*\) tokens in.*/\1/p' "$lg" | tail -1)
            dr=$(sed -n 's/.*n_drafted *= *\([0-9]*\).*/\1/p' "$lg" | tail -1)
            ac=$(sed -n 's/.*n_accept *= *\([0-9]*\).*/\1/p' "$lg" | tail -1)
        fi
        if [ -n "$tps" ]; then
            row "$sec" "$cs" "$th" "$r" "$pr" llama "$mode" "$tps" "" "$dr" "$ac" "$em"
            return 0
        fi
        echo "bench-peer: llama.cpp $sec $cs $mode -t $th (try $attempt) exited with status $rc and no figure (see $lg)" >&2
        cp "$lg" "$lg.try$attempt"
    done
}

SAMPLE_GREEDY="--temp 0"
SAMPLE_T08="--temp 0.8 --top-k 0 --top-p 1 --min-p 0"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for th in $THREADS; do
        # plain decode and prefill
        for t in $TYPES; do
            f=$WORK/files/$NAME-$t.gguf
            js=$(locked "$S" bench-decode -m "$f" -t "$th" -n "$N_DEC" --n-prefill "$N_PRE" --no-roofline --json 2>/dev/null) || js=
            [ -n "$js" ] && row plain "$t" "$th" "$r" - specula plain "$(echo "$js" | json_num decode_tps)" \
                "$(echo "$js" | json_num prefill_tps)" "" "" ""
            if [ "$LLAMA" = 1 ]; then
                ld=$(locked "$LB/llama-bench" -m "$f" -t "$th" -p 0 -n "$N_DEC" -r 1 -o csv 2>/dev/null | llama_bench_ts)
                lp=$(locked "$LB/llama-bench" -m "$f" -t "$th" -p "$N_PRE" -n 0 -r 1 -o csv 2>/dev/null | llama_bench_ts)
                row plain "$t" "$th" "$r" - llama plain "$ld" "$lp" "" "" ""
            fi
        done
        # speculative: the embedded DSpark drafter; the Q4_0 copy as a draft model
        p=1
        while [ "$p" -le "$NPROMPTS" ]; do
            pr=heldout-$p
            sp_gen dspark dspark "$th" "$r" "$pr" plain "$TGT" $SAMPLE_GREEDY
            sp_gen dspark dspark "$th" "$r" "$pr" spec "$TGT" $SAMPLE_GREEDY --spec dspark -md models/default/drafter \
                --draft-max "$BLOCK" $SPEC_ARGS
            ll_gen dspark dspark "$th" "$r" "$pr" plain "$TGT" $SAMPLE_GREEDY
            ll_gen dspark dspark "$th" "$r" "$pr" spec "$TGT" $SAMPLE_GREEDY -md "$WORK/files/drafter.gguf" \
                --spec-type draft-dspark --spec-draft-n-max "$BLOCK" -td "$th"
            p=$((p + 1))
        done
        # the draft model and EAGLE-3 on the plain section's model: N_DRAFT tokens of the first prompt
        # (random weights: these rows measure cost, so fewer tokens say as much)
        N_ALL=$N N=$N_DRAFT pr=heldout-1
        f=$WORK/files/$NAME-q8_0.gguf d=$WORK/files/$NAME-q4_0.gguf
        sp_gen draft q8_0+q4_0 "$th" "$r" "$pr" plain "$f" $SAMPLE_GREEDY
        sp_gen draft q8_0+q4_0 "$th" "$r" "$pr" spec "$f" $SAMPLE_GREEDY --spec draft -md "$d" --draft-max 4 $SPEC_ARGS
        ll_gen draft q8_0+q4_0 "$th" "$r" "$pr" plain "$f" $SAMPLE_GREEDY
        ll_gen draft q8_0+q4_0 "$th" "$r" "$pr" spec "$f" $SAMPLE_GREEDY -md "$d" --spec-type draft-simple \
            --spec-draft-n-max 4 -td "$th"
        sp_gen eagle3 q8_0 "$th" "$r" "$pr" spec "$f" $SAMPLE_GREEDY --spec eagle3 -md "$E3" --draft-max 4 $SPEC_ARGS
        ll_gen eagle3 q8_0 "$th" "$r" "$pr" spec "$f" $SAMPLE_GREEDY -md "$E3.gguf" --spec-type draft-eagle3 \
            --spec-draft-n-max 4 -td "$th"
        N=$N_ALL
        # n-gram drafting on the copy-heavy prompts, greedy and sampled
        for pr in copy-code copy-chat; do
            for temp in greedy t0.8; do
                if [ "$temp" = greedy ]; then smp=$SAMPLE_GREEDY; else smp="$SAMPLE_T08 --seed $r"; fi
                cs=$pr/$temp
                sp_gen ngram "$cs" "$th" "$r" "$pr" plain "$TGT" $smp
                sp_gen ngram "$cs" "$th" "$r" "$pr" ngram "$TGT" $smp --spec ngram $SPEC_ARGS
                sp_gen ngram "$cs" "$th" "$r" "$pr" suffix "$TGT" $smp --spec suffix $SPEC_ARGS
                ll_gen ngram "$cs" "$th" "$r" "$pr" plain "$TGT" $smp
                for m in $LLAMA_NGRAM; do
                    ll_gen ngram "$cs" "$th" "$r" "$pr" "$m" "$TGT" $smp --spec-type "$m"
                done
            done
        done
        echo "bench-peer: round $r/$ROUNDS, $th threads done (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    done
    r=$((r + 1))
done
{
    echo "machine_after	$(machine_line)"
    echo "end	$(date +%s)"
    echo "llama_ngram	$LLAMA_NGRAM"
    echo "block	$BLOCK"
} >> "$WORK/meta.tsv"
python3 "$ROOT/tools/bench-peer-report.py" "$WORK"
exit
}

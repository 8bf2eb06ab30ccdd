#!/bin/sh
# bench-synthetic.sh — speculative speedup at a chosen acceptance (docs/SYNTHETIC.md): `specula
# bench-spec --spec-synthetic` over model shapes, weight types, drafter kinds and thread counts,
# and the server's spec ÷ plain at 1, 2, 4, 8 clients. BENCHMARK ONLY: synthetic acceptance is
# not lossless; every figure it prints is marked so.
#
#   sh tools/bench-synthetic.sh WORK [ROUNDS]
#
# Builds in WORK once (random weights; `specula new-model`, `new-drafter`, `quantize`): each shape
# of SHAPES (default "qwen3-0.6b qwen3-4b", the new-model presets, with the embedded pair's
# tokenizer so the server can serve them) in each type of TYPES (default "q8_0 q4_k_m"), and per
# shape the drafters of KINDS (default "dspark eagle3 draft"; draft: the qwen3 tiny preset with
# the shape's vocabulary; KIND-q8: that drafter with its matrices in Q8_0, `quantize --drafter`). "default" in SHAPES is the embedded pair (models/default/, its DSpark
# drafter, f32) for reference. Then ROUNDS (default 1) times, for every (shape, type, kind,
# threads of THREADS, default "1 2"): bench-spec --spec-always --draft-max G (default 7) -n N
# (default 64) over PROMPTS (default 2) prompts of random token ids, one pass per P of PS
# (default "0.5 0.7 0.8 0.9"), plain and speculative interleaved per prompt. With SERVE=1, per
# (shape, type of SERVE_TYPES (default TYPES), drafter of SERVE_KINDS (default "dspark draft"),
# policy of SERVE_POLICIES) the server (tools/bench-serve.sh, 8 slots, SERVE_ROUNDS (default 1)
# interleaved rounds inside) at P = SERVE_P (default 0.85); a policy is "auto" (the server's cost
# model, --draft-max G) or "fixedK" (--spec-max-slots 0 --draft-max K: K drafts every step),
# default "auto". THREADS="" (empty, not unset) skips the single-stream part.
# Writes WORK/synthetic.md (the tables: medians over rounds) and, when gnuplot is installed,
# WORK/speedup-vs-tau-SHAPE.svg and WORK/serve-ratio.svg. Each timed command holds the lock file
# LOCK (default /tmp/specula-bench.lock; LOCK= runs without one). R0 (default 1) numbers the first
# round, so that a later invocation with R0=2 adds rounds beside the earlier ones.
set -eu
WORK=${1:?usage: bench-synthetic.sh WORK [ROUNDS]}
ROUNDS=${2:-1}
SHAPES=${SHAPES:-qwen3-0.6b qwen3-4b}
TYPES=${TYPES:-q8_0 q4_k_m}
KINDS=${KINDS:-dspark eagle3 draft}
THREADS=${THREADS-1 2}
PS=${PS:-0.5 0.7 0.8 0.9}
G=${G:-7}
N=${N:-64}
NPROMPTS=${PROMPTS:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S=${SPECULA:-$ROOT/build/specula}
LOCK=${LOCK-/tmp/specula-bench.lock}
locked() { if [ -n "$LOCK" ]; then flock "$LOCK" "$@"; else "$@"; fi; }
TOK=$ROOT/models/default/target/tokenizer.json
mkdir -p "$WORK/runs"
PLIST=$(echo "$PS" | tr ' ' ',')

# the prompts: random token ids below 8000 (inside every shape's vocabulary)
[ -f "$WORK/prompts.jsonl" ] || awk -v n="$NPROMPTS" 'BEGIN { srand(7); for (i = 0; i < n; i++) {
    s = "{\"prompt_ids\": ["; for (t = 0; t < 24 + 8 * i; t++) s = s (t ? ", " : "") int(3 + rand() * 7990); print s "]}" } }' > "$WORK/prompts.jsonl"

# build: $1 shape -> WORK/$1 (safetensors), WORK/$1-TYPE.gguf, WORK/$1-KIND drafters
build() {
    sh=$1
    [ "$sh" = default ] && return 0
    [ -f "$WORK/$sh/config.json" ] || "$S" new-model --arch qwen3 --preset "$sh" --tokenizer "$TOK" --seed 1 -o "$WORK/$sh"
    for t in $TYPES; do
        [ -f "$WORK/$sh-$t.gguf" ] || "$S" quantize -m "$WORK/$sh" -o "$WORK/$sh-$t.gguf" --type "$t" -t 2 -q
    done
    vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$WORK/$sh/config.json" | head -1)
    for k in $KINDS; do
        d="$WORK/$sh-$k"
        [ -f "$d/config.json" ] && continue
        case $k in
        draft) "$S" new-model --arch qwen3 --preset tiny --set vocab_size="$vocab" --seed 3 -o "$d" ;;
        *-q8) b=${k%-q8}
            [ -f "$WORK/$sh-$b/config.json" ] || "$S" new-drafter --arch "$b" -m "$WORK/$sh" --seed 2 -o "$WORK/$sh-$b"
            "$S" quantize --drafter -m "$WORK/$sh-$b" -o "$d" --type q8_0 -q ;;
        *) "$S" new-drafter --arch "$k" -m "$WORK/$sh" --seed 2 -o "$d" ;;
        esac
    done
}
for sh in $SHAPES; do build "$sh"; done

# target and drafter of (shape, type, kind)
target() { if [ "$1" = default ]; then echo "$ROOT/models/default/target"; else echo "$WORK/$1-$2.gguf"; fi; }
drafter() { if [ "$1" = default ]; then echo "$ROOT/models/default/drafter"; else echo "$WORK/$1-$2"; fi; }
types_of() { if [ "$1" = default ]; then echo f32; else echo "$TYPES"; fi; }
kinds_of() { if [ "$1" = default ]; then echo dspark; else echo "${2:-$KINDS}"; fi; } # $2: a list other than KINDS

r=${R0:-1} # R0: the first round's number (a later invocation adds rounds to WORK)
while [ "$r" -lt "$((${R0:-1} + ROUNDS))" ]; do
    for sh in $SHAPES; do for t in $(types_of "$sh"); do for k in $(kinds_of "$sh"); do for th in $THREADS; do
        run="$WORK/runs/${sh}__${t}__${k}__t${th}__r${r}"
        locked "$S" bench-spec -m "$(target "$sh" "$t")" --spec "${k%-q8}" -md "$(drafter "$sh" "$k")" --draft-max "$G" \
            --spec-always -t "$th" --prompts "$WORK/prompts.jsonl" -n "$N" --spec-synthetic "$PLIST" \
            --json "$run.json" > "$run.txt" 2>/dev/null ||
            echo "bench-synthetic: $sh $t $k -t $th failed (see $run.txt)" >&2
        grep -A20 '^synthetic sweep' "$run.txt" | sed "s/^/$sh $t $k t$th: /"
    done; done; done; done
    if [ "${SERVE:-0}" = 1 ]; then
        for sh in $SHAPES; do for t in $(types_of "$sh"); do
            case " ${SERVE_TYPES:-$TYPES} f32 " in *" $t "*) ;; *) continue ;; esac
            for k in $(kinds_of "$sh" "${SERVE_KINDS:-dspark draft}"); do
                for pol in ${SERVE_POLICIES:-auto}; do
                    case $pol in
                    auto) pa="--draft-max $G" ;;
                    fixed[1-9]*) pa="--spec-max-slots 0 --draft-max ${pol#fixed}" ;;
                    *) echo "bench-synthetic: unknown server policy $pol" >&2; exit 2 ;;
                    esac
                    SERVE_ARGS="-m $(target "$sh" "$t") --spec ${k%-q8} -md $(drafter "$sh" "$k") $pa --spec-synthetic ${SERVE_P:-0.85}" \
                        THREADS=${SERVE_THREADS:-2} locked sh "$ROOT/tools/bench-serve.sh" "${SERVE_ROUNDS:-1}" "$N" |
                        tail -1 > "$WORK/runs/serve__${sh}__${t}__${k}__${pol}__r${r}.json"
                done
            done
        done; done
    fi
    r=$((r + 1))
done
python3 "$ROOT/tools/bench-synthetic-report.py" "$WORK" "$G"

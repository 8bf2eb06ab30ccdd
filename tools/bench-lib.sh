# bench-lib.sh — shell functions the benchmark scripts that measure specula against llama.cpp
# share (tools/bench-peer.sh, tools/bench-gguf.sh, tools/peer-check.sh). Sourced, not run:
#   . "$ROOT/tools/bench-lib.sh"
# POSIX sh; every function takes its inputs as arguments (S is the specula binary).

# locked CMD...: CMD under the lock file $LOCK (flock), so timed runs of separate benchmarks on a
# shared machine do not overlap; LOCK empty runs CMD as is
locked() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }

# json_num KEY: the first number stored under "KEY" in the JSON on stdin (flat or nested)
json_num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | head -1; }

# llama_bench_ts: the avg_ts column (tokens per second) of each row of `llama-bench -o csv` on stdin
llama_bench_ts() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "\"avg_ts\"" || $i == "avg_ts") c = i }
             NR > 1 { gsub(/"/, "", $c); print $c }'
}

# gguf_models S WORK NAME MODEL VOCAB TYPES: a random-weight model in WORK/NAME (`new-model MODEL
# --seed 1`), exported once to WORK/NAME-f32.gguf-or-bf16 (WORK/NAME-base.gguf) and quantized with
# `specula quantize` to WORK/NAME-TYPE.gguf for each of TYPES. VOCAB: a GGUF file whose vocabulary
# the export carries (llama.cpp's models/ggml-vocab-qwen2.gguf for the real presets), or a
# tokenizer.json that new-model copies into the model. Files already there are kept.
gguf_models() {
    _s=$1 _w=$2 _n=$3 _m=$4 _v=$5 _t=$6
    mkdir -p "$_w"
    case $_v in
    *.gguf) _tok='' _tg="--tokenizer-gguf $_v" ;;
    *) _tok="--tokenizer $_v" _tg='' ;;
    esac
    # shellcheck disable=SC2086 # MODEL and the tokenizer options are lists of arguments
    [ -f "$_w/$_n/config.json" ] || "$_s" new-model $_m $_tok --seed 1 -o "$_w/$_n" || return 1
    # shellcheck disable=SC2086
    [ -f "$_w/$_n-base.gguf" ] || "$_s" export-gguf -m "$_w/$_n" -o "$_w/$_n-base.gguf" $_tg || return 1
    for _x in $_t; do
        [ -f "$_w/$_n-$_x.gguf" ] ||
            "$_s" quantize -m "$_w/$_n-base.gguf" -o "$_w/$_n-$_x.gguf" --type "$_x" -t 2 -q || return 1
    done
}

# default_pair_gguf S OUT: the embedded pair as llama.cpp reads it: OUT/target.gguf
# (models/default/target) and OUT/drafter.gguf (its DSpark drafter, `export-gguf --target`;
# docs/EXPORT.md). Run from the repository root. Files already there are kept.
default_pair_gguf() {
    mkdir -p "$2"
    [ -f "$2/target.gguf" ] || "$1" export-gguf -m models/default/target -o "$2/target.gguf" >/dev/null || return 1
    [ -f "$2/drafter.gguf" ] ||
        "$1" export-gguf -m models/default/drafter --target models/default/target -o "$2/drafter.gguf" 2>/dev/null >/dev/null
}

# machine_line: one line describing this machine now (CPU model, cores, load average)
machine_line() {
    printf '%s, %s cores, load average %s' \
        "$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -1)" \
        "$(nproc 2>/dev/null || echo '?')" "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
}

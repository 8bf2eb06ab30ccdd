#!/bin/sh
# make-default-model.sh — reproduce specula's embedded default model from scratch, offline:
# a Gemma-4-architecture text model trained by `specula train-lm` on the
# Python standard library sources Debian ships, with a tokenizer from `specula train-tokenizer`.
#
#   sh tools/make-default-model.sh            # full recipe (about 2 h of training on 2 cores)
#   STEPS=20 OUT=/tmp/m sh tools/make-default-model.sh   # a quick rehearsal
#   RESUME=1 sh tools/make-default-model.sh   # continue an interrupted training run
#   TIME_LIMIT=1800 sh tools/make-default-model.sh   # train in 30-minute slices (then RESUME=1 ...)
#
# Steps (each recorded with its exact command in $OUT/RECIPE.txt):
#   1. corpus: every /usr/lib/python3.11/**/*.py, sorted (C locale); a file is HELD OUT for
#      evaluation when the first hex digit of md5(path) is 0 (~1/16 of the files, whole files).
#      The lists and a sha256 of the concatenated corpus are written to $OUT.
#   2. tokenizer: train-tokenizer, 8192 ids, on the training files only.
#   3. model config (below): Gemma-4 text, 8 layers S,S,S,F,S,S,S,F, sliding window 128 (so
#      demos wrap the rotating cache), H 512, 8 heads (2 KV heads), head dim 64 / 128 on full
#      layers (proportional RoPE, partial 0.25), GeGLU 2048, tied embeddings, softcap 30.
#      No per-layer inputs, no KV sharing, no k_eq_v (train-lm does not train those).
#      35.9 M parameters: 71.8 MB in bf16 (> 64 MB, larger than the L3 of the target machine).
#   4. train-lm: AdamW (0.9, 0.95, wd 0.1), lr 1e-3 warmup 80 + cosine to 1e-4, clip 1.0,
#      800 steps of batch 8 × 256 tokens (1.6 M tokens, ~0.5 epoch of the 3.4 M training
#      tokens), checkpoints every 100 steps (RESUME=1 continues exactly), held-out perplexity
#      every 200 steps. Measured on the shared 2-core development machine (2 threads):
#      310 tok/s when it was quiet (load 3.5), down to ~170 tok/s under load 7 — i.e.
#      1.5–2.7 h for the 800 steps. A 40-step run: loss 9.10 -> 5.60, held-out perplexity
#      384; peak RSS 1.96 GB.
#   5. the DSpark drafter — not part of this script (tools/make-default-drafter.sh).
set -eu

SPECULA=${SPECULA:-build/specula}
OUT=${OUT:-models/default}
WORK=${WORK:-build/default-model}
PYLIB=${PYLIB:-/usr/lib/python3.11}
SEED=${SEED:-8}
STEPS=${STEPS:-800}
BATCH=${BATCH:-8}
SEQ=${SEQ:-256}
LR=${LR:-1e-3}
WARMUP=${WARMUP:-80}
VOCAB=${VOCAB:-8192}
EVAL_SEQS=${EVAL_SEQS:-64}
RESUME=${RESUME:-0}
TIME_LIMIT=${TIME_LIMIT:-0} # seconds of training in this invocation (0: all); RESUME=1 continues

[ -x "$SPECULA" ] || { echo "make-default-model: $SPECULA not built (run make)" >&2; exit 1; }
[ -d "$PYLIB" ] || { echo "make-default-model: $PYLIB not found (Debian package libpython3.11-stdlib)" >&2; exit 1; }
mkdir -p "$OUT" "$WORK"
RECIPE="$OUT/RECIPE.txt"
log() { printf '%s\n' "$*" >> "$RECIPE"; }
run() { log "\$ $*"; "$@"; }

if [ "$RESUME" != 1 ]; then
    : > "$RECIPE"
    log "# specula default model — recipe run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
    log "# specula $(git describe --always --dirty 2>/dev/null || echo unknown), seed $SEED"
    log "# corpus package: $(dpkg-query -W -f='${Package} ${Version}' libpython3.11-stdlib 2>/dev/null || echo unknown)"
fi

# ---- 1. corpus ------------------------------------------------------------------------------
find "$PYLIB" -name '*.py' -type f | LC_ALL=C sort > "$WORK/corpus-all.txt"
: > "$WORK/corpus-train.txt"
: > "$WORK/corpus-eval.txt"
while IFS= read -r f; do
    h=$(printf '%s' "$f" | md5sum | cut -c1)
    if [ "$h" = 0 ]; then echo "$f" >> "$WORK/corpus-eval.txt"; else echo "$f" >> "$WORK/corpus-train.txt"; fi
done < "$WORK/corpus-all.txt"
cp "$WORK/corpus-train.txt" "$WORK/corpus-eval.txt" "$OUT/"
ntr=$(wc -l < "$WORK/corpus-train.txt"); nev=$(wc -l < "$WORK/corpus-eval.txt")
sum=$(tr '\n' '\0' < "$WORK/corpus-all.txt" | xargs -0 cat | sha256sum | cut -c1-64)
[ "$RESUME" = 1 ] || log "# corpus: $ntr training files, $nev held-out files (md5(path) starts with 0); sha256 of all files concatenated: $sum"

# ---- 2. tokenizer ---------------------------------------------------------------------------
if [ "$RESUME" != 1 ]; then
    # shellcheck disable=SC2046
    run "$SPECULA" train-tokenizer -f $(cat "$WORK/corpus-train.txt") --vocab-size "$VOCAB" -o "$WORK/tokenizer.json"
fi

# ---- 3. config ------------------------------------------------------------------------------
cat > "$WORK/config.json" <<JSON
{
  "architectures": ["Gemma4ForConditionalGeneration"],
  "model_type": "gemma4",
  "text_config": {
    "model_type": "gemma4_text",
    "vocab_size": $VOCAB,
    "hidden_size": 512,
    "intermediate_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "global_head_dim": 128,
    "num_global_key_value_heads": null,
    "attention_k_eq_v": false,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
      "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}
    },
    "attention_bias": false,
    "attention_dropout": 0.0,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                    "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "final_logit_softcapping": 30.0,
    "use_bidirectional_attention": null,
    "vocab_size_per_layer_input": $VOCAB,
    "hidden_size_per_layer_input": 0,
    "num_kv_shared_layers": 0,
    "enable_moe_block": false,
    "use_double_wide_mlp": false,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "tie_word_embeddings": true,
    "initializer_range": 0.02,
    "use_cache": true,
    "dtype": "bfloat16"
  },
  "vision_config": null,
  "audio_config": null,
  "tie_word_embeddings": true,
  "initializer_range": 0.02,
  "dtype": "bfloat16"
}
JSON
[ "$RESUME" = 1 ] || log "# config: $WORK/config.json (copied to $OUT/config.json by train-lm)"

# ---- 4. train-lm ----------------------------------------------------------------------------
resume_flag=
[ "$RESUME" = 1 ] && resume_flag=--resume
run "$SPECULA" train-lm --arch gemma4 --config "$WORK/config.json" --tokenizer "$WORK/tokenizer.json" \
    --data-list "$WORK/corpus-train.txt" --eval-list "$WORK/corpus-eval.txt" -o "$WORK/run" \
    --steps "$STEPS" --warmup "$WARMUP" --batch "$BATCH" --seq "$SEQ" --lr "$LR" --seed "$SEED" \
    --save-every 100 --eval-every 200 --eval-seqs "$EVAL_SEQS" --dtype bf16 --time-limit "$TIME_LIMIT" $resume_flag 2> "$WORK/train-lm.log" || {
    tail -n 5 "$WORK/train-lm.log" >&2; exit 1; }
grep -E '^(train-lm: [0-9]+ parameters|stopped at)' "$WORK/train-lm.log" | sed 's/^/# /' >> "$RECIPE"
cp "$WORK/run/config.json" "$WORK/run/model.safetensors" "$WORK/run/tokenizer.json" "$WORK/run/train_log.csv" "$OUT/"
log "# model: $(du -b "$OUT/model.safetensors" | cut -f1) bytes of bf16 weights in $OUT/model.safetensors"
if command -v gnuplot > /dev/null; then # loss curves from the CSV log
    gnuplot -e "set terminal svg size 800,500; set output '$OUT/train_loss.svg'; set datafile separator ',';
        set xlabel 'step'; set ylabel 'loss (nats/token)'; set grid;
        plot '$OUT/train_log.csv' using 1:2 every ::1 with lines title 'train loss',
             '' using 1:6 every ::1 with linespoints pointtype 7 title 'held-out loss'" && log "# plot: $OUT/train_loss.svg"
fi

# ---- 5. the DSpark drafter (regen + train + calibrate): tools/make-default-drafter.sh.
echo "make-default-model: wrote $OUT (see $RECIPE)" >&2

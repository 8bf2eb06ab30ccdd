#!/bin/sh
# The README's main job. Until the embedded default model exists (models/default, issue 8), it
# writes a random-weight tiny Gemma-4 checkpoint and shows plain vs speculative (n-gram) greedy
# generation on it: same tokens, with the speculative statistics.
set -e
cd "$(dirname "$0")/.."
B=build/specula
if [ -x "$B" ] && "$B" --help 2>/dev/null | grep -q "^  run "; then
    if [ -f models/default/target/config.json ]; then exec "$B" run; fi
fi
M=.cache/tiny-gemma4
[ -f "$M/config.json" ] || "$B" new-model --arch gemma4 --preset tiny --seed 1 -o "$M"
P=2,10,20,30,40,10,20,30,40,10,20,30,40,50
echo "== plain greedy decoding (random-weight tiny Gemma-4; the embedded trained model is issue 8)"
"$B" generate -m "$M" --prompt-ids "$P" -n 48 --ignore-eos
echo "== speculative decoding, n-gram drafter (output must be identical)"
"$B" generate -m "$M" --prompt-ids "$P" -n 48 --ignore-eos --spec ngram --draft-max 6

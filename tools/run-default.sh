#!/bin/sh
# The README's main job: `specula run` on the embedded default model (models/default/: a Gemma-4
# architecture target trained by specula, tools/make-default-model.sh). With its trained DSpark
# drafter present it runs DSpark; until then the n-gram drafter. Without the embedded model at all
# it falls back to a random-weight tiny Gemma-4 to show plain vs speculative decoding.
set -e
cd "$(dirname "$0")/.."
B=build/specula
D=models/default
if [ -f "$D/target/config.json" ]; then
    if [ -f "$D/drafter/config.json" ]; then exec "$B" run; fi
    echo "== specula run: embedded target, n-gram drafter (the trained DSpark drafter is not embedded yet)"
    exec "$B" run --spec ngram
fi
M=.cache/tiny-gemma4
[ -f "$M/config.json" ] || "$B" new-model --arch gemma4 --preset tiny --seed 1 -o "$M"
P=2,10,20,30,40,10,20,30,40,10,20,30,40,50
echo "== plain greedy decoding (random-weight tiny Gemma-4)"
"$B" generate -m "$M" --prompt-ids "$P" -n 48 --ignore-eos
echo "== speculative decoding, n-gram drafter (output must be identical)"
"$B" generate -m "$M" --prompt-ids "$P" -n 48 --ignore-eos --spec ngram --draft-max 6

#!/bin/sh
# Regenerate tests/data/tokenizer-ref/*.ids with transformers.js (@lenml/tokenizers 3.7.2).
# Developer tool, not run by CI: needs node and npm, and writes to a temp dir.
set -eu
cd "$(dirname "$0")/.."
sh tools/fetch-tokenizers.sh
tmp=$(mktemp -d)
(cd "$tmp" && npm install --silent --no-audit --no-fund @lenml/tokenizers@3.7.2 >/dev/null)
cat >"$tmp/ref.js" <<'JS'
const { TokenizerLoader } = require('@lenml/tokenizers');
const fs = require('fs');
const dir = process.argv[2];
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(dir + '/tokenizer.json', 'utf8')),
  tokenizerConfig: JSON.parse(fs.readFileSync(dir + '/tokenizer_config.json', 'utf8')),
});
const corpus = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
for (const bytes of corpus)
  console.log(tok.encode(Buffer.from(bytes).toString('utf8'), { add_special_tokens: false }).join(' '));
JS
for name in gemma3 qwen3 llama3 llama2; do
    NODE_PATH="$tmp/node_modules" node "$tmp/ref.js" ".cache/tokenizers/$name" \
        tests/data/tokenizer-ref/corpus.json >"tests/data/tokenizer-ref/$name.ids"
done
rm -rf "$tmp"

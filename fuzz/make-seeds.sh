#!/bin/sh
# make-seeds.sh BUILD OUT — write the seed corpus of every fuzz target into OUT/NAME/, using
# BUILD/specula (the gcc build) to make small valid files: a tiny random checkpoint (a few KB of
# safetensors), its config.json and the other architectures' configs, a BPE tokenizer trained on
# a few lines, a GGUF export with that vocabulary, a regen shard, and hand-written JSONL records,
# byte-level tokenizers and argument vectors. Each seed is small (the largest is tens of KB), so
# the fuzzers start from valid structure instead of guessing it.
set -e
BUILD=${1:-build}
OUT=${2:-build-fuzz/seeds}
S="$BUILD/specula"
[ -x "$S" ] || { echo "make-seeds: no $S (run make all first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$OUT"
for t in safetensors config tokenizer gguf load shards regen cli jinja request grammar schema; do mkdir -p "$OUT/$t"; done

# a tokenizer trained on a few lines, and tiny checkpoints of each architecture with it
printf 'the quick brown fox jumps over the lazy dog\nspeculative decoding drafts tokens and verifies them\n0123456789 hello world, HELLO WORLD!\n' > "$tmp/corpus.txt"
"$S" train-tokenizer -f "$tmp/corpus.txt" --vocab-size 300 -o "$tmp/tok.json" 2>/dev/null
SMALL="--set hidden_size=16 --set intermediate_size=32 --set num_attention_heads=2 --set num_key_value_heads=1 --set head_dim=8 --set num_hidden_layers=2"
"$S" new-model --arch qwen3 --preset tiny --seed 1 --tokenizer "$tmp/tok.json" --set vocab_size=320 $SMALL -o "$tmp/qwen3" 2>/dev/null
"$S" new-model --arch llama --preset tiny --seed 2 --set vocab_size=64 $SMALL -o "$tmp/llama" 2>/dev/null
cp "$tmp/qwen3/model.safetensors" "$OUT/safetensors/qwen3.safetensors"
cp "$tmp/llama/model.safetensors" "$OUT/safetensors/llama.safetensors"
cp "$tmp/qwen3/config.json" "$OUT/config/qwen3.json"
cp "$tmp/llama/config.json" "$OUT/config/llama.json"
"$S" new-model --arch gemma4 --preset tiny --seed 3 --set vocab_size=64 -o "$tmp/gemma4" 2>/dev/null || true
[ -f "$tmp/gemma4/config.json" ] && cp "$tmp/gemma4/config.json" "$OUT/config/gemma4.json"
[ -f models/default/target/config.json ] && cp models/default/target/config.json "$OUT/config/default.json"
for d in tests/data/ref-logits/*/; do
    [ -f "$d/config.json" ] && cp "$d/config.json" "$OUT/config/ref-$(basename "$d").json"
done

# a hand-made safetensors file: metadata, two dtypes, a header padded with spaces
hdr='{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}'
len=$(printf '%s' "$hdr" | wc -c)
pad=$(( (8 - len % 8) % 8 )); len=$((len + pad))
{ printf "$(printf '\\%03o' $((len & 255)) $(((len >> 8) & 255)))\0\0\0\0\0\0"
  printf '%s%*s' "$hdr" "$pad" ''
  printf '\1\2\3\4\5\6\7\10\11\0\0\0\0\0\0\0'; } > "$OUT/safetensors/hand.safetensors"

# tokenizers: the trained one, and small byte-level BPEs (regex splits, added tokens)
cp "$tmp/tok.json" "$OUT/tokenizer/trained.json"
cat > "$OUT/tokenizer/bytelevel.json" <<'J'
{"version":"1.0","added_tokens":[{"id":6,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},"post_processor":null,"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","dropout":null,"unk_token":null,"fuse_unk":false,"byte_fallback":false,"vocab":{"a":0,"b":1,"c":2,"ab":3,"abc":4,"\u0120":5},"merges":["a b",["ab","c"]]}}
J
cat > "$OUT/tokenizer/split.json" <<'J'
{"added_tokens":[{"id":7,"content":"<|im_start|>","special":true},{"id":8,"content":"hey","normalized":true,"special":false}],"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Lowercase"}]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"h":0,"e":1,"y":2,"\u0120":3,"l":4,"o":5,"he":6},"merges":["h e"]}}
J

# GGUF: the qwen3 checkpoint exported with its vocabulary, and without one
"$S" export-gguf -m "$tmp/qwen3" -o "$OUT/gguf/qwen3.gguf" 2>/dev/null
"$S" export-gguf -m "$tmp/llama" -o "$OUT/gguf/llama-notok.gguf" --no-tokenizer 2>/dev/null
# the loader's tensor binding (fuzz_load): the same models, whole
cp "$OUT/gguf/qwen3.gguf" "$OUT/gguf/llama-notok.gguf" "$OUT/load/"

# a regen shard: shard.json, a newline, model.safetensors
printf '{"ids": [1, 5, 6, 7], "resp_start": 2}\n{"ids": [1, 9, 8], "resp_start": 1}\n' > "$tmp/c.jsonl"
"$S" regen -m "$tmp/llama" --data "$tmp/c.jsonl" -o "$tmp/sh" --taps 0 -q 2>/dev/null
{ cat "$tmp/sh/shard_00000/shard.json"; printf '\n'; cat "$tmp/sh/shard_00000/model.safetensors"; } > "$OUT/shards/two.bin"

# regen records of every kind
printf '{"ids": [1, 2, 3], "resp_start": 1}\n{"text": "the quick brown fox"}\n' > "$OUT/regen/ids-text.jsonl"
printf '{"prompt": "hello", "response": " world"}\n\n  \n{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n' > "$OUT/regen/prompt-messages.jsonl"
printf '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]}\n' > "$OUT/regen/system.jsonl"

# argument vectors, NUL-separated
printf -- '-m\0DIR\0-n\00064\0--temp\0000.8\0--json\0-s\0000x10' > "$OUT/cli/plain.args"
printf -- '--model=DIR\0--prompt-ids\0001,2,3\0--spec\0dspark\0-md\0D\0--draft-max\0008\0--\0-x' > "$OUT/cli/spec.args"
printf -- '-n\0-5\0--n-predict=99999999999\0--temp\0nan\0pos1\0-' > "$OUT/cli/bad.args"
# chat templates (fuzz_jinja): the template alone (it renders a fixed conversation), or the
# template, a NUL byte and a JSON object of variables
cat > "$OUT/jinja/chatml.jinja" <<'J'
{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] | trim + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}
J
cat > "$OUT/jinja/llama3.jinja" <<'J'
{{- bos_token }}{%- set ns = namespace(sys='') %}{%- if messages[0].role == 'system' %}{%- set ns.sys = messages[0].content %}{%- set messages = messages[1:] %}{%- endif %}<|start_header_id|>system<|end_header_id|>

{{ ns.sys }}<|eot_id|>{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role ' ~ m.role) }}{% endif %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content | tojson if m.content is mapping else m.content }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}
J
{ printf '%s' '{% macro say(x, n=2) %}{% for i in range(n) %}{{ x|upper }}{{ loop.index }}{% if not loop.last %},{% endif %}{% endfor %}{% endmacro %}{{ say(name) }} {{ items|join("-") }} {{ items|length }} {{ d.k|default("none") }} {{ "%s=%d"|format("a", 3) }}{{ x is defined }}'
  printf '\0'
  printf '%s' '{"name": "hi", "items": [1, 2.5, "x", null, true], "d": {"k": "v"}, "x": {"nested": [[]]}}'; } > "$OUT/jinja/macro-vars.bin"
# HTTP request bodies (fuzz_request): a route byte (0 chat, 1 completion, 2 tokenize,
# 3 detokenize), then the JSON body
{ printf '\0'; printf '%s' '{"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n", "</s>"], "stream": true, "stream_options": {"include_usage": true}, "seed": 3, "logprobs": true, "top_logprobs": 2}'; } > "$OUT/request/chat.bin"
{ printf '\1'; printf '%s' '{"prompt": [1, 2, 3], "max_tokens": 4, "echo": true, "top_k": 5, "min_p": 0.1, "ignore_eos": true, "n": 1}'; } > "$OUT/request/completion-ids.bin"
{ printf '\1'; printf '%s' '{"prompt": "Once upon", "max_tokens": 2, "frequency_penalty": 0, "response_format": {"type": "text"}}'; } > "$OUT/request/completion-text.bin"
{ printf '\2'; printf '%s' '{"content": "hello world", "add_special": false}'; } > "$OUT/request/tokenize.bin"
{ printf '\3'; printf '%s' '{"tokens": [1, 2, 3]}'; } > "$OUT/request/detokenize.bin"
# GBNF grammars (fuzz_grammar: the grammar, a NUL, a text) and JSON schemas (fuzz_schema)
{ printf '%s\n%s\n' 'root ::= "a" b+ ("x" | [0-9]{2,3})? c # comment' 'b ::= [b-d]'; printf 'c ::= "\\n" | [^"\\\\]*\n'; printf '\0abbb12\n'; } > "$OUT/grammar/basic.bin"
{ printf 'root ::= x\nx ::= "(" x ")" | ""\n'; printf '\0((()))'; } > "$OUT/grammar/nest.bin"
printf '%s' '{"type":"object","properties":{"name":{"type":"string","maxLength":8},"tags":{"type":"array","items":{"enum":["a",1,null]},"minItems":1,"maxItems":3},"v":{"anyOf":[{"type":"integer"},{"type":["null","boolean"]}]}},"required":["name"],"additionalProperties":false}' > "$OUT/schema/object.json"
printf '%s' '{"oneOf":[{"const":"x"},{"type":"array","items":{"type":"number"}}]}' > "$OUT/schema/oneof.json"
[ -f models/default/target/chat_template.jinja ] && cp models/default/target/chat_template.jinja "$OUT/jinja/default.jinja"
n=0; for d in "$OUT"/*; do n=$((n + $(ls "$d" | wc -l))); done
echo "make-seeds: $n seeds in $OUT"

#!/bin/sh
# bench-serve-peer.sh REPS LLAMA_BIN [MAX_TOKENS] — `specula serve` against llama.cpp's
# `llama-server` on the embedded target (exported with `specula export-gguf`), interleaved:
# each rep runs tools/bench-serve.mjs once against specula (speculation on and off, 8 slots) and
# once against llama-server (plain, 8 slots), so both see the same machine load. Prints per cell
# the median aggregate tok/s and time to first token over the reps, and the per-rep ratios
# (median, min-max): specula spec / specula plain, and specula / llama-server.
# THREADS (default 2) sets specula's -t; LLAMA_THREADS (default 1: ggml's spinning thread pool
# collapses on a loaded 2-core machine) sets llama-server's -t. LLAMA_BIN: llama.cpp's build/bin.
set -u
cd "$(dirname "$0")/.." || exit 1
REPS=${1:?usage: bench-serve-peer.sh REPS LLAMA_BIN [MAX_TOKENS]}
LB=${2:?usage: bench-serve-peer.sh REPS LLAMA_BIN [MAX_TOKENS]}
MAX=${3:-96}
WORK=$(mktemp -d)
OUT=$WORK/runs.jsonl
build/specula export-gguf -m models/default/target -o "$WORK/target.gguf" >/dev/null || exit 1

wait_port() { # LOG PATTERN → the port once PATTERN shows up
    for _ in $(seq 1 300); do
        p=$(grep -o "$2" "$1" | grep -o '[0-9]*$' | head -1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.2
    done
    return 1
}

for r in $(seq 1 "$REPS"); do
    build/specula serve --port 0 --parallel 8 -t "${THREADS:-2}" 2>"$WORK/s.log" &
    SP=$!
    PORT=$(wait_port "$WORK/s.log" 'ready:.*port [0-9]*') || { cat "$WORK/s.log" >&2; kill $SP; exit 1; }
    node tools/bench-serve.mjs "http://127.0.0.1:$PORT" 1 "$MAX" | tail -1 | sed "s/^/{\"engine\":\"specula\",\"rep\":$r,\"r\":/; s/\$/}/" >>"$OUT"
    kill -TERM $SP
    wait $SP
    LPORT=$((20000 + $$ % 20000))
    "$LB/llama-server" -m "$WORK/target.gguf" --port $LPORT -np 8 -c 8192 -t "${LLAMA_THREADS:-1}" >"$WORK/l.log" 2>&1 &
    LP=$!
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$LPORT/health" >/dev/null && break; sleep 0.2; done
    node tools/bench-serve.mjs "http://127.0.0.1:$LPORT" 1 "$MAX" --openai-only | tail -1 | sed "s/^/{\"engine\":\"llama-server\",\"rep\":$r,\"r\":/; s/\$/}/" >>"$OUT"
    kill -TERM $LP
    wait $LP
    echo "rep $r done" >&2
done

node -e '
const runs = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(JSON.parse);
const med = (v) => { const s = [...v].sort((a, b) => a - b); return s[s.length >> 1]; };
const cell = (e, m, c) => runs.filter((x) => x.engine === e).map((x) => ({ rep: x.rep, ...x.r.rows.find((y) => y.mode === m && y.clients === c) }));
const reps = [...new Set(runs.map((x) => x.rep))];
const ratio = (a, b) => reps.map((r) => { const x = a.find((y) => y.rep === r), y = b.find((z) => z.rep === r); return x && y ? x.tps / y.tps : NaN; }).filter((v) => v === v);
const fmt = (v) => v.length ? `${med(v).toFixed(2)}x (${Math.min(...v).toFixed(2)}-${Math.max(...v).toFixed(2)})` : "-";
const p1 = cell("specula", "plain", 1);
console.log(`engine         mode   clients  tok/s  x1-plain  TTFT-ms  spec/plain (min-max)   specula/llama-server (min-max)`);
for (const c of [1, 2, 4, 8]) for (const [e, m] of [["specula", "plain"], ["specula", "spec"], ["llama-server", "spec"]]) {
  const v = cell(e, m, c); if (!v.length) continue;
  const mode = e === "llama-server" ? "plain" : m;
  const sp = e === "specula" && m === "spec" ? fmt(ratio(v, cell("specula", "plain", c))) : "";
  const vl = e === "specula" ? fmt(ratio(v, cell("llama-server", "spec", c))) : "";
  console.log(`${e.padEnd(14)} ${mode.padEnd(6)} ${String(c).padStart(7)}  ${med(v.map((x) => x.tps)).toFixed(1).padStart(6)}  ${fmt(ratio(v, p1)).padEnd(8)}  ${med(v.map((x) => x.ttft)).toFixed(0).padStart(6)}  ${sp.padEnd(22)} ${vl}`);
}
console.log(`${reps.length} interleaved reps, ${runs[0]?.r.max_tokens} tokens per request, 2 requests per client`);
' "$OUT"
rm -rf "$WORK"

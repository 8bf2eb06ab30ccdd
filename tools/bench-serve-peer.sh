#!/bin/sh
# bench-serve-peer.sh REPS [LLAMA_BIN|-] [MAX_TOKENS] — aggregate tok/s of `specula serve` with
# speculation on and off at 1, 2, 4, 8 clients (tools/bench-serve.mjs, 8 slots, embedded pair),
# interleaved rep by rep with the optional peers, so all see the same machine load:
# - LLAMA_BIN (llama.cpp's build/bin; "-" or absent: none): llama.cpp's `llama-server` on the
#   embedded target exported with `specula export-gguf` (plain, 8 slots);
# - BASELINE=/path/to/specula (env): another specula build, e.g. main's, for before / after ratios.
# Prints one table: per engine, mode and client count the median aggregate tok/s and time to first
# token over the reps, and the per-rep ratios (median, min-max): spec / plain of the same engine,
# and specula / llama-server.
# RUNS=FILE (env) appends the raw runs to FILE and summarises every run in it, so reps taken by
# separate invocations (e.g. one per `flock` of the shared benchmark lock) make one table.
# THREADS (default 2) sets specula's -t; LLAMA_THREADS (default 1: ggml's spinning thread pool
# collapses on a loaded 2-core machine) sets llama-server's -t.
set -u
cd "$(dirname "$0")/.." || exit 1
USAGE="usage: bench-serve-peer.sh REPS [LLAMA_BIN|-] [MAX_TOKENS]"
REPS=${1:?$USAGE}
LB=${2:--}
MAX=${3:-96}
WORK=$(mktemp -d)
OUT=${RUNS:-$WORK/runs.jsonl}
trap 'rm -rf "$WORK"' EXIT
[ "$LB" = - ] || build/specula export-gguf -m models/default/target -o "$WORK/target.gguf" >/dev/null || exit 1

wait_port() { # LOG PATTERN → the port once PATTERN shows up
    for _ in $(seq 1 300); do
        p=$(grep -o "$2" "$1" | grep -o '[0-9]*$' | head -1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.2
    done
    return 1
}

run_specula() { # ENGINE BINARY REP
    "$2" serve --port 0 --parallel 8 -t "${THREADS:-2}" 2>"$WORK/s.log" &
    SP=$!
    PORT=$(wait_port "$WORK/s.log" 'ready:.*port [0-9]*') || { cat "$WORK/s.log" >&2; kill $SP; exit 1; }
    node tools/bench-serve.mjs "http://127.0.0.1:$PORT" 1 "$MAX" | tail -1 | sed "s/^/{\"engine\":\"$1\",\"rep\":\"$$-$3\",\"r\":/; s/\$/}/" >>"$OUT"
    kill -TERM $SP
    wait $SP || { echo "$1 server (rep $3) exited with status $?; its log ends:" >&2; tail -20 "$WORK/s.log" >&2; }
}

for r in $(seq 1 "$REPS"); do
    run_specula specula build/specula "$r"
    [ -n "${BASELINE:-}" ] && run_specula baseline "$BASELINE" "$r"
    if [ "$LB" != - ]; then
        LPORT=$((20000 + $$ % 20000))
        "$LB/llama-server" -m "$WORK/target.gguf" --port $LPORT -np 8 -c 8192 -t "${LLAMA_THREADS:-1}" >"$WORK/l.log" 2>&1 &
        LP=$!
        for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$LPORT/health" >/dev/null && break; sleep 0.2; done
        node tools/bench-serve.mjs "http://127.0.0.1:$LPORT" 1 "$MAX" --openai-only | tail -1 | sed "s/^/{\"engine\":\"llama-server\",\"rep\":\"$$-$r\",\"r\":/; s/\$/}/" >>"$OUT"
        kill -TERM $LP
        wait $LP
    fi
    echo "rep $r done (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

node -e '
const runs = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(JSON.parse);
const med = (v) => { const s = [...v].sort((a, b) => a - b); return s[s.length >> 1]; };
const cell = (e, m, c) => runs.filter((x) => x.engine === e).map((x) => ({ rep: x.rep, ...x.r.rows.find((y) => y.mode === m && y.clients === c) }));
const reps = [...new Set(runs.map((x) => x.rep))];
const ratio = (a, b) => reps.map((r) => { const x = a.find((y) => y.rep === r), y = b.find((z) => z.rep === r); return x && y ? x.tps / y.tps : NaN; }).filter((v) => v === v);
const fmt = (v) => v.length ? `${med(v).toFixed(2)}x (${Math.min(...v).toFixed(2)}-${Math.max(...v).toFixed(2)})` : "-";
const engines = ["specula", "baseline", "llama-server"].filter((e) => runs.some((x) => x.engine === e));
const llama = engines.includes("llama-server");
console.log(`engine         mode   clients   tok/s  x1-plain               TTFT-ms  spec/plain (min-max)${llama ? "   vs llama-server (min-max)" : ""}`);
for (const c of [1, 2, 4, 8]) for (const e of engines) for (const m of e === "llama-server" ? ["spec"] : ["plain", "spec"]) {
  const v = cell(e, m, c); if (!v.length) continue;
  const mode = e === "llama-server" ? "plain" : m;
  const p1 = cell(e === "llama-server" ? "specula" : e, "plain", 1);
  const sp = e !== "llama-server" && m === "spec" ? fmt(ratio(v, cell(e, "plain", c))) : "";
  const vl = llama && e !== "llama-server" ? fmt(ratio(v, cell("llama-server", "spec", c))) : "";
  console.log(`${e.padEnd(14)} ${mode.padEnd(6)} ${String(c).padStart(7)}  ${med(v.map((x) => x.tps)).toFixed(1).padStart(6)}  ${fmt(ratio(v, p1)).padEnd(21)}  ${med(v.map((x) => x.ttft)).toFixed(0).padStart(6)}  ${sp.padEnd(22)} ${vl}`);
}
console.log(`${reps.length} interleaved reps, ${runs[0]?.r.max_tokens} tokens per request, 2 requests per client; x1-plain: to the same engine'"'"'s plain 1-client figure (llama-server: to specula'"'"'s)`);
' "$OUT"

#!/bin/sh
# bench-server-peer.sh REPS — the server features that chat apps and agents use, measured for
# `specula serve` and llama.cpp's `llama-server` on the SAME GGUF file (the embedded target
# exported with `specula export-gguf`; specula adds the embedded DSpark drafter, -md), both with
# 8 slots of 4096 positions (`-np 8 -c 32768`: -c is the total over the slots for both). Engines
# run one after another inside each rep, so all see the same machine load; the table gives medians
# over the reps with [min–max]:
# 1. prompt cache (tools/bench-cache.py): time to first token of turn 6 of a chat with ~1k tokens
#    of history, "cache_prompt" true ÷ false, and aggregate tok/s of 8 clients each running a
#    6-turn chat, on ÷ off;
# 2. JSON schema (tools/bench-serve.mjs --schema, one client, greedy): tok/s of chat requests with
#    response_format json_schema (tools/bench-server-schema.json), specula with speculation and
#    without ("speculative": false on the same server), llama-server plain (it has no DSpark
#    drafter); the same prompts unconstrained for reference; specula's timings.tokens_from;
# 3. KV cache types (-ctk/-ctv f32 f16 bf16 q8_0): RSS when ready and peak RSS (VmHWM of
#    /proc/PID/status) after a short load (bench-serve.mjs at 1 and 8 clients), and 1-client
#    tok/s and decode tok/s (the server's timings.predicted_per_second) per type.
# Needs LLAMA_BIN (llama.cpp's build/bin, holding llama-server), node and python3. Kept out of CI.
# Environment: THREADS (default 2) is specula's -t; LLAMA_THREADS (default "1"; e.g. "1 2" runs
# llama-server once per value: ggml's spinning thread pool collapses with -t 2 on a loaded 2-core
# machine); PARTS (default "cache json kv"); HISTORY (bench-cache.py --history, default 700: turn
# 6's prompt is then about 1.1k tokens); MAX (JSON tokens per request, default 160);
# SPECULA (default build/specula); RUNS=FILE appends the raw runs to FILE and summarises all of
# it, so reps from separate invocations make one table.
set -u
cd "$(dirname "$0")/.." || exit 1
REPS=${1:?usage: LLAMA_BIN=DIR bench-server-peer.sh REPS}
LB=${LLAMA_BIN:?set LLAMA_BIN to llama.cpp build/bin}
SPECULA=${SPECULA:-build/specula}
PARTS=${PARTS:-cache json kv}
WORK=$(mktemp -d)
OUT=${RUNS:-$WORK/runs.jsonl}
SRV=""
cleanup() {
    [ -n "$SRV" ] && kill -TERM "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$SPECULA" export-gguf -m models/default/target -o "$WORK/target.gguf" >/dev/null || exit 1
GGUF=$WORK/target.gguf
echo "uptime at start: $(uptime)" >&2

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start ENGINE [extra flags] → SRV (pid) and PORT; ENGINE is specula or llama-tN
start() {
    e=$1
    shift
    : >"$WORK/srv.log"
    case $e in
    specula)
        "$SPECULA" serve -m "$GGUF" -md models/default/drafter --port 0 -np 8 -c 32768 \
            -t "${THREADS:-2}" "$@" 2>"$WORK/srv.log" &
        SRV=$!
        for _ in $(seq 1 300); do
            PORT=$(grep -o 'ready:.*port [0-9]*' "$WORK/srv.log" | grep -o '[0-9]*$' | head -1)
            [ -n "$PORT" ] && return 0
            sleep 0.2
        done ;;
    llama-t*)
        PORT=$(free_port)
        "$LB/llama-server" -m "$GGUF" --port "$PORT" -np 8 -c 32768 -t "${e#llama-t}" "$@" \
            >"$WORK/srv.log" 2>&1 &
        SRV=$!
        for _ in $(seq 1 300); do
            curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
            sleep 0.2
        done ;;
    esac
    echo "bench-server-peer: $e did not start; its log ends:" >&2
    tail -20 "$WORK/srv.log" >&2
    exit 1
}

stop() {
    [ -n "$SRV" ] || return 0
    kill -TERM "$SRV"
    wait "$SRV" 2>/dev/null
    SRV=""
}

kb() { # FIELD → kB of it in the server's /proc status
    awk -v f="$1:" '$1 == f { print $2 }' "/proc/$SRV/status"
}

record() { # ENGINE PART REP KV JSON; an empty JSON (the client failed) is kept as an error
    case $5 in
    *'"b":}' | '')
        echo "bench-server-peer: $1 $2 $4 (rep $3) failed; the server log ends:" >&2
        tail -5 "$WORK/srv.log" >&2
        if ! kill -0 "$SRV" 2>/dev/null; then
            wait "$SRV"
            echo "bench-server-peer: the server had exited with status $?" >&2
            SRV=""
        fi
        printf '{"engine":"%s","part":"%s","rep":"%s","kv":"%s","error":true}\n' "$1" "$2" "$$-$3" "$4" >>"$OUT"
        return ;;
    esac
    printf '{"engine":"%s","part":"%s","rep":"%s","kv":"%s","r":%s}\n' "$1" "$2" "$$-$3" "$4" "$5" >>"$OUT"
}

ENGINES="specula"
for t in ${LLAMA_THREADS:-1}; do ENGINES="$ENGINES llama-t$t"; done

for r in $(seq 1 "$REPS"); do
    for e in $ENGINES; do
        oa=""
        [ "$e" = specula ] || oa=--openai-only
        for part in $PARTS; do
            case $part in
            cache)
                start "$e"
                res=$(python3 tools/bench-cache.py "$PORT" --reps 1 --clients 8 --turns 6 \
                    --history "${HISTORY:-700}" --json | tail -1)
                stop
                record "$e" cache "$r" - "$res" ;;
            json)
                start "$e"
                res=$(node tools/bench-serve.mjs "http://127.0.0.1:$PORT" 2 "${MAX:-160}" --clients=1 \
                    --schema=tools/bench-server-schema.json $oa | tail -1)
                record "$e" json "$r" - "$res"
                res=$(node tools/bench-serve.mjs "http://127.0.0.1:$PORT" 2 "${MAX:-160}" --clients=1 \
                    --chat $oa | tail -1)
                record "$e" free "$r" - "$res"
                stop ;;
            kv)
                for k in f32 f16 bf16 q8_0; do
                    start "$e" -ctk "$k" -ctv "$k"
                    idle=$(kb VmRSS)
                    res=$(node tools/bench-serve.mjs "http://127.0.0.1:$PORT" 2 96 --clients=1,8 $oa | tail -1)
                    record "$e" kv "$r" "$k" "{\"idle_kb\":$idle,\"hwm_kb\":$(kb VmHWM),\"b\":$res}"
                    stop
                done ;;
            esac
            echo "rep $r $e $part done (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
        done
    done
done
echo "uptime at end: $(uptime)" >&2

node -e '
const all = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(JSON.parse);
const runs = all.filter((x) => !x.error);
for (const x of all.filter((x) => x.error)) console.log(`failed: ${x.engine} ${x.part} ${x.kv} rep ${x.rep} (left out)`);
const engines = [...new Set(runs.map((x) => x.engine))];
const med = (v) => { const s = [...v].sort((a, b) => a - b); return s[s.length >> 1]; };
const rng = (v, d = 1) => v.length ? `${med(v).toFixed(d)} [${Math.min(...v).toFixed(d)}–${Math.max(...v).toFixed(d)}]` : "-";
const get = (e, p, kv = "-") => runs.filter((x) => x.engine === e && x.part === p && x.kv === kv);
const row = (x, mode, c = 1) => { const rows = x.r.b ? x.r.b.rows : x.r.rows; return rows.find((y) => y.clients === c && (mode === "*" || y.mode === mode)); };
const byRep = (a, b, f) => a.map((x) => { const y = b.find((z) => z.rep === x.rep); return y ? f(x, y) : NaN; }).filter((v) => v === v);
const nreps = new Set(all.map((x) => x.rep)).size;
console.log(`${nreps} reps; medians [min–max]; engine llama-tN: llama-server -t N\n`);
const C = engines.filter((e) => get(e, "cache").length);
if (C.length) {
  const r0 = get(C[0], "cache")[0].r;
  console.log(`## Prompt cache: turn ${r0.turns} of a chat (prompt ${r0.prompt} tokens, ${r0.cached} cached), ${r0.clients} clients x ${r0.turns}-turn chats`);
  console.log("| engine | TTFT on ms | TTFT off ms | on ÷ off | 8-client tok/s on | off | on ÷ off |\n|---|---|---|---|---|---|---|");
  for (const e of C) { const v = get(e, "cache").map((x) => x.r);
    console.log(`| ${e} | ${rng(v.map((x) => x.ttft_on), 0)} | ${rng(v.map((x) => x.ttft_off), 0)} | ${rng(v.map((x) => x.ttft_on / x.ttft_off), 3)} | ${rng(v.map((x) => x.tps_on))} | ${rng(v.map((x) => x.tps_off))} | ${rng(v.map((x) => x.tps_on / x.tps_off), 2)} |`); }
  for (const e of C.slice(1)) {
    console.log(`specula ÷ ${e}: TTFT on ${rng(byRep(get("specula", "cache"), get(e, "cache"), (a, b) => a.r.ttft_on / b.r.ttft_on), 2)}, off ${rng(byRep(get("specula", "cache"), get(e, "cache"), (a, b) => a.r.ttft_off / b.r.ttft_off), 2)}; 8-client tok/s on ${rng(byRep(get("specula", "cache"), get(e, "cache"), (a, b) => a.r.tps_on / b.r.tps_on), 2)}, off ${rng(byRep(get("specula", "cache"), get(e, "cache"), (a, b) => a.r.tps_off / b.r.tps_off), 2)}`);
  }
  console.log("");
}
const J = engines.filter((e) => get(e, "json").length);
if (J.length) {
  console.log("## JSON schema, 1 client, greedy (tok/s = completion tokens ÷ request wall time; decode = the server timings)");
  console.log("| engine | mode | JSON tok/s | JSON decode tok/s | unconstrained tok/s | tokens_from forced/drafter/target (JSON) |\n|---|---|---|---|---|---|");
  const modes = (e) => e === "specula" ? ["plain", "spec"] : ["spec"];
  for (const e of J) for (const m of modes(e)) {
    const js = get(e, "json").map((x) => row(x, m)), fr = get(e, "free").map((x) => row(x, m));
    const tf = js.filter((x) => x.from).map((x) => x.from), sum = (k) => tf.reduce((a, x) => a + x[k], 0);
    console.log(`| ${e} | ${e === "specula" ? m : "plain"} | ${rng(js.map((x) => x.tps))} | ${rng(js.map((x) => x.decode).filter((v) => v != null))} | ${rng(fr.map((x) => x.tps))} | ${tf.length ? `${sum("forced")}/${sum("drafter")}/${sum("target")} (${["forced", "drafter", "target"].map((k) => (100 * sum(k) / (sum("forced") + sum("drafter") + sum("target"))).toFixed(0) + "%").join(" / ")})` : "-"} |`);
  }
  const sp = get("specula", "json"), sf = get("specula", "free");
  const js = rng(sp.map((x) => row(x, "spec").tps / row(x, "plain").tps), 2), fs = rng(sf.map((x) => row(x, "spec").tps / row(x, "plain").tps), 2);
  console.log(`specula spec ÷ plain: JSON ${js}, unconstrained ${fs}; JSON ratio ÷ unconstrained ratio ${rng(byRep(sp, sf, (a, b) => (row(a, "spec").tps / row(a, "plain").tps) / (row(b, "spec").tps / row(b, "plain").tps)), 2)}`);
  for (const e of J.slice(1)) console.log(`specula ÷ ${e} on the JSON requests: spec ${rng(byRep(sp, get(e, "json"), (a, b) => row(a, "spec").tps / row(b, "*").tps), 2)}, plain ${rng(byRep(sp, get(e, "json"), (a, b) => row(a, "plain").tps / row(b, "*").tps), 2)}`);
  console.log("");
}
const K = engines.filter((e) => runs.some((x) => x.engine === e && x.part === "kv"));
if (K.length) {
  console.log("## KV cache types, 8 slots x 4096 positions (-np 8 -c 32768); RSS in MB; 1 client, 96 tokens (specula plain)");
  console.log("| engine | -ctk/-ctv | RSS ready | peak RSS after load | 1-client tok/s | decode tok/s |\n|---|---|---|---|---|---|");
  for (const e of K) for (const k of ["f32", "f16", "bf16", "q8_0"]) {
    const v = get(e, "kv", k); if (!v.length) continue;
    const m = e === "specula" ? "plain" : "*";
    console.log(`| ${e} | ${k} | ${rng(v.map((x) => x.r.idle_kb / 1024), 0)} | ${rng(v.map((x) => x.r.hwm_kb / 1024), 0)} | ${rng(v.map((x) => row(x, m).tps))} | ${rng(v.map((x) => row(x, m).decode).filter((d) => d != null))} |`);
  }
}
' "$OUT"

// bench-serve.mjs BASE_URL [ROUNDS] [MAX_TOKENS] — aggregate generated tok/s and time to first
// token of `specula serve` at 1, 2, 4, 8 concurrent streaming clients, with speculation on and
// off ("speculative": false per request, so one server serves both and the runs interleave:
// round r runs every (mode, clients) cell once, in an order that alternates). Each client sends
// its requests one after another (greedy, prompts from models/default/prompts.jsonl); a cell's
// figure is the median over rounds. Prints a table with ratios to 1 client without speculation.
// With --openai-only the server is any OpenAI-compatible one (e.g. llama-server): speculation is
// then whatever it was started with, and the mode column is that server's.
// Options: --clients=1,8 (the client counts, default 1,2,4,8); --chat (POST /v1/chat/completions,
// the prompt as one user message); --schema=FILE (chat requests with response_format json_schema,
// the JSON Schema in FILE). The JSON line at the end adds per cell the median decode tok/s of the
// server's own `timings.predicted_per_second` (where it sends timings) and the sum of
// `timings.tokens_from` over the cell's requests (specula's forced / drafter / target counts).
import fs from "node:fs";

const args = process.argv.slice(2);
const openaiOnly = args.includes("--openai-only");
const opt = (k) => args.find((a) => a.startsWith(`--${k}=`))?.slice(k.length + 3);
const schema = opt("schema") ? JSON.parse(fs.readFileSync(opt("schema"), "utf8")) : null;
const chat = args.includes("--chat") || schema !== null;
const pos = args.filter((a) => !a.startsWith("--"));
const base = pos[0] ?? "http://127.0.0.1:8080";
const ROUNDS = +(pos[1] ?? 3), MAX = +(pos[2] ?? 96), PER_CLIENT = 2;
const prompts = fs.readFileSync("models/default/prompts.jsonl", "utf8").split("\n").filter(Boolean)
  .map((l) => JSON.parse(l).prompt).map((p) => p.slice(0, 300));

async function one(prompt, spec) {
  const body = { max_tokens: MAX, temperature: 0, stream: true, stream_options: { include_usage: true } };
  if (chat) body.messages = [{ role: "user", content: prompt }]; else body.prompt = prompt;
  if (schema) body.response_format = { type: "json_schema", json_schema: { name: "bench", schema } };
  if (!openaiOnly) body.speculative = spec;
  const t0 = performance.now();
  const r = await fetch(base + (chat ? "/v1/chat/completions" : "/v1/completions"), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`status ${r.status}: ${await r.text()}`);
  let ttft = -1, tokens = 0, buf = "", decode = NaN, from = null;
  const dec = new TextDecoder();
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const o = JSON.parse(ev.slice(6));
      if (ttft < 0 && (o.choices?.[0]?.text || o.choices?.[0]?.delta?.content)) ttft = performance.now() - t0;
      if (o.usage) tokens = o.usage.completion_tokens;
      if (o.timings?.predicted_n && !tokens) tokens = o.timings.predicted_n;
      if (o.timings?.predicted_per_second) decode = o.timings.predicted_per_second;
      if (o.timings?.tokens_from) from = o.timings.tokens_from;
    }
  }
  return { tokens, ttft, decode, from };
}

async function cell(clients, spec, round) {
  const t0 = performance.now();
  const res = await Promise.all(Array.from({ length: clients }, async (_, c) => {
    const out = [];
    for (let k = 0; k < PER_CLIENT; k++) out.push(await one(prompts[(round * 31 + c * PER_CLIENT + k) % prompts.length], spec));
    return out;
  }));
  const ms = performance.now() - t0, flat = res.flat();
  const tokens = flat.reduce((a, r) => a + r.tokens, 0);
  const ttfts = flat.map((r) => r.ttft).sort((a, b) => a - b);
  const decodes = flat.map((r) => r.decode).filter((v) => v === v).sort((a, b) => a - b);
  const from = flat.some((r) => r.from) ? { forced: 0, drafter: 0, target: 0 } : null;
  for (const r of flat) if (r.from) for (const k in from) from[k] += r.from[k] ?? 0;
  return { tps: tokens * 1000 / ms, ttft: ttfts[ttfts.length >> 1], decode: decodes.length ? decodes[decodes.length >> 1] : NaN, from };
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[s.length >> 1]; };
const CLIENTS = opt("clients") ? opt("clients").split(",").map(Number) : [1, 2, 4, 8], MODES = openaiOnly ? [true] : [false, true];
const data = {};
await one(prompts[0], true); // warm-up
for (let r = 0; r < ROUNDS; r++) {
  const cells = [];
  for (const c of CLIENTS) for (const m of MODES) cells.push([c, m]);
  if (r % 2) cells.reverse();
  for (const [c, m] of cells) {
    const k = `${m ? "spec" : "plain"}/${c}`;
    (data[k] ??= []).push(await cell(c, m, r));
  }
}
const ref = median(data[`${MODES[0] ? "spec" : "plain"}/1`].map((x) => x.tps));
const rows = [];
console.log(`mode   clients  tok/s   ratio-to-1-${MODES[0] ? "spec" : "plain"}  spec/plain  median-TTFT-ms`);
for (const c of CLIENTS) for (const m of MODES) {
  const k = `${m ? "spec" : "plain"}/${c}`;
  const tps = median(data[k].map((x) => x.tps)), ttft = median(data[k].map((x) => x.ttft));
  const plain = data[`plain/${c}`] ? median(data[`plain/${c}`].map((x) => x.tps)) : NaN;
  const decode = median(data[k].map((x) => x.decode)), fromAll = data[k].map((x) => x.from).filter(Boolean);
  const from = fromAll.length ? Object.fromEntries(["forced", "drafter", "target"].map((f) => [f, fromAll.reduce((a, x) => a + x[f], 0)])) : null;
  rows.push({ mode: m ? "spec" : "plain", clients: c, tps, ratio: tps / ref, ttft, decode: decode === decode ? decode : null, from });
  console.log(`${(m ? "spec" : "plain").padEnd(6)} ${String(c).padStart(7)}  ${tps.toFixed(1).padStart(6)}  ${(tps / ref).toFixed(2).padStart(8)}x  ${m && !openaiOnly ? (tps / plain).toFixed(2) + "x" : "    -"}      ${ttft.toFixed(0)}`);
}
console.log(JSON.stringify({ rounds: ROUNDS, max_tokens: MAX, per_client: PER_CLIENT, rows }));

// peer-check.mjs — the measuring half of tools/peer-check.sh (see there and docs/PEER_CHECK.md).
// specula runs through `specula generate --json`; llama.cpp through two running llama-servers
// (plain, speculative) with the same prompt token ids, greedy, ignore_eos. Per prompt and round
// the four runs are interleaved: specula plain, specula spec, llama.cpp plain, llama.cpp spec.
//
// tau in both engines = 1 + accepted / verify rounds that carried drafts; acceptance at draft
// position k = rounds whose k-th draft was accepted / those rounds (specula: accept_per_position
// of its stats; llama.cpp: the /metrics counters spec_decode_num_accepted_tokens_per_pos_total
// over spec_decode_num_drafts_total, read before and after each request). tok/s is the decode
// rate each engine reports (prefill excluded): specula stats.decode_tps, llama.cpp
// timings.predicted_per_second.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const reps = Number(args.reps || 5), N = Number(args.n || 128), T = args.threads || "2";

function specula(argv) {
    const out = execFileSync(args.specula, argv, { encoding: "utf8", maxBuffer: 1 << 26, stdio: ["ignore", "pipe", "pipe"] });
    return JSON.parse(out);
}

async function metrics(url) {
    const text = await (await fetch(url + "/metrics")).text();
    const m = { drafts: 0, accepted: 0, pos: [] };
    for (const line of text.split("\n")) {
        let r;
        if ((r = line.match(/^llamacpp:spec_decode_num_drafts_total (\S+)/))) m.drafts = Number(r[1]);
        if ((r = line.match(/^llamacpp:spec_decode_num_accepted_tokens_total (\S+)/))) m.accepted = Number(r[1]);
        if ((r = line.match(/^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\S+)/)))
            m.pos[Number(r[1])] = Number(r[2]);
    }
    return m;
}

// llama-server may close an idle keep-alive connection just as undici reuses it ("other side
// closed"): such a request never ran, so it is sent again (metrics read again first)
async function llama(url, ids, spec) {
    for (let attempt = 1; ; attempt++) {
        try {
            return await llamaOnce(url, ids, spec);
        } catch (e) {
            if (attempt >= 3) throw e;
            process.stderr.write(`peer-check: ${url}: ${e.message} (${e.cause?.message ?? ""}), retrying\n`);
        }
    }
}

async function llamaOnce(url, ids, spec) {
    const before = spec ? await metrics(url) : null;
    const res = await fetch(url + "/completion", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt: ids, n_predict: N, temperature: 0, ignore_eos: true, return_tokens: true,
                               cache_prompt: false }),
    });
    if (!res.ok) throw new Error(`llama-server ${url}: HTTP ${res.status}: ${await res.text()}`);
    const j = await res.json();
    const r = { tokens: j.tokens, tps: j.timings.predicted_per_second };
    if (spec) {
        const after = await metrics(url);
        const rounds = after.drafts - before.drafts, acc = after.accepted - before.accepted;
        r.tau = rounds > 0 ? 1 + acc / rounds : 1;
        r.pos = after.pos.map((v, k) => (rounds > 0 ? (v - (before.pos[k] || 0)) / rounds : 0));
        r.drafted = j.timings.draft_n;
        r.accepted = j.timings.draft_n_accepted;
    }
    return r;
}

function sp(ids, spec) {
    const a = ["generate", "-m", args.target, "--prompt-ids", ids.join(","), "-n", String(N), "--ignore-eos", "--json",
               "-t", T];
    // --spec-always: draft every round as llama.cpp does (specula's default stops drafting while
    // it does not pay); SPECULA_ARGS adds flags to the speculative runs
    if (spec) a.push("-md", args.drafter, "--draft-max", args["draft-max"], "--spec-always",
                     ...(process.env.SPECULA_ARGS || "").split(" ").filter((x) => x));
    const j = specula(a);
    const r = { tokens: j.tokens, tps: j.stats.decode_tps };
    if (spec) {
        const hist = j.stats.verify_len_hist || [];
        const rounds = hist.slice(1).reduce((s, x) => s + x, 0);
        r.tau = rounds > 0 ? 1 + j.stats.accepted / rounds : 1;
        r.pos = j.stats.accept_per_position;
        r.drafted = j.stats.drafted;
        r.accepted = j.stats.accepted;
    }
    return r;
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const firstDiff = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };
const median = (v) => { const s = [...v].sort((x, y) => x - y), n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const f2 = (x) => x.toFixed(2);

const prompts = readFileSync(args.prompts, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).prompt);
const ids = prompts.map((p) => {
    const file = `/tmp/peer-check-prompt-${process.pid}.txt`;
    writeFileSync(file, p);
    return specula(["tokenize", "-m", args.target, "-f", file, "--json"]);
});

const runs = prompts.map(() => ({ sp0: [], sp1: [], ll0: [], ll1: [] }));
for (let r = 0; r < reps; r++) {
    for (let p = 0; p < prompts.length; p++) {
        runs[p].sp0.push(sp(ids[p], false));
        runs[p].sp1.push(sp(ids[p], true));
        runs[p].ll0.push(await llama(args.plain, ids[p], false));
        runs[p].ll1.push(await llama(args.spec, ids[p], true));
    }
    process.stderr.write(`peer-check: round ${r + 1}/${reps} done\n`);
}

const lines = [];
const out = (s) => lines.push(s);
out(`prompts: ${prompts.length} held-out, ${N} tokens each (greedy, ignore_eos), ${reps} interleaved rounds, -t ${T} ` +
    `in both engines; draft max ${args["draft-max"]} in both`);
out("");
out("| prompt | prompt tok | spec == plain (specula / llama.cpp) | specula == llama.cpp (plain; first diff) | " +
    "tau specula / llama.cpp | specula tok/s plain / spec | llama.cpp tok/s plain / spec | " +
    "spec ratio specula / llama.cpp: median (min-max) |");
out("|---|---|---|---|---|---|---|---|");
const posRows = [], allRatios = [];
for (let p = 0; p < prompts.length; p++) {
    const R = runs[p];
    const s0 = R.sp0[0], s1 = R.sp1[0], l0 = R.ll0[0], l1 = R.ll1[0];
    const stable = ["sp0", "sp1", "ll0", "ll1"].every((k) => R[k].every((x) => same(x.tokens, R[k][0].tokens)));
    const yes = (b) => (b ? "yes" : "NO");
    const cross = same(s0.tokens, l0.tokens) ? "yes" : `no (${firstDiff(s0.tokens, l0.tokens)})`;
    const ratios = R.sp1.map((x, i) => x.tps / R.ll1[i].tps);
    allRatios.push(...ratios);
    out(`| ${p + 1} | ${ids[p].length} | ${yes(same(s0.tokens, s1.tokens))} / ${yes(same(l0.tokens, l1.tokens))}` +
        `${stable ? "" : " (runs differ!)"} | ${cross} | ${f2(s1.tau)} / ${f2(l1.tau)} | ` +
        `${median(R.sp0.map((x) => x.tps)).toFixed(1)} / ${median(R.sp1.map((x) => x.tps)).toFixed(1)} | ` +
        `${median(R.ll0.map((x) => x.tps)).toFixed(1)} / ${median(R.ll1.map((x) => x.tps)).toFixed(1)} | ` +
        `${f2(median(ratios))} (${f2(Math.min(...ratios))}-${f2(Math.max(...ratios))}) |`);
    posRows.push(`| ${p + 1} | ${s1.pos.map(f2).join(" ")} | ${l1.pos.map(f2).join(" ")} |`);
}
out("");
out(`all prompts: spec tok/s ratio specula / llama.cpp median ${f2(median(allRatios))} ` +
    `(min ${f2(Math.min(...allRatios))}, max ${f2(Math.max(...allRatios))}, ${allRatios.length} pairs)`);
out("");
out("acceptance per draft position (rounds with drafts whose k-th draft was accepted / rounds):");
out("");
out("| prompt | specula k=1.. | llama.cpp k=1.. |");
out("|---|---|---|");
for (const r of posRows) out(r);
const text = lines.join("\n") + "\n";
process.stdout.write(text);
if (args.out) writeFileSync(args.out, text);

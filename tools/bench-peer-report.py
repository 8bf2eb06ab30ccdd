#!/usr/bin/env python3
"""bench-peer-report.py WORK — the tables and plots of tools/bench-peer.sh.

Reads WORK/meta.tsv (key, value) and WORK/raw.tsv (one row per measured run: section, case,
threads, round, prompt, engine, mode, decode_tps, prefill_tps, drafted, accepted, emitted) and
writes WORK/BENCHMARKS.md (markdown tables, every figure a median with its [min–max] over the
repetitions, ratios formed per repetition before the median) and, when gnuplot is installed,
WORK/plain-decode.svg, WORK/plain-prefill.svg, WORK/spec-speedup.svg and WORK/ngram-speedup.svg.
A llama.cpp cell without figures reads "n/a" with the reason."""
import os
import shutil
import statistics
import subprocess
import sys

work = sys.argv[1]
meta = {}
for line in open(os.path.join(work, "meta.tsv")):
    k, _, v = line.rstrip("\n").partition("\t")
    meta[k] = v
rows = []
for line in open(os.path.join(work, "raw.tsv")):
    f = line.rstrip("\n").split("\t")
    if len(f) != 12:
        continue
    num = lambda x: float(x) if x not in ("", "None") else None
    rows.append(dict(sec=f[0], case=f[1], th=int(f[2]), r=int(f[3]), prompt=f[4], engine=f[5], mode=f[6],
                     dec=num(f[7]), pre=num(f[8]), drafted=num(f[9]), accepted=num(f[10]), emitted=num(f[11])))
llama = bool(meta.get("llama"))
NA = "n/a (no LLAMA_BIN)" if not llama else "n/a (no figure: see logs/)"
threads = [int(t) for t in meta.get("threads", "1 2").split()]


def cell(sec, case, th, engine, mode):
    """{(round, prompt): row} of one table cell"""
    return {(x["r"], x["prompt"]): x for x in rows
            if x["sec"] == sec and x["case"] == case and x["th"] == th and x["engine"] == engine and x["mode"] == mode}


def cases_of(sec):
    """the cases of a section in the order they were measured"""
    return list(dict.fromkeys(x["case"] for x in rows if x["sec"] == sec))


def spread(v):
    v = [x for x in v if x is not None]
    return (statistics.median(v), min(v), max(v)) if v else None


def fmt(s, digits=1, unit=""):
    if s is None:
        return None
    m, lo, hi = s
    return "%.*f%s [%.*f–%.*f]" % (digits, m, unit, digits, lo, digits, hi)


def ratio(a, b, key="dec"):
    """per-repetition ratios a/b of two cells (paired on round and prompt)"""
    return spread([a[k][key] / b[k][key] for k in a if k in b and a[k][key] and b[k][key]])


def tau(c):
    """tokens per target forward: emitted / (emitted - accepted), the same formula for both engines"""
    return spread([x["emitted"] / (x["emitted"] - x["accepted"]) for x in c.values()
                   if x["emitted"] and x["accepted"] is not None and x["emitted"] > x["accepted"]])


def acc(c):
    """accepted / drafted tokens; (0, 0, 0) when there were runs but none drafted"""
    return spread([x["accepted"] / x["drafted"] for x in c.values() if x["drafted"]]) or \
        ((0.0, 0.0, 0.0) if any(x["drafted"] == 0 for x in c.values()) else None)


def orna(s):
    return s if s is not None else NA


out = []
w = out.append
w("Machine: %s (before); %s (after)." % (meta.get("machine_before", "?"), meta.get("machine_after", "?").split(", ")[-1]))
w("")
took = ""
if meta.get("start", "").isdigit() and meta.get("end", "").isdigit():
    took = " (%.0f min)" % ((int(meta["end"]) - int(meta["start"])) / 60)
w("Date %s%s; specula %s; llama.cpp %s; %s interleaved repetitions; threads %s%s." % (
    meta.get("date", "?"), took, meta.get("specula", "?"), meta.get("llama") or "not run (no LLAMA_BIN: its columns are n/a)",
    meta.get("rounds", "?"), ", ".join(map(str, threads)),
    "; REDUCED form (tiny model, few tokens: proves the script, not the engines)" if meta.get("reduced") == "1" else ""))
w("Every figure: median [min–max] over the repetitions (and prompts); ratios are formed within one repetition, "
  "then summarised.")
w("")

# ---- plain decode and prefill
types = cases_of("plain")
w("### Plain decode and prefill (tok/s), the same GGUF files")
w("")
w("Model: %s with random weights, quantized by `specula quantize`; decode: %s tokens after a short prompt "
  "(specula `bench-decode -n`, llama.cpp `llama-bench -p 0 -n`); prefill: a %s-token prompt "
  "(`bench-decode --n-prefill`, `llama-bench -p N -n 0`)." % (
      "qwen3 tiny preset" if meta.get("model") == "tiny" else "Qwen3-0.6B shape", meta.get("n_dec"), meta.get("n_pre")))
w("")
w("| type | threads | specula decode | llama.cpp decode | specula ÷ llama.cpp | specula prefill | llama.cpp prefill | specula ÷ llama.cpp |")
w("|---|---|---|---|---|---|---|---|")
plot_plain = []
for t in types:
    for th in threads:
        s, l = cell("plain", t, th, "specula", "plain"), cell("plain", t, th, "llama", "plain")
        sd, ld = spread([x["dec"] for x in s.values()]), spread([x["dec"] for x in l.values()])
        sp, lp = spread([x["pre"] for x in s.values()]), spread([x["pre"] for x in l.values()])
        w("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
            t.upper(), th, orna(fmt(sd)), orna(fmt(ld)), orna(fmt(ratio(s, l), 2, "×")), orna(fmt(sp)), orna(fmt(lp)),
            orna(fmt(ratio(s, l, "pre"), 2, "×"))))
        plot_plain.append(("%s t%d" % (t.upper(), th), sd, ld, sp, lp))
w("")

# ---- speculative decoding with one drafter
w("### Speculative decoding with the same drafter (greedy, tok/s of the decode phase)")
w("")
w("DSpark: %s tokens on each of %s held-out prompts; draft model and EAGLE-3: %s tokens of the first prompt. "
  "τ = emitted ÷ (emitted − accepted), acceptance = accepted ÷ drafted, from each engine's counts." % (
      meta.get("n"), meta.get("nprompts"), meta.get("n_draft")))
w("")
w("| drafter | threads | specula plain | specula spec | specula speedup | specula τ / acceptance | llama.cpp plain | "
  "llama.cpp spec | llama.cpp speedup | llama.cpp τ / acceptance | spec tok/s specula ÷ llama.cpp |")
w("|---|---|---|---|---|---|---|---|---|---|---|")
# (label, section and case of the speculative runs, section and case of the plain runs beside them)
spec_rows = [("DSpark (embedded pair, block %s)" % meta.get("block", "?"), "dspark", "dspark", "dspark", "dspark"),
             ("draft model (Q8_0 target, its Q4_0 copy drafts 4)", "draft", "q8_0+q4_0", "draft", "q8_0+q4_0"),
             ("EAGLE-3 (Q8_0 target, random SpecForge-layout drafter, 4 drafts: cost only, acceptance ≈ 0)", "eagle3",
              "q8_0", "draft", "q8_0+q4_0")]
plot_spec = []
for label, sec, case, psec, pcase in spec_rows:
    for th in threads:
        s0, s1 = cell(psec, pcase, th, "specula", "plain"), cell(sec, case, th, "specula", "spec")
        l0, l1 = cell(psec, pcase, th, "llama", "plain"), cell(sec, case, th, "llama", "spec")
        if not s1 and not l1:
            continue
        ta = lambda c: None if not c else "%s / %s" % (fmt(tau(c), 2) or "-", fmt(acc(c), 2) or "-")
        w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, th, orna(fmt(spread([x["dec"] for x in s0.values()]))),
            orna(fmt(spread([x["dec"] for x in s1.values()]))), orna(fmt(ratio(s1, s0), 2, "×")), orna(ta(s1)),
            orna(fmt(spread([x["dec"] for x in l0.values()]))), orna(fmt(spread([x["dec"] for x in l1.values()]))),
            orna(fmt(ratio(l1, l0), 2, "×")), orna(ta(l1)), orna(fmt(ratio(s1, l1), 2, "×"))))
        plot_spec.append(("%s t%d" % (label.split(" (")[0], th), ratio(s1, s0), ratio(l1, l0)))
w("")

# ---- n-gram drafting on copy-heavy prompts
modes_sp = ["ngram", "suffix"]
modes_ll = meta.get("llama_ngram", "ngram-simple ngram-mod ngram-cache").split()
cases = cases_of("ngram")
w("### n-gram drafting on copy-heavy prompts (embedded target as GGUF, tok/s of the decode phase)")
w("")
w("Prompts: copy-code = a held-out prompt, the model's own greedy continuation, the prompt again; copy-chat = "
  "a document and the model's answer as `# user:` / `# assistant:` turns, then the same document again. "
  "%s tokens per run; t0.8: temperature 0.8, top-k / top-p / min-p off in both engines, seed = repetition." % meta.get("n"))
w("")
w("| prompt / sampling | threads | engine: mode | tok/s | speedup over the same engine's plain | τ | acceptance |")
w("|---|---|---|---|---|---|---|")
plot_ng = []
best = []
for case in cases:
    for th in threads:
        sp0, ll0 = cell("ngram", case, th, "specula", "plain"), cell("ngram", case, th, "llama", "plain")
        w("| %s | %d | specula: plain | %s | 1× | 1 | – |" % (case, th, orna(fmt(spread([x["dec"] for x in sp0.values()])))))
        pts = {}
        for m in modes_sp:
            c = cell("ngram", case, th, "specula", m)
            pts["specula " + m] = ratio(c, sp0)
            w("| %s | %d | specula: %s | %s | %s | %s | %s |" % (
                case, th, m, orna(fmt(spread([x["dec"] for x in c.values()]))), orna(fmt(ratio(c, sp0), 2, "×")),
                orna(fmt(tau(c), 2)), orna(fmt(acc(c), 2))))
        if llama:
            w("| %s | %d | llama.cpp: plain | %s | 1× | 1 | – |" % (case, th, orna(fmt(spread([x["dec"] for x in ll0.values()])))))
        else:
            w("| %s | %d | llama.cpp: plain, %s | n/a (no LLAMA_BIN) | n/a | n/a | n/a |" % (case, th, ", ".join(modes_ll)))
        for m in modes_ll if llama else []:
            c = cell("ngram", case, th, "llama", m)
            pts["llama.cpp " + m] = ratio(c, ll0)
            w("| %s | %d | llama.cpp: %s | %s | %s | %s | %s |" % (
                case, th, m, orna(fmt(spread([x["dec"] for x in c.values()]))), orna(fmt(ratio(c, ll0), 2, "×")),
                orna(fmt(tau(c), 2)), orna(fmt(acc(c), 2))))
        plot_ng.append(("%s t%d" % (case, th), pts))
        # specula suffix ÷ llama.cpp's best n-gram mode, per repetition
        suf = cell("ngram", case, th, "specula", "suffix")
        lls = [cell("ngram", case, th, "llama", m) for m in modes_ll]
        rs = []
        for k, x in suf.items():
            b = max([c[k]["dec"] for c in lls if k in c and c[k]["dec"]] or [0])
            if b and x["dec"]:
                rs.append(x["dec"] / b)
        best.append((case, th, fmt(spread(rs), 2, "×")))
w("")
w("specula `suffix` ÷ llama.cpp's best n-gram mode of the same repetition (tok/s):")
w("")
w("| prompt / sampling | threads | ratio |")
w("|---|---|---|")
for case, th, s in best:
    w("| %s | %d | %s |" % (case, th, orna(s)))
w("")

svgs = []
if shutil.which("gnuplot"):
    def bars(name, title, ylabel, series, labels):
        """one SVG: per category, a point with its [min, max] bar for each series (skipped when empty)"""
        dat = os.path.join(work, name + ".dat")
        plots = []
        with open(dat, "w") as f:
            for si, (sname, vals) in enumerate(series):
                if all(v is None for v in vals):
                    continue
                off = (si - (len(series) - 1) / 2) * 0.12
                f.write("# %s\n" % sname)
                for i, v in enumerate(vals):
                    if v is not None:
                        f.write("%g %g %g %g\n" % (i + off, v[0], v[1], v[2]))
                f.write("\n\n")
                plots.append("'%s' index %d using 1:2:3:4 with yerrorbars pt 7 ps 0.7 lw 1.5 title '%s'" % (dat, len(plots), sname))
        if not plots:
            return
        xt = ", ".join('"%s" %d' % (l, i) for i, l in enumerate(labels))
        gp = ("set terminal svg size 760,420 noenhanced\nset output '%s'\nset title '%s'\nset ylabel '%s'\nset grid ytics\n"
              "set xtics (%s) rotate by 30 right\nset bmargin 7\nset xrange [-0.6:%g]\nset yrange [0:*]\nset key outside right\nplot %s\n" % (
                  os.path.join(work, name + ".svg"), title, ylabel, xt, len(labels) - 0.4, ", ".join(plots)))
        g = subprocess.run(["gnuplot"], input=gp.encode(), capture_output=True)
        if g.returncode == 0:
            svgs.append(name + ".svg")
        else:
            sys.stderr.write("bench-peer: gnuplot (%s): %s\n" % (name, g.stderr.decode(errors="replace").strip()))

    lab = [p[0] for p in plot_plain]
    bars("plain-decode", "plain decode tok/s (median, min-max)", "tok/s",
         [("specula", [p[1] for p in plot_plain]), ("llama.cpp", [p[2] for p in plot_plain])], lab)
    bars("plain-prefill", "prefill tok/s (median, min-max)", "tok/s",
         [("specula", [p[3] for p in plot_plain]), ("llama.cpp", [p[4] for p in plot_plain])], lab)
    bars("spec-speedup", "speculative speedup over plain decoding in the same engine", "speedup",
         [("specula", [p[1] for p in plot_spec]), ("llama.cpp", [p[2] for p in plot_spec])], [p[0] for p in plot_spec])
    modes = ["specula " + m for m in modes_sp] + ["llama.cpp " + m for m in modes_ll]
    bars("ngram-speedup", "n-gram drafting, copy-heavy prompts: speedup over plain in the same engine", "speedup",
         [(m, [p[1].get(m) for p in plot_ng]) for m in modes], [p[0] for p in plot_ng])
    w("Plots: " + ", ".join("`%s`" % s for s in svgs) + "." if svgs else "Plots: none (no figures to plot).")
else:
    w("Plots: not drawn (gnuplot is not installed).")
text = "\n".join(out) + "\n"
tmp = os.path.join(work, "BENCHMARKS.md.tmp")
open(tmp, "w").write(text)
os.replace(tmp, os.path.join(work, "BENCHMARKS.md"))
sys.stdout.write(text)

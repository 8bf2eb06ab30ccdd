#!/usr/bin/env python3
"""bench-synthetic-report.py WORK G — the tables and plots of tools/bench-synthetic.sh.

Reads WORK/runs/SHAPE__TYPE__KIND__tTH__rR.json (bench-spec --spec-synthetic --json sweeps) and
WORK/runs/serve__SHAPE__TYPE__KIND__POLICY__rR.json (bench-serve.mjs's closing JSON line; the older
serve__SHAPE__TYPE__rR.json is dspark, auto); writes WORK/synthetic.md
with medians over rounds and, when gnuplot is installed, speedup-vs-tau-SHAPE.svg per shape and
serve-ratio.svg. Every table is marked: synthetic acceptance is a benchmark mode, not lossless."""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

work, G = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 7
cells = {}  # (shape, type, kind, threads, P) -> [pass reports]
for path in sorted(glob.glob(os.path.join(work, "runs", "*__t*__r*.json"))):
    m = re.match(r"(.+?)__(.+?)__(.+?)__t(\d+)__r(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    try:
        rep = json.load(open(path))
    except (OSError, ValueError):
        continue
    for p in rep.get("sweep", []):
        key = (m.group(1), m.group(2), m.group(3), int(m.group(4)), ",".join("%g" % x for x in p["synthetic_p"]))
        cells.setdefault(key, []).append(p)

med = lambda ps, k: statistics.median(p[k] for p in ps)
lines = ["SYNTHETIC ACCEPTANCE (benchmark only, NOT lossless): `bench-spec --spec-synthetic`, "
         "--spec-always --draft-max %d; medians over rounds." % G, "",
         "| shape | type | drafter | threads | P | τ expected | τ | speedup | draft ms/round | verify ms/round | plain ms/token |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
plots = {}  # shape -> {(type, kind, threads): [(tau, speedup)]}
for key in sorted(cells):
    ps = cells[key]
    sh, ty, kd, th, P = key
    lines.append("| %s | %s | %s | %d | %s | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2f |" % (
        sh, ty, kd, th, P, med(ps, "expected_tau"), med(ps, "tau"), med(ps, "speedup"), med(ps, "draft_ms_per_round"),
        med(ps, "verify_ms_per_round"), med(ps, "plain_ms_per_token")))
    plots.setdefault(sh, {}).setdefault((ty, kd, th), []).append((med(ps, "tau"), med(ps, "speedup")))

serve = {}  # (shape, type, kind, policy) -> {clients: [spec/plain]}
splain = {}  # the same -> {clients: [plain tok/s]}
sfrom = {}  # the same -> {clients: [share of the spec cell's tokens that came from the drafter]}
for path in sorted(glob.glob(os.path.join(work, "runs", "serve__*__r*.json"))):
    base = os.path.basename(path)
    m = re.match(r"serve__(.+?)__(.+?)__(.+?)__(.+?)__r\d+\.json$", base) or re.match(r"serve__(.+?)__(.+?)__r\d+\.json$", base)
    if not m:
        continue
    key = m.groups() if len(m.groups()) == 4 else m.groups() + ("dspark", "auto")
    try:
        rows = json.load(open(path))["rows"]
    except (OSError, ValueError, KeyError):
        continue
    by = {}
    for row in rows:
        by.setdefault(row.get("clients"), {})[row.get("mode") == "spec"] = row
    for c, v in by.items():
        if v.get(False) and v[False].get("tps"):
            serve.setdefault(key, {}).setdefault(c, []).append(v.get(True, {}).get("tps", 0) / v[False]["tps"])
            splain.setdefault(key, {}).setdefault(c, []).append(v[False]["tps"])
            fr = (v.get(True) or {}).get("from") or {}
            if sum(fr.values()):
                sfrom.setdefault(key, {}).setdefault(c, []).append(fr.get("drafter", 0) / sum(fr.values()))
if serve:
    lines += ["", "Server (SYNTHETIC acceptance): aggregate tok/s, spec ÷ plain, medians over rounds; policy auto = the "
              "server's cost model (`--draft-max %d`), fixedK = K drafts at every step (`--spec-max-slots 0 --draft-max "
              "K`); the last columns: plain aggregate tok/s at 1 and 8 clients, and the share of the speculative "
              "tokens that were accepted drafts at 1 and 8 clients." % G, "",
              "| shape | type | drafter | policy | " + " | ".join("%s clients" % c for c in (1, 2, 4, 8)) +
              " | plain tok/s 1 / 8 | from the drafter 1 / 8 |", "|---|---|---|---|---|---|---|---|---|---|"]
    md = lambda d, c, f: f % statistics.median(d[c]) if d and c in d else "-"
    for key, d in sorted(serve.items()):
        lines.append("| %s | %s | %s | %s | " % key + " | ".join(md(d, c, "%.2fx") for c in (1, 2, 4, 8)) +
                     " | %s / %s | %s / %s |" % (md(splain.get(key), 1, "%.1f"), md(splain.get(key), 8, "%.1f"),
                                                 md(sfrom.get(key), 1, "%.2f"), md(sfrom.get(key), 8, "%.2f")))
open(os.path.join(work, "synthetic.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))

if shutil.which("gnuplot"):
    for sh, series in plots.items():
        dat, plot = os.path.join(work, "tau-%s.dat" % sh), []
        with open(dat, "w") as f:
            for i, (name, pts) in enumerate(sorted(series.items())):
                f.write("# %s %s t%d\n" % name + "".join("%.4f %.4f\n" % p for p in sorted(pts)) + "\n\n")
                plot.append("'%s' index %d using 1:2 with linespoints title '%s %s t%d'" % ((dat, i) + name))
        gp = ("set terminal svg size 720,440\nset output '%s'\nset title '%s: speedup vs tau (SYNTHETIC acceptance, "
              "not lossless)'\nset xlabel 'tau (tokens per verify)'\nset ylabel 'speedup over plain'\nset grid\n"
              "set key left top\nplot %s\n" % (os.path.join(work, "speedup-vs-tau-%s.svg" % sh), sh, ", ".join(plot)))
        subprocess.run(["gnuplot"], input=gp.encode(), check=False)
    if serve:
        dat, plot = os.path.join(work, "serve.dat"), []
        with open(dat, "w") as f:
            for i, (key, d) in enumerate(sorted(serve.items())):
                f.write("".join("%d %.4f\n" % (c, statistics.median(d[c])) for c in sorted(d)) + "\n\n")
                plot.append("'%s' index %d using 1:2 with linespoints title '%s %s %s %s'" % ((dat, i) + key))
        gp = ("set terminal svg size 720,440\nset output '%s'\nset title 'server: spec / plain aggregate tok/s "
              "(SYNTHETIC acceptance)'\nset xlabel 'clients'\nset ylabel 'spec / plain'\nset logscale x 2\nset grid\n"
              "plot %s\n" % (os.path.join(work, "serve-ratio.svg"), ", ".join(plot)))
        subprocess.run(["gnuplot"], input=gp.encode(), check=False)

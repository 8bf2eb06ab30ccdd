#!/bin/sh
# `make bench`: the embedded pair's figures, each a ratio measured REPS times (default 5) and
# reported as median and min–max, since the machine is noisy. Each repetition runs, interleaved:
#   greedy          `specula run --json` (plain and speculative per prompt, the default policy)
#   greedy-always   the same with --spec-always (a full block every round)
#   t0.6 t0.8 t1.0  sampling at these temperatures (seed = the repetition), default policy
#   verify          bench-verify: the cost of verifying k tokens ÷ one decode step
# Figures: speedup and τ per run kind; draft cost per round ÷ plain step and the profile's split
# (docs/ROUND_COST.md) from greedy-always; 8-token verify ÷ plain step; rounds without drafts.
# QWEN=1 adds the same on a random qwen3-0.6b-preset target with a DSpark drafter trained on its
# own greedy outputs (96 random prompts, 48 tokens each) for QWEN_STEPS steps (200); the target,
# shards and drafter are kept in $QWEN_WORK (build/bench-qwen) and reused by later runs.
# DEFAULT=0 leaves out the embedded pair (with QWEN=1: the qwen pair alone); KINDS picks run kinds.
# Writes $OUT/report.json (every run's JSON under $OUT/runs/) and, with gnuplot, $OUT/verify.svg
# and $OUT/accept.svg.
set -eu
cd "$(dirname "$0")/.."
B=${SPECULA:-build/specula}
D=${D:-models/default}
OUT=${OUT:-build/bench}
N=${N:-96}
REPS=${REPS:-5}
QWEN=${QWEN:-0}
DEFAULT=${DEFAULT:-1}
QWEN_STEPS=${QWEN_STEPS:-200}
KINDS=${KINDS:-"greedy greedy-always t0.6 t0.8 t1.0"} # a subset must keep greedy, greedy-always and t0.8
mkdir -p "$OUT/runs"
[ -f "$D/target/config.json" ] && [ -f "$D/drafter/config.json" ] || { echo "bench: no embedded pair in $D" >&2; exit 1; }

bench_pair() { # NAME TARGET DRAFTER [run args...]
    name=$1 t=$2 dr=$3
    shift 3
    rep=1
    while [ "$rep" -le "$REPS" ]; do
        for kind in $KINDS; do
            case $kind in
                greedy) extra= ;;
                greedy-always) extra=--spec-always ;;
                t*) extra="--temp ${kind#t} --seed $rep" ;;
            esac
            echo "bench: $name rep $rep/$REPS $kind" >&2
            # shellcheck disable=SC2086
            "$B" run -q --json -n "$N" -m "$t" -md "$dr" $extra "$@" > "$OUT/runs/$name-$kind-$rep.json"
        done
        "$B" bench-verify -m "$t" --k-max 16 --json > "$OUT/runs/$name-verify-$rep.json"
        rep=$((rep + 1))
    done
}

[ "$DEFAULT" = 0 ] || bench_pair default "$D/target" "$D/drafter"

if [ "$QWEN" = 1 ]; then
    # a random Qwen3-0.6B-shaped target; its drafter learns the target's own greedy continuations
    # of random prompts (regen), DSpark block 7, 2 layers, QWEN_STEPS steps
    W=${QWEN_WORK:-build/bench-qwen}
    mkdir -p "$W"
    [ -f "$W/target/config.json" ] || "$B" new-model --arch qwen3 --preset qwen3-0.6b --seed 1 -o "$W/target"
    if [ ! -f "$W/prompts.jsonl" ]; then
        python3 - "$W" <<'PY'
import json, random, sys
w = sys.argv[1]
r = random.Random(5)
def ids(n): return [r.randrange(1000, 30000) for _ in range(n)]
with open(w + "/train.jsonl", "w") as f:
    for _ in range(96):
        f.write(json.dumps({"ids": ids(24), "resp_start": 24}) + "\n")
with open(w + "/prompts.jsonl", "w") as f:
    for _ in range(4):
        f.write(json.dumps({"prompt_ids": ids(24)}) + "\n")
PY
    fi
    [ -d "$W/shards" ] || "$B" regen -m "$W/target" --data "$W/train.jsonl" -o "$W/shards" --generate 48 -q
    [ -f "$W/drafter/config.json" ] || "$B" train --arch dspark -m "$W/target" --data "$W/shards" -o "$W/drafter" \
        --steps "$QWEN_STEPS" --layers 2 --ctx 128 --batch 16 -q
    N_SAVE=$N
    N=${QWEN_N:-32}
    bench_pair qwen3-0.6b "$W/target" "$W/drafter" --prompts "$W/prompts.jsonl"
    N=$N_SAVE
fi

load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
python3 - "$OUT" "$REPS" "$load" "$KINDS" <<'EOF_PY'
import glob, json, os, statistics, sys
out, reps, load, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()

def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}

def fmt(s, w=5):
    return "n/a" if s is None else f"{s['median']:.{2 if w else 3}f} [{s['min']:.2f}-{s['max']:.2f}]"

report = {"loadavg_end": load, "repetitions": reps, "pairs": {}}
for name in sorted({os.path.basename(p).split("-greedy-")[0] for p in glob.glob(out + "/runs/*-greedy-1.json")}):
    runs = {k: [json.load(open(f"{out}/runs/{name}-{k}-{r}.json")) for r in range(1, reps + 1)] for k in kinds}
    ver = [json.load(open(f"{out}/runs/{name}-verify-{r}.json")) for r in range(1, reps + 1)]
    p = {}
    for k in kinds:
        rs = runs[k]
        p[k] = {"speedup": spread([x["speedup"] for x in rs]), "tau": spread([x["tau"] for x in rs]),
                "rounds_without_drafts": spread([x["rounds_without_drafts"]["total"] / max(1, x["rounds"]) for x in rs])}
        if k.startswith("greedy"):
            p[k]["identical"] = all(x.get("identical", False) for x in rs)
    prof = [x["profile"] for x in runs["greedy-always"]]
    p["draft_per_round"] = spread([x["draft"] for x in prof])
    p["verify_per_round"] = spread([x["verify"] for x in prof])
    p["engine_per_round"] = spread([x["engine"] for x in prof])
    parts = sorted({k for x in prof for k in x["parts"]})
    p["profile_parts"] = {k: spread([x["parts"].get(k, 0) for x in prof]) for k in parts}
    p["verify8"] = spread([v["ratio"][v["k"].index(8)] for v in ver if 8 in v["k"]])
    p["verify_curve"] = {str(k): spread([v["ratio"][v["k"].index(k)] for v in ver]) for k in ver[0]["k"]}
    p["plain_step_ms"] = spread([x["plain_ms_per_token"] for x in runs["greedy"]])
    p["accept_per_position"] = {k: [statistics.median(col) for col in zip(*[x["accept_per_position"] for x in runs[k]])]
                                for k in ("greedy-always", "t0.8")}
    report["pairs"][name] = p

with open(out + "/report.json.tmp", "w") as f:
    json.dump(report, f, indent=1)
os.replace(out + "/report.json.tmp", out + "/report.json")

print(f"load average at the end: {load}; {reps} repetitions; median [min-max] of each ratio")
for name, p in report["pairs"].items():
    print(f"\n== {name} (plain step {p['plain_step_ms']['median']:.2f} ms)")
    print(f"{'run':15s} {'speedup':>20s} {'tau':>20s} {'no-draft rounds':>20s}")
    for k in kinds:
        x = p[k]
        ident = "" if "identical" not in x else ("  identical" if x["identical"] else "  NOT IDENTICAL")
        print(f"{k:15s} {fmt(x['speedup']):>20s} {fmt(x['tau']):>20s} {fmt(x['rounds_without_drafts']):>20s}{ident}")
    print(f"draft per round / plain step   {fmt(p['draft_per_round'])}")
    print(f"verify per round / plain step  {fmt(p['verify_per_round'])}  (8-token verify forward: {fmt(p['verify8'])})")
    print(f"engine per round / plain step  {fmt(p['engine_per_round'])}")
    print("profile (greedy-always, per round / plain step): " +
          ", ".join(f"{k} {v['median']:.3f}" for k, v in p["profile_parts"].items()))
EOF_PY

if [ "$DEFAULT" != 0 ] && command -v gnuplot > /dev/null; then
    python3 - "$OUT" <<'EOF_PY'
import json, sys
out = sys.argv[1]
p = json.load(open(out + "/report.json"))["pairs"]["default"]
with open(out + "/verify.dat", "w") as f:
    for k, s in p["verify_curve"].items():
        f.write(f"{k} {s['median']} {s['min']} {s['max']}\n")
with open(out + "/accept.dat", "w") as f:
    a, b = p["accept_per_position"]["greedy-always"], p["accept_per_position"]["t0.8"]
    for i in range(max(len(a), len(b))):
        f.write(f"{i + 1} {a[i] if i < len(a) else 'NaN'} {b[i] if i < len(b) else 'NaN'}\n")
EOF_PY
    gnuplot <<EOF_GP
set terminal svg size 640,400
set output "$OUT/verify.svg"
set title "verify cost of k tokens / one decode step (embedded target; median, min-max)"
set xlabel "k (tokens verified in one forward)"; set ylabel "cost / decode step"; set grid
plot "$OUT/verify.dat" using 1:2:3:4 with yerrorlines title "specula", x title "k (no batching gain)", 1 title "one step"
set output "$OUT/accept.svg"
set title "acceptance per draft position (held-out prompts, median of runs)"
set xlabel "draft position"; set ylabel "all drafts up to here accepted"; set yrange [0:1]
plot "$OUT/accept.dat" using 1:2 with linespoints title "DSpark greedy", "" using 1:3 with linespoints title "DSpark temp 0.8"
EOF_GP
fi
echo "bench: wrote $OUT/report.json" >&2

#!/bin/sh
# `make bench`: the embedded pair's figures in one JSON report plus plots (issue 8, item 6).
#   decode       bench-decode: tok/s and the fraction of the memory roofline
#   verify       bench-verify: the cost of verifying k tokens relative to one decode step
#   runs         `specula run --json` on the held-out prompts: DSpark greedy (full block of 7),
#                DSpark with the hardware-aware scheduler, DSpark sampling at --temp 0.8, and the
#                n-gram drafter for comparison; each with speedup, tau, acceptance per position
#                and the time per round (draft, verify, other) against a plain step
# Writes $OUT/report.json and, when gnuplot is installed, $OUT/verify.svg and $OUT/accept.svg.
# The machine is shared and noisy: compare the ratios, and rerun when the load is high.
set -eu
cd "$(dirname "$0")/.."
B=${SPECULA:-build/specula}
D=${D:-models/default}
OUT=${OUT:-build/bench}
N=${N:-96}
mkdir -p "$OUT"
T="$D/target"
[ -f "$T/config.json" ] && [ -f "$D/drafter/config.json" ] || { echo "bench: no embedded pair in $D" >&2; exit 1; }

echo "bench: decode" >&2
"$B" bench-decode -m "$T" --json > "$OUT/decode.json"
echo "bench: verify curve" >&2
"$B" bench-verify -m "$T" --k-max 16 --json > "$OUT/verify.json"
run() { # NAME ARGS...: one `specula run --json`
    name=$1; shift
    echo "bench: run $name" >&2
    "$B" run -q --json -n "$N" "$@" > "$OUT/run-$name.json"
}
run dspark
run dspark-schedule --schedule auto
run dspark-temp0.8 --temp 0.8 --seed 1
run ngram --spec ngram

load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
{
    printf '{"target": "%s", "drafter": "%s", "tokens_per_prompt": %s, "loadavg": "%s",\n' "$T" "$D/drafter" "$N" "$load"
    printf ' "decode": %s,\n "verify": %s,\n "runs": {' "$(cat "$OUT/decode.json")" "$(cat "$OUT/verify.json")"
    sep=
    for name in dspark dspark-schedule dspark-temp0.8 ngram; do
        printf '%s\n  "%s": %s' "$sep" "$name" "$(cat "$OUT/run-$name.json")"
        sep=,
    done
    printf '}}\n'
} > "$OUT/report.json.tmp"
mv "$OUT/report.json.tmp" "$OUT/report.json"

if command -v gnuplot > /dev/null && command -v python3 > /dev/null; then
    python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
r = json.load(open(out + "/report.json"))
with open(out + "/verify.dat", "w") as f:
    for k, x in zip(r["verify"]["k"], r["verify"]["ratio"]):
        f.write(f"{k} {x}\n")
with open(out + "/accept.dat", "w") as f:
    names = ["dspark", "dspark-temp0.8", "ngram"]
    rows = [r["runs"][n]["accept_per_position"] for n in names]
    for k in range(max(len(x) for x in rows)):
        f.write(f"{k + 1} " + " ".join(str(x[k]) if k < len(x) else "NaN" for x in rows) + "\n")
EOF
    gnuplot <<EOF
set terminal svg size 640,400
set output "$OUT/verify.svg"
set title "verify cost of k tokens / one decode step (embedded target)"
set xlabel "k (tokens verified in one forward)"; set ylabel "cost / decode step"; set grid
plot "$OUT/verify.dat" using 1:2 with linespoints title "specula", x title "k (no batching gain)", 1 title "one step"
set output "$OUT/accept.svg"
set title "acceptance per draft position (held-out prompts)"
set xlabel "draft position"; set ylabel "accepted / drafted"; set yrange [0:1]
plot "$OUT/accept.dat" using 1:2 with linespoints title "DSpark greedy", "" using 1:3 with linespoints title "DSpark temp 0.8", "" using 1:4 with linespoints title "n-gram greedy"
EOF
fi
python3 - "$OUT/report.json" <<'EOF' 2>/dev/null || cat "$OUT/report.json"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"load {r['loadavg']}; decode roofline fraction {r['decode'].get('roofline_fraction', 0):.2f}")
print("verify k:ratio " + " ".join(f"{k}:{x:.2f}" for k, x in zip(r["verify"]["k"], r["verify"]["ratio"])))
print(f"{'run':18s} {'speedup':>8s} {'tau':>6s} {'plain':>8s} {'spec':>8s} {'draft':>6s} {'verify':>6s} {'other':>6s} identical")
for n, x in r["runs"].items():
    print(f"{n:18s} {x['speedup']:8.2f} {x['tau']:6.2f} {x['plain_tps']:8.1f} {x['spec_tps']:8.1f} "
          f"{x['draft_ms_per_round']:6.2f} {x['verify_ms_per_round']:6.2f} {x['other_ms_per_round']:6.2f} {x.get('identical', 'n/a')}")
EOF
echo "bench: wrote $OUT/report.json" >&2

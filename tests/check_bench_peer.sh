#!/bin/sh
# `make bench-peer` in its reduced form, end to end, without llama.cpp (tools/bench-peer.sh,
# docs/BENCHMARKS.md): the qwen3 tiny preset in Q8_0 / Q4_0 / Q4_K_M, the embedded pair, one
# repetition of a few tokens. It must say that the llama.cpp columns are skipped, mark them
# "n/a", and still write every table with specula's figures (and the plots when gnuplot is
# installed). Prints "ok ..." / "FAIL ..." lines like the test programs.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
fail=0
check() { if [ "$1" -eq 0 ]; then echo "ok $2"; else echo "FAIL $2"; fail=1; fi; }
if ! command -v python3 > /dev/null; then
    echo "ok bench-peer skipped: no python3 (tools/bench-peer-report.py writes its tables)"
    exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT INT TERM

t0=$(date +%s)
REDUCED=1 ROUNDS=1 LOCK='' SPECULA="$BUILD/specula" sh tools/bench-peer.sh "$W/out" > "$W/stdout" 2> "$W/stderr"
rc=$?
check $rc "bench-peer (reduced, no LLAMA_BIN) exits 0 in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || tail -20 "$W/stderr"
grep -q 'no LLAMA_BIN given: the llama.cpp columns are skipped' "$W/stderr"
check $? "it says that the llama.cpp columns are skipped"
M=$W/out/BENCHMARKS.md
[ -s "$M" ]
check $? "BENCHMARKS.md written"
for h in '### Plain decode and prefill' '### Speculative decoding with the same drafter' '### n-gram drafting on copy-heavy prompts' \
    'Machine: ' 'REDUCED form'; do
    grep -q "$h" "$M"
    check $? "BENCHMARKS.md has \"$h\""
done
# every plain row: specula decode and prefill are numbers, llama.cpp's n/a
for t in Q8_0 Q4_0 Q4_K_M; do for th in 1 2; do
    grep -Eq "^\| $t \| $th \| [0-9.]+ \[[0-9.]+–[0-9.]+\] \| n/a \(no LLAMA_BIN\) \| n/a \(no LLAMA_BIN\) \| [0-9.]+ \[" "$M"
    check $? "plain $t at $th threads: specula figures, llama.cpp n/a"
done; done
grep -Eq '^\| DSpark \(embedded pair, block [0-9]+\) \| 1 \| [0-9.]+ \[.*\| [0-9.]+× \[' "$M"
check $? "DSpark row with specula's speedup"
grep -Eq '^\| draft model .* \| 1 \| [0-9.]+ \[' "$M"
check $? "draft-model row"
grep -Eq '^\| EAGLE-3 \(.*\) \| 2 \| [0-9.]+ \[.*\| [0-9.]+× \[' "$M"
check $? "EAGLE-3 row"
for c in copy-code/greedy copy-code/t0.8 copy-chat/greedy copy-chat/t0.8; do for m in plain ngram suffix; do
    grep -Eq "^\| $c \| 2 \| specula: $m \| [0-9.]+ \[" "$M"
    check $? "n-gram table: $c specula $m at 2 threads"
done; done
n=$(grep -c 'llama.cpp: plain, ngram-simple, ngram-mod, ngram-cache | n/a (no LLAMA_BIN)' "$M")
[ "$n" -eq 8 ]
check $? "n-gram table: llama.cpp rows n/a ($n of 8)"
if command -v gnuplot > /dev/null; then
    for s in plain-decode plain-prefill spec-speedup ngram-speedup; do
        grep -q '</svg>' "$W/out/$s.svg" 2> /dev/null
        check $? "$s.svg drawn"
    done
fi
exit $fail

#!/bin/sh
# run.sh NAME|all SECONDS [libFuzzer flags...] — run build-fuzz/fuzz_NAME (or every target,
# FUZZ_JOBS at once, default one after another) for SECONDS each on its seeds (build-fuzz/seeds/NAME) and its growing corpus
# (build-fuzz/corpus/NAME), replaying first every past finding in fuzz/regressions/NAME/. A crash, sanitizer report, leak, timeout (10 s per input) or memory
# blow-up (2 GB) is a finding: the input is saved under build-fuzz/findings/ and the exit status
# is non-zero. One line per target: executions, executions per second, edges covered.
cd "$(dirname "$0")/.." || exit 1
name=$1; secs=${2:-60}
[ -n "$name" ] || { echo "usage: fuzz/run.sh NAME|all SECONDS" >&2; exit 2; }
shift; [ $# -gt 0 ] && shift
if [ "$name" = all ]; then
    names=$(for f in build-fuzz/fuzz_*; do [ -f "$f" ] && [ -x "$f" ] && echo "${f#build-fuzz/fuzz_}"; done)
else
    names=$name
fi
[ -n "$names" ] || { echo "fuzz: no targets in build-fuzz/ (make fuzz-build)" >&2; exit 2; }
mkdir -p build-fuzz/findings build-fuzz/logs
# one target: its run, then one verdict line in build-fuzz/logs/NAME.verdict (exit status 1 on a
# finding); FUZZ_JOBS targets (default 1) run at once, each a single process
one() {
    n=$1; shift
    bin=build-fuzz/fuzz_$n
    out=build-fuzz/logs/$n.verdict
    [ -x "$bin" ] || { echo "fuzz: no $bin (make fuzz-build)" > "$out"; return 1; }
    mkdir -p "build-fuzz/corpus/$n" "build-fuzz/seeds/$n"
    log=build-fuzz/logs/$n.log
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
        "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="build-fuzz/findings/$n-" "$@" "build-fuzz/corpus/$n" "build-fuzz/seeds/$n" \
        $(ls -d "fuzz/regressions/$n" 2>/dev/null) >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
    if [ $rc -ne 0 ]; then
        { echo "FAIL fuzz_$n: exit $rc after ${runs:-?} runs; the log ends:"; tail -40 "$log"; } > "$out"
        return 1
    fi
    echo "ok fuzz_$n: ${runs:-?} runs in ${secs}s, ${rate:-?} exec/s, ${cov:-?} edges, no finding" > "$out"
}
jobs=${FUZZ_JOBS:-1}
fail=0
batch=""
report() { # the verdicts of the batch that just ended
    wait
    for b in $batch; do
        cat "build-fuzz/logs/$b.verdict"
        grep -q '^ok ' "build-fuzz/logs/$b.verdict" || fail=1
    done
    batch=""
}
for n in $names; do
    one "$n" "$@" &
    batch="$batch $n"
    [ "$(echo $batch | wc -w)" -lt "$jobs" ] || report
done
report
exit $fail

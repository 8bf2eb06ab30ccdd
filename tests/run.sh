#!/bin/sh
# Run every test program of the given build directories (default: build) from the repo root,
# then print one closing line "N passed, N failed" over all test cases.
cd "$(dirname "$0")/.." || exit 1
[ $# -gt 0 ] || set -- build
# Sanitizer builds: LeakSanitizer is on (a leak makes a program exit non-zero, which fails it),
# UBSan reports abort. Only the mpirun cases of test_train_mpi turn leaks off (Open MPI's runtime).
export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
pass=0; fail=0; log=$(mktemp)
for dir in "$@"; do
    for t in "$dir"/tests/test_*; do
        [ -x "$t" ] || continue
        echo "== $t"
        "$t" >"$log" 2>&1; rc=$?
        cat "$log"
        p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log")
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $t exited with status $rc"; fi
        pass=$((pass + p)); fail=$((fail + f))
    done
done
# shell checks (tests/check_*.sh), once, against the first build directory
for c in tests/check_*.sh; do
    [ -f "$c" ] || continue
    echo "== $c"
    sh "$c" "$1" >"$log" 2>&1; rc=$?
    cat "$log"
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log")
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $c exited with status $rc"; fi
    pass=$((pass + p)); fail=$((fail + f))
done
rm -f "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

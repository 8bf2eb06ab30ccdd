#!/bin/sh
# Run every test program of the given build directories (default: build) from the repo root,
# then print one closing line "N passed, N failed" over all test cases.
#   sh tests/run.sh [--exec CMD] [DIR...] [TEST...]
# TEST names (test_kernels, ...) limit the run to those programs; --exec starts each program
# through CMD (e.g. qemu-aarch64-static for a cross build); SPECULA_TESTS_<program>=a,b runs
# only cases a and b of that program (harness.h's SPECULA_TESTS).
cd "$(dirname "$0")/.." || exit 1
exec_cmd=""
if [ "$1" = "--exec" ]; then exec_cmd=$2; shift 2; fi
dirs=""; only=""
for a in "$@"; do
    if [ -d "$a" ]; then dirs="$dirs $a"; else only="$only $a"; fi
done
[ -n "$dirs" ] || dirs=build
# Sanitizer builds: LeakSanitizer is on (a leak makes a program exit non-zero, which fails it),
# UBSan reports abort. Only the mpirun cases of test_train_mpi turn leaks off (Open MPI's runtime).
export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
pass=0; fail=0; log=$(mktemp)
for dir in $dirs; do
    for t in "$dir"/tests/test_*; do
        [ -x "$t" ] || continue
        name=${t##*/}
        if [ -n "$only" ]; then
            case " $only " in *" $name "*) ;; *) continue ;; esac
        fi
        echo "== $t"
        eval "cases=\${SPECULA_TESTS_$name:-}"
        t0=$(date +%s)
        SPECULA_TESTS=$cases $exec_cmd "$t" >"$log" 2>&1; rc=$?
        cat "$log"
        echo "-- $t: $(( $(date +%s) - t0 )) s"
        p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log")
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $t exited with status $rc"; fi
        pass=$((pass + p)); fail=$((fail + f))
    done
done
# shell checks (tests/check_*.sh), once, against the first build directory; not when only
# some test programs were asked for
first=${dirs# }; first=${first%% *}
[ -n "$only" ] || for c in tests/check_*.sh; do
    [ -f "$c" ] || continue
    echo "== $c"
    sh "$c" "$first" >"$log" 2>&1; rc=$?
    cat "$log"
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log")
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $c exited with status $rc"; fi
    pass=$((pass + p)); fail=$((fail + f))
done
rm -f "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

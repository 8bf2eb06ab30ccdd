#!/bin/sh
# valgrind-check.sh SPECULA — one valgrind memcheck run of a short plain generate and a short
# speculative generate (the embedded DSpark drafter) on the embedded default model, one thread.
# Any memory error or definite leak fails (exit 1). SPECULA must be built without AVX-512
# (valgrind does not decode it): `make valgrind` builds build-valgrind/specula for this.
cd "$(dirname "$0")/.." || exit 1
S=${1:-build-valgrind/specula}
M=models/default/target
D=models/default/drafter
command -v valgrind >/dev/null 2>&1 || { echo "valgrind-check: valgrind is not installed" >&2; exit 1; }
[ -x "$S" ] && [ -f "$M/config.json" ] || { echo "valgrind-check: need $S and $M" >&2; exit 1; }
VG="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite -q"
fail=0
check() {
    name=$1; shift
    out=$($VG "$S" "$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok valgrind $name"
    else
        echo "FAIL valgrind $name (exit $rc)"
        printf '%s\n' "$out" | tail -40
        fail=1
    fi
}
check generate generate -m "$M" -p "Once upon a time" -n 3 -t 1
if [ -f "$D/config.json" ]; then
    check generate-spec generate -m "$M" -p "Once upon a time" -n 4 -t 1 --spec dspark -md "$D"
else
    check generate-spec generate -m "$M" -p "Once upon a time" -n 4 -t 1 --spec ngram
fi
exit $fail

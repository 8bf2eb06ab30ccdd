#!/bin/sh
# `make check-install`: install into a scratch prefix, check the shared library's exports, and
# build and run examples/generate.c as an outside program would (pkg-config, installed header
# and library only). Prints "ok ..." / "FAIL ..." lines like the test programs.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
prefix=$(mktemp -d) || exit 1
trap 'rm -rf "$prefix"' EXIT
fail=0
check() { if [ "$1" -eq 0 ]; then echo "ok $2"; else echo "FAIL $2"; fail=1; fi; }

make -s BUILD="$BUILD" install PREFIX="$prefix" >/dev/null
check $? "install into a scratch prefix"

bad=$(nm -D --defined-only "$prefix/lib/libspecula.so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^sp_')
[ -z "$bad" ]
check $? "libspecula.so exports only sp_ symbols${bad:+ (also: $(echo $bad | head -c 200))}"
nm -D --defined-only "$prefix/lib/libspecula.so" | grep -q ' T sp_engine_generate$'
check $? "libspecula.so exports sp_engine_generate"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion specula)" = "$(sed -n 's/^#define SPECULA_VERSION "\([^"]*\)".*/\1/p' include/specula.h)" ]
check $? "pkg-config finds specula at the header's version"
${CC:-cc} -std=c11 -Wall -Wextra -Werror examples/generate.c $(pkg-config --cflags --libs specula) -o "$prefix/generate"
check $? "examples/generate.c builds against the installed library"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/generate" "$prefix/share/specula/default/target" \
    "$prefix/share/specula/default/drafter" "def add(a, b):" >"$prefix/out.txt" 2>"$prefix/err.txt"
rc=$?
cat "$prefix/err.txt"
check $rc "the example generates speculatively, output identical to plain decoding"
grep -q "drafter dspark" "$prefix/err.txt"
check $? "the example's drafter kind is detected as dspark"
[ -s "$prefix/out.txt" ]
check $? "the example streamed text"
exit $fail

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

version=$(sed -n 's/^#define SPECULA_VERSION "\([^"]*\)".*/\1/p' include/specula.h)
major=${version%%.*}
[ -f "$prefix/lib/libspecula.so.$version" ] && [ ! -L "$prefix/lib/libspecula.so.$version" ]
check $? "libspecula.so.$version is installed as a file"
[ "$(readlink "$prefix/lib/libspecula.so.$major")" = "libspecula.so.$version" ] &&
    [ "$(readlink "$prefix/lib/libspecula.so")" = "libspecula.so.$major" ]
check $? "libspecula.so -> libspecula.so.$major -> libspecula.so.$version"
soname=$(objdump -p "$prefix/lib/libspecula.so.$version" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "libspecula.so.$major" ]
check $? "the SONAME is libspecula.so.$major (it is '$soname')"
needed=$(objdump -p "$prefix/lib/libspecula.so.$version" | awk '$1 == "NEEDED" {print $2}')
! echo "$needed" | grep -q mpi
check $? "libspecula.so needs no MPI library (needs: $(echo $needed))"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
missing=
for flag in $(pkg-config --static --libs-only-l specula); do
    lib=${flag#-l}
    [ "$lib" = specula ] && continue
    found=$(${CC:-cc} -print-file-name="lib$lib.so")
    [ "$found" = "lib$lib.so" ] && found=$(${CC:-cc} -print-file-name="lib$lib.a")
    [ "$found" = "lib$lib.a" ] && missing="$missing $flag"
done
[ -z "$missing" ]
check $? "pkg-config --static names only libraries the linker finds${missing:+ (missing:$missing)}"
${CC:-cc} -std=c11 -Wall -Wextra -Werror examples/generate.c $(pkg-config --cflags specula) \
    "$prefix/lib/libspecula.a" $(pkg-config --static --libs-only-other --libs-only-l specula | sed 's/-lspecula//') \
    -o "$prefix/generate-static"
check $? "examples/generate.c links statically with pkg-config --static's flags"
[ "$(pkg-config --modversion specula)" = "$(sed -n 's/^#define SPECULA_VERSION "\([^"]*\)".*/\1/p' include/specula.h)" ]
check $? "pkg-config finds specula at the header's version"
${CC:-cc} -std=c11 -Wall -Wextra -Werror examples/generate.c $(pkg-config --cflags --libs specula) -o "$prefix/generate"
check $? "examples/generate.c builds against the installed library"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/generate" "$prefix/share/specula/default/target" \
    "$prefix/share/specula/default/drafter" "$(printf 'class Stack:\n    def __init__(self):\n        self.')" >"$prefix/out.txt" 2>"$prefix/err.txt"
rc=$?
cat "$prefix/err.txt"
check $rc "the example generates speculatively, output identical to plain decoding"
grep -q "drafter dspark" "$prefix/err.txt"
check $? "the example's drafter kind is detected as dspark"
[ -s "$prefix/out.txt" ]
check $? "the example streamed text"
exit $fail

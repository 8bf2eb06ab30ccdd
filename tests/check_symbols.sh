#!/bin/sh
# The global symbols of libspecula.a and libspecula.so: none from ggml's namespace and none
# without the project's prefix, so the library links statically beside ggml, llama.cpp or any
# other C library. Prints "ok ..." / "FAIL ..." lines like the test programs.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
fail=0
check() { if [ "$1" -eq 0 ]; then echo "ok $2"; else echo "FAIL $2"; fail=1; fi; }
# Allowed prefixes of a defined global symbol: sp_ for functions and data, SP_ for constant tables.
ALLOWED='^(sp_|SP_)'
for lib in "$BUILD/libspecula.a" "$BUILD/libspecula.so"; do
    [ -f "$lib" ] || { check 1 "$lib exists"; continue; }
    case $lib in *.so) opt=-D ;; *) opt= ;; esac
    syms=$(nm $opt -g --defined-only "$lib" 2>/dev/null | awk 'NF >= 3 && $2 ~ /^[A-Z]$/ {print $3}' | sort -u)
    n=$(echo "$syms" | grep -c .)
    [ "$n" -gt 0 ]
    check $? "$lib defines global symbols ($n)"
    bad=$(echo "$syms" | grep -E '^(ggml_|gguf_|llama_)')
    [ -z "$bad" ]
    check $? "$lib defines no ggml_ / gguf_ / llama_ names${bad:+ (has: $(echo $bad | head -c 300))}"
    bad=$(echo "$syms" | grep -Ev "$ALLOWED")
    [ -z "$bad" ]
    check $? "$lib defines only sp_ / SP_ globals${bad:+ (also: $(echo $bad | head -c 300))}"
done
exit $fail

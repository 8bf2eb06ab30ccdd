#!/bin/sh
# Print the linker version script of libspecula.so: the functions declared in the public
# header(s) given as arguments are global, every other symbol is local. So the shared library
# exports exactly the documented sp_* API (no tok_/st_/gguf_ internals to clash with other
# libraries), whatever the internal files name their functions.
set -e
echo "{"
echo "  global:"
for h in "$@"; do ${CC:-cc} -fpreprocessed -dD -E -P "$h"; done | grep -oE '\bsp_[a-z0-9_]+[[:space:]]*\(' | sed -e 's/[[:space:]]*($//' | sort -u |
    while read -r f; do echo "    $f;"; done
echo "  local: *;"
echo "};"

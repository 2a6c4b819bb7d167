#!/usr/bin/env bash
# Single-process CLI path: `troupe run` against a standalone `troupe-mock`, the same M-step
# script the bench runs (default 6: list, read, write, glob, grep, text), measured with
# `/usr/bin/time -v`. Usage: bench/cli-compare.sh [RUNS=5] [STEPS=6]
# Needs: cargo build --release -p troupe -p troupe-testkit -p troupe-bench
set -euo pipefail
RUNS=${1:-5}
STEPS=${2:-6}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REL="$ROOT/target/release"
for b in troupe troupe-mock troupe-bench; do
  [ -x "$REL/$b" ] || { echo "missing $REL/$b: cargo build --release -p troupe -p troupe-testkit -p troupe-bench" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "missing /usr/bin/time (GNU time)" >&2; exit 1; }

WORK=$(mktemp -d -t troupe-cli-bench-XXXXXX)
MOCK_PID=""
cleanup() {
  if [ -n "$MOCK_PID" ]; then kill "$MOCK_PID" 2>/dev/null || true; wait "$MOCK_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$REL/troupe-bench" --steps "$STEPS" --print-script > "$WORK/script.json"
mkfifo "$WORK/mock.out"
"$REL/troupe-mock" --script "$WORK/script.json" --port 0 > "$WORK/mock.out" &
MOCK_PID=$!
read -r LINE < "$WORK/mock.out"   # "listening on http://127.0.0.1:PORT/v1"
BASE=${LINE#listening on }

export TROUPE_CONFIG_CONTENT="{\"model\":\"mock/mock-model\",\"provider\":{\"mock\":{\"npm\":\"@ai-sdk/openai-compatible\",\"options\":{\"baseURL\":\"$BASE\",\"apiKey\":\"sk-bench\"},\"models\":{\"mock-model\":{\"name\":\"Mock model\"}}}}}"
export XDG_CONFIG_HOME="$WORK/config" TROUPE_CONFIG_DIR="$WORK/config" TROUPE_NO_STDIN=1

echo "mock at $BASE; $RUNS runs of a $STEPS-step session"
printf '%-4s %-10s %-10s %-10s %-12s\n' run wall_s user_s sys_s max_rss_mib
for i in $(seq 1 "$RUNS"); do
  WS="$WORK/ws-$i"
  "$REL/troupe-bench" --init-workspace "$WS"
  /usr/bin/time -v -o "$WORK/time-$i.txt" \
    "$REL/troupe" --db "$WORK/db-$i.sqlite" run --dir "$WS" "bench session $i: list, read, write, glob and grep this workspace" \
    > "$WORK/out-$i.txt" 2> "$WORK/err-$i.txt" || { echo "run $i failed:" >&2; cat "$WORK/err-$i.txt" "$WORK/time-$i.txt" >&2; exit 1; }
  W=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(k=1;k<=n;k++) s=s*60+a[k]; print s}' "$WORK/time-$i.txt")
  U=$(awk -F': ' '/User time/ {print $2}' "$WORK/time-$i.txt")
  S=$(awk -F': ' '/System time/ {print $2}' "$WORK/time-$i.txt")
  R=$(awk -F': ' '/Maximum resident/ {printf "%.1f", $2/1024}' "$WORK/time-$i.txt")
  printf '%-4s %-10s %-10s %-10s %-12s\n' "$i" "$W" "$U" "$S" "$R"
done
echo "last run's output:"
cat "$WORK/out-$RUNS.txt"

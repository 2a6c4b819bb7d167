#!/usr/bin/env bash
# Cluster bench (issue 18): N scripted tasks of S steps each, once as a local batch in one
# process and once on a cluster of W `troupe worker`s over NATS JetStream on this machine,
# with the same total concurrency (W × C). Prints both throughputs and the wall time per
# step each way; the difference is what going through the cluster costs per step here.
#
#   scripts/cluster-bench.sh                      # 1000 tasks × 10 steps, 2 workers × 16
#   N=200 S=5 W=2 C=8 scripts/cluster-bench.sh    # smaller
#
# Needs a NATS server with JetStream ($NATS, default nats://127.0.0.1:4222) and the release
# binaries (cargo build --release -p troupe -p troupe-testkit); BIN / MOCK override them.
# Each step but the last calls `glob` (a real tool call, a distinct pattern per step so the
# doom-loop guard stays quiet); the last answers. Everything lives in a temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
S=${S:-10}
W=${W:-2}
C=${C:-16}
NATS=${NATS:-nats://127.0.0.1:4222}
BIN=${BIN:-target/release/troupe}
MOCK=${MOCK:-target/release/troupe-mock}
BIN=$(realpath "$BIN")
MOCK=$(realpath "$MOCK")
work=$(mktemp -d)
pids=()
# Delete the bench's two streams (a JetStream API request over the plain NATS protocol).
delete_streams() {
  python3 - "$NATS" "$1" <<'PY' || true
import socket, sys
hostport = sys.argv[1].split("://", 1)[-1]
host, port = hostport.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.recv(4096)
msg = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
for name in (sys.argv[2].upper() + "_TASKS", sys.argv[2].upper() + "_RESULTS"):
    msg += b"PUB $JS.API.STREAM.DELETE." + name.encode() + b" 0\r\n\r\n"
s.sendall(msg + b"PING\r\n")
s.recv(4096)
PY
}
prefix="bench$$"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  delete_streams "$prefix"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/proj" "$work/home/config" "$work/home/tmp"
python3 - "$work" "$N" "$S" <<'PY'
import json, sys
work, n, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps = [{"tool_calls": [{"name": "glob", "arguments": {"pattern": f"nothing-{k}.none"}}]} for k in range(s - 1)]
steps.append({"text": "done"})
json.dump({"conversations": [{"steps": steps}]}, open(f"{work}/script.json", "w"))
with open(f"{work}/proj/tasks.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": f"t{i}", "prompt": f"task {i}"}) + "\n")
PY
"$MOCK" --script "$work/script.json" --port 0 > "$work/mock.out" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$work/mock.out")
cat > "$work/proj/troupe.json" <<JSON
{"model": "mock/mock-model", "provider": {"mock": {"npm": "@ai-sdk/openai-compatible",
 "options": {"baseURL": "$url", "apiKey": "bench"},
 "models": {"mock-model": {"limit": {"context": 1000000000, "output": 8192}}}}}}
JSON
export HOME="$work/home" TMPDIR="$work/home/tmp" TROUPE_CONFIG_DIR="$work/home/config"
export TROUPE_TITLE=0 TROUPE_SUMMARY=0 TROUPE_NO_STDIN=1
cd "$work/proj"
now() { date +%s.%N; }

t0=$(now)
TROUPE_DB="$work/local.db" "$BIN" batch tasks.jsonl --parallel $((W * C)) --out local.jsonl 2> local.err
t1=$(now)
local_s=$(echo "$t1 - $t0" | bc -l)

for i in $(seq "$W"); do
  TROUPE_DB="$work/cluster.db" "$BIN" worker --nats "$NATS" --cluster-prefix "$prefix" \
    --name "w$i" --concurrency "$C" 2> "w$i.err" &
  pids+=($!)
done
t0=$(now)
TROUPE_DB="$work/cluster.db" "$BIN" batch tasks.jsonl --cluster "$NATS" --cluster-prefix "$prefix" \
  --out cluster.jsonl 2> cluster.err
t1=$(now)
cluster_s=$(echo "$t1 - $t0" | bc -l)
for p in "${pids[@]:1}"; do kill -TERM "$p" 2>/dev/null || true; done

ok_local=$(grep -c '"status":"completed"' local.jsonl || true)
ok_cluster=$(grep -c '"status":"completed"' cluster.jsonl || true)
steps=$((N * S))
python3 - "$N" "$S" "$W" "$C" "$local_s" "$cluster_s" "$ok_local" "$ok_cluster" <<'PY'
import sys
n, s, w, c = map(int, sys.argv[1:5])
ls, cs = float(sys.argv[5]), float(sys.argv[6])
ok_l, ok_c = sys.argv[7], sys.argv[8]
steps = n * s
print(f"{n} tasks x {s} steps, concurrency {w * c} ({w} workers x {c} on the cluster)")
print(f"local batch, one process: {ls:7.2f} s  {n / ls:7.1f} tasks/s  {steps / ls:8.1f} steps/s  {ok_l} completed")
print(f"cluster, {w} workers:      {cs:7.2f} s  {n / cs:7.1f} tasks/s  {steps / cs:8.1f} steps/s  {ok_c} completed")
print(f"wall time per step: local {1000 * ls / steps:.3f} ms, cluster {1000 * cs / steps:.3f} ms; "
      f"cluster overhead {1000 * (cs - ls) / steps:+.3f} ms per step ({1000 * (cs - ls) / n:+.2f} ms per task)")
PY

#!/usr/bin/env bash
# Browser test of the web view served by `troupe serve`.
#
# Installs what it needs on a fresh Debian machine (as root; registries only): chromium from
# Debian (only if /usr/bin/chromium is missing) and playwright-core from npm (no browser
# download). Builds troupe + troupe-mock, starts troupe-mock with tests/browser/mock-script.json,
# writes a temp project whose troupe.json points a `mock` provider at it with bash on "ask",
# starts `troupe serve --port 0` there (with a password, so the page's ?token= path is tested),
# runs tests/browser/webview.test.mjs, the 250-session responsiveness test
# tests/browser/stress.test.mjs (fake API in Node), then checks `troupe monitor --once` against
# the same server. Servers are killed on exit.
#
# Usage: scripts/browser-test.sh            (screenshots in $ARTIFACTS_DIR, default target/artifacts)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ARTIFACTS_DIR="${ARTIFACTS_DIR:-$ROOT/target/artifacts}"
mkdir -p "$ARTIFACTS_DIR"
ARTIFACTS_DIR="$(cd "$ARTIFACTS_DIR" && pwd)"
export ARTIFACTS_DIR
PASSWORD="${BROWSER_TEST_PASSWORD:-browser-test-secret}"

say() { echo "browser-test: $*"; }
die() { echo "browser-test: FAILED: $*" >&2; exit 1; }

# ---- dependencies ------------------------------------------------------------------------
if [ ! -x /usr/bin/chromium ]; then
  [ "$(id -u)" = 0 ] || die "/usr/bin/chromium is missing and this is not root (apt-get install chromium)"
  say "installing chromium (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
command -v node >/dev/null || die "node is not installed"
if [ ! -f tests/browser/node_modules/playwright-core/package.json ]; then
  say "installing playwright-core (npm; no browser download)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix tests/browser --no-audit --no-fund \
    playwright-core@1 >/dev/null
fi

# ---- build -------------------------------------------------------------------------------
say "building troupe and troupe-mock"
cargo build -q -p troupe -p troupe-testkit
TROUPE="$ROOT/target/debug/troupe"
MOCK="$ROOT/target/debug/troupe-mock"

# ---- servers -----------------------------------------------------------------------------
WORK="$(mktemp -d -t troupe-browser-XXXXXX)"
PIDS=()
cleanup() {
  local code=$?
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ "$code" != 0 ]; then
    for f in mock.err serve.err; do
      if [ -s "$WORK/$f" ]; then
        cp "$WORK/$f" "$ARTIFACTS_DIR/browser-test-$f.log"
        echo "---- $f (last 40 lines; full copy in $ARTIFACTS_DIR/browser-test-$f.log)" >&2
        tail -n 40 "$WORK/$f" >&2
      fi
    done
  fi
  rm -rf "$WORK"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_line FILE PATTERN SECONDS PID: print the first line of FILE matching PATTERN.
wait_line() {
  local file=$1 pattern=$2 secs=$3 pid=$4 line
  for _ in $(seq 1 $((secs * 10))); do
    line="$(grep -m1 -E "$pattern" "$file" 2>/dev/null || true)"
    if [ -n "$line" ]; then
      echo "$line"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

"$MOCK" --script "$ROOT/tests/browser/mock-script.json" --port 0 \
  >"$WORK/mock.out" 2>"$WORK/mock.err" &
PIDS+=($!)
line="$(wait_line "$WORK/mock.out" '^listening on http' 30 "${PIDS[-1]}")" \
  || die "troupe-mock did not start: $(tail -n 5 "$WORK/mock.err")"
MOCK_URL="${line#listening on }"
say "mock provider at $MOCK_URL"

mkdir -p "$WORK/project" "$WORK/data" "$WORK/config"
cat >"$WORK/project/troupe.json" <<EOF
{
  "model": "mock/mock-model",
  "permission": {"bash": "ask"},
  "provider": {"mock": {
    "name": "Mock",
    "npm": "@ai-sdk/openai-compatible",
    "options": {"baseURL": "$MOCK_URL", "apiKey": "test"},
    "models": {"mock-model": {"name": "Mock", "limit": {"context": 128000, "output": 8192}}}
  }}
}
EOF
echo "hello" >"$WORK/project/README.md"
# A git project, so steps are snapshotted and the bash step's new file shows as its patch.
git -C "$WORK/project" init -q

(
  cd "$WORK/project"
  exec env -u OPENAI_API_KEY -u ANTHROPIC_API_KEY -u TROUPE_CONFIG_CONTENT \
    TROUPE_DB="$WORK/data/troupe.db" TROUPE_DATA_DIR="$WORK/data" TROUPE_CONFIG_DIR="$WORK/config" \
    TROUPE_SERVER_PASSWORD="$PASSWORD" TROUPE_LOG="${TROUPE_LOG:-warn}" \
    "$TROUPE" serve --port 0
) >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=($!)
line="$(wait_line "$WORK/serve.out" 'troupe server listening on http' 60 "${PIDS[-1]}")" \
  || die "troupe serve did not start: $(tail -n 5 "$WORK/serve.err")"
SERVER_URL="$(echo "$line" | grep -oE 'http://[^ ]+')"
SERVER_URL="${SERVER_URL%/}"
say "troupe server at $SERVER_URL"

# ---- the browser test --------------------------------------------------------------------
node "$ROOT/tests/browser/webview.test.mjs" "$SERVER_URL/?token=$PASSWORD" \
  || die "webview test (see messages above; screenshots in $ARTIFACTS_DIR)"

# ---- responsiveness with 250 live sessions (fake API, no troupe needed) --------------------
node "$ROOT/tests/browser/stress.test.mjs" || die "web view stress test"

# ---- troupe monitor --once against the same server ---------------------------------------
out="$("$TROUPE" monitor --once --password "$PASSWORD" "$SERVER_URL")" \
  || die "troupe monitor --once failed"
echo "$out" | grep -q '^runtime ' || die "monitor --once printed no runtime line:
$out"
echo "$out" | grep -qE '^troupe_[a-z_]+ [0-9]' || die "monitor --once printed no troupe_ counters:
$out"
say "monitor --once:"
echo "$out" | sed 's/^/  /'
if "$TROUPE" monitor --once "$SERVER_URL" >/dev/null 2>&1; then
  die "monitor without the password should fail"
fi

say "PASS (screenshot: $ARTIFACTS_DIR/webview.png)"

#!/usr/bin/env bash
# Quickstart: install troupe, get llama.cpp's server and a small model (cached under
# ~/.cache/troupe, so a second run starts in seconds), start the server on 127.0.0.1, ask the
# demo question in a sample project (the model reads a file through a real tool call, then
# answers), print a summary and the next steps, stop the server.
#
#   ./scripts/quickstart.sh ["your own prompt for the sample project"]
#
# Env: LLAMA_PORT (default 8080), TROUPE_CACHE (default ~/.cache/troupe),
#      CARGO_INSTALL_ROOT (where `cargo install` puts bin/troupe; default ~/.cargo),
#      QUICKSTART_KEEP_SERVER=1 leaves llama-server running at the end,
#      TROUPE_BIN=path uses that troupe binary instead of installing one.
# Sessions go to troupe's normal store (TROUPE_DB if set, else ~/.local/share/troupe/troupe.db).
# Exit status: 0 when the demo question got the expected answer through a tool call.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PORT="${LLAMA_PORT:-8080}"
export LLAMA_PORT="$PORT"
CACHE="${TROUPE_CACHE:-$HOME/.cache/troupe}"
T0=$(date +%s)
stage() { printf '\n==> [%s/5] %s  (%ss so far)\n' "$1" "$2" "$(( $(date +%s) - T0 ))" >&2; }

if [ -n "${TROUPE_BIN:-}" ]; then
  stage 1 "using TROUPE_BIN=$TROUPE_BIN (not installing)"
  BIN="$TROUPE_BIN"
  INSTALL_BIN=$(dirname "$BIN")
else
  stage 1 "installing troupe with cargo install --path . --locked (release build; ~9 min the first time on 2 cores)"
  cargo install --path . --locked
  INSTALL_BIN="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin"
  BIN="$INSTALL_BIN/troupe"
fi
[ -x "$BIN" ] || { echo "cargo install finished but $BIN is missing" >&2; exit 1; }
ON_PATH=0
if [ "$(command -v troupe 2>/dev/null || true)" = "$BIN" ]; then ON_PATH=1; fi

stage 2 "getting llama-server and SmolLM2-135M-Instruct (built once, then cached in $CACHE)"
eval "$(scripts/llama-setup.sh)"

stage 3 "writing the sample project"
SAMPLE="$CACHE/sample-project"
rm -rf "$SAMPLE"
DEMO_QUESTION=$(scripts/demo-project.sh "$SAMPLE" "$PORT")
PROMPT="${1:-$DEMO_QUESTION}"
echo "$SAMPLE: README.md, NOTES.md, src/calc.py and troupe.json (agent \"quickstart\", model local/smollm2)" >&2

stage 4 "starting llama-server on 127.0.0.1:$PORT"
STARTED=0
if curl -fsS --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  echo "a server already answers on port $PORT; using it (set LLAMA_PORT to use another port)" >&2
else
  LLAMA_ALIAS=smollm2 scripts/llama-server.sh start >/dev/null
  STARTED=1
fi
cleanup() {
  if [ "$STARTED" = 1 ] && [ "${QUICKSTART_KEEP_SERVER:-0}" != 1 ]; then
    "$ROOT/scripts/llama-server.sh" stop >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

stage 5 "troupe run \"$PROMPT\"  (in $SAMPLE)"
cd "$SAMPLE"
ANSWER_FILE="$CACHE/quickstart-answer.txt"
rm -f "$ANSWER_FILE"
t_run=$(date +%s%N)
TROUPE_NO_STDIN=1 "$BIN" run --title "troupe quickstart" -o "$ANSWER_FILE" "$PROMPT"
RUN_MS=$(( ($(date +%s%N) - t_run) / 1000000 ))
SID=$("$BIN" session list --format json --dir "$SAMPLE" --limit 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
CHECK=0
[ -n "${1:-}" ] || CHECK=1

SHOW="$CACHE/quickstart-session.json"
"$BIN" session show "$SID" --format json > "$SHOW"
set +e
python3 - "$SHOW" "$RUN_MS" "$CHECK" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
run_ms, check = int(sys.argv[2]), sys.argv[3] == "1"
assistants = [m for m in doc["messages"] if m["info"]["role"] == "assistant"]
tools = [p for m in assistants for p in m["parts"] if p["type"] == "tool"]
tok_in = sum(m["info"]["tokens"]["input"] + m["info"]["tokens"]["cache"]["read"] for m in assistants)
tok_out = sum(m["info"]["tokens"]["output"] for m in assistants)
answer = "".join(p["text"] for p in assistants[-1]["parts"] if p["type"] == "text").strip() if assistants else ""
print("\n==> summary", file=sys.stderr)
print(f"  session     {doc['info']['id']}  ({len(assistants)} model steps)", file=sys.stderr)
for t in tools:
    st = t["state"]
    print(f"  tool call   {t['tool']} {json.dumps(st.get('input', {}))} -> {st['status']}", file=sys.stderr)
if not tools:
    print("  tool call   none", file=sys.stderr)
print(f"  tokens      {tok_in} in, {tok_out} out", file=sys.stderr)
print(f"  time        {run_ms / 1000:.1f} s", file=sys.stderr)
print(f"  answer      {answer!r}", file=sys.stderr)
if check:
    ok = (any(t["tool"] == "read" and t["state"]["status"] == "completed"
              and t["state"]["input"].get("filePath") == "NOTES.md" for t in tools)
          and "bluebird" in answer.lower())
    print("  check       " + ("correct: the model read NOTES.md and named the codename Bluebird" if ok
          else "NOT correct: expected a read of NOTES.md and an answer naming Bluebird"), file=sys.stderr)
    sys.exit(0 if ok else 1)
PY
STATUS=$?
set -e

if [ "$ON_PATH" = 1 ]; then T=troupe; else T="$BIN"; fi
{
  echo
  echo "==> next steps"
  if [ "$ON_PATH" = 1 ]; then
    echo "  troupe is installed at $BIN and on your PATH."
  else
    echo "  troupe is installed at $BIN, which is not on your PATH yet; add it with"
    echo "    export PATH=\"$INSTALL_BIN:\$PATH\"      # e.g. in ~/.bashrc or ~/.profile"
  fi
  echo "  Start the local model server again:"
  echo "    LLAMA_PORT=$PORT $ROOT/scripts/llama-server.sh start     # and ... stop when done"
  echo "  Run a prompt in the sample project (its troupe.json points at port $PORT):"
  echo "    cd $SAMPLE && $T run \"$DEMO_QUESTION\""
  echo "  See the session:"
  echo "    $T session list"
  echo "    $T session show $SID"
  echo "    $T serve                                   # web view at the printed address"
  echo "  Use a hosted provider on your own code:"
  echo "    $T auth login openai                       # or: export OPENAI_API_KEY=... (or ANTHROPIC_API_KEY)"
  echo "    cd your/repo && $T run --model openai/gpt-5-mini \"find the TODOs and list them\""
  echo "    $T                                         # interactive chat in a terminal"
  echo "  Done in $(( $(date +%s) - T0 ))s."
} >&2
exit "$STATUS"

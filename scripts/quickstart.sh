#!/usr/bin/env bash
# Quickstart: build troupe, get llama.cpp's server and a small model (cached under
# ~/.cache/troupe, so the second run starts in seconds), start the server on 127.0.0.1, run
# the main job on a real task in a sample directory, print the answer, stop the server.
#
#   ./scripts/quickstart.sh ["your prompt"]
#
# Env: LLAMA_PORT (default 8080), TROUPE_CACHE (default ~/.cache/troupe).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PORT="${LLAMA_PORT:-8080}"
export LLAMA_PORT="$PORT"
PROMPT="${1:-Find the markdown files in this project and tell me what they are about.}"
say() { printf '\n==> %s\n' "$*" >&2; }

say "building troupe (release)"
cargo build --release -p troupe
BIN="$ROOT/target/release/troupe"

say "getting llama-server and SmolLM2-135M-Instruct (cached after the first run)"
eval "$(scripts/llama-setup.sh)"

SAMPLE="${TROUPE_CACHE:-$HOME/.cache/troupe}/sample-project"
rm -rf "$SAMPLE"
mkdir -p "$SAMPLE/src" "$SAMPLE/.troupe-home"
cat > "$SAMPLE/README.md" <<'EOF'
# Sample project
A tiny calculator used to try troupe on a real local model.
EOF
cat > "$SAMPLE/NOTES.md" <<'EOF'
# Notes
TODO: add a divide function.
EOF
cat > "$SAMPLE/src/calc.py" <<'EOF'
def add(a, b):
    return a + b
EOF
# The `quickstart` agent sees one tool (glob). A 135M model does not choose tools on its
# own; its first step is steered with llama.cpp's request fields (scripts/REAL_MODEL_NOTES.md).
cat > "$SAMPLE/troupe.json" <<EOF
{
  "model": "local/smollm2",
  "default_agent": "quickstart",
  "provider": {
    "local": {
      "options": { "baseURL": "http://127.0.0.1:$PORT/v1", "chunkTimeout": 180000, "temperature": 0 },
      "models": { "smollm2": { "name": "SmolLM2 135M Instruct", "limit": { "context": 4096, "output": 256 } } }
    }
  },
  "agent": {
    "quickstart": {
      "mode": "primary",
      "steps": 3,
      "prompt": "You are a coding agent. Use the glob tool, then answer briefly.",
      "permission": { "*": "deny", "glob": "allow" },
      "options": { "firstStep": { "tool_choice": "required", "stop": ["</tool_call>"], "prefill": "<tool_call>\\n" } }
    }
  }
}
EOF

say "starting llama-server on 127.0.0.1:$PORT"
STARTED=0
if curl -fsS --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  echo "a server already answers on port $PORT; using it (set LLAMA_PORT to use another port)" >&2
else
  LLAMA_ALIAS=smollm2 scripts/llama-server.sh start >/dev/null
  STARTED=1
fi
cleanup() { if [ "$STARTED" = 1 ]; then "$ROOT/scripts/llama-server.sh" stop >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

say "troupe run \"$PROMPT\"  (in $SAMPLE)"
cd "$SAMPLE"
TROUPE_DB="$SAMPLE/.troupe-home/troupe.db" TROUPE_CONFIG_DIR="$SAMPLE/.troupe-home" TROUPE_NO_STDIN=1 \
  "$BIN" run "$PROMPT"
say "the session is stored in $SAMPLE/.troupe-home/troupe.db; inspect it with:"
echo "  TROUPE_DB=$SAMPLE/.troupe-home/troupe.db $BIN session list" >&2

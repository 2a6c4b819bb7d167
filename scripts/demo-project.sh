#!/usr/bin/env bash
# demo-project.sh DIR PORT — write the quickstart's sample project into DIR: three small
# files and a `troupe.json` whose default agent `quickstart` answers questions about them
# with SmolLM2-135M on the llama.cpp server at 127.0.0.1:PORT.
#
# Used by scripts/quickstart.sh and scripts/real-model-smoke.sh, so the smoke test checks the
# very task the quickstart shows. Prints the demo question on stdout; the expected answer
# word is "Bluebird" (the smoke test asserts the answer contains it).
#
# Why this works with a 135M model (scripts/REAL_MODEL_NOTES.md): the model does not decide
# to call tools on its own, so the agent's first request forces one read call
# (`tool_choice: "required"`, a `<tool_call>` prefill, a stop at `</tool_call>`) and
# `toolSchema` narrows `read.filePath` to an `enum` of real files and drops the optional
# `offset`/`limit` (merge-patch `null`; left in, the model sometimes invents an offset past
# the end), which llama.cpp compiles into the grammar of the call's arguments; the
# arguments are then always the real file the question is about (given a choice among the project's files, the
# 135M model picks one at random). In the follow-up request the model would copy the
# `<tool_response>` block the template shows it; `logit_bias` bans those tokens (llama.cpp
# accepts a string and bans each of its tokens), and it answers in a sentence instead. The
# first step resets `logit_bias`, as its grammar needs the `</tool_call>` closing tag.
set -euo pipefail
DIR="${1:?usage: demo-project.sh DIR PORT}"
PORT="${2:?usage: demo-project.sh DIR PORT}"
mkdir -p "$DIR/src"
cat > "$DIR/README.md" <<'MD'
# Sample project
A tiny calculator used to try troupe on a real local model.
MD
cat > "$DIR/NOTES.md" <<'MD'
The project codename is Bluebird.
MD
cat > "$DIR/src/calc.py" <<'PY'
def add(a, b):
    return a + b
PY
cat > "$DIR/troupe.json" <<JSON
{
  "model": "local/smollm2",
  "default_agent": "quickstart",
  "provider": {
    "local": {
      "options": { "baseURL": "http://127.0.0.1:$PORT/v1", "chunkTimeout": 180000, "temperature": 0 },
      "models": { "smollm2": { "name": "SmolLM2 135M Instruct", "limit": { "context": 4096, "output": 200 } } }
    }
  },
  "agent": {
    "quickstart": {
      "description": "Reads the file a question names and answers in one sentence; small enough for a 4,096-token local model",
      "mode": "primary",
      "steps": 3,
      "prompt": "You are a coding agent. Read the file the user asks about with the read tool, then answer in one short sentence.",
      "permission": { "*": "deny", "read": "allow" },
      "options": {
        "logit_bias": [["<tool_response>", false]],
        "firstStep": {
          "logit_bias": [],
          "tool_choice": "required",
          "stop": ["</tool_call>"],
          "prefill": "<tool_call>\\n",
          "toolSchema": { "read": {
            "properties": { "filePath": { "enum": ["NOTES.md"] }, "offset": null, "limit": null },
            "additionalProperties": false
          } }
        }
      }
    }
  }
}
JSON
echo "What is the project codename written in NOTES.md?"

#!/usr/bin/env bash
# Real-model smoke test: troupe against a real llama.cpp server and a real (tiny) model.
#
# 1. gets (or reuses) llama-server and SmolLM2-135M (scripts/llama-setup.sh, cached);
# 2. starts the server on 127.0.0.1:$SMOKE_PORT and always stops it on exit;
# 3. asks the quickstart's demo question (scripts/demo-project.sh) with `troupe run --format
#    json` and asserts: exactly one `read` call with the valid arguments {"filePath":
#    "NOTES.md"} that completed, the result went back to the model, and the answer names the
#    codename (Bluebird) in a short sentence; usage tokens > 0 as the server reported;
# 4. interrupts a long generation with SIGINT and checks the partial text was kept and the
#    run exited cleanly (130);
# 5. runs two `troupe run` processes at once against the same server and the same store and
#    checks both sessions are intact;
# 6. checks the server it started is gone.
#
# Env: SMOKE_PORT (default 18080), TROUPE_BIN (default target/debug/troupe, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PORT="${SMOKE_PORT:-18080}"
export LLAMA_PORT="$PORT"
log() { printf '[smoke %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# The session id of a `troupe run --format json` output file.
sid_of() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    p = e["properties"]
    if e["type"].startswith("session.") and "info" in p:
        print(p["info"]["id"]); break
    s = p.get("sessionID") or p.get("part", {}).get("sessionID") or p.get("info", {}).get("sessionID")
    if s:
        print(s); break
PY
}

eval "$(scripts/llama-setup.sh)"
BIN="${TROUPE_BIN:-$ROOT/target/debug/troupe}"
[ -x "$BIN" ] || cargo build -p troupe
WORK=$(mktemp -d)
SERVER_PID_FILE="${TROUPE_CACHE:-$HOME/.cache/troupe}/run/llama-server-$PORT.pid"
cleanup() {
  "$ROOT/scripts/llama-server.sh" stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

LLAMA_ALIAS=smollm2 scripts/llama-server.sh start >/dev/null
SERVER_PID=$(cat "$SERVER_PID_FILE")
log "llama-server pid $SERVER_PID on port $PORT"

mkdir -p "$WORK/repo" "$WORK/cfg"
# The quickstart's sample project and agent (scripts/demo-project.sh): the first step is
# forced into one `read` call whose `filePath` the grammar limits to the real NOTES.md, the
# second answers from the file. Added here: `chat` (no tools, small context, for the
# compaction check) and `counter` (no tools, generates for a long time).
DEMO_QUESTION=$(scripts/demo-project.sh "$WORK/repo" "$PORT")
python3 - "$WORK/repo/troupe.json" <<'PY'
import json, sys
path = sys.argv[1]
cfg = json.load(open(path))
cfg["provider"]["local"]["models"]["smollm2-small"] = {
    "id": "smollm2", "name": "SmolLM2 135M, small context",
    "limit": {"context": 1500, "output": 120}}
cfg["agent"]["chat"] = {
    "mode": "primary", "model": "local/smollm2-small",
    "prompt": "You are a helpful assistant. Answer in one or two sentences.",
    "permission": {"*": "deny"}}
cfg["agent"]["counter"] = {
    "mode": "primary", "prompt": "You are a helpful assistant.",
    "permission": {"*": "deny"}, "options": {"ignore_eos": True, "max_tokens": 3000}}
json.dump(cfg, open(path, "w"), indent=2)
PY
export TROUPE_DB="$WORK/troupe.db" TROUPE_CONFIG_DIR="$WORK/cfg" TROUPE_NO_STDIN=1 TROUPE_TITLE=0
cd "$WORK/repo"

log "1/4 the quickstart's demo question: a real tool call with valid arguments, then a correct answer"
t0=$(date +%s)
"$BIN" run --format json "$DEMO_QUESTION" > "$WORK/run1.jsonl"
log "turn finished in $(( $(date +%s) - t0 ))s"
SID=$(sid_of "$WORK/run1.jsonl")
"$BIN" session show "$SID" --format json > "$WORK/show1.json"
python3 - "$WORK/run1.jsonl" "$WORK/show1.json" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
doc = json.load(open(sys.argv[2]))
types = [e["type"] for e in events]
assert "session.idle" in types, "the turn did not finish"
status = [e["properties"]["status"]["type"] for e in events if e["type"] == "session.status"]
assert status[0] == "busy" and status[-1] == "idle", status
msgs = doc["messages"]
assistants = [m for m in msgs if m["info"]["role"] == "assistant"]
assert assistants, "no assistant message stored"
for a in assistants:
    assert a["info"].get("error") is None, a["info"].get("error")
parts = [p for m in assistants for p in m["parts"]]
tools = [p for p in parts if p["type"] == "tool"]
assert len(tools) == 1, f"expected exactly one tool call, got {[(t['tool'], t['state']) for t in tools]}"
call = tools[0]
assert call["tool"] == "read", call["tool"]
# Valid arguments: exactly the real file, no invented offset/limit, and the tool succeeded
# on them (its output is the file's text).
assert call["state"]["input"] == {"filePath": "NOTES.md"}, call["state"]["input"]
assert call["state"]["status"] == "completed", call["state"]
assert "The project codename is Bluebird." in call["state"]["output"], call["state"]["output"]
assert len(assistants) == 2, f"expected a tool step and an answer step, got {len(assistants)}"
answer = "".join(p["text"] for p in assistants[-1]["parts"] if p["type"] == "text").strip()
# A correct short answer in the model's own words: names the codename, no copied tool block.
assert "bluebird" in answer.lower(), f"wrong answer: {answer!r}"
assert "<tool_response>" not in answer and "<content>" not in answer, f"copied the tool result: {answer!r}"
assert len(answer) <= 200, f"not a short answer: {answer!r}"
finishes = [p for p in parts if p["type"] == "step-finish"]
assert finishes and all(f["tokens"]["input"] + f["tokens"]["cache"]["read"] > 0 and f["tokens"]["output"] > 0 for f in finishes), finishes
print(f"ok: read {call['state']['input']} -> completed; answer {answer!r}")
PY

log "2/4 SIGINT during a long generation keeps the partial text"
"$BIN" run --agent counter --format json "Count from 1 to 1000, one number per line." > "$WORK/run2.jsonl" 2> "$WORK/run2.err" &
RUN_PID=$!
for _ in $(seq 1 600); do
  if grep -q '"message.part.delta"' "$WORK/run2.jsonl" 2>/dev/null && [ "$(grep -c '"message.part.delta"' "$WORK/run2.jsonl")" -ge 5 ]; then break; fi
  kill -0 "$RUN_PID" 2>/dev/null || break
  sleep 0.2
done
kill -0 "$RUN_PID" 2>/dev/null || { cat "$WORK/run2.err" >&2; echo "the long generation ended before it could be interrupted" >&2; exit 1; }
t_int=$(date +%s%N)
kill -INT "$RUN_PID"
set +e; wait "$RUN_PID"; code=$?; set -e
ms=$(( ($(date +%s%N) - t_int) / 1000000 ))
log "exited with $code ${ms}ms after SIGINT"
[ "$code" = 130 ] || { cat "$WORK/run2.err" >&2; echo "expected exit code 130 after SIGINT, got $code" >&2; exit 1; }
SID2=$(sid_of "$WORK/run2.jsonl")
"$BIN" session show "$SID2" --format json > "$WORK/show2.json"
python3 - "$WORK/show2.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
a = [m for m in doc["messages"] if m["info"]["role"] == "assistant"][-1]
assert a["info"]["error"]["name"] == "MessageAbortedError", a["info"].get("error")
text = "".join(p["text"] for p in a["parts"] if p["type"] == "text")
assert text.strip(), "the partial text was not kept"
print(f"ok: partial text kept ({len(text)} chars): {text[:60]!r}")
PY

log "3/4 two runs at once against one server and one store"
"$BIN" run --format json "$DEMO_QUESTION" > "$WORK/a.jsonl" 2> "$WORK/a.err" & PA=$!
"$BIN" run --format json "Read NOTES.md and tell me the codename of the project." > "$WORK/b.jsonl" 2> "$WORK/b.err" & PB=$!
set +e; wait "$PA"; ca=$?; wait "$PB"; cb=$?; set -e
[ "$ca" = 0 ] && [ "$cb" = 0 ] || { cat "$WORK/a.err" "$WORK/b.err" >&2; echo "concurrent runs failed: $ca $cb" >&2; exit 1; }
"$BIN" session list --format json > "$WORK/list.json"
for f in a b; do
  sid=$(sid_of "$WORK/$f.jsonl")
  "$BIN" session show "$sid" --format json > "$WORK/show-$f.json"
  python3 - "$WORK/show-$f.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
msgs = doc["messages"]
assert msgs[0]["info"]["role"] == "user" and len(msgs) >= 2, len(msgs)
for m in msgs[1:]:
    assert m["info"]["role"] == "assistant" and m["info"].get("error") is None, m["info"]
    assert any(p["type"] == "step-finish" for p in m["parts"]), "a step without step-finish"
print(f"ok: session {doc['info']['id']} intact with {len(msgs)} messages")
PY
done
python3 -c 'import json,sys; n=len(json.load(open(sys.argv[1]))); assert n==4, n; print("ok: 4 sessions in the store")' "$WORK/list.json"

log "4/4 a multi-turn session with a small context compacts, and the next turn goes on from the summary"
PARA="Here is some background about our project. We are building a small calculator in Python with add, subtract, multiply and divide functions, unit tests for each, a command line interface that reads two numbers and an operator, and a README that explains how to install and run it. The team prefers short functions, clear names and tests that cover edge cases such as division by zero and very large numbers."
compacted=0
for i in 1 2 3 4 5 6 7 8; do
  if [ "$i" = 1 ]; then flag=""; else flag="--continue"; fi
  "$BIN" run --agent chat $flag --format json "Turn $i. $PARA What should we do next, briefly?" > "$WORK/chat$i.jsonl" 2> "$WORK/chat$i.err" \
    || { cat "$WORK/chat$i.err" >&2; echo "turn $i failed" >&2; exit 1; }
  if grep -q '"session.compacted"' "$WORK/chat$i.jsonl"; then compacted=$i; break; fi
done
[ "$compacted" != 0 ] || { echo "the session never compacted" >&2; exit 1; }
# The answer that passed the budget was complete: the turn ended after the summary. The next
# prompt starts from the summary and is answered.
"$BIN" run --agent chat --continue --format json "Turn $((compacted + 1)). What did we agree on, briefly?" > "$WORK/chat-next.jsonl" 2> "$WORK/chat-next.err" \
  || { cat "$WORK/chat-next.err" >&2; echo "the turn after the compaction failed" >&2; exit 1; }
SID4=$(sid_of "$WORK/chat$compacted.jsonl")
"$BIN" session show "$SID4" --format json > "$WORK/show4.json"
python3 - "$WORK/show4.json" "$compacted" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
msgs = doc["messages"]
summaries = [i for i, m in enumerate(msgs) if m["info"].get("summary")]
assert summaries, "no summary message stored"
s = summaries[0]
after = msgs[s + 1:]
# Right after the first summary: the next prompt, as the user wrote it (no synthetic
# "continue"); its answer has text and no error (it may be compacted in turn).
assert after and after[0]["info"]["role"] == "user", "the next prompt does not follow the summary"
nxt = after[0]
assert not any(p.get("synthetic") or p["type"] == "compaction" for p in nxt["parts"]), \
    f"a continue message followed the summary of a complete answer: {nxt['parts']}"
answers = [m for m in after if m["info"]["role"] == "assistant" and m["info"].get("parentID") == nxt["info"]["id"]
           and not m["info"].get("summary")]
assert answers, "the next prompt was not answered"
last = answers[-1]
assert last["info"].get("error") is None, last["info"]
assert any(p["type"] == "text" and p["text"].strip() for p in last["parts"]), "no answer after the compaction"
print(f"ok: compacted at turn {sys.argv[2]}, summary message #{s}, the turn ended there and the next one answered")
PY

"$ROOT/scripts/llama-server.sh" stop >/dev/null
if kill -0 "$SERVER_PID" 2>/dev/null; then echo "the llama-server we started is still running" >&2; exit 1; fi
log "llama-server stopped"
echo "real-model smoke: 4 passed, 0 failed"

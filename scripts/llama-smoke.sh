#!/usr/bin/env bash
# llama-smoke.sh — check a running llama-server (scripts/llama-server.sh start) for the
# behaviours troupe's real-model tests rely on. Prints PASS/FAIL per check, exits 1 on
# any FAIL. Needs curl + python3. See scripts/REAL_MODEL_NOTES.md for the why.
#
#   LLAMA_PORT (default 8080)
set -uo pipefail
BASE="http://127.0.0.1:${LLAMA_PORT:-8080}"
exec python3 - "$BASE" <<'EOF'
import json, sys, time, urllib.request, urllib.error

BASE = sys.argv[1]
TOOLS = [{"type": "function", "function": {
    "name": "list", "description": "List the files in a directory",
    "parameters": {"type": "object",
                   "properties": {"path": {"type": "string", "description": "Directory path"}},
                   "required": ["path"]}}}]
SYS = {"role": "system", "content": "You are a coding agent. Use the tools to answer."}
USER = {"role": "user", "content": "List the files in the directory \".\" (the current directory)."}
fails = 0

def check(name, ok, detail=""):
    global fails
    print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""))
    if not ok:
        fails += 1

def stream(body, cut=None):
    """POST a streaming chat request; return dict with status, chunks, content, tool calls..."""
    req = urllib.request.Request(BASE + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out = {"status": None, "chunks": 0, "content": "", "calls": {}, "finish": None,
           "usage": None, "done": False, "error": None, "t_first": None}
    t0 = time.time()
    try:
        r = urllib.request.urlopen(req, timeout=300)
    except urllib.error.HTTPError as e:
        out["status"] = e.code
        out["error"] = json.loads(e.read() or b"{}")
        return out
    out["status"] = r.status
    for raw in r:
        line = raw.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            out["done"] = True
            break
        j = json.loads(line[6:])
        if "error" in j:
            out["error"] = j
            continue
        out["chunks"] += 1
        if out["t_first"] is None:
            out["t_first"] = time.time() - t0
        if j.get("usage"):
            out["usage"] = j["usage"]
        for c in j.get("choices", []):
            d = c.get("delta", {})
            out["content"] += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                e = out["calls"].setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                e["id"] = tc.get("id") or e["id"]
                f = tc.get("function") or {}
                e["name"] += f.get("name") or ""
                e["arguments"] += f.get("arguments") or ""
            out["finish"] = c.get("finish_reason") or out["finish"]
        if cut and time.time() - t0 > cut:
            r.close()
            break
    out["elapsed"] = time.time() - t0
    return out

try:
    h = urllib.request.urlopen(BASE + "/health", timeout=5).read().decode()
    check("health", '"ok"' in h, h.strip())
except Exception as e:
    check("health", False, str(e)); sys.exit(1)

# 1. forced real tool call: tools + tool_choice=required + assistant prefill "<tool_call>\n"
#    + stop "</tool_call>" (one call only) + temperature 0
r1 = stream({"model": "x", "stream": True, "stream_options": {"include_usage": True},
             "messages": [SYS, USER, {"role": "assistant", "content": "<tool_call>\n"}],
             "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
             "stop": ["</tool_call>"], "temperature": 0, "max_tokens": 128})
call = r1["calls"].get(0)
args_ok = False
if call:
    try:
        args_ok = isinstance(json.loads(call["arguments"]).get("path"), str)
    except Exception:
        pass
check("tool call streamed", r1["status"] == 200 and len(r1["calls"]) == 1 and call["name"] == "list" and args_ok,
      json.dumps(r1["calls"]))
check("tool call finish_reason", r1["finish"] == "tool_calls", str(r1["finish"]))
u = r1["usage"] or {}
check("tool call usage", u.get("prompt_tokens", 0) > 0 and u.get("completion_tokens", 0) > 0 and r1["done"], json.dumps(u))

# 2. round trip: feed the tool result back; expect plain text + stop
if call:
    r2 = stream({"model": "x", "stream": True, "stream_options": {"include_usage": True},
                 "messages": [SYS, USER,
                              {"role": "assistant", "content": None, "tool_calls": [
                                  {"id": call["id"], "type": "function",
                                   "function": {"name": "list", "arguments": call["arguments"]}}]},
                              {"role": "tool", "tool_call_id": call["id"], "content": "Cargo.toml\nsrc/\n"}],
                 "tools": TOOLS, "tool_choice": "auto", "temperature": 0, "max_tokens": 128})
    check("round 2 answers in text", r2["status"] == 200 and r2["content"] and not r2["calls"]
          and r2["finish"] in ("stop", "length") and (r2["usage"] or {}).get("completion_tokens", 0) > 0,
          "finish=%s content=%r" % (r2["finish"], r2["content"][:80]))

# 3. prompt longer than the context -> HTTP 400 exceed_context_size_error (before any SSE)
r3 = stream({"model": "x", "stream": True, "max_tokens": 8,
             "messages": [{"role": "user", "content": " ".join("word%d" % i for i in range(5000))}]})
err = (r3["error"] or {}).get("error", {})
check("context overflow -> 400", r3["status"] == 400 and err.get("type") == "exceed_context_size_error",
      "status=%s %s" % (r3["status"], json.dumps(err)[:160]))

# 4. long generation streams for several seconds (ignore_eos makes the length deterministic)
r4 = stream({"model": "x", "stream": True, "temperature": 0, "max_tokens": 2000, "ignore_eos": True,
             "messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}]}, cut=3.0)
check("long stream still running after 3 s (client closed it)", r4["chunks"] > 5 and not r4["done"],
      "%d chunks, first after %.2fs" % (r4["chunks"], r4["t_first"] or -1))
t0 = time.time()
freed = False
while time.time() - t0 < 10:   # the server notices the disconnect on its next write
    slots = json.load(urllib.request.urlopen(BASE + "/slots", timeout=5))
    if not any(s.get("is_processing") for s in slots):
        freed = True
        break
    time.sleep(0.1)
check("slot freed after client disconnect", freed, "after %.2fs" % (time.time() - t0))

sys.exit(1 if fails else 0)
EOF

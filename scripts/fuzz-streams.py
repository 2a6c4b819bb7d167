#!/usr/bin/env python3
"""Process-level fuzzing of `troupe run` (issue 24, "Done when"): bounded, on demand, not in CI.

A hostile OpenAI-compatible server (this script, standard library only) answers each chat
completion with a mutated stream: chunks dropped, repeated, swapped, cut, a leading BOM, CR or
CRLF line ends, garbage and keep-alive lines, odd finish reasons, duplicate tool-call ids,
absurd usage, and tool calls a confused model would make (bash leaving processes behind, reads
of FIFOs, grep with huge patterns, empty edits). Some runs get SIGINT or SIGTERM at a random
moment. After each run the oracles are checked:

  - the exit code is 0, 1, 130 or 143 (never death by a signal);
  - stderr has no "panicked" and no actor "crashed";
  - the run ends within --deadline seconds (else it is killed and reported as a hang);
  - the store is readable (`troupe session show --format json`) and no tool part is left
    `pending`/`running`, no assistant message without `time.completed`;
  - no process started by the run's tools is left behind (each run's commands carry a unique
    `sleep` duration that `pgrep -f` looks for).

Usage:
  cargo build && scripts/fuzz-streams.py [--runs 50] [--seed 1] [--deadline 60]
      [--troupe target/debug/troupe] [--keep]

Exit status 0 when every run met every oracle, 1 otherwise (each failure is printed with its
seed, so `--seed S --runs 1` replays it).
"""

import argparse
import http.server
import json
import os
import random
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

ALLOWED_EXIT = {0, 1, 130, 143}


def chunk(delta=None, finish=None, usage=None, idx=0):
    c = {
        "id": "chatcmpl-fuzz",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fuzz-model",
        "choices": [{"index": idx, "delta": delta or {}, "finish_reason": finish}],
    }
    if usage is not None:
        c["usage"] = usage
    return json.dumps(c)


def tool_chunks(rng, call_id, name, args, index=0):
    """A tool call split into argument pieces at random points."""
    text = json.dumps(args)
    cuts = sorted(rng.sample(range(1, max(2, len(text))), k=min(3, max(0, len(text) - 2))))
    pieces, last = [], 0
    for c in cuts + [len(text)]:
        pieces.append(text[last:c])
        last = c
    out = [chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": ""}}]})]
    for p in pieces:
        out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}))
    return out


def tool_call_for(rng, marker, workdir):
    """A tool call a confused model could make; `marker` tags processes for the leak check."""
    fifo = os.path.join(workdir, "fifo")
    choices = [
        ("bash", {"command": f"sleep {marker} & echo started", "description": "bg"}),
        ("bash", {"command": f"(sleep {marker} &); echo bg", "description": "orphan"}),
        ("bash", {"command": f"timeout 100 sleep {marker} & setsid sleep {marker} & echo t",
                  "description": "groups"}),
        ("bash", {"command": f"sleep {marker}", "description": "long", "timeout": 300}),
        ("bash", {"command": "head -c 60000 /dev/zero | tr '\\0' x; echo END",
                  "description": "long line"}),
        ("read", {"filePath": fifo}),
        ("write", {"filePath": fifo, "content": "x"}),
        ("grep", {"pattern": rng.choice(["a{1000}{1000}", "a{100000}", ".{65536}"])}),
        ("edit", {"filePath": "keep.txt", "oldString": "", "newString": "gone\n"}),
        ("read", {"filePath": "latin1.txt"}),
        ("test_sleep", {"ms": rng.choice([50, 500, 3000])}),
    ]
    return rng.choice(choices)


def mutate(rng, events):
    """Drop, repeat, swap and cut events."""
    ev = list(events)
    for _ in range(rng.randint(0, 3)):
        if not ev:
            break
        op = rng.choice(["drop", "repeat", "swap", "cut", "none"])
        i = rng.randrange(len(ev))
        if op == "drop":
            ev.pop(i)
        elif op == "repeat":
            ev.insert(i, ev[i])
        elif op == "swap" and len(ev) > 1:
            j = rng.randrange(len(ev))
            ev[i], ev[j] = ev[j], ev[i]
        elif op == "cut":
            ev = ev[:i]
    return ev


def first_stream(rng, marker, workdir):
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": rng.choice(["Let me ", "check ", "that. ", "\u00e9\u20ac "])})
               for _ in range(rng.randint(0, 4))]
    ncalls = rng.choice([0, 1, 1, 1, 2])
    ids = [f"call_{i}" for i in range(ncalls)]
    if ncalls == 2 and rng.random() < 0.3:
        ids[1] = ids[0]  # duplicate id
    for i, cid in enumerate(ids):
        name, args = tool_call_for(rng, marker, workdir)
        events += tool_chunks(rng, cid, name, args, index=i)
    finish = "tool_calls" if ncalls else "stop"
    if rng.random() < 0.15:
        finish = rng.choice(["tool_calls", "length", "content_filter", None, "weird"])
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if rng.random() < 0.1:
        usage = {"prompt_tokens": 18446744073709551615, "completion_tokens": -3}
    events.append(chunk({}, finish, usage))
    return mutate(rng, events), rng.random() < 0.8


def frame(rng, events, done):
    sep = rng.choice(["\n\n"] * 6 + ["\r\n\r\n", "\r\r"])
    out = "\ufeff" if rng.random() < 0.05 else ""
    for e in events:
        if rng.random() < 0.05:
            out += ": ping" + sep
        if rng.random() < 0.03:
            out += "data: : keepalive" + sep
        out += "data: " + e + sep
    if done:
        out += "data: [DONE]" + sep
    return out.encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "fuzz-model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        self.rfile.read(n)
        st = self.server.state
        with st["lock"]:
            st["requests"] += 1
            req = st["requests"]
            rng = random.Random(st["seed"] * 1000 + req)
        if req == 1:
            events, done = first_stream(rng, st["marker"], st["workdir"])
            if rng.random() < 0.05:
                self.send_response(rng.choice([429, 500, 529]))
                body = b'{"error":{"message":"\\u001b]0;pwned\\u0007fuzz\\u001b[2J","type":"server_error"}}'
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.send_header("retry-after-ms", "50")
                self.end_headers()
                self.wfile.write(body)
                return
        else:
            events = [chunk({"role": "assistant", "content": "done"}),
                      chunk({}, "stop", {"prompt_tokens": 1, "completion_tokens": 1})]
            done = True
        payload = frame(rng, events, done)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        # Send in random pieces, so frames split anywhere across reads.
        i = 0
        while i < len(payload):
            k = rng.randint(1, 200)
            try:
                self.wfile.write(payload[i:i + k])
                self.wfile.flush()
            except OSError:
                return
            i += k


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def pgrep(needle):
    out = subprocess.run(["pgrep", "-f", needle], capture_output=True, text=True).stdout.split()
    live = []
    for p in out:
        try:
            with open(f"/proc/{p}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    live.append(p)
        except (OSError, IndexError):
            pass
    return live


def handlers_installed(pid):
    """Whether `pid` catches SIGINT and SIGTERM (SigCgt bits 2 and 15)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
                    want = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
                    return mask & want == want
    except OSError:
        pass
    return False


def check_store(troupe, env, cwd):
    problems = []
    out = subprocess.run([troupe, "session", "list", "--format", "json"], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return [f"session list failed: {out.stderr.strip()}"]
    for s in json.loads(out.stdout or "[]"):
        show = subprocess.run([troupe, "session", "show", s["id"], "--format", "json"], env=env,
                              cwd=cwd, capture_output=True, text=True, timeout=30)
        if show.returncode != 0:
            problems.append(f"session show {s['id']} failed: {show.stderr.strip()}")
            continue
        for m in json.loads(show.stdout).get("messages", []):
            info = m.get("info", {})
            if info.get("role") == "assistant" and not info.get("time", {}).get("completed"):
                problems.append(f"assistant message {info.get('id')} never completed")
            for p in m.get("parts", []):
                st = p.get("state", {}).get("status")
                if p.get("type") == "tool" and st in ("pending", "running"):
                    problems.append(f"tool part {p.get('id')} left {st}")
    return problems


def one_run(args, seed):
    rng = random.Random(seed)
    marker = f"7.{seed % 1000:03d}{rng.randint(100, 999)}"
    work = tempfile.mkdtemp(prefix="troupe-fuzz-")
    proj = os.path.join(work, "proj")
    os.makedirs(proj)
    with open(os.path.join(proj, "keep.txt"), "w") as f:
        f.write("keep me\n")
    with open(os.path.join(proj, "latin1.txt"), "wb") as f:
        f.write(b"caf\xe9 cr\xe8me\n")
    os.mkfifo(os.path.join(proj, "fifo"))
    with open(os.path.join(proj, "long.txt"), "w") as f:
        f.write("a" * 200000 + "\n")
    state = {"lock": threading.Lock(), "requests": 0, "seed": seed, "marker": marker,
             "workdir": proj}
    srv = Server(("127.0.0.1", 0), Handler)
    srv.state = state
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    config = {"model": "fuzz/fuzz-model", "provider": {"fuzz": {
        "name": "Fuzz", "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": base, "apiKey": "test"},
        "models": {"fuzz-model": {"name": "Fuzz", "limit": {"context": 128000, "output": 8192}}}}}}
    with open(os.path.join(proj, "troupe.json"), "w") as f:
        json.dump(config, f)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TROUPE_LOG")}
    env.update({"TROUPE_DB": os.path.join(work, "troupe.db"),
                "TROUPE_CONFIG_DIR": os.path.join(work, "config"),
                "TROUPE_NO_STDIN": "1", "TROUPE_TITLE": "0", "TROUPE_TEST_TOOLS": "1",
                "TROUPE_MAX_RETRIES": "2",
                "TROUPE_TOOL_OUTPUT_DIR": os.path.join(work, "out")})
    os.makedirs(env["TROUPE_CONFIG_DIR"])
    fmt = ["--format", "json"] if rng.random() < 0.5 else []
    cmd = [args.troupe, "run", *fmt, "--permission", "allow", "fuzz", "me"]
    failures = []
    started = time.monotonic()
    p = subprocess.Popen(cmd, cwd=proj, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sig = None
    if rng.random() < 0.25:
        sig = rng.choice([signal.SIGINT, signal.SIGTERM])
        delay = rng.choice([0.0, 0.03, 0.2, 1.0])

        def send():
            # Delays count from the moment troupe's handlers are in (first thing in main):
            # before that the process is still being loaded and nothing can catch a signal.
            while p.poll() is None and not handlers_installed(p.pid):
                time.sleep(0.001)
            time.sleep(delay)
            if p.poll() is None:
                p.send_signal(sig)
        threading.Thread(target=send, daemon=True).start()
    try:
        out, err = p.communicate(timeout=args.deadline)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        failures.append(f"hang: still running after {args.deadline}s")
    took = time.monotonic() - started
    err_text = err.decode(errors="replace")
    code = p.returncode
    if code is not None and code < 0:
        failures.append(f"died by signal {-code}")
    elif code not in ALLOWED_EXIT:
        failures.append(f"exit code {code}")
    if "panicked" in err_text:
        failures.append("stderr says panicked")
    if "crashed" in err_text:
        failures.append("an actor crashed")
    if "\x1b" in err_text or ("\x1b" in out.decode(errors="replace") and not fmt):
        failures.append("terminal escape printed")
    # Processes of the run's tools: give the watchdog/kill a bounded moment.
    left = pgrep(f"sleep {marker}")
    t0 = time.monotonic()
    while left and time.monotonic() - t0 < 5:
        time.sleep(0.1)
        left = pgrep(f"sleep {marker}")
    if left:
        failures.append(f"processes left behind: {left}")
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    try:
        failures += check_store(args.troupe, env, proj)
    except Exception as e:  # noqa: BLE001 - any failure to read is a finding
        failures.append(f"store check failed: {e}")
    srv.shutdown()
    srv.server_close()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"seed": seed, "code": code, "signal": sig and sig.name, "took": round(took, 2),
            "requests": state["requests"], "failures": failures,
            "stderr": err_text.strip().splitlines()[-3:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=60.0,
                    help="seconds one run may take before it counts as a hang")
    ap.add_argument("--troupe", default=os.path.join(os.path.dirname(__file__), "..",
                                                     "target", "debug", "troupe"))
    ap.add_argument("--keep", action="store_true", help="keep each run's temp directory")
    args = ap.parse_args()
    args.troupe = os.path.abspath(args.troupe)
    if not os.access(args.troupe, os.X_OK):
        sys.exit(f"no troupe binary at {args.troupe}: run `cargo build` first")
    bad = 0
    codes = {}
    for i in range(args.runs):
        r = one_run(args, args.seed + i)
        codes[r["code"]] = codes.get(r["code"], 0) + 1
        if r["failures"]:
            bad += 1
            print(json.dumps(r), flush=True)
    print(f"{args.runs - bad} passed, {bad} failed", flush=True)
    print(f"exit codes: {codes}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

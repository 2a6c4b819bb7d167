#!/usr/bin/env bash
# llama-server.sh start|stop|status|restart — run a local llama.cpp llama-server
# built by scripts/llama-setup.sh, bound to 127.0.0.1.
#
# start  : starts the server (if not already running), waits for GET /health == ok,
#          prints the OpenAI-compatible base URL (http://127.0.0.1:PORT/v1) on stdout.
# stop   : SIGTERM, waits (then SIGKILL after 15 s), removes the pid file.
# status : prints the base URL and exits 0 if running+healthy, else exits 1.
#
# Environment:
#   TROUPE_CACHE         cache root (default ~/.cache/troupe)
#   LLAMA_PORT           port (default 8080)
#   LLAMA_MODEL          .gguf path (default $CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   LLAMA_CTX            context size (default 4096)
#   LLAMA_THREADS        threads (default 2)
#   LLAMA_PARALLEL       server slots (default 1; context is split/shared across slots)
#   LLAMA_CHAT_TEMPLATE  path to a jinja chat template, or "model" to use the model's own.
#                        Default: scripts/templates/chatml-tools.jinja (tool-capable ChatML/Hermes),
#                        which is what makes llama.cpp accept `tools` with the tiny models.
#   LLAMA_ALIAS          model id reported by the API (default: file name without .gguf)
#   LLAMA_EXTRA_ARGS     extra llama-server args (word-split)
#   LLAMA_HEALTH_TIMEOUT seconds to wait for /health (default 120)
# Pid file and log: $CACHE/run/llama-server-$PORT.{pid,log}
set -euo pipefail

CACHE="${TROUPE_CACHE:-$HOME/.cache/troupe}"
PORT="${LLAMA_PORT:-8080}"
HOST=127.0.0.1
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$CACHE/bin/llama-server"
MODEL="${LLAMA_MODEL:-$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
CTX="${LLAMA_CTX:-4096}"
THREADS="${LLAMA_THREADS:-2}"
PARALLEL="${LLAMA_PARALLEL:-1}"
TEMPLATE="${LLAMA_CHAT_TEMPLATE:-$SCRIPT_DIR/templates/chatml-tools.jinja}"
ALIAS="${LLAMA_ALIAS:-$(basename "$MODEL" .gguf)}"
TIMEOUT="${LLAMA_HEALTH_TIMEOUT:-120}"
RUN="$CACHE/run"
PIDFILE="$RUN/llama-server-$PORT.pid"
LOGFILE="$RUN/llama-server-$PORT.log"
URL="http://$HOST:$PORT"

log() { printf '[llama-server %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

pid_alive() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
healthy() { curl -fsS --max-time 2 "$URL/health" 2>/dev/null | grep -q '"ok"'; }

start() {
  if pid_alive; then
    if healthy; then log "already running (pid $(cat "$PIDFILE"))"; echo "$URL/v1"; return 0; fi
  else
    rm -f "$PIDFILE"
  fi
  [[ -x "$BIN" ]] || die "$BIN missing; run scripts/llama-setup.sh first"
  [[ -f "$MODEL" ]] || die "model $MODEL missing; run scripts/llama-setup.sh first"
  if curl -fsS --max-time 2 "$URL/health" >/dev/null 2>&1; then
    die "something else already answers on $URL (not started by this script)"
  fi
  mkdir -p "$RUN"
  local args=(--host "$HOST" --port "$PORT" -m "$MODEL" --alias "$ALIAS"
              --jinja -c "$CTX" -t "$THREADS" -np "$PARALLEL" --no-webui)
  if [[ "$TEMPLATE" != "model" ]]; then
    [[ -f "$TEMPLATE" ]] || die "chat template $TEMPLATE not found"
    args+=(--chat-template-file "$TEMPLATE")
  fi
  # shellcheck disable=SC2206
  [[ -n "${LLAMA_EXTRA_ARGS:-}" ]] && args+=($LLAMA_EXTRA_ARGS)
  log "starting: $BIN ${args[*]}"
  log "log: $LOGFILE"
  # setsid: own process group, survives the calling shell; stdin from /dev/null.
  setsid "$BIN" "${args[@]}" >"$LOGFILE" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local deadline=$(( $(date +%s) + TIMEOUT ))
  while :; do
    if ! pid_alive; then
      tail -20 "$LOGFILE" >&2; rm -f "$PIDFILE"; die "llama-server exited during startup"
    fi
    if healthy; then break; fi
    if (( $(date +%s) >= deadline )); then
      tail -20 "$LOGFILE" >&2; stop || true; die "no healthy /health after ${TIMEOUT}s"
    fi
    sleep 0.5
  done
  log "healthy (pid $(cat "$PIDFILE"))"
  echo "$URL/v1"
}

stop() {
  if ! pid_alive; then log "not running"; rm -f "$PIDFILE"; return 0; fi
  local pid; pid="$(cat "$PIDFILE")"
  log "stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then log "still alive after 15s, SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  rm -f "$PIDFILE"
  log "stopped"
}

status() {
  if pid_alive && healthy; then
    log "running (pid $(cat "$PIDFILE")), healthy"; echo "$URL/v1"; return 0
  elif pid_alive; then
    log "running (pid $(cat "$PIDFILE")) but /health not ok"; return 1
  else
    log "not running"; return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  *) echo "usage: $0 start|stop|status|restart" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Start or stop the local real model server: llama.cpp's llama-server (hack/build-model-server.sh) serving
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M by default (hack/fetch-model.py), OpenAI-compatible, on 127.0.0.1.
#
#   hack/model-server.sh up      # build/fetch what is missing, start it in the background, wait for /health,
#                                # print `export OPENAI_BASE_URL=...` and the --model to use
#   hack/model-server.sh down    # stop it
#   hack/model-server.sh status
#
# Settings (environment): UNICORE_MODEL_PORT (8090), UNICORE_MODEL_CTX (16384), UNICORE_MODEL (qwen2.5-coder-1.5b,
# or the faster qwen2.5-coder-0.5b for plain answers), UNICORE_MODEL_TEMP (0: greedy, so runs repeat), UNICORE_MODEL_THREADS (1). The served model's name (its --alias) is
# UNICORE_MODEL's value. State: ${UNICORE_CACHE:-$HOME/.cache/unicore}/model-server/ (pid, port, alias, server.log).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${UNICORE_CACHE:-$HOME/.cache/unicore}"
STATE="$CACHE/model-server"
PORT="${UNICORE_MODEL_PORT:-8090}"
CTX="${UNICORE_MODEL_CTX:-16384}"
MODEL="${UNICORE_MODEL:-qwen2.5-coder-1.5b}"  # the 0.5B repeats a tool call after its result
TEMP="${UNICORE_MODEL_TEMP:-0}"
THREADS="${UNICORE_MODEL_THREADS:-1}"  # 2 threads collapse to <1 token/s on a busy 2-core machine (docs/models.md)
READY_TIMEOUT=120
log() { echo "[model-server] $*" >&2; }
fail() { echo "model-server: $*" >&2; exit 1; }

running_pid() {  # the pid of our server if it still runs, else nothing
  [[ -f "$STATE/pid" ]] || return 0
  local pid
  pid="$(cat "$STATE/pid")"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && grep -q llama-server "/proc/$pid/cmdline" 2>/dev/null; then
    echo "$pid"
  fi
}

print_usage_lines() {
  local port alias
  port="$(cat "$STATE/port")" alias="$(cat "$STATE/alias")"
  echo "export OPENAI_BASE_URL=http://127.0.0.1:${port}/v1"
  echo "# then: .venv/bin/unicore run --model openai:${alias} \"...\""
}

health() { python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

up() {
  local pid
  pid="$(running_pid)"
  if [[ -n "$pid" ]]; then
    log "already running (pid $pid, log $STATE/server.log)"
    print_usage_lines
    return 0
  fi
  local server gguf
  server="$("$HERE/build-model-server.sh" | tail -n 1)"
  gguf="$(python3 "$HERE/fetch-model.py" --model "$MODEL" | tail -n 1)"
  mkdir -p "$STATE"
  if health "$PORT"; then fail "port $PORT already serves something; set UNICORE_MODEL_PORT to a free port"; fi
  local start=$SECONDS
  setsid "$server" --jinja -m "$gguf" --host 127.0.0.1 --port "$PORT" -c "$CTX" --alias "$MODEL" \
    --temp "$TEMP" --seed 42 --no-webui -t "$THREADS" >"$STATE/server.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$STATE/pid"
  echo "$PORT" >"$STATE/port"
  echo "$MODEL" >"$STATE/alias"
  until health "$PORT"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$STATE/pid"
      tail -n 20 "$STATE/server.log" >&2
      fail "llama-server exited during start-up (log: $STATE/server.log)"
    fi
    if ((SECONDS - start > READY_TIMEOUT)); then
      kill "$pid" 2>/dev/null || true
      rm -f "$STATE/pid"
      fail "llama-server did not answer /health within ${READY_TIMEOUT} s (log: $STATE/server.log)"
    fi
    sleep 0.2
  done
  log "llama-server ready on 127.0.0.1:$PORT in $((SECONDS - start)) s (pid $pid, model $MODEL, log $STATE/server.log)"
  print_usage_lines
}

down() {
  local pid
  pid="$(running_pid)"
  if [[ -z "$pid" ]]; then
    log "not running"
    rm -f "$STATE/pid"
    return 0
  fi
  kill "$pid"
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$STATE/pid"
  log "stopped (pid $pid)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status)
    pid="$(running_pid)"
    if [[ -n "$pid" ]]; then log "running (pid $pid)"; print_usage_lines; else log "not running"; exit 1; fi
    ;;
  *) fail "usage: $0 up|down|status" ;;
esac

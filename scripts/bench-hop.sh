#!/usr/bin/env bash
# The cost of the controller hop: `cairn bench` at concurrency 1 against
# `cairn serve` alone, then against `cairn controller` with one `cairn worker`
# (same model, same flags), and the difference of the median TTFTs.
# Usage: scripts/bench-hop.sh [MODEL] [REQUESTS]   (env CAIRN_BIN: the binary)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CAIRN_BIN:-$root/build/cairn}
model=${1:-$root/../shared/models/stories260K.gguf}
requests=${2:-100}
bench_flags=(--concurrency 1 --requests "$requests" --prompt-tokens 32 --max-tokens 16 --json)
[[ -x $bin ]] || { echo "bench-hop: $bin is not built" >&2; exit 1; }
[[ -f $model ]] || { echo "bench-hop: no model at $model" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  exec 2>/dev/null  # no "Killed" job notices for the servers stopped here
  for p in "${pids[@]}"; do kill -9 "$p" || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Starts "$@" with stderr to $1's log and waits (30 s at most) for a line matching $2.
start() {
  local log=$1 pattern=$2
  shift 2
  "$@" 2>"$log" &
  pids+=($!)
  for _ in $(seq 300); do
    grep -qE "$pattern" "$log" && return 0
    sleep 0.1
  done
  echo "bench-hop: '$*' did not print /$pattern/:" >&2
  cat "$log" >&2
  exit 1
}
url_of() { grep -oE 'listening on http://[^ ]+' "$1" | head -1 | sed 's/listening on //'; }
wait_health() {
  for _ in $(seq 300); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$1/health") == 200 ]] && return 0
    sleep 0.1
  done
  echo "bench-hop: $1 never became healthy" >&2
  exit 1
}
p50() { /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["ttft"]["p50_ms"])'; }

start "$tmp/serve.log" 'cairn: ready' "$bin" serve -m "$model" --port 0 -t 1
serve_url=$(url_of "$tmp/serve.log")
wait_health "$serve_url"
serve_ms=$("$bin" bench --url "$serve_url" "${bench_flags[@]}" 2>/dev/null | p50)
kill "${pids[0]}"

start "$tmp/controller.log" 'grpc listening on' "$bin" controller --http-port 0 --grpc-port 0
controller_url=$(url_of "$tmp/controller.log")
grpc=$(grep -oE 'grpc listening on [^ ]+' "$tmp/controller.log" | head -1 | sed 's/grpc listening on //')
start "$tmp/worker.log" 'registered with' "$bin" worker -m "$model" --controller "$grpc" -t 1
wait_health "$controller_url"
hop_ms=$("$bin" bench --url "$controller_url" "${bench_flags[@]}" 2>/dev/null | p50)

/usr/bin/python3 - "$serve_ms" "$hop_ms" <<'PY'
import sys
serve, hop = float(sys.argv[1]), float(sys.argv[2])
print(f"median TTFT, concurrency 1: serve {serve:.3f} ms, controller + worker {hop:.3f} ms, "
      f"hop {hop - serve:+.3f} ms (target < 2 ms)")
PY

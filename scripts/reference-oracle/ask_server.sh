# Sourced by arch_golden.sh, quant_golden.sh and lora_golden.sh (the one copy of their
# server loop). ask_server SERVER MODEL PORT OUT_JSON [SERVER_ARGS...] serves MODEL with
# the reference's llama-server (-t 1 -fa off -c 512, then SERVER_ARGS), waits until it answers, asks it the prompts of
# $shared/golden/stories260K.json (golden_from_server.py) into OUT_JSON and stops it.
# Uses the caller's $root, $shared and $work; sets $pid while the server runs, so the
# caller's EXIT trap stops one left running by a failure.
ask_server() {
  local server=$1 model=$2 port=$3 out=$4 ready=
  shift 4
  # -fa off: cairn computes attention as the reference's unfused path does
  # (scores, softmax, weighted sum), not its flash-attention kernel.
  "$server" -m "$model" -t 1 --port "$port" -fa off -c 512 "$@" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && { ready=1; break; }
    kill -0 "$pid" 2>/dev/null || { cat "$work/server.log"; return 1; }
    sleep 1
  done
  [ -n "$ready" ] || { echo "llama-server did not answer on port $port in 120 s" >&2; return 1; }
  /usr/bin/python3 "$root/scripts/reference-oracle/golden_from_server.py" "$shared" stories260K \
    "$port" "$out"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
}

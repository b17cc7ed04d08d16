#!/usr/bin/env bash
# Makes one reference-quantized model and its golden file for
# tests/model/quant_golden_test.cpp: writes a random F32 model with
# `cairn make-model` (the vocabulary of ../shared/models/stories260K.gguf),
# quantizes it with the reference's own llama-quantize (so cairn reads a file
# another implementation wrote: its block layouts, its fallbacks for rows that
# are not whole blocks, its K-quant mixes), stores that file in
# tests/data/ref-quant/, serves it with the reference's llama-server, asks it
# the prompts of ../shared/golden/stories260K.json and stores the answers with
# the make-model arguments (the test rebuilds the F32 weights from them to
# check every tensor cairn dequantizes).
#
# Usage: quant_golden.sh NAME PORT "QUANTIZE_ARGS" MAKE_MODEL_ARGS...
#   QUANTIZE_ARGS: llama-quantize's options and type, e.g. "Q4_K_M" or
#                  "--tensor-type attn_q=q2_k --pure Q4_K"
#   CAIRN (default build/cairn), REF (default /tmp/ref2026/build/bin): the
#   reference's binaries (scripts/reference-oracle/README.md).
set -euo pipefail
name=$1 port=$2 qargs=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${CAIRN_SHARED_DIR:-$root/../shared}
cairn=${CAIRN:-$root/build/cairn}
ref=${REF:-/tmp/ref2026/build/bin}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$root/tests/data/ref-quant" "$root/tests/model/golden-quant"
model="$root/tests/data/ref-quant/$name.gguf"

"$cairn" make-model "$work/f32.gguf" "$@" --type f32 --vocab-from "$shared/models/stories260K.gguf" -t 1
qtype=${qargs##* } qopts=
[[ $qargs == *" "* ]] && qopts=${qargs% *}
# shellcheck disable=SC2086
"$ref/llama-quantize" $qopts "$work/f32.gguf" "$model" "$qtype" 1 >"$work/quantize.log" 2>&1 ||
  { cat "$work/quantize.log"; exit 1; }
# shellcheck source=ask_server.sh
. "$root/scripts/reference-oracle/ask_server.sh"
ask_server "$ref/llama-server" "$model" "$port" "$work/out.json"
/usr/bin/python3 - "$work/out.json" "$model" "$root/tests/model/golden-quant/$name.json" "$qargs" "$@" <<'PY'
import hashlib, json, os, sys
src, model, out, qargs, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
g = json.load(open(src))
g['model'] = 'tests/data/ref-quant/' + os.path.basename(model)
g['sha256'] = hashlib.sha256(open(model, 'rb').read()).hexdigest()
g['reference'] = ('llama.cpp from node-llama-cpp 3.21.1 (source of September 2026): llama-quantize '
                  + qargs + ', then llama-server -t 1 -fa off, greedy, top-5 log-probabilities')
g['make_model_args'] = args  # of the F32 model it quantized (`cairn make-model OUT ARGS --type f32`)
json.dump(g, open(out, 'w'), indent=1)
print(f'wrote {out} and {model}')
PY

#!/usr/bin/env bash
# tests/onnx/generate.sh — the ctest fixture onnx_models: the test models, their inputs and
# ONNX Runtime's outputs, into OUT (make_models.py, then ort_expected.mjs).
# A missing python3-onnx/numpy, node or onnxruntime-node is not a failure: OUT/SKIP
# then says what is missing, and the parity tests skip with that reason.
set -euo pipefail
out=${1:?usage: generate.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"
mkdir -p "$out"
py=/usr/bin/python3
if [ ! -x "$py" ]; then
  echo "Debian's /usr/bin/python3 (with python3-onnx) is missing" > "$out/SKIP"
  cat "$out/SKIP"
  exit 0
fi
"$py" "$here/make_models.py" "$out"
[ -e "$out/SKIP" ] && exit 0
if ! command -v node >/dev/null 2>&1; then
  echo "node is missing: ONNX Runtime (onnxruntime-node) cannot compute the expected outputs" > "$out/SKIP"
  cat "$out/SKIP"
  exit 0
fi
node "$here/ort_expected.mjs" "$out"

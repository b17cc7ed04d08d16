#!/usr/bin/env bash
# Builds the reference implementation the golden files name (llama.cpp; build
# b4753, five commits after the golden's b4748) from the source bundle that the
# npm package node-llama-cpp@3.6.0 ships, plus a tensor-dump tool against it.
# A diagnostic for numerical parity work only: nothing in the build or CI uses
# it. Output: $OUT (default /tmp/reference-oracle) with llama.cpp/build-var/bin.
set -euo pipefail
OUT=${OUT:-/tmp/reference-oracle}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" && cd "$OUT"
if [ ! -d llama.cpp ]; then
  npm pack node-llama-cpp@3.6.0 >/dev/null
  mkdir -p pkg && tar xzf node-llama-cpp-3.6.0.tgz -C pkg
  git clone -q pkg/package/llama/gitRelease.bundle llama.cpp
fi
# As the project's release builds are made: one CPU backend per x86 level,
# the best one loaded at run time.
cmake -S llama.cpp -B llama.cpp/build-var -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
ninja -C llama.cpp/build-var llama-server ggml-cpu-skylakex ggml-cpu-icelake ggml-cpu-haswell
L=llama.cpp
g++ -O2 -std=c++17 "$HERE/dump_tensors.cpp" -I$L/include -I$L/ggml/include -L$L/build-var/bin \
  -lllama -lggml -lggml-base -Wl,-rpath,"$OUT/$L/build-var/bin" -o dump_tensors
echo "built: $OUT/$L/build-var/bin/llama-server and $OUT/dump_tensors"

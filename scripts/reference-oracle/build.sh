#!/usr/bin/env bash
# Builds the reference implementation the golden files name (llama.cpp; build
# b4753, five commits after the golden's b4748) from the source bundle that the
# npm package node-llama-cpp@3.6.0 ships, plus a tensor-dump tool against it.
# A diagnostic for numerical parity work only: nothing in the build or CI uses
# it. Output under $OUT (default /tmp/reference-oracle):
#   golden-host/bin   compiled as the golden files' host compiled it
#                     (-march=sapphirerapids), minus the AVX512-FP16 and AMX
#                     instructions so it runs on any AVX-512 (VNNI, BF16) CPU;
#   generic/bin       the project's release style (one CPU backend per x86
#                     level), for contrast;
#   dump_tensors      linked against golden-host.
set -euo pipefail
OUT=${OUT:-/tmp/reference-oracle}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" && cd "$OUT"
if [ ! -d llama.cpp ]; then
  npm pack node-llama-cpp@3.6.0 >/dev/null
  mkdir -p pkg && tar xzf node-llama-cpp-3.6.0.tgz -C pkg
  git clone -q pkg/package/llama/gitRelease.bundle llama.cpp
fi
COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF)
FLAGS="-march=sapphirerapids -mno-avx512fp16 -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S llama.cpp -B golden-host "${COMMON[@]}" -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" >/dev/null
ninja -C golden-host llama-server
if [ "${GENERIC:-0}" = 1 ]; then
  cmake -S llama.cpp -B generic "${COMMON[@]}" -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON >/dev/null
  ninja -C generic llama-server ggml-cpu-skylakex ggml-cpu-icelake ggml-cpu-haswell
fi
L=llama.cpp
g++ -O2 -std=c++17 "$HERE/dump_tensors.cpp" -I$L/include -I$L/ggml/include -Lgolden-host/bin \
  -lllama -lggml -lggml-base -Wl,-rpath,"$OUT/golden-host/bin" -o dump_tensors
echo "built: $OUT/golden-host/bin/llama-server and $OUT/dump_tensors"

#!/usr/bin/env bash
# Installs, builds and runs every test: the release suite, the unit tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and the GGUF reader fuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"

bash scripts/build.sh
bash scripts/install-node-deps.sh

echo "== release test suite"
ctest --test-dir build --output-on-failure -j "$JOBS"

# The unit tests only: the CLI, the load generator and the multi-process tests
# run in the release tree above (building them twice would push CI past its
# time limit), while every library they drive is covered here in process.
echo "== unit tests under ASan + UBSan"
# -O1 -g1: line numbers in every report at a fraction of -O2 -g's compile time.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCAIRN_SANITIZE=ON -DCAIRN_TOOLS=OFF >/dev/null
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS"

echo "== fuzzing the GGUF reader (${FUZZ_SECONDS:-60} s)"
bash scripts/fuzz.sh

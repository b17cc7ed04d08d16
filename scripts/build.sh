#!/usr/bin/env bash
# Installs the build dependencies and builds the release tree in build/ (CLI at build/cairn).
# With arguments, builds only those targets (scripts/run.sh asks for `cairn` alone).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build ${1:+--target "$@"}

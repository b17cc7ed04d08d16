#!/usr/bin/env bash
# Installs, builds and starts the OpenAI-compatible server on 127.0.0.1:8080.
# With no arguments it serves the built-in demo model; any arguments are passed
# to `cairn serve` (e.g. -m model.gguf --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the server binary: the tests and benchmarks are scripts/test.sh's to build.
bash scripts/build.sh cairn
exec ./build/cairn serve "$@"

#!/usr/bin/env bash
# Installs, builds and runs cairn. With no arguments it generates text with the
# built-in demo model; any arguments are passed to `cairn run` (e.g. -m model.gguf -p "Hello").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ $# -eq 0 ]; then
  exec ./build/cairn run -p "Once upon a time" -n 64
fi
exec ./build/cairn run "$@"

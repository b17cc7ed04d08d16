#!/usr/bin/env bash
# Makes the golden files of tests/model/golden-embd (tests/model/embedding_golden_test.cpp):
# the reference llama-server's token ids and unnormalized pooled embeddings
# (and a reranker's scores) for the texts in embedding_golden.py, for
#   syn-bert-f32       a random BERT (cairn make-model --arch bert, the bert-bge
#                      vocabulary), mean and cls pooling
#   syn-bert-rank-f32  the same shape with a reranker's head: /rerank scores
#   syn-llama-gqa-f32  ../shared/models/syn-llama-gqa-f32.gguf, mean and last
#   syn-qwen2-f32      ../shared/models/syn-qwen2-f32.gguf, last
# Generated models are stored as their make-model spec and sha256 (the test
# writes them again and checks the bytes), shared ones by name and sha256.
#
# Usage: embedding_golden.sh [PORT]
#   CAIRN=path of cairn (default build/cairn)
#   LLAMA_SERVER=path of llama-server (default /tmp/ref2026/build-noamx/bin/llama-server)
set -euo pipefail
port=${1:-18461}
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${CAIRN_SHARED_DIR:-$root/../shared}
cairn=${CAIRN:-$root/build/cairn}
server=${LLAMA_SERVER:-/tmp/ref2026/build-noamx/bin/llama-server}
out=$root/tests/model/golden-embd
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
vocab=$shared/tokenizer/ggml-vocab-bert-bge.gguf
py=$root/scripts/reference-oracle/embedding_golden.py

# NAME POOLINGS MAKE_MODEL_ARGS...: a generated bert model.
generated() {
  local name=$1 poolings=$2
  shift 2
  "$cairn" make-model "$work/$name.gguf" "$@" --type f32 --vocab-from "$vocab" -t 1
  /usr/bin/python3 - "$work/$name.gguf" "$work/$name.meta.json" "$@" <<'PY'
import argparse, hashlib, json, sys
model, meta, args = sys.argv[1], sys.argv[2], sys.argv[3:]
p = argparse.ArgumentParser()
for opt, typ, default in [('--arch', str, 'llama'), ('--dim', int, 256), ('--layers', int, 2),
                          ('--heads', int, 4), ('--kv-heads', int, 4), ('--ffn', int, 512),
                          ('--ctx', int, 2048), ('--pooling', str, ''), ('--seed', int, 0)]:
    p.add_argument(opt, type=typ, default=default)
a = p.parse_args(args)
json.dump({'model': model.split('/')[-1],
           'make_model': {'command': 'cairn make-model OUT ' + ' '.join(args) +
                          ' --type f32 --vocab-from ../shared/tokenizer/ggml-vocab-bert-bge.gguf',
                          'vocab': 'tokenizer/ggml-vocab-bert-bge.gguf',
                          'spec': {'arch': a.arch, 'dim': a.dim, 'layers': a.layers,
                                   'heads': a.heads, 'kv_heads': a.kv_heads, 'ffn': a.ffn,
                                   'ctx': a.ctx, 'pooling': a.pooling, 'seed': a.seed}},
           'sha256': hashlib.sha256(open(model, 'rb').read()).hexdigest()}, open(meta, 'w'))
PY
  /usr/bin/python3 "$py" "$server" "$work/$name.gguf" "$port" "$out/$name.json" "$poolings" \
    "$work/$name.meta.json"
}

# NAME POOLINGS: a model of ../shared/models.
shared_model() {
  local name=$1 poolings=$2
  /usr/bin/python3 - "$shared/models/$name.gguf" "$work/$name.meta.json" <<'PY'
import hashlib, json, sys
model, meta = sys.argv[1], sys.argv[2]
json.dump({'model': model.split('/')[-1], 'shared_model': 'models/' + model.split('/')[-1],
           'sha256': hashlib.sha256(open(model, 'rb').read()).hexdigest()}, open(meta, 'w'))
PY
  /usr/bin/python3 "$py" "$server" "$shared/models/$name.gguf" "$port" "$out/$name.json" \
    "$poolings" "$work/$name.meta.json"
}

common=(--arch bert --dim 128 --layers 2 --heads 4 --kv-heads 4 --ffn 256 --ctx 512)
generated syn-bert-f32 mean,cls "${common[@]}" --pooling mean --seed 11
generated syn-bert-rank-f32 rank "${common[@]}" --pooling rank --seed 12
shared_model syn-llama-gqa-f32 mean,last
shared_model syn-qwen2-f32 last
rm -f "$out"/*.server.log

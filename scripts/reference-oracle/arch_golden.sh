#!/usr/bin/env bash
# Makes one golden file of tests/model/golden (tests/model/arch_golden_test.cpp):
# writes a random F32 model with `cairn make-model` (the vocabulary of
# ../shared/models/stories260K.gguf), serves it with the reference's
# llama-server, asks it the prompts of ../shared/golden/stories260K.json
# (golden_from_server.py) and stores the answers with the make-model spec and
# the model file's sha256.
#
# Usage: arch_golden.sh NAME PORT MAKE_MODEL_ARGS...
#   CAIRN=path of cairn (default build-arch/cairn)
#   LLAMA_SERVER=path of llama-server (default /tmp/ref2026/build/bin/llama-server)
# Example:
#   scripts/reference-oracle/arch_golden.sh syn-qwen3-f32 18231 --arch qwen3 --dim 128 \
#     --layers 2 --heads 4 --kv-heads 2 --head-dim 48 --ffn 320 --ctx 512 --seed 3
#   scripts/reference-oracle/arch_golden.sh syn-qwen3moe-f32 18233 --arch qwen3moe --dim 128 \
#     --layers 2 --heads 4 --kv-heads 2 --head-dim 48 --ffn 320 --experts 8 --experts-used 2 \
#     --expert-ffn 96 --ctx 512 --seed 5
#   scripts/reference-oracle/arch_golden.sh syn-gemma2-f32 18241 --arch gemma2 --dim 128 \
#     --layers 2 --heads 4 --kv-heads 2 --head-dim 48 --ffn 320 --sliding-window 16 \
#     --attn-softcap 4 --final-softcap 8 --ctx 512 --seed 7
#   scripts/reference-oracle/arch_golden.sh syn-gemma3-f32 18243 --arch gemma3 --dim 128 \
#     --layers 6 --heads 4 --kv-heads 2 --head-dim 48 --ffn 320 --sliding-window 16 \
#     --final-softcap 8 --ctx 512 --seed 9
#   LLAMA_SERVER=/tmp/ref2026/build-noamx/bin/llama-server \
#   scripts/reference-oracle/arch_golden.sh syn-gptoss-f32 18323 --arch gpt-oss --dim 128 \
#     --layers 4 --heads 4 --kv-heads 2 --head-dim 48 --ffn 320 --experts 8 --experts-used 4 \
#     --expert-ffn 96 --sliding-window 16 --ctx 512 --seed 31
# YaRN (made with LLAMA_SERVER=/tmp/ref2026/build-noamx/bin/llama-server, below):
#   scripts/reference-oracle/arch_golden.sh syn-llama-yarn-f32 18245 --arch llama --dim 192 \
#     --layers 2 --heads 6 --kv-heads 2 --ffn 384 --rope-scaling yarn --rope-scaling-factor 4 \
#     --rope-orig-ctx 32 --ctx 512 --seed 5
#   scripts/reference-oracle/arch_golden.sh syn-qwen2-yarn-f32 18248 --arch qwen2 --dim 128 \
#     --layers 2 --heads 4 --kv-heads 2 --ffn 320 --rope-scaling yarn --rope-scaling-factor 8 \
#     --rope-orig-ctx 16 --ctx 512 --seed 17
#   scripts/reference-oracle/arch_golden.sh syn-qwen3-yarn-f32 18265 --arch qwen3 --dim 128 \
#     --layers 2 --heads 4 --kv-heads 2 --head-dim 48 --ffn 320 --rope-scaling yarn \
#     --rope-scaling-factor 4 --rope-orig-ctx 32 --ctx 512 --seed 3
#   scripts/reference-oracle/arch_golden.sh syn-phi3-longrope-f32 18270 --arch phi3 --dim 128 \
#     --layers 3 --heads 4 --kv-heads 2 --ffn 256 --rope-scaling longrope \
#     --rope-scaling-factor 8 --rope-orig-ctx 64 --ctx 512 --seed 7 --name cairn-random-phi-128x3
#   (-c 512 > 64: the reference takes the long factors, as cairn's test loads it)
# Which build of the reference matters for decode steps: a -march=native
# build on an AMX host (/tmp/ref2026/build) sums single-token attention in
# another order than cairn emulates (remade here, syn-qwen3-f32 moves by up to
# 8e-4 and cairn's median deviation goes from 1e-6 to 1.7e-4); a build with
# GGML_NATIVE=OFF and the AVX-512 flags without AMX or AVX512-FP16
# (/tmp/ref2026/build-noamx: -msse4.2 -mf16c -mfma -mbmi2 -mavx -mavx2
# -mavx512f/cd/vl/dq/bw/vbmi/vnni/bf16) reproduces it to 1e-6. The build's
# folder name is stored in each file's "reference".
# (The reference sets token attributes by general.name: a name containing
# "phi3" makes it look up Phi-3's special tokens, which stories260K's
# vocabulary lacks, so phi3 models get another --name.)
set -euo pipefail
name=$1 port=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${CAIRN_SHARED_DIR:-$root/../shared}
cairn=${CAIRN:-$root/build-arch/cairn}
server=${LLAMA_SERVER:-/tmp/ref2026/build/bin/llama-server}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$root/tests/model/golden"
"$cairn" make-model "$work/$name.gguf" "$@" --type f32 --vocab-from "$shared/models/stories260K.gguf" -t 1
# shellcheck source=ask_server.sh
. "$root/scripts/reference-oracle/ask_server.sh"
ask_server "$server" "$work/$name.gguf" "$port" "$work/out.json"
version=$("$server" --version 2>&1 | grep -m1 -i version || true)
version="$version, $(basename "$(dirname "$(dirname "$server")")")"
/usr/bin/python3 - "$work/out.json" "$work/$name.gguf" "$root/tests/model/golden/$name.json" "$version" "$@" <<'EOF'
import argparse, hashlib, json, os, sys
src, model, out, version, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
p = argparse.ArgumentParser()
for opt, typ, default in [('--arch', str, 'llama'), ('--dim', int, 256), ('--layers', int, 2),
                          ('--heads', int, 4), ('--kv-heads', int, 4), ('--ffn', int, 512),
                          ('--ctx', int, 2048), ('--head-dim', int, 0), ('--rope-freqs', str, ''),
                          ('--experts', int, 0), ('--experts-used', int, 0),
                          ('--expert-ffn', int, 0), ('--shared-ffn', int, 0),
                          ('--sliding-window', int, 0), ('--attn-softcap', float, 0.0),
                          ('--final-softcap', float, 0.0), ('--rope-scaling', str, ''),
                          ('--rope-scaling-factor', float, 0.0), ('--rope-orig-ctx', int, 0),
                          ('--seed', int, 0), ('--name', str, '')]:
    p.add_argument(opt, type=typ, default=default)
a = p.parse_args(args)
g = json.load(open(src))
g['model'] = os.path.basename(model)
g['reference'] = ('llama.cpp llama-server from node-llama-cpp 3.21.1 (source of September 2026, '
                  f'{version.strip()}), -t 1 -fa off, greedy (temperature 0), top-5 log-probabilities '
                  'of the full distribution at each step')
g['make_model'] = {
    'command': 'cairn make-model OUT ' + ' '.join(args) +
               ' --type f32 --vocab-from ../shared/models/stories260K.gguf',
    'spec': {'arch': a.arch, 'dim': a.dim, 'layers': a.layers, 'heads': a.heads,
             'kv_heads': a.kv_heads, 'ffn': a.ffn, 'ctx': a.ctx, 'head_dim': a.head_dim,
             'rope_freqs': a.rope_freqs, 'seed': a.seed, 'name': a.name},
}
if a.experts or a.experts_used or a.expert_ffn or a.shared_ffn:  # the MoE architectures
    g['make_model']['spec'].update({'experts': a.experts, 'experts_used': a.experts_used,
                                    'expert_ffn': a.expert_ffn, 'shared_ffn': a.shared_ffn})
if a.sliding_window or a.attn_softcap or a.final_softcap:  # the gemma architectures
    g['make_model']['spec'].update({'sliding_window': a.sliding_window,
                                    'attn_softcap': a.attn_softcap,
                                    'final_softcap': a.final_softcap})
if a.rope_scaling:  # RoPE scaling keys
    g['make_model']['spec'].update({'rope_scaling': a.rope_scaling,
                                    'rope_scaling_factor': a.rope_scaling_factor,
                                    'rope_orig_ctx': a.rope_orig_ctx})
g['sha256'] = hashlib.sha256(open(model, 'rb').read()).hexdigest()
json.dump(g, open(out, 'w'), indent=1)
print(f'wrote {out}')
EOF

#!/usr/bin/env bash
# Makes one golden file of tests/model/golden-lora (tests/model/lora_golden_test.cpp):
# writes a random base model with `cairn make-model` (the vocabulary of
# ../shared/models/stories260K.gguf) and a random LoRA adapter for it with
# `cairn make-lora`, serves the pair with the reference's llama-server
# (--lora-scaled FILE:SCALE, applied at run time), asks it the prompts of
# ../shared/golden/stories260K.json and stores the answers with both specs
# and both files' sha256.
#
# Usage: lora_golden.sh NAME PORT "MAKE_LORA_ARGS" SCALE MAKE_MODEL_ARGS...
#   CAIRN=path of cairn (default build/cairn)
#   LLAMA_SERVER=path of llama-server (default /tmp/ref2026/build-noamx/bin/llama-server)
#   RUN_TIME=0: cairn applies this adapter only merged (an adapter of experts):
#     the golden test then expects the run-time load to be refused
#   REF_ARGS=more llama-server options
# The files of the repository were made on an Intel host with AVX-512 and AMX,
# by the reference built without its AMX kernels (GGML_NATIVE=OFF, AVX-512
# F/BW/VBMI/VNNI/BF16 on, GGML_AMX_*=OFF; its AMX build crashed there on
# quantized weights) into /tmp/ref2026/build-noamx.
# Examples (the golden files of the repository):
#   scripts/reference-oracle/lora_golden.sh syn-lora-llama-f32 18311 \
#     "--rank 4 --alpha 8 --targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down,output,token_embd --type f32 --seed 3" \
#     1.0 --arch llama --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 320 --ctx 512 --seed 21 --type f32
#   scripts/reference-oracle/lora_golden.sh syn-lora-qwen2-q8_0 18313 \
#     "--rank 8 --alpha 16 --targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down --type f16 --b-scale 0.25 --seed 4" \
#     0.5 --arch qwen2 --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 320 --ctx 512 --seed 22 --type q8_0
#   scripts/reference-oracle/lora_golden.sh syn-lora-phi-f32 18315 \
#     "--rank 4 --alpha 4 --targets attn_qkv,attn_output,ffn_up,ffn_down --type f32 --seed 5" \
#     1.0 --arch phi3 --dim 128 --layers 2 --heads 4 --kv-heads 4 --ffn 320 --ctx 512 --seed 23 \
#     --name synthetic-small --type f32
#   RUN_TIME=0 scripts/reference-oracle/lora_golden.sh syn-lora-qwen2moe-f32 18317 \
#     "--rank 4 --alpha 8 --targets attn_q,attn_v,ffn_gate_inp,ffn_gate_exps,ffn_up_exps,ffn_down_exps,ffn_up_shexp --type f32 --seed 6" \
#     1.0 --arch qwen2moe --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 320 --experts 8 \
#     --experts-used 2 --expert-ffn 96 --ctx 512 --seed 24 --type f32
set -euo pipefail
name=$1 port=$2 lora_args=$3 scale=$4
shift 4
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${CAIRN_SHARED_DIR:-$root/../shared}
cairn=${CAIRN:-$root/build/cairn}
server=${LLAMA_SERVER:-/tmp/ref2026/build-noamx/bin/llama-server}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$root/tests/model/golden-lora"
"$cairn" make-model "$work/base.gguf" "$@" --vocab-from "$shared/models/stories260K.gguf" -t 1
# shellcheck disable=SC2086  # the adapter's arguments are words
"$cairn" make-lora "$work/base.gguf" "$work/adapter.gguf" $lora_args
# shellcheck source=ask_server.sh
. "$root/scripts/reference-oracle/ask_server.sh"
# shellcheck disable=SC2086  # REF_ARGS are words
ask_server "$server" "$work/base.gguf" "$port" "$work/out.json" \
  --lora-scaled "$work/adapter.gguf:$scale" ${REF_ARGS:-}
version=$("$server" --version 2>&1 | grep -m1 -i version || true)
RUN_TIME=${RUN_TIME:-1} /usr/bin/python3 - "$work" "$root/tests/model/golden-lora/$name.json" "$version" "$scale" "$lora_args" "$@" <<'PY'
import argparse, hashlib, json, os, sys
work, out, version, scale, lora_args, args = sys.argv[1:6] + [sys.argv[6:]]
p = argparse.ArgumentParser()
for opt, typ, default in [('--arch', str, 'llama'), ('--dim', int, 256), ('--layers', int, 2),
                          ('--heads', int, 4), ('--kv-heads', int, 4), ('--ffn', int, 512),
                          ('--ctx', int, 2048), ('--head-dim', int, 0), ('--seed', int, 0),
                          ('--name', str, ''), ('--type', str, 'f32'), ('--experts', int, 0),
                          ('--experts-used', int, 0), ('--expert-ffn', int, 0), ('--shared-ffn', int, 0)]:
    p.add_argument(opt, type=typ, default=default)
a = p.parse_args(args)
q = argparse.ArgumentParser()
for opt, typ, default in [('--rank', int, 8), ('--alpha', float, 16.0), ('--targets', str, ''),
                          ('--type', str, 'f32'), ('--a-scale', float, 1.0),
                          ('--b-scale', float, 0.5), ('--seed', int, 0)]:
    q.add_argument(opt, type=typ, default=default)
l = q.parse_args(lora_args.split())
g = json.load(open(f'{work}/out.json'))
sha = lambda f: hashlib.sha256(open(f, 'rb').read()).hexdigest()
g['reference'] = ('llama.cpp llama-server from node-llama-cpp 3.21.1 (source of September 2026, '
                  f'{version.strip()}), --lora-scaled ADAPTER:{scale}, -t 1 -fa off, greedy, '
                  'top-5 log-probabilities of the full distribution at each step')
g['make_model'] = {
    'command': 'cairn make-model OUT ' + ' '.join(args) + ' --vocab-from ../shared/models/stories260K.gguf',
    'spec': {'arch': a.arch, 'dim': a.dim, 'layers': a.layers, 'heads': a.heads,
             'kv_heads': a.kv_heads, 'ffn': a.ffn, 'ctx': a.ctx, 'head_dim': a.head_dim,
             'seed': a.seed, 'name': a.name, 'type': a.type},
}
if a.experts or a.experts_used or a.expert_ffn or a.shared_ffn:  # the MoE architectures
    g['make_model']['spec'].update({'experts': a.experts, 'experts_used': a.experts_used,
                                    'expert_ffn': a.expert_ffn, 'shared_ffn': a.shared_ffn})
g['run_time'] = os.environ.get('RUN_TIME', '1') != '0'
g['make_lora'] = {'command': 'cairn make-lora BASE OUT ' + lora_args,
                  'spec': {'rank': l.rank, 'alpha': l.alpha, 'targets': l.targets.split(','),
                           'type': l.type, 'a_scale': l.a_scale, 'b_scale': l.b_scale,
                           'seed': l.seed}}
g['scale'] = float(scale)
g['sha256'] = sha(f'{work}/base.gguf')
g['adapter_sha256'] = sha(f'{work}/adapter.gguf')
json.dump(g, open(out, 'w'), indent=1)
print(f'wrote {out}')
PY

"""Prefill and decode speed of each GGUF type cairn computes, side by side
with the reference (llama.cpp's llama-bench, built from the node-llama-cpp
3.21.1 bundle by scripts/reference-oracle) in the same run, on TinyLlama-shaped
models (dim 2048, 22 layers, 32/4 heads, FFN 5632) or, with --shape qwen3moe,
on a Qwen3-MoE-shaped one (dim 2048, 16 layers, 32/4 heads of 128, 8 experts
of FFN 1408, 2 active per token), with random weights that `cairn
make-model` writes once per type into --dir. A benchmark, not a test: the
numbers are this host's; docs/performance.md records them.

    /usr/bin/python3 bench/gguf_types.py [--types q4_1,q5_0,...] [--shape tinyllama|qwen3moe]
        [--llama-bench PATH] [--prompt 128] [--decode 32] [--threads 2] [--dir /tmp/cairn-bench]

Each row: cairn's best of --reps runs (bench-model: prefill of --prompt
tokens, decode of --decode tokens one sequence at a time) and llama-bench's
mean over the same number of repetitions (--ref-best: its best one; pp<prompt>, tg<decode>), and their
ratio. Without a llama-bench the reference columns stay empty.
"""

import argparse
import json
import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
TYPES = "q4_0,q4_1,q5_0,q5_1,q8_0,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_nl,iq4_xs,mxfp4,q3_k_m,q4_k_m,q5_k_m"
SHAPES = {
    "tinyllama": ("tl", ["--dim", "2048", "--layers", "22", "--heads", "32", "--kv-heads", "4",
                         "--ffn", "5632"]),
    "qwen3moe": ("q3moe", ["--arch", "qwen3moe", "--dim", "2048", "--layers", "16", "--heads", "32",
                           "--kv-heads", "4", "--head-dim", "128", "--ffn", "5632", "--experts", "8",
                           "--experts-used", "2", "--expert-ffn", "1408"]),
}


def make_model(path, shape, qtype, threads):
    if os.path.exists(path):
        return
    subprocess.run([CAIRN_BIN, "make-model", path, *SHAPES[shape][1], "--type", qtype, "--seed", "1",
                    "-t", str(threads)], check=True, capture_output=True)


def cairn_speeds(path, args):
    out = subprocess.run([CAIRN_BIN, "bench-model", "-m", path, "-p", str(args.prompt), "-n", str(args.decode),
                          "--batch", "1", "-t", str(args.threads), "--reps", str(args.reps), "--probe-passes", "1",
                          "--probe-mib", "64"], check=True, capture_output=True, text=True).stdout
    pp = re.search(r"^prefill p=\d+\s+\d+\s+[\d.]+\s+([\d.]+)", out, re.M)
    tg = re.search(r"^decode B=1 n=\d+\s+\d+\s+[\d.]+\s+([\d.]+)", out, re.M)
    cpu = re.findall(r"^(?:prefill|decode) .*\s(\d+)\s*$", out, re.M)
    return float(pp.group(1)), float(tg.group(1)), "/".join(cpu)


def reference_speeds(path, args):
    if not args.llama_bench or not os.path.exists(args.llama_bench):
        return None, None
    res = subprocess.run([args.llama_bench, "-m", path, "-p", str(args.prompt), "-n", str(args.decode),
                          "-t", str(args.threads), "-r", str(args.reps), "-o", "json"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        return None, None
    pp = tg = None
    # --ref-best: the best repetition, as cairn's column (on a shared host the
    # mean mostly measures the other users' load).
    def speed(row):
        return max(row["samples_ts"]) if args.ref_best and row.get("samples_ts") else row["avg_ts"]
    for row in json.loads(res.stdout):
        if row.get("n_prompt") and not row.get("n_gen"):
            pp = speed(row)
        elif row.get("n_gen") and not row.get("n_prompt"):
            tg = speed(row)
    return pp, tg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--ref-best", action="store_true",
                    help="the reference's best repetition instead of its mean")
    ap.add_argument("--shape", default="tinyllama", choices=sorted(SHAPES))
    ap.add_argument("--llama-bench", default="/tmp/ref2026/build/bin/llama-bench")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/cairn-bench")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    fmt = "{:<8} {:>9} {:>9} {:>7}   {:>9} {:>9} {:>7}   {}"
    print(f"{args.shape} shape, {args.threads} threads; prefill of {args.prompt} tokens, decode of {args.decode} (tok/s)")
    print(fmt.format("type", "cairn pp", "ref pp", "ratio", "cairn tg", "ref tg", "ratio", "cairn cpu% pp/tg"))
    for qtype in args.types.split(","):
        path = os.path.join(args.dir, f"{SHAPES[args.shape][0]}-{qtype}.gguf")
        make_model(path, args.shape, qtype, args.threads)
        pp, tg, cpu = cairn_speeds(path, args)
        rpp, rtg = reference_speeds(path, args)
        ratio = lambda a, b: f"{a / b:.2f}" if b else "-"
        show = lambda v: f"{v:.2f}" if v else "-"
        print(fmt.format(qtype, show(pp), show(rpp), ratio(pp, rpp), show(tg), show(rtg), ratio(tg, rtg), cpu), flush=True)


if __name__ == "__main__":
    main()

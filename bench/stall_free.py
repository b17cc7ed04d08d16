#!/usr/bin/env python3
"""Stall-free batching (issue 42's latency benchmark): `cairn bench` against
`cairn serve`, 16 clients, 128-token prompts, 64 output tokens, on the
TinyLlama-shaped Q4_0 model, with prompt chunks sized by the step budget
(the default) and without it (`--max-step-ms -1`: chunks of up to
--max-batch-tokens), setups alternating round by round in one run.

    /usr/bin/python3 bench/stall_free.py [--cairn PATH] [--model FILE]
        [--threads 2] [--requests 32] [--rounds 2]
        [--setup NAME=SERVE_ARGS ...]

Prints per setup and round: output tok/s, TTFT p50/p99, inter-token
latency p50/p99 and p99/p50, and the medians over rounds beside the
chunked path's (ratios measured in the same run). The aims: ITL p99 at most
3x its p50, output tok/s within 5 % of the chunked path's, TTFT p50 not
worse. The model is made by `cairn make-model` when missing. A benchmark,
not a test.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_process import Proc, free_port, loadavg, wait_healthy  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINYLLAMA = ["--dim", "2048", "--layers", "22", "--heads", "32", "--kv-heads", "4", "--ffn", "5632"]


def make_model(cairn, path):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    subprocess.run([cairn, "make-model", "--out", path, "--type", "q4_0"] + TINYLLAMA, check=True)


def run_setup(args, serve_args):
    port = free_port()
    addr = "127.0.0.1:%d" % port
    env = dict(a[4:].split("=", 1) for a in serve_args if a.startswith("env:"))
    serve_args = [a for a in serve_args if not a.startswith("env:")]
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        serve = Proc([args.cairn, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads)]
                     + serve_args, name="cairn serve")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        wait_healthy(addr, serve)
        out = subprocess.run([args.cairn, "bench", "--url", "http://" + addr, "--concurrency", "16",
                              "--requests", str(args.requests), "--prompt-tokens", "128",
                              "--max-tokens", "64", "--json"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        serve.stop()
    level = json.loads(out)["levels"][0]
    if level["errors"]:
        raise RuntimeError("bench errors: %s" % level.get("first_error"))
    return {"tok_s": level["output_tokens_per_s"], "ttft50": level["ttft"]["p50_ms"],
            "ttft99": level["ttft"]["p99_ms"], "itl50": level["itl"]["p50_ms"],
            "itl99": level["itl"]["p99_ms"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cairn", default=os.path.join(REPO, "build", "cairn"))
    ap.add_argument("--model", default="/tmp/cairn-bench/tl-q4_0.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--setup", action="append", default=[],
                    help="NAME=SERVE_ARGS, e.g. 'fixed160=--max-step-ms 160'; an argument env:VAR=VALUE sets "
                         "the server's environment instead (default setups: chunked and stall-free)")
    ap.add_argument("--no-defaults", action="store_true",
                    help="run only the --setup ones (the first is the base of the ratios)")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        make_model(args.cairn, args.model)
    setups = [] if args.no_defaults else [("chunked", ["--max-step-ms", "-1"]), ("stall-free", [])]
    for s in args.setup:
        name, _, rest = s.partition("=")
        setups.append((name, shlex.split(rest)))

    print("cairn bench, 16 clients, %d requests, 128-token prompts, 64 out; %s, serve -t %d; load %s"
          % (args.requests, os.path.basename(args.model), args.threads, loadavg()))
    results = {name: [] for name, _ in setups}
    head = "%-15s %5s %9s %9s %9s %8s %8s %7s" % ("setup", "round", "out tok/s", "TTFT p50", "TTFT p99",
                                                  "ITL p50", "ITL p99", "p99/p50")
    print(head)
    for r in range(args.rounds):
        for name, serve_args in setups:
            m = run_setup(args, serve_args)
            results[name].append(m)
            print("%-15s %5d %9.1f %7.0fms %7.0fms %6.0fms %6.0fms %7.2f" % (
                name, r + 1, m["tok_s"], m["ttft50"], m["ttft99"], m["itl50"], m["itl99"],
                m["itl99"] / m["itl50"]), flush=True)

    med = {name: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for name, rs in results.items()}
    base_name = setups[0][0]
    base = med[base_name]
    print("\nmedians over %d rounds; ratios against %s measured in this run (load %s)"
          % (args.rounds, base_name, loadavg()))
    print("%-15s %9s %9s %9s %8s %8s %7s %10s %10s" % ("setup", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50",
                                                      "ITL p99", "p99/p50", "tok/s vs", "TTFT50 vs"))
    for name, m in med.items():
        print("%-15s %9.1f %7.0fms %7.0fms %6.0fms %6.0fms %7.2f %9.3fx %9.3fx" % (
            name, m["tok_s"], m["ttft50"], m["ttft99"], m["itl50"], m["itl99"], m["itl99"] / m["itl50"],
            m["tok_s"] / base["tok_s"], m["ttft50"] / base["ttft50"]))


if __name__ == "__main__":
    main()

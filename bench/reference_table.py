#!/usr/bin/env python3
"""Issue 42's comparison table, measured in one run on this host: cairn
against the 2026 llama.cpp (scripts/reference-oracle builds it) and
ik_llama.cpp (its public repository, built with -DGGML_NATIVE=ON, run with
run-time repacking `-rtr 1`) on TinyLlama-shaped Q4_0 and Q8_0 models
(random weights, `cairn make-model`).

    /usr/bin/python3 bench/reference_table.py [--cairn PATH] [--dir /tmp/cairn-bench]
        [--llama DIR_WITH_llama-bench] [--ik DIR_WITH_llama-bench] [--threads 2]
        [--reps 2] [--skip-server]

Rows: prefill of 512 tokens (tok/s); decode of one stream (tok/s, 64
tokens); decode of 16 streams at once (total tok/s: `cairn bench-model
--batch 16`, the references' `llama-batched-bench -npp 16 -ntg 64 -npl
16`); and the server: `cairn bench` (16 clients, 32 requests, 128-token
prompts, 64 out) against `cairn serve` and against each `llama-server -np
16` (output tok/s, inter-token latency p50 / p99). Engines alternate row by
row, so a row's numbers come from the same minutes. A missing reference
binary leaves its column empty. A benchmark, not a test.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_process import Proc, free_port, loadavg, wait_healthy  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINYLLAMA = ["--dim", "2048", "--layers", "22", "--heads", "32", "--kv-heads", "4", "--ffn", "5632"]


def model_path(args, qtype):
    path = os.path.join(args.dir, "tl-%s.gguf" % qtype)
    if not os.path.exists(path):
        os.makedirs(args.dir, exist_ok=True)
        subprocess.run([args.cairn, "make-model", path, *TINYLLAMA, "--type", qtype, "--seed", "1",
                        "-t", str(args.threads)], check=True, capture_output=True)
    return path


def cairn_model_speeds(args, path):
    out = subprocess.run([args.cairn, "bench-model", "-m", path, "-p", "512", "-n", "64", "--batch", "1,16",
                          "-t", str(args.threads), "--reps", str(args.reps), "--probe-passes", "1",
                          "--probe-mib", "64"], check=True, capture_output=True, text=True).stdout
    def rate(pattern):
        m = re.search(pattern, out, re.M)
        return float(m.group(1)) if m else None
    return {"pp": rate(r"^prefill p=512\s+\d+\s+[\d.]+\s+([\d.]+)"),
            "tg": rate(r"^decode B=1 n=\d+\s+\d+\s+[\d.]+\s+([\d.]+)"),
            "tg16": rate(r"^decode B=16 n=\d+\s+\d+\s+[\d.]+\s+([\d.]+)")}


def llama_bench_speeds(args, bindir, path, extra):
    exe = os.path.join(bindir, "llama-bench")
    if not os.path.exists(exe):
        return {}
    res = subprocess.run([exe, "-m", path, "-p", "512", "-n", "64", "-t", str(args.threads), "-r",
                          str(args.reps), "-o", "json", *extra], capture_output=True, text=True)
    if res.returncode != 0:
        print("  %s failed: %s" % (exe, res.stderr.strip().splitlines()[-1:]), file=sys.stderr)
        return {}
    rows = json.loads(res.stdout)
    speeds = {}
    for r in rows:
        if r.get("n_prompt") == 512 and r.get("n_gen") == 0:
            speeds["pp"] = r["avg_ts"]
        elif r.get("n_gen") == 64 and r.get("n_prompt") == 0:
            speeds["tg"] = r["avg_ts"]
    return speeds


def batched_speed(args, bindir, path, extra):
    exe = os.path.join(bindir, "llama-batched-bench")
    if not os.path.exists(exe):
        return None
    res = subprocess.run([exe, "-m", path, "-c", "2048", "-b", "512", "-ub", "512", "-npp", "16", "-ntg", "64",
                          "-npl", "16", "-t", str(args.threads), *extra], capture_output=True, text=True)
    if res.returncode != 0:
        print("  %s failed: %s" % (exe, res.stderr.strip().splitlines()[-1:]), file=sys.stderr)
        return None
    # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    for line in (res.stdout + res.stderr).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[:3] == ["16", "64", "16"]:
            return float(cells[7])
    return None


def bench_server(args, cmd, addr, name):
    proc = Proc(cmd, name=name)
    try:
        wait_healthy(addr, proc)
        out = subprocess.run([args.cairn, "bench", "--url", "http://" + addr, "--concurrency", "16", "--requests",
                              "32", "--prompt-tokens", "128", "--max-tokens", "64", "--json"],
                             capture_output=True, text=True, check=True).stdout
    finally:
        proc.stop()
    level = json.loads(out)["levels"][0]
    if level["errors"]:
        print("  %s: %d errors (%s)" % (name, level["errors"], level.get("first_error")), file=sys.stderr)
    return level["output_tokens_per_s"], level["itl"]["p50_ms"], level["itl"]["p99_ms"]


def server_rows(args, path):
    rows = {}
    port = free_port()
    rows["cairn"] = bench_server(args, [args.cairn, "serve", "-m", path, "--port", str(port), "-t",
                                        str(args.threads)], "127.0.0.1:%d" % port, "cairn serve")
    for name, bindir, extra in (("llama.cpp", args.llama, []), ("ik_llama.cpp", args.ik, ["-rtr"])):
        exe = os.path.join(bindir or "", "llama-server")
        if not bindir or not os.path.exists(exe):
            continue
        port = free_port()
        rows[name] = bench_server(args, [exe, "-m", path, "--port", str(port), "-t", str(args.threads), "-np", "16",
                                         "-c", str(16 * 256), *extra], "127.0.0.1:%d" % port, name)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cairn", default=os.path.join(REPO, "build", "cairn"))
    ap.add_argument("--dir", default="/tmp/cairn-bench")
    ap.add_argument("--llama", default="/tmp/ref2026/build-noamx/bin")
    ap.add_argument("--ik", default="/tmp/ik/build/bin")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--skip-server", action="store_true")
    args = ap.parse_args()

    print("host load %s, %d threads" % (loadavg(), args.threads))
    table = []
    for qtype in ("q4_0", "q8_0"):
        path = model_path(args, qtype)
        c = cairn_model_speeds(args, path)
        ref = llama_bench_speeds(args, args.llama, path, [])
        ik = llama_bench_speeds(args, args.ik, path, ["-rtr", "1"])
        table.append(("%s prefill, 512 tokens (tok/s)" % qtype.upper(), c["pp"], ik.get("pp"), ref.get("pp")))
        table.append(("%s decode, 1 stream (tok/s)" % qtype.upper(), c["tg"], ik.get("tg"), ref.get("tg")))
        if qtype == "q4_0":
            table.append(("Q4_0 decode, 16 streams (tok/s)", c["tg16"], batched_speed(args, args.ik, path, ["-rtr"]),
                          batched_speed(args, args.llama, path, [])))
        print("  %s done (load %s)" % (qtype, loadavg()), flush=True)
    if not args.skip_server:
        s = server_rows(args, model_path(args, "q4_0"))
        get = lambda name, i: s[name][i] if name in s else None  # noqa: E731
        table.append(("server, 16 clients: output tok/s", get("cairn", 0), get("ik_llama.cpp", 0),
                      get("llama.cpp", 0)))
        table.append(("server: inter-token p50 (ms)", get("cairn", 1), get("ik_llama.cpp", 1), get("llama.cpp", 1)))
        table.append(("server: inter-token p99 (ms)", get("cairn", 2), get("ik_llama.cpp", 2), get("llama.cpp", 2)))

    fmt = lambda v: "—" if v is None else "%.1f" % v  # noqa: E731
    print("\n| | cairn | ik_llama.cpp | llama.cpp (2026) | cairn / ik | cairn / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for name, c, ik, ref in table:
        ratio = lambda a, b: "—" if a is None or not b else "%.2fx" % (a / b)  # noqa: E731
        print("| %s | %s | %s | %s | %s | %s |" % (name, fmt(c), fmt(ik), fmt(ref), ratio(c, ik), ratio(c, ref)))
    print("\nload at the end %s" % loadavg())


if __name__ == "__main__":
    main()

"""What cutting an LLM over agents costs on one host: a GGUF model served by
`cairn serve` as a distributed worker with R `cairn agent` processes in S
pipeline stages (tensor parallel R/S), against the same file served by one
`cairn serve --model` process. For each layout it prints prefill and decode
tokens/s through the OpenAI route (one stream, then the aggregate of several), and from the worker's /metrics the time
the agents spent inside their collectives and the payload they handed them,
per token, plus each agent's resident memory after loading its shard. A
benchmark, not a test: the numbers are this host's.

    /usr/bin/python3 bench/distributed_llm.py [--model FILE] [--layouts local,1x1,2x1,2x2]
        [--prompt-tokens 128] [--decode-tokens 64] [--cores 2] [--streams 8]

Without --model it makes the TinyLlama-shaped Q4_0 model of docs/performance.md
(random weights, Llama 2's vocabulary from ../shared/tokenizer when present).
Each layout gets --cores compute threads in all (the worker's engine thread
aside): one process with all of them, or R agents with cores / R each (at
least one).
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.request

from child_process import Proc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
SHARED = os.environ.get("CAIRN_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared")

CONFIG = """
from mindspore_serving.server import distributed, register
model = distributed.declare_servable(rank_size={r}, stage_size={s}, model_file={path!r})

@register.register_method(output_names=["text"])
def generate(prompt):
    return register.add_stage(model, prompt, outputs_count=1)
"""


def make_model(path):
    vocab = os.path.join(SHARED, "tokenizer", "ggml-vocab-llama-spm.gguf")
    cmd = [CAIRN_BIN, "make-model", path, "--arch", "llama", "--dim", "2048", "--layers", "22", "--heads", "32",
           "--kv-heads", "4", "--ffn", "5632", "--type", "q4_0"]
    if os.path.isfile(vocab):
        cmd += ["--vocab-from", vocab]
    print("making", path, "...", flush=True)
    subprocess.run(cmd, check=True, capture_output=True)


def post(http, body, timeout=600):
    req = urllib.request.Request("http://%s/v1/completions" % http, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metrics(http):
    with urllib.request.urlopen("http://%s/metrics" % http, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"(cairn_distributed_\w+) ([\d.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def stream_times(http, prompt, max_tokens):
    """Arrival time of each streamed chunk of a greedy completion (EOS ignored)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}
    req = urllib.request.Request("http://%s/v1/completions" % http, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                times.append(time.time())
    return times


def measure(http, prompt_text, decode_tokens, streams, distributed):
    post(http, {"model": "m", "prompt": "warm up", "max_tokens": 4, "temperature": 0})
    before = metrics(http) if distributed else {}
    t0 = time.time()
    # Prefill: the prompt and one sampled token (prefix caching would skip
    # the second run: each layout's prompt is new to its server).
    r = post(http, {"model": "m", "prompt": prompt_text, "max_tokens": 1, "temperature": 0})
    prefill_s = time.time() - t0
    n_prompt = r["usage"]["prompt_tokens"]
    mid = metrics(http) if distributed else {}
    times = stream_times(http, "Decode " + prompt_text[:20], decode_tokens)
    after = metrics(http) if distributed else {}
    decode_s = times[-1] - times[0]
    n_decode = len(times) - 1
    row = {"prompt_tokens": n_prompt, "prefill_tok_s": n_prompt / prefill_s,
           "decode_tok_s": n_decode / decode_s if decode_s > 0 else 0.0}
    # Several streams at once: continuous batching (and, with stages, one
    # micro-batch per stage) for the aggregate rate.
    results = [None] * streams
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(
        i, stream_times(http, "Stream %d %s" % (i, prompt_text[:16]), decode_tokens))) for i in range(streams)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row["streams"] = streams
    row["aggregate_tok_s"] = sum(len(r) for r in results) / (time.time() - t0)
    if distributed:
        def per(a, b, key, n):
            return (b.get(key, 0) - a.get(key, 0)) / max(1, n)
        row["prefill_comm_ms_per_tok"] = 1e3 * per(before, mid, "cairn_distributed_agent_comm_seconds_total", n_prompt)
        row["prefill_comm_kib_per_tok"] = per(before, mid, "cairn_distributed_agent_comm_bytes_total", n_prompt) / 1024
        forwards = after.get("cairn_distributed_forwards_total", 0) - mid.get("cairn_distributed_forwards_total", 0)
        row["decode_forwards"] = forwards
        row["decode_comm_ms_per_tok"] = 1e3 * per(mid, after, "cairn_distributed_agent_comm_seconds_total", forwards)
        row["decode_agent_ms_per_tok"] = 1e3 * per(mid, after, "cairn_distributed_agent_forward_seconds_total",
                                                   forwards)
        row["decode_comm_kib_per_tok"] = per(mid, after, "cairn_distributed_agent_comm_bytes_total", forwards) / 1024
    return row


def run_layout(layout, model, root, args, prompt_text):
    if layout == "local":
        server = Proc([CAIRN_BIN, "serve", "--model", model, "--model-name", "m", "--port", "0", "--threads",
                       str(args.cores)])
        http = server.wait_for(r"listening on http://([\d.]+:\d+)").group(1)
        server.wait_for(r"cairn: ready")
        try:
            return measure(http, prompt_text, args.decode_tokens, args.streams, False), []
        finally:
            server.stop()
    ranks, stages = (int(x) for x in layout.split("x"))
    servables = os.path.join(root, layout)
    os.makedirs(os.path.join(servables, "m", "1"))
    with open(os.path.join(servables, "m", "servable_config.py"), "w") as f:
        f.write(CONFIG.format(r=ranks, s=stages, path=os.path.abspath(model)))
    worker = Proc([CAIRN_BIN, "serve", "--servable-dir", servables, "--port", "0", "--threads", "1",
                   "--distributed-address", "127.0.0.1:0", "--wait-agents-seconds", "600"])
    agents = []
    try:
        http = worker.wait_for(r"listening on http://([\d.]+:\d+)").group(1)
        dist = "127.0.0.1:" + worker.wait_for(r"distributed worker listening on \S+ \(port (\d+)\)").group(1)
        threads = max(1, args.cores // ranks)
        agents = [Proc([CAIRN_BIN, "agent", "--distributed-address", dist, "--rank", str(r), "--model", model,
                        "--threads", str(threads)]) for r in range(ranks)]
        worker.wait_for(r"cairn: ready")
        memory = [int(m.group(1)) for m in
                  (re.search(r"agent rank \d+ loaded .*\((\d+) MiB resident\)", line) for line in worker.lines) if m]
        return measure(http, prompt_text, args.decode_tokens, args.streams, True), memory
    finally:
        worker.stop()
        for a in agents:
            a.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--layouts", default="local,1x1,2x1,2x2")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8, help="concurrent streams for the aggregate decode rate")
    args = ap.parse_args()
    model = args.model
    if not model:
        model = os.path.join(tempfile.gettempdir(), "cairn-bench", "tl-q4_0.gguf")
        if not os.path.isfile(model):
            os.makedirs(os.path.dirname(model), exist_ok=True)
            make_model(model)
    words = "the quick brown fox jumps over a lazy dog and runs to see the little bird in the tree ".split()
    prompt_text = " ".join(words[i % len(words)] for i in range(args.prompt_tokens))
    print("model %s, prompt about %d tokens, %d decoded, %d cores per layout" %
          (model, args.prompt_tokens, args.decode_tokens, args.cores))
    with tempfile.TemporaryDirectory() as root:
        for layout in args.layouts.split(","):
            row, memory = run_layout(layout, model, root, args, prompt_text)
            name = "one process" if layout == "local" else "%s agents (TP %d x PP %d)" % (
                layout.split("x")[0], int(layout.split("x")[0]) // int(layout.split("x")[1]), int(layout.split("x")[1]))
            print("%-26s prefill %7.1f tok/s (%d tokens), decode %6.2f tok/s, %d streams %6.2f tok/s" %
                  (name, row["prefill_tok_s"], row["prompt_tokens"], row["decode_tok_s"], row["streams"],
                   row["aggregate_tok_s"]))
            if "decode_forwards" in row:
                print("%26s decode: agents %.1f ms per token forward, %.2f ms in collectives, %.1f KiB to them"
                      " (summed over agents); prefill: %.3f ms, %.1f KiB per token" %
                      ("", row["decode_agent_ms_per_tok"], row["decode_comm_ms_per_tok"],
                       row["decode_comm_kib_per_tok"], row["prefill_comm_ms_per_tok"],
                       row["prefill_comm_kib_per_tok"]))
                print("%26s resident memory per agent: %s MiB" % ("", ", ".join(str(m) for m in memory)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Speculative decoding by prompt lookup (issue 42's benchmark): one stream's
decode rate with and without it, on a TinyLlama-shaped model, against the
reference's n-gram speculation in the same run.

    /usr/bin/python3 bench/speculative.py [--cairn PATH] [--model FILE]
        [--threads 2] [--tokens 128] [--rounds 3] [--lookup 8]
        [--llama-server /tmp/ref2026/build-noamx/bin/llama-server]

cairn: one `cairn serve --spec-lookup N`; requests alternate between plain
(`"speculative": false`) and speculative, so both run in the same process
and the same minutes. The reference: `llama-server` without and with
`--spec-type ngram-simple` looking up the last 3 tokens and drafting up to
--lookup, as cairn does (two processes, one after the other, alternated per
round). Every request is greedy, streamed, `ignore_eos`, --tokens long;
its decode rate is (tokens - 1) / (last token's time - first token's time),
as the client sees it. Acceptance: cairn's cairn_spec_accepted_tokens_total
over cairn_spec_draft_tokens_total across the speculative requests; the
reference's from its `timings` (draft_n, draft_n_accepted) when it sends them.

Two prompts: "repetitive", a text followed by an instruction to summarise
it (what prompt lookup is for: the answer repeats its input), and "free", a
short open prompt. The model is made by `cairn make-model` (random weights,
with stories260K's vocabulary when ../shared has it): what its output
repeats is its own, so acceptance here says how often the model's greedy
text repeats earlier text, and the speed-up is what that acceptance buys on
a bandwidth-bound 1.1B-parameter model. Outputs of the plain and the
speculative requests are compared: greedy speculation must not change them.
A benchmark, not a test.

--mode draft: speculative decoding with a draft model instead (`cairn serve
--draft-model`, the reference's `llama-server --model-draft`, both drafting
up to --draft-max). Random-weight models of other seeds never agree, so the
pair is made related: the target (TinyLlama-shaped) by `cairn make-model
--quiet-from L --quiet-scale S` (layers L.. have their output projections
scaled by S), the draft by the same seed and shape with only L layers. The
draft then shares the target's embeddings, output head and first L layers,
and the quiet layers move its choice only sometimes: the acceptance is a
property of this construction, not of any trained pair.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_process import Proc, free_port, wait_healthy  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("CAIRN_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
TINYLLAMA = ["--dim", "2048", "--layers", "22", "--heads", "32", "--kv-heads", "4", "--ffn", "5632"]

TEXT = (
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with her "
    "red ball. One day, Lily saw a big dog near the swings. The dog was sad because it had lost its "
    "way home. Lily gave the dog some of her water and walked with it down the street. They looked "
    "at every house until they found a blue door with a picture of the dog on it. A kind old man "
    "opened the door and hugged the dog. He thanked Lily and gave her a cookie. Lily smiled and "
    "went back to the park, happy that she had helped the dog find its home."
)
PROMPTS = {
    "repetitive": TEXT + "\n\nSummarise the story above in a few sentences, using its own words.\n\nSummary: Once upon a time,",
    "free": "Once upon a time, in a small village,",
}


def post_stream(port, path, body, timeout=600):
    """Streams an SSE completion; returns (token chunk times, text, last event)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError("%s %d: %s" % (path, res.status, res.read()[:300]))
    times, text, last = [], [], None
    buf = b""
    while True:
        chunk = res.read1(65536) if hasattr(res, "read1") else res.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                continue
            ev = json.loads(data)
            last = ev
            for c in ev.get("choices") or []:
                if c.get("text"):
                    times.append(time.perf_counter())
                    text.append(c["text"])
    conn.close()
    return times, "".join(text), last


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for name in ("cairn_spec_draft_tokens_total", "cairn_spec_accepted_tokens_total",
                 "cairn_generation_tokens_total"):
        m = re.search(r"^%s(?:\{[^}]*\})? ([0-9.e+]+)$" % name, text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def decode_rate(times, n_tokens):
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    # Chunks may carry several tokens (a speculative step emits them at once):
    # the rate counts tokens, not chunks.
    return (n_tokens - 1) / (times[-1] - times[0])


def one_request(port, prompt, tokens, extra):
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    body.update(extra)
    times, text, last = post_stream(port, "/v1/completions", body)
    usage = (last or {}).get("usage") or {}
    n = usage.get("completion_tokens") or len(times)
    return decode_rate(times, n), text, n, (last or {}).get("timings")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cairn", default=os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn")))
    ap.add_argument("--model", default="/tmp/cairn-bench/tl-q4_0-spec.gguf")
    ap.add_argument("--type", default="q4_0", help="weights of the model made when --model is missing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lookup", type=int, default=8, help="cairn --spec-lookup N")
    ap.add_argument("--llama-server", default="/tmp/ref2026/build-noamx/bin/llama-server")
    ap.add_argument("--mode", choices=("lookup", "draft"), default="lookup",
                    help="prompt lookup, or a draft model")
    ap.add_argument("--draft-model", default="/tmp/cairn-bench/tl-q4_0-draft.gguf",
                    help="--mode draft: the draft (made with the target when missing)")
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--draft-p-min", type=float, default=0.0, help="cairn and reference: stop drafting below")
    ap.add_argument("--draft-layers", type=int, default=2, help="layers of a made draft")
    ap.add_argument("--quiet-scale", type=float, default=0.1,
                    help="a made target's output projections past --draft-layers are scaled so")
    args = ap.parse_args()
    draft = args.mode == "draft"
    if draft and args.model == ap.get_default("model"):
        args.model = "/tmp/cairn-bench/tl-q4_0-quiet%d-%g.gguf" % (args.draft_layers, args.quiet_scale)

    def make(path, extra):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        shape = list(TINYLLAMA)
        if "--layers" in extra:  # the draft: the target's shape with fewer layers
            i = shape.index("--layers")
            del shape[i:i + 2]
        cmd = [args.cairn, "make-model", path, *shape, "--type", args.type, "--seed", "1",
               "-t", str(args.threads), *extra]
        vocab = os.path.join(SHARED, "models", "stories260K.gguf")
        if os.path.exists(vocab):
            cmd += ["--vocab-from", vocab]
        print("making %s ..." % path, flush=True)
        subprocess.run(cmd, check=True, capture_output=True)

    if not os.path.exists(args.model):
        make(args.model, ["--quiet-from", str(args.draft_layers), "--quiet-scale",
                          str(args.quiet_scale)] if draft else [])
    if draft and not os.path.exists(args.draft_model):
        # The same seed and shape: the target's embeddings, head and first layers.
        make(args.draft_model, ["--layers", str(args.draft_layers)])
    if draft:
        print("draft %s" % args.draft_model, flush=True)
    print("model %s; %d threads; %d tokens a request; %d rounds; host %d CPUs, load %s" % (
        args.model, args.threads, args.tokens, args.rounds, os.cpu_count(),
        open("/proc/loadavg").read().split()[0]), flush=True)

    results = {}  # (engine, mode, prompt) -> [rates]
    accept = {}   # (engine, prompt) -> [drafted, accepted]
    texts = {}    # (engine, mode, prompt) -> text
    same = {}     # (engine, prompt) -> all plain/spec pairs equal

    port = free_port()
    spec_flags = (["--draft-model", args.draft_model, "--draft-max", str(args.draft_max),
                   "--draft-p-min", str(args.draft_p_min)] if draft
                  else ["--spec-lookup", str(args.lookup)])
    cairn = Proc([args.cairn, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
                  *spec_flags], "cairn serve")
    try:
        wait_healthy("127.0.0.1:%d" % port, cairn, 600)
        one_request(port, "warm up", 8, {})
        for r in range(args.rounds):
            for name, prompt in PROMPTS.items():
                order = ("plain", "spec") if r % 2 == 0 else ("spec", "plain")
                for mode in order:
                    before = metrics(port)
                    rate, text, n, _ = one_request(port, prompt, args.tokens,
                                                   {"speculative": mode == "spec"})
                    after = metrics(port)
                    results.setdefault(("cairn", mode, name), []).append(rate)
                    prev = texts.setdefault(("cairn", mode, name), text)
                    same[("cairn", name)] = same.get(("cairn", name), True) and prev == text
                    if mode == "spec":
                        a = accept.setdefault(("cairn", name), [0.0, 0.0])
                        a[0] += after["cairn_spec_draft_tokens_total"] - before["cairn_spec_draft_tokens_total"]
                        a[1] += after["cairn_spec_accepted_tokens_total"] - before["cairn_spec_accepted_tokens_total"]
                    print("cairn %-5s %-10s round %d: %7.2f tok/s (%d tokens)" % (mode, name, r + 1, rate, n),
                          flush=True)
            for name in PROMPTS:
                same[("cairn", name)] = same[("cairn", name)] and \
                    texts[("cairn", "plain", name)] == texts[("cairn", "spec", name)]
    finally:
        cairn.stop()

    ref = args.llama_server if args.llama_server and os.path.exists(args.llama_server) else None
    if ref:
        for r in range(args.rounds):
            modes = ("plain", "spec") if r % 2 == 0 else ("spec", "plain")
            for mode in modes:
                port = free_port()
                cmd = [ref, "-m", args.model, "--port", str(port), "-t", str(args.threads), "-c", "2048",
                       "-np", "1", "--no-webui"]
                if mode == "spec" and draft:
                    # Greedy drafts of up to --draft-max, none dropped for low confidence.
                    cmd += ["--model-draft", args.draft_model, "--spec-draft-n-max", str(args.draft_max),
                            "--spec-draft-n-min", "0", "--draft-p-min", str(args.draft_p_min),
                            "-td", str(args.threads)]
                elif mode == "spec":
                    # cairn's lookup: the last 3 tokens, up to --lookup drafted.
                    cmd += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                            "--spec-ngram-simple-size-m", str(args.lookup)]
                proc = Proc(cmd, "llama-server " + mode)
                try:
                    wait_healthy("127.0.0.1:%d" % port, proc, 600)
                    one_request(port, "warm up", 8, {})
                    for name, prompt in PROMPTS.items():
                        rate, text, n, timings = one_request(port, prompt, args.tokens, {})
                        results.setdefault(("reference", mode, name), []).append(rate)
                        prev = texts.setdefault(("reference", mode, name), text)
                        same[("reference", name)] = same.get(("reference", name), True) and prev == text
                        if mode == "spec" and timings and "draft_n" in timings:
                            a = accept.setdefault(("reference", name), [0.0, 0.0])
                            a[0] += timings.get("draft_n", 0)
                            a[1] += timings.get("draft_n_accepted", 0)
                        print("reference %-5s %-10s round %d: %7.2f tok/s (%d tokens)" % (mode, name, r + 1, rate, n),
                              flush=True)
                finally:
                    proc.stop()
        for name in PROMPTS:
            if ("reference", "plain", name) in texts and ("reference", "spec", name) in texts:
                same[("reference", name)] = same[("reference", name)] and \
                    texts[("reference", "plain", name)] == texts[("reference", "spec", name)]
    else:
        print("no reference llama-server at %s: its rows are left out" % args.llama_server)

    print("\n| engine | prompt | plain tok/s | speculative tok/s | speed-up | drafted | accepted | acceptance | same text |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for engine in ("cairn", "reference"):
        for name in PROMPTS:
            plain = results.get((engine, "plain", name))
            spec = results.get((engine, "spec", name))
            if not plain or not spec:
                continue
            p, s = statistics.median(plain), statistics.median(spec)
            a = accept.get((engine, name))
            acc = "%.0f | %.0f | %.1f %%" % (a[0], a[1], 100 * a[1] / a[0]) if a and a[0] else "- | - | -"
            print("| %s | %s | %.2f | %.2f | %.2fx | %s | %s |" % (
                engine if engine == "cairn" else
                "llama-server (--model-draft)" if draft else "llama-server (ngram-simple, n 3)", name, p, s,
                s / p if p else 0, acc, "yes" if same.get((engine, name)) else "NO"))
    print("\nmedians of %d rounds; decode rate as the client sees it (first to last token)." % args.rounds)


if __name__ == "__main__":
    main()

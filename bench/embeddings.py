"""Embeddings throughput through the server: `cairn serve --embeddings` and the
reference (llama.cpp's `llama-server --embeddings`) on the same BERT-base-shaped
GGUF file (dim 768, 12 layers, 12 heads, FFN 3072, context 512, BGE's WordPiece
vocabulary, random weights that `cairn make-model` writes once into --dir), both
with --threads threads, both up for the whole run. For each input length
(deterministic English text of about --lengths tokens) and each (inputs per
request, concurrent clients) cell, cairn and the reference are timed in
alternating rounds, so both see the same host; each row gives inputs/s and
tokens/s (the servers' own usage.prompt_tokens) of the best round and the
cairn/reference ratio. Then a correctness check: the two servers' vectors for
the same inputs (mean pooling), their cosine (should be >= 0.999), next to the
cosine between different inputs as a control. A benchmark, not a test: it
exits non-zero only when something failed to run.

    /usr/bin/python3 bench/embeddings.py [--llama-server PATH] [--type f16] [--lengths 64,200]
        [--cells 1x1,1x4,16x1,64x1] [--seconds 3] [--rounds 2] [--threads 2] [--dir /tmp/cairn-bench]

A cell BxC: C clients, each sending requests of B inputs back to back (keep-alive
connections, threads of this process). The reference gets --ref-parallel slots
(default 8) and a context of 512 per slot, so it too runs several inputs per
forward; cairn's engine batches the inputs of all requests up to its
--max-batch-tokens (--batch-tokens, default 2048 as the reference's -b/-ub). Without a llama-server the reference columns stay empty.
"""

import argparse
import http.client
import json
import math
import os
import random
import subprocess
import sys
import threading
import time

from child_process import Proc, free_port, loadavg, wait_healthy

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
SHARED = os.environ.get("CAIRN_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared")
VOCAB = os.path.join(SHARED, "tokenizer", "ggml-vocab-bert-bge.gguf")
SHAPE = ["--arch", "bert", "--dim", "768", "--layers", "12", "--heads", "12", "--ffn", "3072", "--ctx", "512"]

WORDS = ("the a of and to in is was for on that with as by at from it this which be are were an or "
         "his her their its one two first new time year people world city river school music church "
         "house water small large early later during after before between under over through many "
         "most some other several state family court party film book game team season station line "
         "road island village county market company system service power light field history war "
         "army king queen village garden summer winter north south east west old young long short "
         "built named known found began became remained served moved opened played wrote won lost "
         "held called made used given taken based located published released recorded elected").split()


def sentence(rng):
    n = rng.randint(8, 18)
    words = [rng.choice(WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    if n > 10:
        words[rng.randint(3, n - 4)] += ","
    return " ".join(words) + "."


def text(rng, tokens):
    """About `tokens` WordPiece tokens ([CLS] and [SEP] included): the words
    above are single tokens, punctuation one more each."""
    out, n = [], 2
    while n < tokens:
        s = sentence(rng)
        out.append(s)
        n += len(s.split()) + s.count(",") + 1
    words = " ".join(out).split()
    while n > tokens and len(words) > 1:  # trim back to the target
        n -= 1 + words.pop().count(",")
    return " ".join(words).rstrip(",") + "."


def embed(conn, inputs):
    """POST /v1/embeddings; returns (vectors, prompt tokens)."""
    body = json.dumps({"input": inputs, "encoding_format": "float"})
    conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, data[:300]))
    out = json.loads(data)
    vecs = [d["embedding"] for d in sorted(out["data"], key=lambda d: d["index"])]
    if len(vecs) != len(inputs):
        raise RuntimeError("%d vectors for %d inputs" % (len(vecs), len(inputs)))
    return vecs, int(out.get("usage", {}).get("prompt_tokens", 0))


def measure(addr, texts, batch, clients, seconds):
    """C clients sending B-input requests back to back for about `seconds`
    (every client finishes at least one request). Returns (inputs/s, tokens/s)."""
    done, errors = [], []
    start = time.perf_counter()
    stop_at = start + seconds

    def client(ci):
        conn = http.client.HTTPConnection(addr, timeout=900)
        n = tok = 0
        k = ci * 7919
        try:
            while True:
                inputs = [texts[(k + i) % len(texts)] for i in range(batch)]
                k += batch * clients
                _, t = embed(conn, inputs)
                n += batch
                tok += t
                if time.perf_counter() >= stop_at:
                    break
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(repr(e))
        finally:
            conn.close()
        done.append((n, tok))

    threads = [threading.Thread(target=client, args=(ci,)) for ci in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(errors[0])
    n = sum(d[0] for d in done)
    tok = sum(d[1] for d in done)
    return n / wall, tok / wall


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default="/tmp/ref2026/build-noamx/bin/llama-server")
    ap.add_argument("--model", help="a BERT GGUF file instead of the made one")
    ap.add_argument("--type", default="f16", help="weight type of the made model (f16, q8_0, f32)")
    ap.add_argument("--lengths", default="64,200", help="tokens per input, about")
    ap.add_argument("--cells", default="1x1,1x4,16x1,64x1", help="BxC: inputs per request x clients")
    ap.add_argument("--seconds", type=float, default=3.0, help="per cell, server and round (at least a request each)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=2048,
                    help="cairn serve --max-batch-tokens (the reference's -b/-ub are 2048)")
    ap.add_argument("--ref-parallel", type=int, default=8)
    ap.add_argument("--texts", type=int, default=256, help="distinct inputs per length")
    ap.add_argument("--dir", default="/tmp/cairn-bench")
    args = ap.parse_args()

    failed = False
    model = args.model
    if not model:
        os.makedirs(args.dir, exist_ok=True)
        model = os.path.join(args.dir, "bert-base-%s.gguf" % args.type)
        if not os.path.exists(model):
            print("making", model, "...", flush=True)
            subprocess.run([CAIRN_BIN, "make-model", model + ".tmp", *SHAPE, "--type", args.type, "--seed", "1",
                            "--vocab-from", VOCAB], check=True, capture_output=True)
            os.replace(model + ".tmp", model)

    servers, procs = {}, []
    try:
        port = free_port()
        cmd = [CAIRN_BIN, "serve", "-m", model, "--embeddings", "--pooling", "mean", "--port", str(port),
               "--threads", str(args.threads)]
        if args.batch_tokens:
            cmd += ["--max-batch-tokens", str(args.batch_tokens)]
        p = Proc(cmd, name="cairn", stdout=True)
        procs.append(p)
        wait_healthy("127.0.0.1:%d" % port, p)
        servers["cairn"] = "127.0.0.1:%d" % port
        if args.llama_server and os.path.exists(args.llama_server):
            port = free_port()
            p = Proc(name="reference", stdout=True, cmd=[args.llama_server, "--embeddings", "--pooling", "mean", "-m", model,
                                   "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads),
                                   "-tb", str(args.threads), "-c", str(512 * args.ref_parallel),
                                   "-b", "2048", "-ub", "2048", "--parallel", str(args.ref_parallel)])
            procs.append(p)
            wait_healthy("127.0.0.1:%d" % port, p)
            servers["ref"] = "127.0.0.1:%d" % port
        else:
            print("no llama-server at %s: reference columns stay empty" % args.llama_server)

        lengths = [int(x) for x in args.lengths.split(",")]
        cells = [tuple(int(v) for v in c.split("x")) for c in args.cells.split(",")]
        texts = {L: [text(random.Random(L * 100003 + i), L) for i in range(args.texts)] for L in lengths}

        # Warm-up (first touch of the weights, thread start-up) and the token count per input.
        mean_tokens = {}
        for name, addr in servers.items():
            conn = http.client.HTTPConnection(addr, timeout=900)
            for L in lengths:
                _, tok = embed(conn, texts[L][:4])
                if name == "cairn":
                    mean_tokens[L] = tok / 4
            conn.close()

        print("model %s (%d threads each; reference --parallel %d); load before: %s"
              % (os.path.basename(model), args.threads, args.ref_parallel, loadavg()), flush=True)
        fmt = "{:>7} {:>6} {:>7}   {:>9} {:>9} {:>6}   {:>9} {:>9}   {}"
        print(fmt.format("tokens", "batch", "clients", "cairn in/s", "ref in/s", "ratio", "cairn tok/s",
                         "ref tok/s", "load (1 min)"))
        for L in lengths:
            for batch, clients in cells:
                best = {name: (0.0, 0.0) for name in servers}
                for _ in range(args.rounds):
                    for name, addr in servers.items():
                        try:
                            r = measure(addr, texts[L], batch, clients, args.seconds)
                        except Exception as e:  # noqa: BLE001
                            print("%s failed at %d tokens, %dx%d: %s" % (name, L, batch, clients, e))
                            failed = True
                            continue
                        if r[0] > best[name][0]:
                            best[name] = r
                c, r = best["cairn"], best.get("ref", (0.0, 0.0))
                show = lambda v: "%.1f" % v if v else "-"
                print(fmt.format("%.0f" % mean_tokens[L], batch, clients, show(c[0]), show(r[0]),
                                 "%.2f" % (c[0] / r[0]) if c[0] and r[0] else "-", show(c[1]), show(r[1]),
                                 loadavg().split()[0]), flush=True)
        print("load after: %s" % loadavg())

        # Correctness: the same inputs through both servers.
        if "ref" in servers:
            probe = [texts[L][i] for L in lengths for i in range(3)]
            vecs = {}
            for name, addr in servers.items():
                conn = http.client.HTTPConnection(addr, timeout=900)
                vecs[name] = embed(conn, probe)[0]
                conn.close()
            same = [cosine(a, b) for a, b in zip(vecs["cairn"], vecs["ref"])]
            cross = [cosine(vecs["cairn"][i], vecs["cairn"][i + 1]) for i in range(len(probe) - 1)]
            ok = min(same) >= 0.999
            print("cosine cairn/reference, same input (%d inputs): min %.6f, mean %.6f -> %s"
                  % (len(probe), min(same), sum(same) / len(same), "ok" if ok else "MISMATCH"))
            print("control, cosine between different inputs (cairn): min %.4f, max %.4f" % (min(cross), max(cross)))
    except Exception as e:  # noqa: BLE001
        print("failed:", e, file=sys.stderr)
        failed = True
    finally:
        for p in procs:
            p.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

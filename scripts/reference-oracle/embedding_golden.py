#!/usr/bin/env python3
"""Makes one golden file of tests/model/golden-embd (embedding_golden_test.cpp).

Serves MODEL with the reference's llama-server once per pooling type
(--embeddings --pooling P; rank: --reranking), and stores for each text the
token ids the reference embeds (/tokenize with add_special) and its pooled,
unnormalized vector (/embedding with "embd_normalize": -1); for rank, the
score of each query/document pair (/rerank, one document per request, so
usage.prompt_tokens is that pair's length) and the pair's token ids as the
reference builds them (format_prompt_rerank in tools/server/server-common.cpp:
bos if add_bos, query, eos if add_eos, sep if add_sep, document, eos if
add_eos; for a BERT vocabulary [CLS] query [SEP] document, no closing [SEP]).

Usage: embedding_golden.py SERVER MODEL PORT OUT.json POOLINGS META.json
  POOLINGS: comma-separated (mean,cls,last,rank)
  META.json: fields merged into the output (make_model spec and sha256, or
  the shared model's name and sha256).
"""
import json
import subprocess
import sys
import time
import urllib.request

TEXTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Crème brûlée, naïve café — déjà vu!",
    "東京は日本の首都です。 Tokyo is big.",
    "What's the capital of France? Paris, of course; it has been since 987 AD (roughly).",
    "Once upon a time, in a small village by the sea, there lived an old fisherman named "
    "Tomas. Every morning he rowed his little boat past the lighthouse, cast his nets, and "
    "waited patiently. The gulls circled overhead, hoping for scraps. One day, he pulled up "
    "something unexpected: a glass bottle holding a letter, sealed with wax, addressed to "
    "nobody at all.",
]
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog.",
    "Berlin ist die Hauptstadt Deutschlands.",
    "France, officially the French Republic, is a country in Western Europe; its capital is "
    "Paris, famous for the Eiffel Tower.",
]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def serve(server, model, port, pooling, log):
    args = [server, "-m", model, "--port", str(port), "-t", "2", "-fa", "off", "-c", "512",
            "-ub", "512", "-b", "512", "--embeddings", "--pooling", pooling]
    if pooling == "rank":
        args.append("--reranking")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(120):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except Exception:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited ({proc.returncode}); see its log")
        time.sleep(1)
    proc.kill()
    raise SystemExit("llama-server did not answer in 120 s")


def main():
    server, model, port, out, poolings, meta = sys.argv[1:7]
    port = int(port)
    g = json.load(open(meta))
    g["texts"] = TEXTS
    g["poolings"] = {}
    with open(out + ".server.log", "w") as log:
        for pooling in poolings.split(","):
            proc = serve(server, model, port, pooling, log)
            try:
                if pooling == "rank":
                    q = post(port, "/tokenize", {"content": QUERY})["tokens"]
                    pairs = []
                    for d in DOCUMENTS:
                        r = post(port, "/rerank", {"query": QUERY, "documents": [d], "top_n": 1})
                        dt = post(port, "/tokenize", {"content": d})["tokens"]
                        pairs.append({"document": d, "doc_tokens": dt,
                                      "n_tokens": r["usage"]["prompt_tokens"],
                                      "score": r["results"][0]["relevance_score"]})
                    g["rerank"] = {"query": QUERY, "query_tokens": q, "pairs": pairs}
                    continue
                tokens, vectors = [], []
                for t in TEXTS:
                    tokens.append(post(port, "/tokenize", {"content": t, "add_special": True})["tokens"])
                    r = post(port, "/embedding", {"content": t, "embd_normalize": -1})
                    emb = r[0]["embedding"]
                    vectors.append(emb[0] if isinstance(emb[0], list) else emb)
                if "tokens" in g and g["tokens"] != tokens:
                    raise SystemExit("the reference tokenized differently between runs")
                g["tokens"] = tokens
                g["poolings"][pooling] = vectors
            finally:
                proc.terminate()
                proc.wait()
    version = subprocess.run([server, "--version"], capture_output=True, text=True)
    line = next((l for l in (version.stdout + version.stderr).splitlines() if "version" in l.lower()), "")
    g["reference"] = ("llama.cpp llama-server from node-llama-cpp 3.21.1 (source of September 2026, "
                      f"{line.strip()}, {server.split('/')[-3]}), -t 2 -fa off -c 512 --embeddings "
                      "--pooling P (rank: --reranking); /embedding with embd_normalize -1")
    json.dump(g, open(out, "w"), indent=1, ensure_ascii=False)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

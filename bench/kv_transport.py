#!/usr/bin/env python3
"""How fast K/V rows cross between two processes over Worker.PushKv (gRPC), the
transport of the prefill -> decode handoff, to set beside the collective
engine's figures (build/bench/bench_collective, gloo over loopback TCP).

    /usr/bin/python3 bench/kv_transport.py [--model FILE] [--tokens 1024] [--reps 10]

Starts a controller and one `cairn worker --role decode` on the model, then
pushes --reps whole transfers of --tokens positions (the model's F16 K/V
geometry, 4 MiB messages as a prefill worker sends them) from this process and
times each from the first message to the decode worker's reply. The client is
Python (its message building is excluded: the messages are made before the
clock starts), so the figure bounds gRPC's cost from above. A benchmark, not a
test.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_process import Proc, free_port, loadavg, wait_healthy  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cairn", default=os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn")))
    ap.add_argument("--model", default="/tmp/cairn-bench/pd-llama-640x8-ffn1728-q8_0.gguf")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--chunk-mb", type=float, default=4.0)
    ap.add_argument("--n-layer", type=int, default=8, help="the model's layers (default: the default model's)")
    ap.add_argument("--row-elems", type=int, default=640, help="K/V heads x head size (default model: 640)")
    args = ap.parse_args()

    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    import grpc
    from cairn.v1 import worker_pb2 as pb

    if not os.path.exists(args.model):
        os.makedirs(os.path.dirname(args.model), exist_ok=True)
        subprocess.run([args.cairn, "make-model", args.model, "--dim", "640", "--layers", "8", "--heads", "10",
                        "--ffn", "1728", "--ctx", "4096", "--type", "q8_0"], check=True, capture_output=True)
    http = free_port()
    ctl = Proc([args.cairn, "controller", "--host", "127.0.0.1", "--http-port", str(http), "--grpc-port", "0"],
               "controller")
    grpc_addr = ctl.wait_for(r"grpc listening on (\S+)", 60).group(1)
    worker = Proc([args.cairn, "worker", "-m", args.model, "--controller", grpc_addr, "--role", "decode",
                   "--threads", "1", "--name", "kv-transport"], "worker")
    addr = worker.wait_for(r"worker listening on (\S+)", 120).group(1)
    wait_healthy("127.0.0.1:%d" % http, ctl, 60)
    import re
    model_id = next(m.group(1) for m in (re.search(r"worker model '([^']+)'", l) for l in worker.lines) if m)

    n_layer, row_elems = args.n_layer, args.row_elems
    per_pos = 2 * n_layer * row_elems * 2
    step = max(1, int(args.chunk_mb * (1 << 20)) // per_pos)
    total = per_pos * args.tokens

    channel = grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 64 << 20),
                                                   ("grpc.max_receive_message_length", 64 << 20)])
    push = channel.stream_unary("/cairn.v1.Worker/PushKv", request_serializer=pb.KvPush.SerializeToString,
                                response_deserializer=pb.KvPushReply.FromString)
    print("model %s (%s): %d layers x %d values a row; %d positions = %.2f MB a transfer in %d-position "
          "messages; load %s" % (args.model, model_id, n_layer, row_elems, args.tokens, total / 1e6, step,
                                 loadavg()), flush=True)
    times = []
    try:
        for r in range(args.reps + 1):
            msgs = []
            for first in range(0, args.tokens, step):
                n = min(step, args.tokens - first)
                m = pb.KvPush(first=first, n=n, rows=bytes(per_pos * n), last=first + n == args.tokens)
                if first == 0:
                    m.handoff_id = "kv-transport-%d" % r
                    m.header.CopyFrom(pb.KvHeader(version=1, model=model_id, n_layer=n_layer, row_elems=row_elems,
                                                  elem_bytes=2, block_tokens=16,
                                                  prompt=[1 + (i % 200) for i in range(args.tokens)]))
                msgs.append(m)
            t0 = time.perf_counter()
            reply = push(iter(msgs), timeout=120)
            dt = time.perf_counter() - t0
            if reply.HasField("error"):
                raise RuntimeError("refused: %s" % reply.error.message)
            if reply.bytes != total:
                raise RuntimeError("the worker counted %d bytes of %d" % (reply.bytes, total))
            if r > 0:  # the first one warms the channel up
                times.append(dt)
                print("  transfer %d: %.1f ms, %.2f GB/s" % (r, dt * 1e3, total / dt / 1e9), flush=True)
    finally:
        worker.stop()
        ctl.stop()
    med = statistics.median(times)
    print("\nWorker.PushKv, %.2f MB: median %.1f ms (min %.1f, max %.1f), %.2f GB/s; %.1f ms per 1,000 positions"
          % (total / 1e6, med * 1e3, min(times) * 1e3, max(times) * 1e3, total / med / 1e9,
             med * 1e3 * 1000 / args.tokens))


if __name__ == "__main__":
    main()

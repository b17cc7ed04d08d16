"""What cutting a model over agents costs on one host: the seeds' MatMul-shaped
network, widened (x [M, K] . W [K, N], then Neg), cut by
scripts/distributed/shard_matmul.py over R ranks in S stages and served by
`cairn serve` with R `cairn agent` processes, against the same network as an
ordinary ONNX servable in the same server run. Prints per-call latency (p50,
p99) through the gRPC client for each layout. A benchmark, not a test.

    /usr/bin/python3 bench/distributed_servable.py [--m 128] [--k 4096] [--n 4096]
        [--layouts 1x1,2x1,4x1,8x1,8x2] [--calls 50]

Needs build/cairn (or CAIRN_BIN), python3-onnx, python3-numpy, python3-grpcio.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("CAIRN_PYTHON_PROTOS", os.path.join(REPO, "build", "python"))
import cairn  # noqa: E402

CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
SHARD = os.path.join(REPO, "scripts", "distributed", "shard_matmul.py")

DIST_CONFIG = """
from mindspore_serving.server import distributed, register
model = distributed.declare_servable(rank_size={r}, stage_size={s}, with_batch_dim=False)

@register.register_method(output_names=["y"])
def predict(x):
    return register.add_stage(model, x, outputs_count=1)
"""

LOCAL_CONFIG = """
from cairn.server import register
model = register.declare_model(model_file="net.onnx", model_format="ONNX", with_batch_dim=False)

@register.register_method(output_names=["y"])
def predict(x):
    return register.add_stage(model, x, outputs_count=1)
"""


def network(path, m, k, n):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.uniform(-1, 1, (k, n)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Neg", ["p"], ["y"])],
                          "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def wait_line(proc, pattern, timeout=300):
    end = time.time() + timeout
    seen = []
    while time.time() < end:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise RuntimeError("no line matching %r:\n%s" % (pattern, "".join(seen[-20:])))


def time_calls(address, calls, x):
    client = cairn.Client(address, "net", "predict")
    client.infer({"x": x})  # warm-up
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        out = client.infer({"x": x})
        lat.append((time.perf_counter() - t) * 1000)
        if isinstance(out, dict) and "error" in out:
            raise RuntimeError(out["error"])
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def run_layout(root, ranks, stages, args, x):
    servables = os.path.join(root, "s%dx%d" % (ranks, stages))
    os.makedirs(os.path.join(servables, "net", "1"))
    agents = []
    if ranks == 0:
        network(os.path.join(servables, "net", "1", "net.onnx"), args.m, args.k, args.n)
        config = LOCAL_CONFIG
    else:
        files = subprocess.run([sys.executable, SHARD, os.path.join(root, "net.onnx"), "--rank-size", str(ranks),
                                "--stage-size", str(stages), "--out", os.path.join(servables, "model")],
                               check=True, capture_output=True, text=True).stdout.split()
        config = DIST_CONFIG.format(r=ranks, s=stages)
    with open(os.path.join(servables, "net", "servable_config.py"), "w") as f:
        f.write(config)
    server = subprocess.Popen([CAIRN_BIN, "serve", "--servable-dir", servables, "--port", "0", "--grpc-port", "0",
                               "--threads", str(args.threads), "--distributed-address", "127.0.0.1:0"],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        grpc = wait_line(server, r"grpc listening on ([\d.]+:\d+)").group(1)
        if ranks:
            port = wait_line(server, r"distributed worker listening on \S+ \(port (\d+)\)").group(1)
            per_agent = max(1, args.threads // ranks)
            for r, f in enumerate(files):
                agents.append(subprocess.Popen([CAIRN_BIN, "agent", "--distributed-address", "127.0.0.1:" + port,
                                                "--rank", str(r), "--model", f, "--threads", str(per_agent)],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_line(server, r"cairn: ready")
        return time_calls(grpc, args.calls, x)
    finally:
        server.terminate()
        server.wait()
        for a in agents:
            a.kill()
            a.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--layouts", default="1x1,2x1,4x1,8x1,8x2", help="RANKSxSTAGES; 1x1 is the local model")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--threads", type=int, default=2, help="kernel threads in all (split over the agents)")
    args = p.parse_args()
    x = np.ones((args.m, args.k), np.float32)
    print("x [%d, %d] . W [%d, %d] (%.0f MB of weights), %d calls per layout" %
          (args.m, args.k, args.k, args.n, args.k * args.n * 4 / 1e6, args.calls))
    print("%-10s %12s %12s" % ("layout", "p50 ms", "p99 ms"))
    with tempfile.TemporaryDirectory() as root:
        network(os.path.join(root, "net.onnx"), args.m, args.k, args.n)
        for layout in args.layouts.split(","):
            ranks, stages = (int(v) for v in layout.split("x"))
            p50, p99 = run_layout(root, 0 if layout == "1x1" else ranks, stages, args, x)
            name = "local" if layout == "1x1" else "%d x %d" % (ranks, stages)
            print("%-10s %12.2f %12.2f" % (name, p50, p99), flush=True)


if __name__ == "__main__":
    main()

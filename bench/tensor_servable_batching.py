"""What the batcher buys through the server: C concurrent single-instance
clients on one tensor model, served once with batching on and once with it
off (the same ONNX file, two servables of one `cairn serve`), alternating
rounds so both see the same host. Prints instances/s and latency for each and
the ratio. A benchmark, not a test: it asserts nothing.

    /usr/bin/python3 bench/tensor_servable_batching.py [--hidden 4096] [--layers 3]
        [--clients 32] [--seconds 10] [--rounds 2] [--max-batch 32] [--delay-us 0]

Needs build/cairn (or CAIRN_BIN), python3-onnx, python3-numpy, python3-grpcio.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("CAIRN_PYTHON_PROTOS", os.path.join(REPO, "build", "python"))
import cairn  # noqa: E402

CONFIG = """
from cairn.server import register

batched = register.declare_model(model_file="mlp.onnx", model_format="ONNX",
                                 options={{"max_batch_size": {max_batch},
                                          "max_queue_delay_microseconds": {delay}}})
single = register.declare_model(model_file="mlp.onnx", model_format="ONNX",
                                options={{"batching": False}})

@register.register_method(output_names=["y"])
def batched_predict(x):
    return register.add_stage(batched, x, outputs_count=1)

@register.register_method(output_names=["y"])
def single_predict(x):
    return register.add_stage(single, x, outputs_count=1)
"""


def mlp(path, hidden, layers):
    """`layers` MatMul+Add+Relu blocks of hidden x hidden, dynamic batch."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        inits += [numpy_helper.from_array(w, "w%d" % i),
                  numpy_helper.from_array(np.zeros(hidden, np.float32), "b%d" % i)]
        nodes += [helper.make_node("MatMul", [x, "w%d" % i], ["m%d" % i]),
                  helper.make_node("Add", ["m%d" % i, "b%d" % i], ["a%d" % i])]
        if i + 1 < layers:
            nodes.append(helper.make_node("Relu", ["a%d" % i], ["r%d" % i]))
            x = "r%d" % i
        else:
            nodes.append(helper.make_node("Identity", ["a%d" % i], ["y"]))
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", hidden])],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def serve(root, binary):
    proc = subprocess.Popen([binary, "serve", "--servable-dir", root, "--port", "0",
                             "--grpc-port", "0", "--version-poll", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    grpc_addr = None
    for line in proc.stderr:
        m = re.search(r"grpc listening on ([\d.]+:\d+)", line)
        if m:
            grpc_addr = m.group(1)
        if "cairn: ready" in line:
            break
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    if not grpc_addr:
        proc.kill()
        sys.exit("cairn serve did not start")
    return proc, grpc_addr


def load(addr, method, clients, seconds, hidden):
    """`clients` threads calling back to back for `seconds`; per-call latencies."""
    stop = time.time() + seconds
    lat, errors = [], []
    lock = threading.Lock()

    def client(k):
        c = cairn.Client(addr, "mlp", method)
        x = np.random.default_rng(k).standard_normal(hidden).astype(np.float32)
        mine = []
        while time.time() < stop:
            t = time.perf_counter()
            r = c.infer({"x": x})
            mine.append(time.perf_counter() - t)
            if not isinstance(r, list) or "error" in r[0]:
                with lock:
                    errors.append(r)
                break
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    return len(lat) / wall, lat, errors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--delay-us", type=int, default=0)
    a = p.parse_args()
    binary = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
    root = tempfile.mkdtemp(prefix="cairn-bench-tensor-")
    try:
        os.makedirs(os.path.join(root, "mlp", "1"))
        mlp(os.path.join(root, "mlp", "1", "mlp.onnx"), a.hidden, a.layers)
        with open(os.path.join(root, "mlp", "servable_config.py"), "w") as f:
            f.write(textwrap.dedent(CONFIG.format(max_batch=a.max_batch, delay=a.delay_us)))
        proc, addr = serve(root, binary)
        try:
            load(addr, "batched_predict", 2, 2, a.hidden)  # warm-up: plans and pages
            load(addr, "single_predict", 2, 2, a.hidden)
            print("MLP %d x %d layers, %d clients, %.0f s per round" %
                  (a.hidden, a.layers, a.clients, a.seconds))
            print("%-8s %-9s %12s %10s %10s" % ("round", "batching", "instances/s", "p50 ms", "p99 ms"))
            totals = {"on": [], "off": []}
            for r in range(a.rounds):
                for name, method in (("on", "batched_predict"), ("off", "single_predict")):
                    rate, lat, errors = load(addr, method, a.clients, a.seconds, a.hidden)
                    if errors:
                        print("errors:", errors[:3])
                    lat.sort()
                    p50 = lat[len(lat) // 2] * 1e3 if lat else 0
                    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3 if lat else 0
                    totals[name].append(rate)
                    print("%-8d %-9s %12.1f %10.1f %10.1f" % (r + 1, name, rate, p50, p99))
            on = sum(totals["on"]) / len(totals["on"])
            off = sum(totals["off"]) / len(totals["off"])
            print("batching on / off: %.1f / %.1f instances/s = %.2fx" % (on, off, on / off))
        finally:
            proc.terminate()
            proc.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

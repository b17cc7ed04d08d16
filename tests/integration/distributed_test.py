"""Distributed servables end to end: `cairn serve --servable-dir` as the
distributed worker and `cairn agent` processes holding the shards, all on
loopback. The seeds' MatMul example (MatMul 128x96 . 96x16 of 0.5, then Neg,
cut by scripts/distributed/shard_matmul.py) at rank_size 8 with 1 and with 2
stages, called through the unchanged `mindspore_serving.client`; the
MindSpore start scripts (distributed.start_servable + start_grpc_server, and
distributed.startup_agents) as users write them; and faults: an agent killed
with SIGKILL or stopped with SIGSTOP makes requests fail within 10 s, and a
replacement agent with the same rank brings the servable back without
restarting the worker.

Run by ctest with /usr/bin/python3; exit code 77 (skipped) when something it
needs is absent.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servables_test import CAIRN_BIN, REPO, Server, skip  # noqa: E402

try:
    import numpy as np
    import onnx  # noqa: F401
except ImportError as e:
    skip("%s: run with /usr/bin/python3 (python3-onnx, python3-numpy)" % e)

from mindspore_serving.client import Client as MsClient  # noqa: E402

SHARD = os.path.join(REPO, "scripts", "distributed", "shard_matmul.py")

CONFIG = textwrap.dedent("""\
    from mindspore_serving.server import distributed
    from mindspore_serving.server import register

    model = distributed.declare_servable(rank_size={ranks}, stage_size={stages}, with_batch_dim=False)


    @register.register_method(output_names=["y"])
    def predict(x):
        y = register.add_stage(model, x, outputs_count=1)
        return y
    """)


def make_servable(root, ranks, stages):
    """servable dir, model files (one per rank) for the seeds' matmul."""
    seed = os.path.join(root, "matmul.onnx")
    subprocess.run([sys.executable, SHARD, "--seed-model", seed], check=True)
    out = subprocess.run([sys.executable, SHARD, seed, "--rank-size", str(ranks), "--stage-size", str(stages),
                          "--out", os.path.join(root, "model")], check=True, capture_output=True, text=True)
    files = out.stdout.split()
    servables = os.path.join(root, "servables")
    os.makedirs(os.path.join(servables, "matmul", "1"))
    with open(os.path.join(servables, "matmul", "servable_config.py"), "w") as f:
        f.write(CONFIG.format(ranks=ranks, stages=stages))
    return servables, files


class Worker(Server):
    """`cairn serve` as a distributed worker: ready only once the agents are in."""

    def __init__(self, servable_dir):
        super().__init__(servable_dir, "--distributed-address", "127.0.0.1:0", "--wait-agents-seconds", "120",
                         ready=False)
        self.dist = "127.0.0.1:" + self.wait_for(r"distributed worker listening on \S+ \(port (\d+)\)").group(1)


def health(worker):
    """(HTTP status, body) of the worker's /health."""
    try:
        with urllib.request.urlopen("http://%s/health" % worker.http, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start_agent(dist, rank, model):
    return subprocess.Popen([CAIRN_BIN, "agent", "--distributed-address", dist, "--rank", str(rank),
                             "--model", model, "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


X = {"x": np.ones((128, 96), np.float32)}


def error_of(result):
    """The error of a one-instance reply: the whole request's or the instance's."""
    if isinstance(result, dict):
        return result.get("error")
    return result[0].get("error")


def expect_minus_48(test, result):
    test.assertIsInstance(result, list, result)
    test.assertNotIn("error", result[0], result)
    y = result[0]["y"]
    test.assertEqual(y.shape, (128, 16))
    test.assertTrue(np.all(y == -48.0), np.unique(y))


class SeedMatmul(unittest.TestCase):
    def run_seed(self, ranks, stages):
        with tempfile.TemporaryDirectory() as root:
            servables, files = make_servable(root, ranks, stages)
            worker = Worker(servables)
            agents = [start_agent(worker.dist, r, f) for r, f in enumerate(files)]
            try:
                worker.wait_for(r"cairn: ready")
                client = MsClient(worker.grpc, "matmul", "predict")
                for _ in range(3):
                    expect_minus_48(self, client.infer(X))
                self.assertRegex(worker.log(), r"agent rank 7 joined .*MiB resident")
            finally:
                worker.stop()
                stop_all(agents)

    def test_rank8_stage1(self):
        self.run_seed(8, 1)

    def test_rank8_stage2(self):
        self.run_seed(8, 2)


class MindSporeScripts(unittest.TestCase):
    """The seed's master_with_worker.py and agent.py, as a user writes them."""

    def test_start_servable_and_startup_agents(self):
        with tempfile.TemporaryDirectory() as root:
            servables, files = make_servable(root, 2, 1)
            env = dict(os.environ, CAIRN_BINARY=CAIRN_BIN,
                       PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"),
                                                   os.environ.get("CAIRN_PYTHON_PROTOS", "")]))
            port = 16300 + os.getpid() % 1000
            server_py = os.path.join(root, "serve.py")
            with open(server_py, "w") as f:
                f.write(textwrap.dedent(f"""\
                    from mindspore_serving import server
                    from mindspore_serving.server import distributed
                    distributed.start_servable({servables!r}, "matmul", rank_table_json_file="rank_table_2pcs.json",
                                               version_number=1, distributed_address="127.0.0.1:{port}",
                                               wait_agents_time_in_seconds=120)
                    server.start_grpc_server("127.0.0.1:{port + 1}")
                    print("started", flush=True)
                    """))
            agent_py = os.path.join(root, "agent.py")
            with open(agent_py, "w") as f:
                f.write(textwrap.dedent(f"""\
                    from mindspore_serving.server import distributed
                    distributed.startup_agents(distributed_address="127.0.0.1:{port}", model_files={files!r},
                                               group_config_files=None, agent_start_port=7000, agent_ip=None,
                                               rank_start=None)
                    """))
            # start_grpc_server returns once the worker is ready, which needs
            # the agents: start them first (they wait for the worker).
            agents = subprocess.Popen([sys.executable, agent_py], env=env, stderr=subprocess.DEVNULL)
            server = subprocess.Popen([sys.executable, server_py], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
            try:
                line = server.stdout.readline()
                self.assertEqual(line.strip(), "started")
                expect_minus_48(self, MsClient("127.0.0.1:%d" % (port + 1), "matmul", "predict").infer(X))
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=60)
                agents.send_signal(signal.SIGTERM)
                agents.wait(timeout=60)


class Faults(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.TemporaryDirectory()
        servables, self.files = make_servable(self.root.name, 2, 1)
        self.worker = Worker(servables)
        self.agents = [start_agent(self.worker.dist, r, f) for r, f in enumerate(self.files)]
        self.worker.wait_for(r"cairn: ready")
        self.client = MsClient(self.worker.grpc, "matmul", "predict")
        expect_minus_48(self, self.client.infer(X))

    def tearDown(self):
        self.worker.stop()
        stop_all(self.agents)
        self.root.cleanup()

    def fails_within(self, seconds):
        start = time.time()
        result = self.client.infer(X)
        took = time.time() - start
        self.assertLess(took, seconds)
        return result

    def comes_back(self):
        self.agents[1] = start_agent(self.worker.dist, 1, self.files[1])
        deadline = time.time() + 30
        while time.time() < deadline:
            result = self.client.infer(X)
            if not error_of(result):
                expect_minus_48(self, result)
                return
            time.sleep(0.2)
        self.fail("the servable did not come back: %s\n%s" % (result, self.worker.log()))

    def test_killed_agent(self):
        self.agents[1].kill()
        self.agents[1].wait()
        result = self.fails_within(10)
        self.assertRegex(error_of(result) or "", r"not available|left|agent")
        code, body = health(self.worker)
        self.assertEqual(code, 503, body)
        self.assertEqual(body["status"], "unavailable")
        self.assertIn("waiting for agent ranks 1", body["reason"])
        self.comes_back()
        self.assertEqual(health(self.worker)[0], 200)
        self.assertRegex(self.worker.log(), r"agent rank 1 left")

    def test_hung_agent(self):
        self.agents[1].send_signal(signal.SIGSTOP)
        try:
            result = self.fails_within(10)
            self.assertTrue(error_of(result), result)
            self.worker.wait_for(r"agent rank 1 silent", timeout=10)
        finally:
            self.agents[1].kill()
            self.agents[1].wait()
        self.comes_back()


if __name__ == "__main__":
    if not os.path.isfile(CAIRN_BIN):
        skip(CAIRN_BIN + " is not built")
    unittest.main(verbosity=2)

"""Servables end to end: `cairn serve --servable-dir` with the configs in
tests/servables, called over REST (MindSpore Serving's /model/<servable>:<method>),
over gRPC through the Python client (`cairn.Client`), and through an unchanged
MindSpore Serving client script (`mindspore_serving.client`). Covers pure Python
methods on numpy arrays, a GGUF model between Python stages (its greedy text
equals `cairn run`'s), a batched stage, model.call() from Python, streaming,
per-instance errors (a raising stage, a timeout, wrong names and types), a
config that fails to load, and a version hot-swap under load with no failed
request.

Run by ctest with /usr/bin/python3 (Debian's numpy and grpcio): CAIRN_BIN,
CAIRN_PYTHON_PROTOS and CAIRN_SHARED_DIR come from the environment. Exit code
77 (ctest: skipped) when something it needs is absent.
"""

import base64
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
PROTOS = os.environ.get("CAIRN_PYTHON_PROTOS", os.path.join(REPO, "build", "python"))
SHARED = os.environ.get("CAIRN_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared")
SKIP = 77


def skip(reason):
    print("skipped: " + reason)
    sys.exit(SKIP)


try:
    import numpy as np
    import grpc  # noqa: F401
except ImportError as e:
    skip("%s: run with /usr/bin/python3 (python3-numpy, python3-grpcio)" % e)
if not os.path.isfile(CAIRN_BIN):
    skip(CAIRN_BIN + " is not built")
os.environ["CAIRN_PYTHON_PROTOS"] = PROTOS
sys.path.insert(0, os.path.join(REPO, "python"))
import cairn  # noqa: E402
from mindspore_serving.client import Client as MsClient  # noqa: E402


class Server:
    """`cairn serve --servable-dir DIR` on free ports; stderr kept for checks.
    ready=False returns once it listens, before its servables have loaded."""

    def __init__(self, servable_dir, *extra, ready=True):
        self.proc = subprocess.Popen(
            [CAIRN_BIN, "serve", "--servable-dir", servable_dir, "--port", "0", "--grpc-port", "0",
             "--threads", "1", "--stage-timeout", "3", "--version-poll", "0.2", *extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines = []
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.http = self.wait_for(r"listening on http://([\d.]+:\d+)").group(1)
        self.grpc = self.wait_for(r"grpc listening on ([\d.]+:\d+)").group(1)
        if ready:
            self.wait_for(r"cairn: ready")

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            self.events.put(line)
        self.events.put(None)

    def wait_for(self, pattern, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = self.events.get(timeout=max(0.1, end - time.time()))
            except queue.Empty:
                break
            if line is None:
                break
            m = re.search(pattern, line)
            if m:
                return m
        raise AssertionError("no line matching %r; stderr:\n%s" % (pattern, "".join(self.lines)))

    def log(self):
        return "".join(self.lines)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def make_model(path):
    stories = os.path.join(SHARED, "models", "stories260K.gguf")
    if os.path.isfile(stories):
        shutil.copy(stories, path)
        return
    subprocess.run([CAIRN_BIN, "make-model", path, "--dim", "64", "--layers", "2", "--heads", "4",
                    "--kv-heads", "2", "--ffn", "128"], check=True, capture_output=True)


def setup_repository(root):
    src = os.path.join(REPO, "tests", "servables")
    for name in ("add", "llm", "broken"):
        os.makedirs(os.path.join(root, name, "1"))
        shutil.copy(os.path.join(src, name, "servable_config.py"), os.path.join(root, name))
    make_model(os.path.join(root, "llm", "1", "model.gguf"))


def post(server, path, body, timeout=60):
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    req = urllib.request.Request("http://%s%s" % (server.http, path), data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class ServablesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="cairn-servables-")
        setup_repository(cls.root)
        cls.server = Server(cls.root)
        cls.model = os.path.join(cls.root, "llm", "1", "model.gguf")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    # ---- REST
    def test_rest_pure_python_method(self):
        status, body = post(self.server, "/model/add:add_common",
                            {"instances": [{"x1": [[1.0, 2.0], [3.0, 4.0]],
                                            "x2": [[10.0, 20.0], [30.0, 40.0]]}]})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["instances"][0]["y"], [[11.0, 22.0], [33.0, 44.0]])

    def test_rest_typed_tensor_and_version(self):
        x = np.arange(6, dtype=np.int16).reshape(2, 3)
        typed = {"type": "int16", "shape": [2, 3], "b64": base64.b64encode(x.tobytes()).decode()}
        status, body = post(self.server, "/model/add/version/1:add_cast",
                            {"instances": [{"x1": typed, "x2": typed}]})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["instances"][0]["y"], (2 * x).astype(np.float32).tolist())

    def test_rest_per_instance_errors(self):
        status, body = post(self.server, "/model/add:positive",
                            {"instances": [{"x": [1, 2]}, {"x": [-1, 2]}, {"z": [1]}]})
        self.assertEqual(status, 200, body)
        inst = body["instances"]
        self.assertEqual(inst[0], {"y": [1, 2]})
        self.assertIn("ValueError: x has negative values", inst[1]["error_msg"])
        self.assertIn("unknown input 'z'", inst[2]["error_msg"])

    def test_rest_whole_request_errors(self):
        status, body = post(self.server, "/model/nope:add_common", {"instances": [{"x1": [1]}]})
        self.assertEqual(status, 404)
        self.assertIn("error_msg", body)
        status, body = post(self.server, "/model/add:nope", {"instances": [{"x1": [1]}]})
        self.assertEqual(status, 404)
        self.assertIn("nope", body["error_msg"])
        status, body = post(self.server, "/model/add/version/7:add_common",
                            {"instances": [{"x1": [1], "x2": [1]}]})
        self.assertEqual(status, 404)
        status, body = post(self.server, "/model/add:add_common", b"{not json")
        self.assertEqual(status, 400)

    def test_rest_llm_equals_cairn_run(self):
        prompt = "Once upon a time"
        status, body = post(self.server, "/model/llm:generate",
                            {"instances": [{"prompt": "  " + prompt + "  "}]})
        self.assertEqual(status, 200, body)
        out = subprocess.run([CAIRN_BIN, "run", "-m", self.model, "-p", prompt, "-n", "12",
                              "--temp", "0", "-t", "1"], capture_output=True, text=True,
                             check=True).stdout
        self.assertEqual(body["instances"][0]["text"], out)
        self.assertEqual(body["instances"][0]["length"], len(out))

    def test_rest_stream(self):
        req = urllib.request.Request(
            "http://%s/model/llm:stream" % self.server.http,
            data=json.dumps({"instances": [{"prompt": "Once upon a time"}], "stream": True}).encode(),
            headers={"Content-Type": "application/json"})
        pieces, final = [], None
        with urllib.request.urlopen(req, timeout=60) as r:
            self.assertIn("text/event-stream", r.headers.get("Content-Type"))
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if "instances" in ev:
                    final = ev
                else:
                    pieces.append(ev["text"])
        self.assertIsNotNone(final)
        self.assertGreater(len(pieces), 1)
        self.assertEqual("".join(pieces), final["instances"][0]["text"])

    def test_broken_config_reported_and_others_serve(self):
        self.assertIn("broken on purpose", self.server.log())
        with urllib.request.urlopen("http://%s/health" % self.server.http, timeout=10) as r:
            health = json.loads(r.read())
        self.assertIn("broken on purpose", json.dumps(health))

    def test_openai_route_reaches_the_servable_model(self):
        status, body = post(self.server, "/v1/completions",
                            {"model": "llm", "prompt": "Once upon a time", "max_tokens": 12,
                             "temperature": 0})
        self.assertEqual(status, 200, body)
        status2, body2 = post(self.server, "/model/llm:raw",
                              {"instances": [{"prompt": "Once upon a time", "max_tokens": 12}]})
        self.assertEqual(status2, 200, body2)
        self.assertEqual(body["choices"][0]["text"], body2["instances"][0]["text"])

    # ---- gRPC through the Python client
    def test_client_numpy_round_trip(self):
        client = cairn.Client(self.server.grpc, "add", "add_common")
        for dtype in (np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.float16):
            x = (np.arange(12) % 7).astype(dtype).reshape(3, 4)
            out = client.infer({"x1": x, "x2": x})
            self.assertEqual(len(out), 1, out)
            self.assertEqual(out[0]["y"].dtype, np.dtype(dtype))
            np.testing.assert_array_equal(out[0]["y"], x + x)

    def test_client_scalars_and_bytes(self):
        client = cairn.Client(self.server.grpc, "add", "scalars")
        out = client.infer([{"s": "héllo", "b": b"\x00\x01\x02", "flag": True, "n": 7, "f": 0.5}])
        self.assertEqual(out[0]["text"], "héllo|3|True|7|0.50")
        self.assertEqual(out[0]["reversed"], b"\x02\x01\x00")

    def test_client_batched_stage(self):
        client = cairn.Client(self.server.grpc, "add", "add_batched")
        inst = [{"x1": np.full((2,), i, np.float32), "x2": np.ones((2,), np.float32)} for i in range(6)]
        out = client.infer(inst)
        self.assertEqual(len(out), 6)
        for i, o in enumerate(out):
            np.testing.assert_array_equal(o["y"], np.full((2,), i + 1, np.float32))
        # batch_size=4: six instances are called as four and two.
        self.assertEqual(sorted(int(o["batch"]) for o in out), [2, 2, 4, 4, 4, 4])

    def test_client_errors(self):
        client = cairn.Client(self.server.grpc, "add", "add_common")
        out = client.infer([{"x1": np.ones((2,), np.float32), "x2": np.ones((3,), np.float32)},
                            {"x1": np.ones((2,), np.float32)},
                            {"x1": np.ones((2,), np.float32), "x2": np.ones((2,), np.float32)}])
        self.assertIn("shape", out[0]["error"])
        self.assertIn("'x2' is missing", out[1]["error"])
        np.testing.assert_array_equal(out[2]["y"], np.full((2,), 2, np.float32))

    def test_timeout_fails_only_that_instance(self):
        client = cairn.Client(self.server.grpc, "add", "spin")
        start = time.time()
        out = client.infer([{"seconds": 30.0}])
        # MindSpore's client gives a lone failed instance as the request's error.
        self.assertIn("timeout", out["error"])
        self.assertLess(time.time() - start, 15)
        # The server still answers at once, and the spinning stage was stopped.
        out = cairn.Client(self.server.grpc, "add", "add_common").infer(
            {"x1": np.ones(1, np.float32), "x2": np.ones(1, np.float32)})
        np.testing.assert_array_equal(out[0]["y"], [2.0])

    def test_llm_with_model_call_from_python(self):
        out = cairn.Client(self.server.grpc, "llm", "nested").infer({"prompt": "Once upon a time"})
        self.assertIsInstance(out, list, out)
        a, b = out[0]["text"].split("|")
        first = subprocess.run([CAIRN_BIN, "run", "-m", self.model, "-p", "Once upon a time",
                                "-n", "4", "--temp", "0", "-t", "1"], capture_output=True,
                               text=True, check=True).stdout
        self.assertEqual(a, first)

    def test_llm_raw_outputs(self):
        out = cairn.Client(self.server.grpc, "llm", "raw").infer(
            {"prompt": "Once upon a time", "max_tokens": 5})
        self.assertIsInstance(out, list, out)
        self.assertEqual(out[0]["finish_reason"] in ("length", "stop"), True, out)
        self.assertLessEqual(len(out[0]["tokens"]), 5)
        self.assertEqual(out[0]["tokens"].dtype, np.int32)

    def test_mindspore_client_script(self):
        # A MindSpore Serving client script, unchanged but for its address.
        script = """
import numpy as np
from mindspore_serving.client import Client

def run_add_common():
    client = Client("%s", "add", "add_common")
    instances = []
    x1 = np.asarray([[1, 1], [1, 1]]).astype(np.float32)
    x2 = np.asarray([[1, 1], [1, 1]]).astype(np.float32)
    instances.append({"x1": x1, "x2": x2})
    result = client.infer(instances)
    print(result[0]["y"].tolist())

run_add_common()
""" % self.server.grpc
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "[[2.0, 2.0], [2.0, 2.0]]")
        self.assertIs(MsClient, cairn.Client)

    def test_mindspore_start_script(self):
        # A MindSpore Serving start script, unchanged: it starts cairn and stays up.
        ports = []
        for _ in range(2):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                ports.append(sock.getsockname()[1])
        script = """
import sys
from mindspore_serving import server

def start():
    servable_dir = sys.argv[1]
    config = server.ServableStartConfig(servable_directory=servable_dir, servable_name="add",
                                        device_ids=(0, 1))
    server.start_servables(servable_configs=config)
    server.start_grpc_server(address="127.0.0.1:%d")
    server.start_restful_server(address="127.0.0.1:%d")

if __name__ == "__main__":
    start()
""" % tuple(ports)
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), CAIRN_BINARY=CAIRN_BIN)
        log = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen([sys.executable, "-c", script, self.root], env=env,
                                stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            out = None
            end = time.time() + 120
            while time.time() < end and proc.poll() is None:
                try:
                    req = urllib.request.Request(
                        "http://127.0.0.1:%d/model/add:add_common" % ports[1],
                        data=json.dumps({"instances": [{"x1": [1.0], "x2": [2.0]}]}).encode(),
                        headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(req, timeout=10) as r:
                        out = json.loads(r.read())
                    break
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.2)
            log.seek(0)
            self.assertEqual(out, {"instances": [{"y": [3.0]}]}, log.read())
            grpc_out = MsClient("127.0.0.1:%d" % ports[0], "add", "add_common").infer(
                {"x1": np.ones(2, np.float32), "x2": np.ones(2, np.float32)})
            np.testing.assert_array_equal(grpc_out[0]["y"], [2.0, 2.0])
            self.assertIsNone(proc.poll(), "the start script must stay up while cairn serves")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()

    def test_version_hot_swap_under_load(self):
        failures, done, stop = [], [0], threading.Event()

        def load():
            client = cairn.Client(self.server.grpc, "add", "add_common")
            while not stop.is_set():
                try:
                    out = client.infer({"x1": np.ones(4, np.float32), "x2": np.ones(4, np.float32)})
                    if "error" in out[0] or not np.array_equal(out[0]["y"], np.full(4, 2.0)):
                        failures.append(out)
                    done[0] += 1
                except Exception as e:  # noqa: BLE001: every failure counts
                    failures.append(repr(e))

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        os.makedirs(os.path.join(self.root, "add", "2"))
        self.server.wait_for(r"servable 'add': version 2 is served", timeout=60)
        time.sleep(0.5)
        v2 = cairn.Client(self.server.grpc, "add", "add_common", version_number=2).infer(
            {"x1": np.ones(1, np.float32), "x2": np.ones(1, np.float32)})
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        self.assertGreater(done[0], 10)
        np.testing.assert_array_equal(v2[0]["y"], [2.0])


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""The Python client (python/cairn_client.py) and the C++ CLI client (`cairn
client`) against a real `cairn serve --port 0 --grpc-port 0`: both get the
golden greedy completions of stories260K through Serving.Predict, unary and
streaming. Without ../shared the built-in demo model is served and the test
checks that unary and streamed texts agree instead.

Run by ctest with /usr/bin/python3 (Debian's, with grpc and protobuf):
CAIRN_BIN, CAIRN_PYTHON_PROTOS and CAIRN_SHARED_DIR come from the
environment. Exit code 77 (ctest: skipped) when something it needs is absent.
"""

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))
PROTOS = os.environ.get("CAIRN_PYTHON_PROTOS", os.path.join(REPO, "build", "python"))
SHARED = os.environ.get("CAIRN_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
GOLDEN = os.path.join(SHARED, "golden", "stories260K.json")
SKIP = 77


def skip(reason):
    print("skipped: " + reason)
    sys.exit(SKIP)


try:
    import grpc  # noqa: F401
except ImportError:
    skip("the grpc module is missing: run with /usr/bin/python3 (python3-grpcio)")
if not os.path.isfile(CAIRN_BIN):
    skip(CAIRN_BIN + " is not built")
if not os.path.isfile(os.path.join(PROTOS, "cairn", "v1", "serving_pb2.py")):
    skip(PROTOS + "/cairn/v1/serving_pb2.py is not built (target cairn_python_protos)")
_help = subprocess.run([CAIRN_BIN, "serve", "--help"], capture_output=True, text=True, timeout=30)
if "--grpc-port" not in _help.stdout + _help.stderr:
    skip("`cairn serve` has no --grpc-port yet")
_help = subprocess.run([CAIRN_BIN, "controller", "--help"], capture_output=True, text=True,
                       timeout=30)
HAVE_CLUSTER = "--grpc-port" in _help.stdout + _help.stderr

sys.path.insert(0, os.path.join(REPO, "python"))
from cairn_client import Client, ServingError  # noqa: E402

HAVE_GOLDEN = os.path.isfile(MODEL) and os.path.isfile(GOLDEN)


class Proc:
    """A cairn process whose stderr is watched for lines; stop() kills it."""

    def __init__(self, args):
        self.proc = subprocess.Popen([CAIRN_BIN] + args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stderr:
            self.stderr.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern, until, seconds=60):
        """The match of the first line matching `pattern` (a regex), reading
        on until a line contains `until`; fails after `seconds`."""
        deadline = time.monotonic() + seconds
        found = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("no %r in %d s:\n%s" % (until, seconds, "".join(self.stderr)))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError("cairn exited:\n" + "".join(self.stderr))
            m = re.search(pattern, line)
            if m and not found:
                found = m
            if until in line:
                if not found:
                    raise RuntimeError("no %r before %r:\n%s" % (pattern, until, "".join(self.stderr)))
                return found

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def model_args():
    return ["-m", MODEL] if HAVE_GOLDEN else ["--ctx", "256"]


class Server:
    """`cairn serve` on free ports, with the Serving gRPC service."""

    def __init__(self):
        self.proc = Proc(["serve", "--port", "0", "--grpc-port", "0", "--http-threads", "2"]
                         + model_args())
        try:
            m = self.proc.wait_for(r"cairn: grpc listening on (\S+)", "cairn: ready")
        except Exception:
            self.proc.stop()
            raise
        self.grpc_address = m.group(1)

    def stop(self):
        self.proc.stop()


class Cluster:
    """`cairn controller` and one `cairn worker` registered with it."""

    def __init__(self):
        self.procs = []
        try:
            c = Proc(["controller", "--http-port", "0", "--grpc-port", "0", "--http-threads", "2",
                      "--heartbeat-ms", "500"])
            self.procs.append(c)
            self.grpc_address = c.wait_for(r"cairn: grpc listening on (\S+)",
                                           "cairn: ready").group(1)
            w = Proc(["worker", "--controller", self.grpc_address, "--listen", "127.0.0.1:0",
                      "--heartbeat-ms", "500"] + model_args())
            self.procs.append(w)
            w.wait_for(r"cairn: registered with", "cairn: registered with")
        except Exception:
            self.stop()
            raise

    def stop(self):
        for p in reversed(self.procs):
            p.stop()


def cases():
    if HAVE_GOLDEN:
        with open(GOLDEN) as f:
            return [(c["prompt"], c["n_predict"], c["text"]) for c in json.load(f)["cases"]]
    return [("Once upon a time", 16, None)]


class PythonClientTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            cls.server.stop()

    def client(self, servable="", method="generate", timeout=120.0):
        return Client(self.server.grpc_address, servable, method, timeout=timeout,
                      proto_path=PROTOS)

    def test_list_servables(self):
        with self.client() as c:
            servables = c.list_servables()
        self.assertEqual(len(servables), 1)
        self.assertEqual(servables[0]["methods"], ["generate", "chat"])
        if HAVE_GOLDEN:
            self.assertEqual(servables[0]["name"], "stories260K")
        self.assertGreater(servables[0]["n_ctx"], 0)

    def test_golden_unary_and_streaming(self):
        cs = cases()
        instances = [{"prompt": p, "max_tokens": n, "temperature": 0} for p, n, _ in cs]
        servable = "stories260K" if HAVE_GOLDEN else ""
        with self.client(servable) as c:
            unary = c.infer(instances)
            events = []
            streamed = c.infer_stream_all(instances, on_event=events.append)
        self.assertEqual(len(unary), len(cs))
        for i, (prompt, n, text) in enumerate(cs):
            self.assertEqual(streamed[i]["text"], unary[i]["text"], prompt)
            self.assertTrue(unary[i]["text"])
            if text is not None:
                self.assertEqual(unary[i]["text"], text, prompt)
                self.assertEqual(unary[i]["completion_tokens"], n)
                self.assertEqual(unary[i]["finish_reason"], "length")
                self.assertEqual(streamed[i]["completion_tokens"], n)
        # Streaming really streamed: several events per instance, one last one.
        per = [sum(1 for e in events if e["instance"] == i) for i in range(len(cs))]
        self.assertTrue(all(k > 2 for k in per), per)
        finals = [e for e in events if "finish_reason" in e]
        self.assertEqual(len(finals), len(cs))

    def test_chat(self):
        with self.client(method="chat") as c:
            out = c.infer([{"messages": [{"role": "user", "content": "Hello"}],
                            "max_tokens": 4, "temperature": 0}])
        self.assertIn(out[0]["finish_reason"], ("stop", "length"))
        self.assertLessEqual(out[0]["completion_tokens"], 4)

    def test_errors_raise_with_the_servers_message(self):
        with self.client("no-such-model") as c:
            with self.assertRaises(ServingError) as cm:
                c.infer([{"prompt": "x"}])
        self.assertEqual(cm.exception.code, 404)
        self.assertIn("no-such-model", cm.exception.message)
        with self.client() as c:
            with self.assertRaises(ServingError) as cm:
                c.infer([{"prompt": "x", "max_tokens": 2}, {"prompt": "x", "wibble": 1}])
            self.assertEqual(cm.exception.code, 400)
            self.assertIn("wibble", cm.exception.message)
            self.assertEqual(cm.exception.outputs[1]["error_code"], 400)
            self.assertIn("text", cm.exception.outputs[0])
            with self.assertRaises(ServingError) as cm:
                list(c.infer_stream([{"prompt": "x"}] * 65))
            self.assertEqual(cm.exception.code, 400)

    def test_server_down_is_a_clear_error_within_the_deadline(self):
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        c = Client("127.0.0.1:%d" % port, "", "generate", timeout=3.0, proto_path=PROTOS)
        t0 = time.monotonic()
        with self.assertRaises(ServingError) as cm:
            c.infer([{"prompt": "x"}])
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertIn(cm.exception.code, (503, 504))
        self.assertIn(str(port), cm.exception.message)
        c.close()

    def run_cli(self, *args):
        return subprocess.run([CAIRN_BIN, "client", "--address", self.server.grpc_address,
                               "--timeout", "120", *args],
                              capture_output=True, text=True, timeout=180)

    def test_cpp_cli_client_golden_unary_and_streaming(self):
        prompt, n, text = cases()[0]
        for extra in ([], ["--stream"]):
            r = self.run_cli("--input", "prompt=" + prompt, "--input", "max_tokens=%d" % n,
                             "--input", "temperature=0", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            if text is not None:
                self.assertEqual(r.stdout, text + "\n")
            else:
                self.assertGreater(len(r.stdout), 1)
        r = self.run_cli("--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("methods=generate,chat", r.stdout)

    def test_cpp_cli_client_errors_are_one_line(self):
        r = self.run_cli("--servable", "nope", "--input", "prompt=x")
        self.assertNotEqual(r.returncode, 0)
        errors = [l for l in r.stderr.splitlines() if l.startswith("cairn: error:")]
        self.assertEqual(len(errors), 1, r.stderr)
        self.assertIn("nope", errors[0])
        r = self.run_cli("--input", "max_tokens=lots", "--input", "prompt=x")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("max_tokens", r.stderr)


@unittest.skipUnless(HAVE_CLUSTER, "`cairn controller` has no --grpc-port yet")
class ClusterClientTest(unittest.TestCase):
    """The same golden texts through a controller routing to a worker."""

    cluster = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        # The worker is registered; wait until the controller lists its model.
        c = Client(cls.cluster.grpc_address, "", "generate", timeout=5.0, proto_path=PROTOS)
        deadline = time.monotonic() + 30
        try:
            while not c.list_servables():
                if time.monotonic() > deadline:
                    raise RuntimeError("the controller never listed the worker's model")
                time.sleep(0.05)
        finally:
            c.close()

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()

    def test_python_client_golden_unary_and_streaming(self):
        cs = cases()
        instances = [{"prompt": p, "max_tokens": n, "temperature": 0} for p, n, _ in cs]
        with Client(self.cluster.grpc_address, "", "generate", timeout=120.0,
                    proto_path=PROTOS) as c:
            unary = c.infer(instances)
            streamed = c.infer_stream_all(instances)
        for i, (prompt, n, text) in enumerate(cs):
            self.assertEqual(streamed[i]["text"], unary[i]["text"], prompt)
            self.assertTrue(unary[i]["text"])
            if text is not None:
                self.assertEqual(unary[i]["text"], text, prompt)
                self.assertEqual(streamed[i]["completion_tokens"], n)

    def test_cpp_cli_client_golden_unary_and_streaming(self):
        prompt, n, text = cases()[0]
        outs = []
        for extra in ([], ["--stream"]):
            r = subprocess.run([CAIRN_BIN, "client", "--address", self.cluster.grpc_address,
                                "--timeout", "120", "--input", "prompt=" + prompt,
                                "--input", "max_tokens=%d" % n, "--input", "temperature=0",
                                *extra], capture_output=True, text=True, timeout=180)
            self.assertEqual(r.returncode, 0, r.stderr)
            outs.append(r.stdout)
            if text is not None:
                self.assertEqual(r.stdout, text + "\n")
        self.assertEqual(outs[0], outs[1])


if __name__ == "__main__":
    unittest.main()

# tests/integration/python_servable_client_test.py — the cairn Python package's Client and the mindspore_serving shims, against an in-process fake Serving server.
"""The Python client package (python/cairn/client.py) against an in-process
fake of the Serving gRPC service (grpc.server with generic handlers and the
generated serving_pb2 classes), which decodes and encodes the wire format on
its own, so the client's conversions are checked against the proto's
definition rather than against themselves. Also mindspore_serving.client and
mindspore_serving.server: the command line the start API builds, and its
lifecycle (start, restart with both addresses, the process staying up after
the script's main code, signals forwarded, stop) with a fake `cairn` binary.

Run by ctest with /usr/bin/python3 (Debian's numpy, grpc and protobuf);
CAIRN_PYTHON_PROTOS names BUILD/python, CAIRN_BIN the real binary (used only
for `serve --help`). Exit code 77 (ctest: skipped) when something it needs is
absent.
"""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.path.join(REPO, "python")
PROTOS = os.environ.get("CAIRN_PYTHON_PROTOS", os.path.join(REPO, "build", "python"))
CAIRN_BIN = os.environ.get("CAIRN_BIN", "")
SKIP = 77


def skip(reason):
    print("skipped: " + reason)
    sys.exit(SKIP)


try:
    import grpc
    import numpy as np
except ImportError as e:
    skip("%s: run with /usr/bin/python3 (python3-grpcio, python3-numpy)" % e)
if not os.path.isfile(os.path.join(PROTOS, "cairn", "v1", "serving_pb2.py")):
    skip(PROTOS + "/cairn/v1/serving_pb2.py is not built (target cairn_python_protos)")
os.environ["CAIRN_PYTHON_PROTOS"] = PROTOS
sys.path.insert(0, PYTHON_DIR)

import cairn  # noqa: E402
from cairn import client as cairn_client  # noqa: E402

pb2 = cairn_client.load_serving_pb2()

# The wire's dtypes as the proto comment lists them, decoded here on their own.
WIRE = {"bool": "?", "int8": "i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
        "uint8": "u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
        "float16": "<f2", "float32": "<f4", "float64": "<f8"}


def decode_tensor(t):
    return np.frombuffer(t.data, dtype=np.dtype(WIRE[t.dtype])).reshape(list(t.shape))


def encode_tensor(msg, array, dtype_name=None):
    array = np.asarray(array)
    name = dtype_name or array.dtype.name
    msg.tensor_value.dtype = name
    msg.tensor_value.shape.extend(array.shape)
    msg.tensor_value.data = array.astype(np.dtype(WIRE.get(name, "<u2"))).tobytes()


class FakeServing:
    """A servable "add" with methods add (y = x1 + x2), echo, version, bf16
    (y = x as bfloat16), slow (echo after 0.3 s), abort (a gRPC error); a
    servable "llm" whose generate method streams the prompt's words."""

    def __init__(self):
        self.requests = []

    def predict(self, req, context):
        self.requests.append(req)
        spec = req.servable_spec
        reply = pb2.PredictReply()
        reply.servable_spec.CopyFrom(spec)
        if spec.name != "add":
            e = reply.error_msg.add()
            e.error_code = 404
            e.error_msg = "servable '%s' is not served" % spec.name
            return reply
        if spec.method_name == "abort":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the fake refuses this request")
        if spec.method_name == "slow":
            time.sleep(0.3)
        errors = []
        for inst in req.instances:
            out = reply.instances.add()
            err = ""
            if spec.method_name in ("echo", "slow"):
                out.CopyFrom(inst)
            elif spec.method_name == "version":
                out.items["version"].int_value = spec.version_number
            elif spec.method_name == "bf16":
                x = decode_tensor(inst.items["x"].tensor_value).astype("<f4")
                encode_tensor(out.items["y"], (x.view("<u4") >> 16).astype("<u2"), "bfloat16")
            elif spec.method_name == "add":
                if "x1" not in inst.items or "x2" not in inst.items:
                    err = "add needs inputs x1 and x2"
                else:
                    x1 = decode_tensor(inst.items["x1"].tensor_value)
                    x2 = decode_tensor(inst.items["x2"].tensor_value)
                    if x1.shape != x2.shape:
                        err = "x1 has shape %s, x2 %s" % (list(x1.shape), list(x2.shape))
                    else:
                        encode_tensor(out.items["y"], x1 + x2)
            else:
                context.abort(grpc.StatusCode.NOT_FOUND, "no method " + spec.method_name)
            if err:
                out.Clear()
            errors.append(err)
        if any(errors):
            for err in errors:
                e = reply.error_msg.add()
                e.error_code = 400 if err else 0
                e.error_msg = err
        return reply

    def predict_stream(self, req, context):
        self.requests.append(req)
        spec = req.servable_spec
        if spec.name != "llm" or spec.method_name != "generate":
            context.abort(grpc.StatusCode.NOT_FOUND, "no servable %s method %s"
                          % (spec.name, spec.method_name))
        for i, inst in enumerate(req.instances):
            prompt = inst.items["prompt"].string_value
            if not prompt:
                reply = pb2.PredictReply(instance_index=i, final=True)
                reply.error_msg.add(error_code=400, error_msg="the prompt is empty")
                yield reply
                continue
            words = prompt.split()
            for w in words:
                reply = pb2.PredictReply(instance_index=i, final=False)
                reply.instances.add().items["text"].string_value = w + " "
                yield reply
            reply = pb2.PredictReply(instance_index=i, final=True)
            out = reply.instances.add()
            out.items["text"].string_value = " ".join(words) + " "
            encode_tensor(out.items["lengths"], np.array([len(w) for w in words], np.int32))
            yield reply


def start_fake():
    fake = FakeServing()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "Predict": grpc.unary_unary_rpc_method_handler(
            fake.predict, request_deserializer=pb2.PredictRequest.FromString,
            response_serializer=pb2.PredictReply.SerializeToString),
        "PredictStream": grpc.unary_stream_rpc_method_handler(
            fake.predict_stream, request_deserializer=pb2.PredictRequest.FromString,
            response_serializer=pb2.PredictReply.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("cairn.v1.Serving",
                                                                          handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, fake, "127.0.0.1:%d" % port


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, cls.fake, cls.address = start_fake()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(0)

    def client(self, method, servable="add", **kw):
        return cairn.Client(self.address, servable, method, **kw)

    def test_every_dtype_round_trips(self):
        c = self.client("echo")
        for name in WIRE:
            with self.subTest(dtype=name):
                if name == "bool":
                    x = np.array([[True, False, True], [False, False, True]])
                else:
                    x = (np.arange(6) * 7 - 3).astype(name).reshape(2, 3)
                out = c.infer({"x": x})
                self.assertIsInstance(out, list)
                y = out[0]["x"]
                self.assertEqual(y.dtype, np.dtype(name))
                self.assertEqual(y.shape, (2, 3))
                np.testing.assert_array_equal(y, x)
                # What went over the wire is the proto's format: little-endian, row-major.
                sent = self.fake.requests[-1].instances[0].items["x"].tensor_value
                self.assertEqual(sent.dtype, name)
                self.assertEqual(list(sent.shape), [2, 3])
                self.assertEqual(sent.data, x.astype(np.dtype(WIRE[name])).tobytes())

    def test_byte_order_layout_and_scalars(self):
        c = self.client("echo")
        big = np.arange(12, dtype=">i4").reshape(3, 4)
        strided = np.arange(12, dtype=np.float64).reshape(3, 4).T  # not C-contiguous
        out = c.infer({"big": big, "strided": strided, "s0": np.float32(1.5),
                       "b0": np.bool_(True), "z": np.zeros((0, 3), np.int16),
                       "f64": np.float64(2.5), "ns": np.str_("text"), "nb": np.bytes_(b"\x01")})[0]
        self.assertEqual(out["f64"].dtype, np.float64)  # a numpy scalar stays a tensor
        self.assertEqual(out["f64"].shape, ())
        self.assertEqual(out["ns"], "text")
        self.assertIs(type(out["ns"]), str)
        self.assertEqual(out["nb"], b"\x01")
        np.testing.assert_array_equal(out["big"], big)
        self.assertEqual(out["big"].dtype, np.dtype("int32"))
        np.testing.assert_array_equal(out["strided"], strided)
        self.assertEqual(out["s0"].shape, ())
        self.assertEqual(out["s0"].dtype, np.float32)
        self.assertEqual(float(out["s0"]), 1.5)
        self.assertEqual(out["b0"].shape, ())
        self.assertTrue(bool(out["b0"]))
        self.assertEqual(out["z"].shape, (0, 3))
        sent = self.fake.requests[-1].instances[0].items
        self.assertEqual(sent["big"].tensor_value.data, big.astype("<i4").tobytes())
        self.assertEqual(sent["strided"].tensor_value.data, np.ascontiguousarray(strided).tobytes())
        self.assertEqual(list(sent["s0"].tensor_value.shape), [])

    def test_str_bytes_and_python_scalars(self):
        out = self.client("echo").infer([{"s": "héllo", "b": b"\x00\xff", "t": True, "f": False,
                                           "i": -(1 << 62), "d": 0.25}])
        self.assertEqual(out, [{"s": "héllo", "b": b"\x00\xff", "t": True, "f": False,
                                "i": -(1 << 62), "d": 0.25}])
        o = out[0]
        self.assertIs(type(o["t"]), bool)
        self.assertIs(type(o["i"]), int)
        self.assertIs(type(o["b"]), bytes)
        kinds = {k: v.WhichOneof("kind") for k, v in self.fake.requests[-1].instances[0].items.items()}
        self.assertEqual(kinds, {"s": "string_value", "b": "bytes_value", "t": "bool_value",
                                 "f": "bool_value", "i": "int_value", "d": "double_value"})

    def test_add_instances_in_order(self):
        c = self.client("add")
        instances = [{"x1": np.full((2, 2), k, np.float32), "x2": np.ones((2, 2), np.float32)}
                     for k in range(1, 4)]
        out = c.infer(instances)
        self.assertEqual(len(out), 3)
        for k, o in enumerate(out, start=1):
            np.testing.assert_array_equal(o["y"], np.full((2, 2), k + 1, np.float32))
        # One dict is one instance; a tuple works as a list.
        one = c.infer({"x1": np.int64(2), "x2": np.int64(5)})
        self.assertEqual(len(one), 1)
        self.assertEqual(int(one[0]["y"]), 7)
        self.assertEqual(len(c.infer(tuple(instances))), 3)

    def test_bfloat16_outputs_are_float32(self):
        x = np.array([1.0, -2.5, 3.140625, 65280.0], np.float32)
        y = self.client("bf16").infer({"x": x})[0]["y"]
        self.assertEqual(y.dtype, np.float32)
        np.testing.assert_array_equal(y, x)  # these values are exact in bfloat16
        y = self.client("bf16").infer({"x": np.float32(1.0 + 2 ** -10)})[0]["y"]
        self.assertEqual(float(y), 1.0)  # truncated to bfloat16's 8 bits of mantissa

    def test_version_number_is_sent(self):
        self.assertEqual(self.client("version").infer({})[0]["version"], 0)
        self.assertEqual(self.client("version", version_number=3).infer({})[0]["version"], 3)
        self.assertEqual(self.fake.requests[-1].servable_spec.version_number, 3)

    def test_mindspore_1_1_constructor(self):
        host, port = self.address.rsplit(":", 1)
        c = cairn.Client(host, int(port), "add", "version")
        self.assertEqual((c.address, c.servable_name, c.method_name, c.version_number),
                         (self.address, "add", "version", 0))
        self.assertEqual(c.infer({}), [{"version": 0}])
        c = cairn.Client(host, int(port), "add", "version", 2)
        self.assertEqual(c.infer({}), [{"version": 2}])

    def test_per_instance_errors(self):
        ok = {"x1": np.ones(2, np.int32), "x2": np.ones(2, np.int32)}
        bad = {"x1": np.ones(2, np.int32), "x2": np.ones(3, np.int32)}
        out = self.client("add").infer([ok, bad, ok, {"x1": np.ones(1)}])
        self.assertIsInstance(out, list)
        self.assertEqual(len(out), 4)
        np.testing.assert_array_equal(out[0]["y"], [2, 2])
        self.assertEqual(out[1], {"error": "x1 has shape [2], x2 [3]"})
        np.testing.assert_array_equal(out[2]["y"], [2, 2])
        self.assertEqual(out[3], {"error": "add needs inputs x1 and x2"})

    def test_whole_request_errors(self):
        # The server's single error entry: one dict, as MindSpore's client gives.
        out = cairn.Client(self.address, "nosuch", "add").infer([{"x": 1}, {"x": 2}])
        self.assertEqual(out, {"error": "servable 'nosuch' is not served"})
        # A single failed instance reads the same way (MindSpore's rule).
        out = self.client("add").infer({"x1": np.ones(2)})
        self.assertEqual(out, {"error": "add needs inputs x1 and x2"})
        # gRPC failures.
        out = self.client("abort").infer({"x": 1})
        self.assertIsInstance(out, dict)
        self.assertTrue(out["error"].startswith("Grpc Error, "), out)
        self.assertIn("the fake refuses this request", out["error"])
        self.assertIn("invalid argument", out["error"])
        with socket_closed_port() as port:
            out = cairn.Client("127.0.0.1:%d" % port, "add", "add", timeout=5).infer({"x": 1})
        self.assertTrue(out["error"].startswith("Grpc Error, "), out)

    def test_bad_arguments_raise_before_sending(self):
        c = self.client("echo")
        n = len(self.fake.requests)
        for bad in ({"x": [1, 2]}, {"x": None}, {"x": np.array(["a", "b"])},
                    {"x": np.array([object()])}, {"x": 1 << 63}, {"x": np.complex64(1)},
                    [{"x": 1}, 5], "x", {1: 2}):
            with self.subTest(bad=repr(bad)[:40]):
                with self.assertRaises(RuntimeError):
                    c.infer(bad)
                with self.assertRaises(RuntimeError):
                    c.infer_async(bad)
        self.assertEqual(len(self.fake.requests), n)
        for args in (("", "add", "m"), (self.address, "", "m"), (self.address, "add", "")):
            with self.assertRaises(RuntimeError):
                cairn.Client(*args)
        with self.assertRaises(RuntimeError):
            cairn.Client(self.address, "add", "m", -1)
        with self.assertRaises(RuntimeError):
            cairn.Client(self.address, "add", "m", 0, "not an SSLConfig")
        with self.assertRaises(RuntimeError):
            cairn.Client(self.address, "add", "m", timeout=0)

    def test_infer_async(self):
        c = self.client("slow")
        start = time.monotonic()
        pending = [c.infer_async({"i": k}) for k in range(4)]
        self.assertLess(time.monotonic() - start, 0.25)  # did not wait for the replies
        self.assertEqual([p.result() for p in pending], [[{"i": k}] for k in range(4)])
        self.assertTrue(all(p.done() for p in pending))
        self.assertEqual(cairn.Client(self.address, "nosuch", "x").infer_async({}).result(),
                         {"error": "servable 'nosuch' is not served"})
        out = self.client("abort").infer_async({}).result()
        self.assertTrue(out["error"].startswith("Grpc Error, "), out)

    def test_infer_stream(self):
        c = self.client("generate", servable="llm")
        events = list(c.infer_stream([{"prompt": "once upon a time"}, {"prompt": ""},
                                      {"prompt": "the end"}]))
        by_instance = {}
        for ev in events:
            by_instance.setdefault(ev["instance"], []).append(ev)
        self.assertEqual(sorted(by_instance), [0, 1, 2])
        for i, prompt in ((0, "once upon a time"), (2, "the end")):
            evs = by_instance[i]
            self.assertEqual([e["final"] for e in evs], [False] * len(prompt.split()) + [True])
            streamed = "".join(e["outputs"]["text"] for e in evs[:-1])
            self.assertEqual(streamed, evs[-1]["outputs"]["text"])
            self.assertEqual(streamed, prompt + " ")
            lengths = evs[-1]["outputs"]["lengths"]
            self.assertEqual(lengths.dtype, np.int32)
            np.testing.assert_array_equal(lengths, [len(w) for w in prompt.split()])
        self.assertEqual(by_instance[1], [{"instance": 1, "final": True,
                                           "error": "the prompt is empty", "error_code": 400}])
        # A failure of the whole call raises.
        with self.assertRaises(RuntimeError) as cm:
            list(cairn.Client(self.address, "llm", "nosuch").infer_stream({"prompt": "x"}))
        self.assertIn("no servable llm method nosuch", str(cm.exception))
        # Breaking off early cancels the call without error.
        for ev in c.infer_stream({"prompt": "a b c d e f"}):
            break
        self.assertFalse(ev["final"])


class socket_closed_port:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then closed)."""

    def __enter__(self):
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port

    def __exit__(self, *exc):
        return False


class PackagesTest(unittest.TestCase):
    def test_mindspore_serving_client_is_cairns(self):
        from mindspore_serving.client import Client, SSLConfig
        import mindspore_serving.client as msc

        self.assertIs(Client, cairn_client.Client)
        self.assertIs(Client, cairn.Client)
        self.assertIs(SSLConfig, cairn_client.SSLConfig)
        self.assertEqual(sorted(msc.__all__), ["Client", "SSLConfig"])

    def test_import_cairn_is_light(self):
        code = ("import sys, cairn, mindspore_serving; "
                "print(sorted(m for m in ('grpc', 'numpy', 'cairn.client') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=PYTHON_DIR), timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "[]")
        with self.assertRaises(AttributeError):
            cairn.NoSuchName  # noqa: B018

    def test_protos_load_under_a_private_name(self):
        self.assertEqual(pb2.__name__, "_cairn_v1_serving_pb2")
        self.assertNotIn("cairn.v1", sys.modules)
        self.assertIs(cairn_client.load_serving_pb2(), pb2)


FAKE_CAIRN = textwrap.dedent("""\
    #!%s
    # A stand-in for `cairn serve`: records its arguments, prints what the real
    # binary prints, and on SIGTERM/SIGINT records the signal and exits.
    import os, signal, sys, time
    log = os.environ["FAKE_CAIRN_LOG"]
    with open(log, "a") as f:
        f.write("start " + " ".join(sys.argv[1:]) + "\\n")
    if os.environ.get("FAKE_CAIRN_FAIL"):
        sys.stderr.write("cairn: error: servable 'add' failed to load\\n")
        sys.exit(3)
    def on_signal(signum, frame):
        with open(log, "a") as f:
            f.write("signal %%d\\n" %% signum)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.stderr.write("cairn: listening on http://127.0.0.1:1\\n")
    sys.stderr.write("cairn: ready\\n")
    sys.stderr.flush()
    while True:
        time.sleep(0.05)
    """) % sys.executable


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "servables")
        for name in ("add", "llm"):
            os.makedirs(os.path.join(self.dir, name, "1"))
        self.fake_bin = os.path.join(self.tmp.name, "cairn")
        with open(self.fake_bin, "w") as f:
            f.write(FAKE_CAIRN)
        os.chmod(self.fake_bin, 0o755)
        self.log = os.path.join(self.tmp.name, "log")
        self.env = dict(os.environ, CAIRN_BINARY=self.fake_bin, FAKE_CAIRN_LOG=self.log,
                        PYTHONPATH=PYTHON_DIR)

    def tearDown(self):
        self.tmp.cleanup()

    def read_log(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def test_command_line(self):
        from mindspore_serving import server

        configs = [server.ServableStartConfig(self.dir, "add", device_ids=(0, 1)),
                   server.ServableStartConfig(self.dir, "llm", version_number=0)]
        cmd = server.build_command(configs, "0.0.0.0:5500", "0.0.0.0:1500", 100, binary="cairn",
                                   grpc_max_msg_mb_size=64)
        self.assertEqual(cmd, ["cairn", "serve", "--servable-dir", self.dir, "--servable", "add",
                               "--servable", "llm", "--host", "0.0.0.0", "--port", "1500",
                               "--max-body-bytes", str(100 << 20), "--grpc-port", "5500",
                               "--grpc-max-message-mb", "64"])
        cmd = server.build_command(configs[:1], "localhost:5500", binary="cairn")
        self.assertEqual(cmd, ["cairn", "serve", "--servable-dir", self.dir, "--servable", "add",
                               "--host", "127.0.0.1", "--port", "0", "--grpc-port", "5500"])
        cmd = server.build_command(configs[:1], None, "[::1]:8080", binary="cairn")
        self.assertEqual(cmd[-4:], ["--host", "::1", "--port", "8080"])
        # A relative directory becomes absolute; the same servable twice is served once.
        rel = server.ServableStartConfig(os.path.relpath(self.dir), "add")
        self.assertEqual(rel.servable_directory, self.dir)
        self.assertEqual(server.build_command([rel, configs[0]], "h:1", binary="c").count("add"), 1)
        for bad in (lambda: server.build_command(configs, "1.2.3.4:1", "5.6.7.8:2", binary="c"),
                    lambda: server.build_command(configs, "unix:/tmp/s", binary="c"),
                    lambda: server.build_command(configs, "nohost", binary="c"),
                    lambda: server.build_command(configs, "h:99999", binary="c"),
                    lambda: server.build_command(configs, None, None, binary="c"),
                    lambda: server.build_command([], "h:1", binary="c"),
                    lambda: server.build_command(
                        configs + [server.ServableStartConfig(self.tmp.name, "x")], "h:1",
                        binary="c")):
            with self.assertRaises(RuntimeError):
                bad()

    def test_config_checks(self):
        from mindspore_serving import server

        for kw in ({"version_number": -1}, {"device_type": "TPU"}, {"dec_key": b"short"},
                   {"dec_mode": "ROT13"}, {"num_parallel_workers": 65}, {"device_ids": "0"}):
            with self.subTest(kw=kw), self.assertRaises(RuntimeError):
                server.ServableStartConfig(self.dir, "add", **kw)
        with self.assertRaises(RuntimeError):
            server.ServableStartConfig("", "add")
        with self.assertRaises(RuntimeError):
            server.start_servables(server.ServableStartConfig(self.dir, "missing"))
        with self.assertRaises(RuntimeError):
            server.start_servables(["not a config"])
        with self.assertRaises(RuntimeError):
            server.start_grpc_server("h:1", max_msg_mb_size=0)
        with self.assertRaises(RuntimeError):
            server.start_grpc_server("h:1", ssl_config=server.SSLConfig("c.pem", "k.pem"))

    def run_script(self, body, extra_env=None):
        script = os.path.join(self.tmp.name, "serving_server.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(body))
        env = dict(self.env, **(extra_env or {}))
        return subprocess.Popen([sys.executable, script], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.tmp.name)

    def wait_for_log(self, predicate, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.log) and predicate(self.read_log()):
                return self.read_log()
            time.sleep(0.05)
        self.fail("the fake cairn's log never matched: %s"
                  % (self.read_log() if os.path.exists(self.log) else "(no log)"))

    def test_start_script_stays_up_and_forwards_sigterm(self):
        # A MindSpore start script, unchanged: its main code ends, the server stays.
        proc = self.run_script("""\
            import os
            from mindspore_serving import server

            def start():
                servable_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "servables")
                config = server.ServableStartConfig(servable_directory=servable_dir,
                                                    servable_name="add", device_ids=(0, 1))
                server.start_servables(servable_configs=config)
                server.start_grpc_server(address="127.0.0.1:5500")
                server.start_restful_server(address="127.0.0.1:1500")
                print("command", " ".join(server.command_line()), flush=True)

            if __name__ == "__main__":
                start()
            """)
        try:
            line = proc.stdout.readline()
            self.assertTrue(line.startswith("command "), line + proc.stderr.read()
                            if proc.poll() is not None else line)
            log = self.wait_for_log(lambda lines: len(lines) >= 3)
            servable_dir = os.path.join(self.tmp.name, "servables")
            # The first server started the binary; the second restarted it with both.
            self.assertEqual(log[0], "start serve --servable-dir %s --servable add --host "
                             "127.0.0.1 --port 0 --grpc-port 5500 --grpc-max-message-mb 100"
                             % servable_dir)
            self.assertEqual(log[1], "signal %d" % signal.SIGTERM)
            self.assertEqual(log[2], "start serve --servable-dir %s --servable add --host "
                             "127.0.0.1 --port 1500 --max-body-bytes %d --grpc-port 5500 "
                             "--grpc-max-message-mb 100" % (servable_dir, 100 << 20))
            self.assertEqual(line.split()[1:], [self.fake_bin] + log[2].split()[1:])
            time.sleep(0.5)
            self.assertIsNone(proc.poll(), "the script exited while the server runs")
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            self.assertEqual(self.read_log()[3:], ["signal %d" % signal.SIGTERM])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def test_sigint_during_main_code_and_stop(self):
        proc = self.run_script("""\
            import sys, time
            from mindspore_serving import server
            server.start_servables([server.ServableStartConfig("servables", "add"),
                                    server.ServableStartConfig("servables", "llm")])
            server.start_grpc_server("127.0.0.1:5500")
            if sys.argv[-1] == "stop":
                server.stop()
                print("stopped", flush=True)
                sys.exit(0)
            print("serving", flush=True)
            time.sleep(60)
            """)
        try:
            self.assertEqual(proc.stdout.readline().strip(), "serving")
            proc.send_signal(signal.SIGINT)  # Ctrl+C: reaches the child, then KeyboardInterrupt
            proc.wait(timeout=30)
            self.assertIn("KeyboardInterrupt", proc.stderr.read())
            log = self.read_log()
            self.assertEqual(log[1:], ["signal %d" % signal.SIGINT])
            self.assertIn("--servable add --servable llm", log[0])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def test_stop_ends_the_child(self):
        os.remove(self.log) if os.path.exists(self.log) else None
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""\
                from mindspore_serving import server
                server.start_servables(server.ServableStartConfig("servables", "add"))
                server.start_restful_server("127.0.0.1:1500")
                server.stop()
                print("stopped", server.find_binary())
                """)], env=self.env, capture_output=True, text=True, cwd=self.tmp.name,
            timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout.split(), ["stopped", self.fake_bin])
        self.assertEqual(self.read_log()[1:], ["signal %d" % signal.SIGTERM])

    def test_child_failing_before_ready(self):
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""\
                from mindspore_serving import server
                server.start_servables(server.ServableStartConfig("servables", "add"))
                try:
                    server.start_grpc_server("127.0.0.1:5500")
                except RuntimeError as e:
                    print("error:", e)
                """)], env=dict(self.env, FAKE_CAIRN_FAIL="1"), capture_output=True, text=True,
            cwd=self.tmp.name, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("error: cairn exited with status 3 before it was ready: cairn: error: "
                      "servable 'add' failed to load", proc.stdout)

    def test_a_failed_start_stops_the_server(self):
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""\
                from mindspore_serving import server
                server.start_servables(server.ServableStartConfig("servables", "add"))
                server.start_grpc_server("127.0.0.1:5500")
                try:
                    server.start_restful_server("10.9.8.7:1500")  # another host: refused
                except RuntimeError as e:
                    print("error:", e)
                """)], env=self.env, capture_output=True, text=True, cwd=self.tmp.name,
            timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)  # did not wait: nothing runs
        self.assertIn("error: cairn binds one host for gRPC and REST", proc.stdout)
        self.assertEqual(self.read_log()[1:], ["signal %d" % signal.SIGTERM])

    def test_flags_exist_in_the_real_binary(self):
        if not CAIRN_BIN or not os.path.isfile(CAIRN_BIN):
            self.skipTest("CAIRN_BIN is not set to a built binary")
        out = subprocess.run([CAIRN_BIN, "serve", "--help"], capture_output=True, text=True,
                             timeout=30)
        text = out.stdout + out.stderr
        from mindspore_serving import server

        cmd = server.build_command([server.ServableStartConfig(self.dir, "add")], "h:1", "h:2", 100,
                                   binary=CAIRN_BIN, grpc_max_msg_mb_size=100)
        for flag in (a for a in cmd if a.startswith("--")):
            self.assertIn(flag, text)


if __name__ == "__main__":
    unittest.main(verbosity=2)

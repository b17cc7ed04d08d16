"""Tensor servables end to end: `cairn serve --servable-dir` with ONNX models
built here by Debian's python3-onnx, called over REST, gRPC (`cairn.Client`)
and unchanged MindSpore Serving client scripts (`mindspore_serving.client`):
the seeds' `add` (add_common, add_cast) and `matmul` (MatMul 128x96 . 96x16
with weights 0.5, then Neg) servables, and the batcher: batch size 2 with
three concurrent single-instance requests, 64 concurrent requests of random
instance counts against a fixed batch of 8, a shared (without-batch-dim)
input, a request mixing good and bad instances, and model.call() from a
Python stage. Expected values come from numpy.

Run by ctest with /usr/bin/python3; exit code 77 (skipped) when something it
needs is absent.
"""

import json
import os
import random
import shutil
import sys
import tempfile
import textwrap
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servables_test import CAIRN_BIN, Server, post, skip  # noqa: E402

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    skip("%s: run with /usr/bin/python3 (python3-onnx, python3-numpy)" % e)

import cairn  # noqa: E402
from mindspore_serving.client import Client as MsClient  # noqa: E402


def save(graph, path, opset=13):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def value_info(name, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


def add_model(path, dims):
    g = helper.make_graph([helper.make_node("Add", ["x1", "x2"], ["y"])], "add",
                          [value_info("x1", dims), value_info("x2", dims)], [value_info("y", dims)])
    save(g, path)


def matmul_model(path):
    w = numpy_helper.from_array(np.full((96, 16), 0.5, np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Neg", ["m"], ["y"])], "matmul",
                          [value_info("x", [128, 96])], [value_info("y", [128, 16])], [w])
    save(g, path)


def affine_model(path, batch):
    """y = x . W + b per row of 4 (W, b fixed), plus a shared `scale` input: y * scale."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((3,)).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Add", ["m", "b"], ["a"]),
                           helper.make_node("Mul", ["a", "scale"], ["y"])], "affine",
                          [value_info("x", [batch, 4]), value_info("scale", [1])],
                          [value_info("y", [batch, 3])], [w, b])
    save(g, path)
    return numpy_helper.to_array(w), numpy_helper.to_array(b)


def lookup_model(path):
    """Gather of rows of a 5x2 table by int64 ids: an id out of range fails at run time."""
    table = numpy_helper.from_array(np.arange(10, dtype=np.float32).reshape(5, 2), "table")
    g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)], "lookup",
                          [value_info("ids", ["batch", 3], TensorProto.INT64)],
                          [value_info("y", ["batch", 3, 2])], [table])
    save(g, path)


ADD_CONFIG = """
import numpy as np
from mindspore_serving.server import register

def add_trans_datatype(x1, x2):
    return x1.astype(np.float32), x2.astype(np.float32)

tensor_add = register.declare_model(model_file="tensor_add.onnx", model_format="ONNX",
                                    with_batch_dim=False)

@register.register_method(output_names=["y"])
def add_common(x1, x2):
    y = register.add_stage(tensor_add, x1, x2, outputs_count=1)
    return y

@register.register_method(output_names=["y"])
def add_cast(x1, x2):
    x1, x2 = register.add_stage(add_trans_datatype, x1, x2, outputs_count=2)
    y = register.add_stage(tensor_add, x1, x2, outputs_count=1)
    return y
"""

MATMUL_CONFIG = """
from mindspore_serving.server import register

model = register.declare_model(model_file="matmul.onnx", model_format="ONNX", with_batch_dim=False)

@register.register_method(output_names=["y"])
def predict(x):
    y = register.add_stage(model, x, outputs_count=1)
    return y
"""

# Fixed batch 2 (the "batch size 2, three requests"), fixed batch 8
# (the 64-request test), and a dynamic batch with a shared input; the
# dynamic one waits up to 50 ms for a fuller batch.
AFFINE_CONFIG = """
import numpy as np
from cairn.server import register

b2 = register.declare_model(model_file="affine_b2.onnx", model_format="ONNX",
                            without_batch_dim_inputs=[1])
b8 = register.declare_model(model_file="affine_b8.onnx", model_format="ONNX",
                            without_batch_dim_inputs=1)
dyn = register.declare_model(model_file="affine_dyn.onnx", model_format="ONNX",
                             without_batch_dim_inputs=[1],
                             options={"max_batch_size": 4, "max_queue_delay_microseconds": 50000})
lookup = register.declare_model(model_file="lookup.onnx", model_format="ONNX")

def via_call(x, scale):
    y = b8.call(x, scale)
    return y + 1

@register.register_method(output_names=["y"])
def batch2(x, scale):
    return register.add_stage(b2, x, scale, outputs_count=1)

@register.register_method(output_names=["y"])
def batch8(x, scale):
    return register.add_stage(b8, x, scale, outputs_count=1)

@register.register_method(output_names=["y"])
def dynamic(x, scale):
    return register.add_stage(dyn, x, scale, outputs_count=1)

@register.register_method(output_names=["y"])
def rows(ids):
    return register.add_stage(lookup, ids, outputs_count=1)

@register.register_method(output_names=["y"])
def called(x, scale):
    return register.add_stage(via_call, x, scale, outputs_count=1)
"""


def setup_repository(root):
    def servable(name, config):
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "servable_config.py"), "w") as f:
            f.write(textwrap.dedent(config))
        return os.path.join(root, name, "1")

    add_model(os.path.join(servable("add", ADD_CONFIG), "tensor_add.onnx"), [2, 2])
    matmul_model(os.path.join(servable("matmul", MATMUL_CONFIG), "matmul.onnx"))
    d = servable("affine", AFFINE_CONFIG)
    w, b = affine_model(os.path.join(d, "affine_b2.onnx"), 2)
    affine_model(os.path.join(d, "affine_b8.onnx"), 8)
    affine_model(os.path.join(d, "affine_dyn.onnx"), "batch")
    lookup_model(os.path.join(d, "lookup.onnx"))
    return w, b


class TensorServablesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="cairn-tensor-servables-")
        cls.w, cls.b = setup_repository(cls.root)
        cls.server = Server(cls.root)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def expect_affine(self, x, scale):
        return (x @ self.w + self.b) * scale

    # ---- the seeds' client scripts, unchanged but for the address
    def test_seed_add_client(self):
        client = MsClient(self.server.grpc, "add", "add_common")
        instances = []
        x1 = np.asarray([[1, 1], [1, 1]]).astype(np.float32)
        x2 = np.asarray([[1, 1], [1, 1]]).astype(np.float32)
        instances.append({"x1": x1, "x2": x2})
        x1 = np.asarray([[2, 2], [2, 2]]).astype(np.float32)
        x2 = np.asarray([[2, 2], [2, 2]]).astype(np.float32)
        instances.append({"x1": x1, "x2": x2})
        x1 = np.asarray([[3, 3], [3, 3]]).astype(np.float32)
        x2 = np.asarray([[3, 3], [3, 3]]).astype(np.float32)
        instances.append({"x1": x1, "x2": x2})
        result = client.infer(instances)
        self.assertEqual(len(result), 3, result)
        for k, r in enumerate(result):
            np.testing.assert_array_equal(r["y"], np.full((2, 2), 2.0 * (k + 1), np.float32))

        client = MsClient(self.server.grpc, "add", "add_cast")
        x1 = np.ones((2, 2), np.int32)
        x2 = np.ones((2, 2), np.int32)
        result = client.infer([{"x1": x1, "x2": x2}])
        np.testing.assert_array_equal(result[0]["y"], np.full((2, 2), 2.0, np.float32))
        self.assertEqual(result[0]["y"].dtype, np.float32)

    def test_seed_matmul_client(self):
        client = MsClient(self.server.grpc, "matmul", "predict")
        instance = {"x": np.ones((128, 96), np.float32)}
        result = client.infer(instance)
        np.testing.assert_allclose(result[0]["y"], np.full((128, 16), -48.0, np.float32))
        x = np.random.default_rng(1).standard_normal((128, 96)).astype(np.float32)
        result = client.infer({"x": x})
        np.testing.assert_allclose(result[0]["y"], -(x @ np.full((96, 16), 0.5, np.float32)),
                                   rtol=1e-5, atol=1e-4)

    # ---- REST
    def test_rest_add_and_wrong_inputs(self):
        status, body = post(self.server, "/model/add:add_common",
                            {"instances": [{"x1": [[1.5, 2], [3, 4]], "x2": [[1.0, 1.0], [1.0, 1.0]]},
                                           {"x1": [[1.0, 2.0]], "x2": [[1.0, 2.0]]},
                                           {"x1": {"type": "int32", "shape": [2, 2],
                                                   "b64": "AAAAAAAAAAAAAAAAAAAAAA=="},
                                            "x2": [[1.0, 1.0], [1.0, 1.0]]}]})
        self.assertEqual(status, 200, body)
        inst = body["instances"]
        self.assertEqual(inst[0].get("y"), [[2.5, 3.0], [4.0, 5.0]], inst)
        self.assertIn("expected float32 [2, 2]", inst[1]["error_msg"])
        self.assertIn("int32", inst[2]["error_msg"])

    # ---- batching
    def call_many(self, method, instance_lists):
        """Concurrent gRPC calls, one thread each; returns results in order."""
        results = [None] * len(instance_lists)
        errors = []

        def run(k):
            try:
                client = cairn.Client(self.server.grpc, "affine", method)
                results[k] = client.infer(instance_lists[k])
            except Exception as e:  # reported below, with the thread's index
                errors.append((k, repr(e)))

        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(instance_lists))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        return results

    def test_batch2_three_concurrent_requests(self):
        rng = np.random.default_rng(3)
        xs = [rng.standard_normal(4).astype(np.float32) for _ in range(3)]
        scale = np.asarray([2.0], np.float32)
        results = self.call_many("batch2", [[{"x": x, "scale": scale}] for x in xs])
        for x, r in zip(xs, results):
            np.testing.assert_allclose(r[0]["y"], self.expect_affine(x, 2.0), rtol=1e-5, atol=1e-5)

    def test_batch8_64_concurrent_requests_of_random_sizes(self):
        rng = np.random.default_rng(5)
        sizes = [random.Random(k).randint(1, 20) for k in range(64)]
        calls = []
        for n in sizes:
            calls.append([{"x": rng.standard_normal(4).astype(np.float32),
                           "scale": np.asarray([0.5], np.float32)} for _ in range(n)])
        results = self.call_many("batch8", calls)
        for call, result in zip(calls, results):
            self.assertEqual(len(result), len(call))
            for inst, r in zip(call, result):
                self.assertNotIn("error", r)
                np.testing.assert_allclose(r["y"], self.expect_affine(inst["x"], 0.5),
                                           rtol=1e-5, atol=1e-5)

    def test_shared_input_disagreeing_requests(self):
        rng = np.random.default_rng(9)
        calls = []
        for k in range(12):
            scale = np.asarray([float(k % 3 + 1)], np.float32)
            calls.append([{"x": rng.standard_normal(4).astype(np.float32), "scale": scale}
                          for _ in range(k % 4 + 1)])
        results = self.call_many("dynamic", calls)
        for call, result in zip(calls, results):
            for inst, r in zip(call, result):
                np.testing.assert_allclose(r["y"], self.expect_affine(inst["x"], inst["scale"][0]),
                                           rtol=1e-5, atol=1e-5)

    def test_good_and_bad_instances_in_one_request(self):
        good = np.asarray([0, 4, 2], np.int64)
        table = np.arange(10, dtype=np.float32).reshape(5, 2)
        instances = [{"ids": good}, {"ids": np.asarray([0, 9, 1], np.int64)},
                     {"ids": np.asarray([1, 2], np.int64)}, {"ids": good.astype(np.int32)},
                     {"ids": np.asarray([3, 3, 3], np.int64)}]
        client = cairn.Client(self.server.grpc, "affine", "rows")
        result = client.infer(instances)
        self.assertEqual(len(result), 5)
        np.testing.assert_array_equal(result[0]["y"], table[good])
        self.assertIn("9", result[1]["error"])
        self.assertIn("expected int64 [3] per instance", result[2]["error"])
        self.assertIn("int32", result[3]["error"])
        np.testing.assert_array_equal(result[4]["y"], table[[3, 3, 3]])

    def test_model_call_from_python_stage(self):
        x = np.asarray([1, 2, 3, 4], np.float32)
        status, body = post(self.server, "/model/affine:called",
                            {"instances": [{"x": x.tolist(), "scale": [1.0]}]})
        self.assertEqual(status, 200, body)
        self.assertIn("y", body["instances"][0], body)
        np.testing.assert_allclose(body["instances"][0]["y"], self.expect_affine(x, 1.0) + 1,
                                   rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    if not os.path.isfile(CAIRN_BIN):
        skip(CAIRN_BIN + " is not built")
    unittest.main(verbosity=2)

#!/usr/bin/python3
# tests/onnx/make_models.py — the ONNX test models and their inputs for the parity test.
# Writes, into OUT, one small model per operator case (with the attributes
# that matter: broadcasting, negative axes, pads/strides/groups, the opset-18
# input forms) and the whole models (the seeds' `add` and `matmul`+`Neg`, an
# MLP, an MNIST-sized CNN, a 2-layer BERT-style encoder with dynamic batch and
# sequence dims), each as <case>.onnx plus <case>.in.<input>.npy. Weights are
# random with fixed seeds, so every run writes the same bytes. With --bench it
# writes the benchmark models instead (MLP 4096, encoder 768/12 heads, CNN;
# dynamic batch) and no inputs. Expected outputs come from ONNX Runtime
# (tests/onnx/ort_expected.mjs), never from here.
# Run with Debian's /usr/bin/python3 (python3-onnx, python3-numpy); without
# them it writes OUT/SKIP with the reason, which the parity test reports.
import argparse
import math
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", help="output folder")
    ap.add_argument("--bench", action="store_true", help="write the benchmark models instead")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    skip = os.path.join(args.out, "SKIP")
    if os.path.exists(skip):
        os.remove(skip)
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        with open(skip, "w") as f:
            f.write("python3-onnx or python3-numpy is missing (%s); install them to run the parity test\n" % e)
        print("make_models: %s; wrote %s" % (e, skip))
        return 0
    gen = Gen(args.out)
    if args.bench:
        bench_models(gen)
    else:
        op_cases(gen)
        whole_models(gen)
    print("make_models: wrote %d models into %s" % (gen.count, args.out))
    return 0


class Gen:
    def __init__(self, out):
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        self.np, self.onnx, self.TP, self.h, self.nh = np, onnx, TensorProto, helper, numpy_helper
        self.out = out
        self.count = 0
        self.names = set()

    def rng(self, name):
        # One seed per case, from its name: adding a case leaves the others' bytes alone.
        seed = sum((i + 1) * ord(c) for i, c in enumerate(name)) % (2**31)
        return self.np.random.default_rng(seed)

    def elem(self, arr):
        np, TP = self.np, self.TP
        return {np.dtype(np.float32): TP.FLOAT, np.dtype(np.int64): TP.INT64,
                np.dtype(np.int32): TP.INT32, np.dtype(np.bool_): TP.BOOL}[arr.dtype]

    def init(self, name, arr):
        return self.nh.from_array(arr, name)

    def save(self, name, nodes, inputs, outputs, inits=(), opset=13, dims=None, feeds=None):
        """inputs: list of (name, array) fed at run time; outputs: list of
        (name, elem_type); dims: {input: [dim or symbolic name]} overriding
        the declared shape (dynamic dims); feeds: extra arrays to write
        without declaring (none so far)."""
        h, onnx = self.h, self.onnx
        assert name not in self.names, name
        self.names.add(name)
        vin = []
        for n, a in inputs:
            shape = list(a.shape) if not dims or n not in dims else dims[n]
            vin.append(h.make_tensor_value_info(n, self.elem(a), shape))
        vout = [h.make_tensor_value_info(n, t, None) for n, t in outputs]
        graph = h.make_graph(nodes, name, vin, vout, initializer=list(inits))
        model = h.make_model(graph, producer_name="cairn-tests",
                             opset_imports=[h.make_opsetid("", opset)])
        # onnx 1.12 knows opsets up to 17: newer ones (Split's num_outputs and
        # ReduceMean's axes input at 18, Gelu at 20) are written unchecked.
        model.ir_version = 8 if opset <= 17 else 9
        # The outputs' shapes as exporters write them (shape inference fills
        # them in; the checker wants them).
        if opset <= onnx.defs.onnx_opset_version():
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            # An output whose shape depends on an input's values (Reshape to a
            # runtime shape) stays without one, which the checker refuses.
            if all(o.type.tensor_type.HasField("shape") for o in model.graph.output):
                onnx.checker.check_model(model)
        onnx.save(model, os.path.join(self.out, name + ".onnx"))
        for n, a in inputs:
            self.np.save(os.path.join(self.out, "%s.in.%s.npy" % (name, n)), a)
        self.count += 1

    # Random data helpers.
    def f(self, r, *shape, lo=-2.0, hi=2.0):
        return r.uniform(lo, hi, size=shape).astype(self.np.float32)

    def pos(self, r, *shape):
        return r.uniform(0.1, 3.0, size=shape).astype(self.np.float32)

    def i64(self, values):
        return self.np.array(values, dtype=self.np.int64)


def op_cases(g):
    np, h, TP = g.np, g.h, g.TP
    F = TP.FLOAT
    node = h.make_node

    def unary(op, name=None, positive=False, shape=(2, 3, 4), opset=13, **attrs):
        name = name or op.lower()
        r = g.rng(name)
        x = g.pos(r, *shape) if positive else g.f(r, *shape, lo=-3, hi=3)
        g.save(name, [node(op, ["x"], ["y"], **attrs)], [("x", x)], [("y", F)], opset=opset)

    def binary(op, name, sa, sb, positive_b=False, b_init=False):
        r = g.rng(name)
        a = g.f(r, *sa)
        b = g.pos(r, *sb) if positive_b else g.f(r, *sb)
        if b_init:
            g.save(name, [node(op, ["a", "b"], ["y"])], [("a", a)], [("y", F)], inits=[g.init("b", b)])
        else:
            g.save(name, [node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)], [("y", F)])

    # --- MatMul / Gemm
    r = g.rng("matmul_2d")
    g.save("matmul_2d", [node("MatMul", ["a", "b"], ["y"])], [("a", g.f(r, 3, 7))], [("y", F)],
           inits=[g.init("b", g.f(r, 7, 5))])
    r = g.rng("matmul_batched")
    g.save("matmul_batched", [node("MatMul", ["a", "b"], ["y"])],
           [("a", g.f(r, 2, 3, 4, 5)), ("b", g.f(r, 2, 3, 5, 6))], [("y", F)])
    r = g.rng("matmul_broadcast")
    g.save("matmul_broadcast", [node("MatMul", ["a", "b"], ["y"])],
           [("a", g.f(r, 2, 1, 4, 5)), ("b", g.f(r, 3, 5, 6))], [("y", F)])
    r = g.rng("matmul_weight_3d")
    g.save("matmul_weight_3d", [node("MatMul", ["a", "b"], ["y"])], [("a", g.f(r, 2, 5, 33))], [("y", F)],
           inits=[g.init("b", g.f(r, 33, 17))])
    r = g.rng("matmul_vec")
    g.save("matmul_vec", [node("MatMul", ["a", "b"], ["y"])], [("a", g.f(r, 6)), ("b", g.f(r, 2, 6, 4))], [("y", F)])
    r = g.rng("gemm")
    g.save("gemm", [node("Gemm", ["a", "b", "c"], ["y"])], [("a", g.f(r, 4, 6))], [("y", F)],
           inits=[g.init("b", g.f(r, 6, 5)), g.init("c", g.f(r, 5))])
    r = g.rng("gemm_trans_alpha_beta")
    g.save("gemm_trans_alpha_beta",
           [node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
           [("a", g.f(r, 6, 4)), ("c", g.f(r, 4, 1))], [("y", F)], inits=[g.init("b", g.f(r, 5, 6))])
    r = g.rng("gemm_no_c")
    g.save("gemm_no_c", [node("Gemm", ["a", "b"], ["y"], transB=1)], [("a", g.f(r, 3, 8))], [("y", F)],
           inits=[g.init("b", g.f(r, 9, 8))])

    # --- elementwise binary (numpy broadcasting)
    binary("Add", "add_broadcast", (2, 3, 4), (4,))
    binary("Add", "add_scalar", (3, 4), (), b_init=True)
    binary("Sub", "sub_broadcast", (2, 1, 4), (3, 1))
    binary("Mul", "mul", (2, 3, 4), (2, 3, 4))
    binary("Mul", "mul_broadcast_both", (4, 1, 5), (1, 3, 1))
    binary("Div", "div", (3, 4), (1, 4), positive_b=True)
    r = g.rng("pow")
    g.save("pow", [node("Pow", ["a", "b"], ["y"])], [("a", g.pos(r, 3, 4)), ("b", g.f(r, 3, 4))], [("y", F)])
    r = g.rng("pow_square")
    g.save("pow_square", [node("Pow", ["a", "b"], ["y"])], [("a", g.f(r, 2, 5))], [("y", F)],
           inits=[g.init("b", np.array(2.0, dtype=np.float32))])
    r = g.rng("pow_sqrt")
    g.save("pow_sqrt", [node("Pow", ["a", "b"], ["y"])], [("a", g.pos(r, 2, 5))], [("y", F)],
           inits=[g.init("b", np.array([0.5], dtype=np.float32))])

    # --- elementwise unary
    unary("Neg")
    unary("Abs")
    unary("Sqrt", positive=True)
    unary("Exp")
    unary("Log", positive=True)
    unary("Erf")
    unary("Relu")
    unary("Sigmoid", shape=(3, 37))
    unary("Tanh", shape=(3, 37))
    unary("Identity")
    unary("Gelu", opset=20, shape=(3, 37))
    unary("Gelu", name="gelu_tanh", opset=20, shape=(3, 37), approximate="tanh")

    # --- softmax family (opset 13: one axis)
    unary("Softmax", name="softmax", shape=(2, 3, 10), axis=-1)
    unary("Softmax", name="softmax_axis1", shape=(2, 3, 10), axis=1)
    unary("LogSoftmax", name="logsoftmax", shape=(2, 3, 10), axis=-1)
    unary("LogSoftmax", name="logsoftmax_axis0", shape=(4, 5), axis=0)

    # --- normalisation
    r = g.rng("layernorm")
    g.save("layernorm", [node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)],
           [("x", g.f(r, 2, 5, 64))], [("y", F)], inits=[g.init("s", g.f(r, 64)), g.init("b", g.f(r, 64))],
           opset=17)
    r = g.rng("layernorm_axis1")
    g.save("layernorm_axis1", [node("LayerNormalization", ["x", "s"], ["y"], axis=1, epsilon=1e-3)],
           [("x", g.f(r, 2, 3, 4))], [("y", F)], inits=[g.init("s", g.f(r, 3, 4))], opset=17)
    r = g.rng("batchnorm")
    g.save("batchnorm", [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)],
           [("x", g.f(r, 2, 3, 4, 4))], [("y", F)],
           inits=[g.init("s", g.f(r, 3)), g.init("b", g.f(r, 3)), g.init("m", g.f(r, 3)),
                  g.init("v", g.pos(r, 3))])

    # --- Conv (2-D)
    def conv(name, xs, ws, bias=True, **attrs):
        r = g.rng(name)
        inits = [g.init("w", g.f(r, *ws, lo=-0.5, hi=0.5))]
        ins = ["x", "w"]
        if bias:
            inits.append(g.init("b", g.f(r, ws[0])))
            ins.append("b")
        g.save(name, [node("Conv", ins, ["y"], **attrs)], [("x", g.f(r, *xs))], [("y", F)], inits=inits)

    conv("conv", (1, 3, 8, 8), (4, 3, 3, 3), pads=[1, 1, 1, 1])
    conv("conv_strided_groups", (2, 4, 9, 9), (6, 2, 3, 3), group=2, strides=[2, 2], pads=[1, 0, 1, 0])
    conv("conv_dilated", (1, 2, 10, 10), (3, 2, 3, 3), bias=False, dilations=[2, 2])
    conv("conv_depthwise", (1, 4, 7, 7), (4, 1, 3, 3), group=4, pads=[1, 1, 1, 1])
    conv("conv_1x1", (2, 8, 5, 5), (16, 8, 1, 1))
    conv("conv_same_upper", (1, 3, 7, 7), (2, 3, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2])
    conv("conv_rect", (1, 2, 6, 9), (3, 2, 2, 4), strides=[1, 2], pads=[0, 1, 1, 2])

    # --- pooling
    def pool(op, name, xs, **attrs):
        r = g.rng(name)
        g.save(name, [node(op, ["x"], ["y"], **attrs)], [("x", g.f(r, *xs))], [("y", F)])

    pool("MaxPool", "maxpool", (1, 2, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
    pool("MaxPool", "maxpool_pads", (2, 3, 9, 9), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    pool("MaxPool", "maxpool_ceil", (1, 1, 7, 7), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    pool("AveragePool", "averagepool", (1, 2, 6, 6), kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    pool("AveragePool", "averagepool_include_pad", (1, 2, 6, 6), kernel_shape=[3, 3], strides=[2, 2],
         pads=[1, 1, 1, 1], count_include_pad=1)
    pool("AveragePool", "averagepool_nopad", (2, 3, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
    pool("GlobalAveragePool", "globalaveragepool", (2, 3, 5, 5))

    # --- shape ops
    def shaped(name, nodes, inputs, outputs=(("y", F),), inits=(), opset=13):
        g.save(name, nodes, inputs, list(outputs), inits=inits, opset=opset)

    r = g.rng("reshape")
    shaped("reshape", [node("Reshape", ["x", "s"], ["y"])], [("x", g.f(r, 2, 3, 4))],
           inits=[g.init("s", g.i64([0, -1]))])
    r = g.rng("reshape_input_shape")
    shaped("reshape_input_shape", [node("Reshape", ["x", "s"], ["y"])],
           [("x", g.f(r, 2, 3, 4)), ("s", g.i64([4, -1, 2]))])
    r = g.rng("transpose")
    shaped("transpose", [node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])], [("x", g.f(r, 2, 3, 4, 5))])
    r = g.rng("transpose_default")
    shaped("transpose_default", [node("Transpose", ["x"], ["y"])], [("x", g.f(r, 2, 3, 4))])
    r = g.rng("flatten")
    shaped("flatten", [node("Flatten", ["x"], ["y"])], [("x", g.f(r, 2, 3, 4, 5))])
    r = g.rng("flatten_neg_axis")
    shaped("flatten_neg_axis", [node("Flatten", ["x"], ["y"], axis=-2)], [("x", g.f(r, 2, 3, 4, 5))])
    r = g.rng("flatten_axis0")
    shaped("flatten_axis0", [node("Flatten", ["x"], ["y"], axis=0)], [("x", g.f(r, 2, 3, 4))])
    r = g.rng("squeeze")
    shaped("squeeze", [node("Squeeze", ["x", "a"], ["y"])], [("x", g.f(r, 2, 1, 4, 1))],
           inits=[g.init("a", g.i64([-1, 1]))])
    r = g.rng("squeeze_all")
    shaped("squeeze_all", [node("Squeeze", ["x"], ["y"])], [("x", g.f(r, 1, 3, 1, 2))])
    r = g.rng("unsqueeze")
    shaped("unsqueeze", [node("Unsqueeze", ["x", "a"], ["y"])], [("x", g.f(r, 3, 4))],
           inits=[g.init("a", g.i64([0, -1]))])
    r = g.rng("concat")
    shaped("concat", [node("Concat", ["a", "b", "c"], ["y"], axis=-1)],
           [("a", g.f(r, 2, 3, 1)), ("b", g.f(r, 2, 3, 4)), ("c", g.f(r, 2, 3, 2))])
    r = g.rng("concat_axis0_int")
    shaped("concat_axis0_int", [node("Concat", ["a", "b"], ["y"], axis=0)],
           [("a", g.i64([[1, 2], [3, 4]])), ("b", g.i64([[5, 6]]))], outputs=[("y", TP.INT64)])
    r = g.rng("split")
    shaped("split", [node("Split", ["x", "s"], ["y0", "y1"], axis=1)], [("x", g.f(r, 2, 6, 3))],
           outputs=[("y0", F), ("y1", F)], inits=[g.init("s", g.i64([2, 4]))])
    r = g.rng("split_equal")
    shaped("split_equal", [node("Split", ["x"], ["y0", "y1", "y2"], axis=-1)], [("x", g.f(r, 2, 9))],
           outputs=[("y0", F), ("y1", F), ("y2", F)])
    r = g.rng("split_num_outputs")
    shaped("split_num_outputs", [node("Split", ["x"], ["y0", "y1", "y2"], axis=0, num_outputs=3)],
           [("x", g.f(r, 7, 2))], outputs=[("y0", F), ("y1", F), ("y2", F)], opset=18)
    r = g.rng("slice")
    shaped("slice", [node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [("x", g.f(r, 4, 6, 5))],
           inits=[g.init("st", g.i64([1, -1])), g.init("en", g.i64([5, 0])), g.init("ax", g.i64([1, -1])),
                  g.init("sp", g.i64([2, -2]))])
    r = g.rng("slice_clamp")
    shaped("slice_clamp", [node("Slice", ["x", "st", "en"], ["y"])], [("x", g.f(r, 3, 4))],
           inits=[g.init("st", g.i64([1, -100])), g.init("en", g.i64([2**63 - 1, 3]))])
    r = g.rng("slice_runtime")
    shaped("slice_runtime", [node("Slice", ["x", "st", "en", "ax"], ["y"])],
           [("x", g.f(r, 5, 6)), ("st", g.i64([1])), ("en", g.i64([-1]))], inits=[g.init("ax", g.i64([0]))])
    r = g.rng("gather")
    shaped("gather", [node("Gather", ["t", "i"], ["y"], axis=0)], [("i", g.i64([[0, 3, 9], [-1, 2, 2]]))],
           inits=[g.init("t", g.f(r, 10, 8))])
    r = g.rng("gather_axis1")
    shaped("gather_axis1", [node("Gather", ["x", "i"], ["y"], axis=1)],
           [("x", g.f(r, 2, 5, 3)), ("i", g.i64([4, 0, -2]))])
    r = g.rng("gather_scalar")
    shaped("gather_scalar", [node("Gather", ["x", "i"], ["y"], axis=-1)],
           [("x", g.f(r, 3, 4)), ("i", np.array(2, dtype=np.int64))])
    r = g.rng("gather_int32_idx")
    shaped("gather_int32_idx", [node("Gather", ["x", "i"], ["y"])],
           [("x", g.f(r, 6, 2)), ("i", np.array([5, 1, -6], dtype=np.int32))])
    r = g.rng("cast_float_to_int64")
    shaped("cast_float_to_int64", [node("Cast", ["x"], ["y"], to=TP.INT64)], [("x", g.f(r, 3, 5, lo=-9, hi=9))],
           outputs=[("y", TP.INT64)])
    shaped("cast_int64_to_float", [node("Cast", ["x"], ["y"], to=TP.FLOAT)],
           [("x", g.i64([[-3, 0, 7], [1 << 20, 5, -1]]))])
    shaped("cast_int64_to_int32", [node("Cast", ["x"], ["y"], to=TP.INT32)], [("x", g.i64([-3, 0, 7, 123456]))],
           outputs=[("y", TP.INT32)])
    shaped("cast_bool_to_float", [node("Cast", ["x"], ["y"], to=TP.FLOAT)],
           [("x", np.array([[True, False], [False, True]]))])
    shaped("cast_float_to_bool", [node("Cast", ["x"], ["y"], to=TP.BOOL)],
           [("x", np.array([0.0, -0.5, 2.0, 0.0], dtype=np.float32))], outputs=[("y", TP.BOOL)])
    r = g.rng("shape")
    shaped("shape", [node("Shape", ["x"], ["y"])], [("x", g.f(r, 2, 3, 4))], outputs=[("y", TP.INT64)])
    r = g.rng("shape_start_end")
    shaped("shape_start_end", [node("Shape", ["x"], ["y"], start=1, end=-1)], [("x", g.f(r, 2, 3, 4, 5))],
           outputs=[("y", TP.INT64)], opset=15)
    r = g.rng("constant")
    shaped("constant", [node("Constant", [], ["c"], value=g.init("cv", g.f(r, 3, 4))),
                        node("Add", ["x", "c"], ["y"])], [("x", g.f(r, 3, 4))])
    r = g.rng("constant_value_float")
    shaped("constant_value_float", [node("Constant", [], ["c"], value_float=2.5),
                                    node("Mul", ["x", "c"], ["y"])], [("x", g.f(r, 3, 4))])
    r = g.rng("constant_value_ints")
    shaped("constant_value_ints", [node("Constant", [], ["c"], value_ints=[4, 3]),
                                   node("Reshape", ["x", "c"], ["y"])], [("x", g.f(r, 3, 4))])
    shaped("constantofshape", [node("ConstantOfShape", ["s"], ["y"],
                                    value=g.init("v", np.array([1.5], dtype=np.float32)))],
           [("s", g.i64([2, 3, 1]))])
    r = g.rng("constantofshape_from_shape")
    shaped("constantofshape_from_shape", [node("Shape", ["x"], ["s"]),
                                          node("ConstantOfShape", ["s"], ["z"],
                                               value=g.init("v", g.i64([7]))),
                                          node("Cast", ["z"], ["zf"], to=TP.FLOAT),
                                          node("Add", ["x", "zf"], ["y"])], [("x", g.f(r, 2, 3))])
    shaped("constantofshape_default", [node("ConstantOfShape", ["s"], ["y"])], [("s", g.i64([4]))])
    r = g.rng("where")
    shaped("where", [node("Where", ["c", "a", "b"], ["y"])],
           [("c", r.random((2, 1, 4)) > 0.5), ("a", g.f(r, 2, 3, 4)), ("b", g.f(r, 4))])
    r = g.rng("equal")
    shaped("equal", [node("Equal", ["a", "b"], ["y"])],
           [("a", r.integers(0, 3, size=(3, 4)).astype(np.int64)), ("b", r.integers(0, 3, size=(4,)).astype(np.int64))],
           outputs=[("y", TP.BOOL)])
    shaped("equal_float", [node("Equal", ["a", "b"], ["y"])],
           [("a", np.array([[1.0, 2.0, 3.5], [0.0, -1.0, 2.0]], dtype=np.float32)),
            ("b", np.array([1.0, 2.5, 3.5], dtype=np.float32))], outputs=[("y", TP.BOOL)])
    r = g.rng("reducemean")
    shaped("reducemean", [node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)], [("x", g.f(r, 2, 3, 8))])
    r = g.rng("reducemean_axes_input")
    shaped("reducemean_axes_input", [node("ReduceMean", ["x", "a"], ["y"], keepdims=0)],
           [("x", g.f(r, 2, 3, 4))], inits=[g.init("a", g.i64([0, -1]))], opset=18)
    r = g.rng("reducemean_all")
    shaped("reducemean_all", [node("ReduceMean", ["x"], ["y"], keepdims=0)], [("x", g.f(r, 3, 5))])
    r = g.rng("reducesum")
    shaped("reducesum", [node("ReduceSum", ["x", "a"], ["y"], keepdims=0)], [("x", g.f(r, 2, 3, 4))],
           inits=[g.init("a", g.i64([1]))])
    r = g.rng("reducesum_all_keepdims")
    shaped("reducesum_all_keepdims", [node("ReduceSum", ["x"], ["y"], keepdims=1)], [("x", g.f(r, 2, 3, 4))])
    r = g.rng("reducesum_noop_empty_axes")
    shaped("reducesum_noop_empty_axes", [node("ReduceSum", ["x", "a"], ["y"], noop_with_empty_axes=1)],
           [("x", g.f(r, 2, 3)), ("a", np.zeros((0,), dtype=np.int64))])
    r = g.rng("argmax")
    shaped("argmax", [node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], [("x", g.f(r, 2, 5, 3))],
           outputs=[("y", TP.INT64)])
    r = g.rng("argmax_neg_axis_keepdims")
    shaped("argmax_neg_axis_keepdims", [node("ArgMax", ["x"], ["y"], axis=-1)], [("x", g.f(r, 4, 7))],
           outputs=[("y", TP.INT64)])
    shaped("argmax_ties_last", [node("ArgMax", ["x"], ["y"], axis=0, select_last_index=1)],
           [("x", np.array([[1, 5], [3, 5], [3, 2]], dtype=np.float32))], outputs=[("y", TP.INT64)])
    r = g.rng("topk")
    shaped("topk", [node("TopK", ["x", "k"], ["v", "i"], axis=-1)], [("x", g.f(r, 3, 10))],
           outputs=[("v", F), ("i", TP.INT64)], inits=[g.init("k", g.i64([3]))])
    r = g.rng("topk_smallest_axis0")
    shaped("topk_smallest_axis0", [node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)],
           [("x", g.f(r, 6, 4)), ("k", g.i64([2]))], outputs=[("v", F), ("i", TP.INT64)])


def whole_models(g):
    np, h, TP = g.np, g.h, g.TP
    F = TP.FLOAT
    node = h.make_node
    # The seeds' `add` servable: y = x1 + x2, float32 [2, 2].
    r = g.rng("add")
    g.save("add", [node("Add", ["x1", "x2"], ["y"])], [("x1", g.f(r, 2, 2)), ("x2", g.f(r, 2, 2))], [("y", F)])
    # The seeds' `matmul`: y = -(x · W), W [96, 16] all 0.5.
    r = g.rng("matmul")
    g.save("matmul", [node("MatMul", ["x", "w"], ["xw"]), node("Neg", ["xw"], ["y"])],
           [("x", g.f(r, 128, 96))], [("y", F)], inits=[g.init("w", np.full((96, 16), 0.5, dtype=np.float32))])
    mlp(g, "mlp", [784, 256, 10], batch=3)
    cnn(g, "cnn", batch=2)
    encoder(g, "bert", hidden=64, heads=4, ffn=256, layers=2, vocab=100, max_pos=32, batch=2, seq=16)


def bench_models(g):
    mlp(g, "mlp_4096", [4096, 4096, 4096, 4096], batch=None)
    encoder(g, "bert_768", hidden=768, heads=12, ffn=3072, layers=2, vocab=1000, max_pos=512, batch=None,
            seq=None)
    cnn(g, "cnn_bench", batch=None)


def dense_init(g, r, fan_in, fan_out):
    lim = 1.0 / math.sqrt(fan_in)
    return r.uniform(-lim, lim, size=(fan_in, fan_out)).astype(g.np.float32)


def mlp(g, name, sizes, batch):
    """Gemm (transB, as PyTorch exports Linear) for the first layer, then
    MatMul+Add for the rest; ReLU between; dynamic batch."""
    h, TP = g.h, g.TP
    r = g.rng(name)
    nodes, inits = [], []
    cur = "x"
    for i in range(len(sizes) - 1):
        w = dense_init(g, r, sizes[i], sizes[i + 1])
        b = g.f(r, sizes[i + 1], lo=-0.1, hi=0.1)
        out = "h%d" % i if i + 2 < len(sizes) else "logits"
        if i == 0:
            inits += [g.init("w%d" % i, g.np.ascontiguousarray(w.T)), g.init("b%d" % i, b)]
            nodes.append(h.make_node("Gemm", [cur, "w%d" % i, "b%d" % i], [out + "_pre" if out != "logits" else out],
                                     transB=1))
        else:
            inits += [g.init("w%d" % i, w), g.init("b%d" % i, b)]
            nodes.append(h.make_node("MatMul", [cur, "w%d" % i], ["mm%d" % i]))
            nodes.append(h.make_node("Add", ["mm%d" % i, "b%d" % i], [out + "_pre" if out != "logits" else out]))
        if out != "logits":
            nodes.append(h.make_node("Relu", [out + "_pre"], [out]))
        cur = out
    x = g.f(r, batch or 1, sizes[0], lo=0, hi=1)
    if batch is None:
        save_no_inputs(g, name, nodes, [("x", x)], [("logits", TP.FLOAT)], inits, 13, {"x": ["batch", sizes[0]]})
    else:
        g.save(name, nodes, [("x", x)], [("logits", TP.FLOAT)], inits=inits, dims={"x": ["batch", sizes[0]]})


def save_no_inputs(g, name, nodes, inputs, outputs, inits, opset, dims):
    """A benchmark model: the model only (bench-onnx makes its own inputs)."""
    g.save(name, nodes, inputs, outputs, inits=inits, opset=opset, dims=dims)
    for n, _ in inputs:
        os.remove(os.path.join(g.out, "%s.in.%s.npy" % (name, n)))


def cnn(g, name, batch):
    """MNIST-sized: Conv(8,3x3,pad 1)→Relu→MaxPool 2→Conv(16,3x3,pad 1)→Relu→
    MaxPool 2→Flatten→Gemm(10); input [batch, 1, 28, 28]."""
    h, TP = g.h, g.TP
    r = g.rng(name)
    inits = [
        g.init("c1w", r.uniform(-1 / 3, 1 / 3, size=(8, 1, 3, 3)).astype(g.np.float32)),
        g.init("c1b", g.f(r, 8, lo=-0.1, hi=0.1)),
        g.init("c2w", r.uniform(-1 / 8.5, 1 / 8.5, size=(16, 8, 3, 3)).astype(g.np.float32)),
        g.init("c2b", g.f(r, 16, lo=-0.1, hi=0.1)),
        g.init("fcw", g.np.ascontiguousarray(dense_init(g, r, 16 * 7 * 7, 10).T)),
        g.init("fcb", g.f(r, 10, lo=-0.1, hi=0.1)),
    ]
    n = h.make_node
    nodes = [
        n("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        n("Relu", ["c2"], ["r2"]),
        n("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Flatten", ["p2"], ["flat"], axis=1),
        n("Gemm", ["flat", "fcw", "fcb"], ["logits"], transB=1),
    ]
    x = g.f(r, batch or 1, 1, 28, 28, lo=0, hi=1)
    dims = {"x": ["batch", 1, 28, 28]}
    if batch is None:
        save_no_inputs(g, name, nodes, [("x", x)], [("logits", TP.FLOAT)], inits, 13, dims)
    else:
        g.save(name, nodes, [("x", x)], [("logits", TP.FLOAT)], inits=inits, dims=dims)


def encoder(g, name, hidden, heads, ffn, layers, vocab, max_pos, batch, seq):
    """A BERT-style encoder from primitive ops, the way exporters write it:
    word + position embeddings (the position table sliced to the sequence
    length through Shape→Gather→Unsqueeze), LayerNormalization, per layer
    MatMul+Add for Q/K/V, Reshape to heads with a shape built by
    Shape→Gather→Unsqueeze→Concat, Q·Kᵀ / sqrt(d) + mask, Softmax, ·V, back
    to [B, S, H], output projection, residual, LayerNorm, an Erf-based GELU
    FFN, residual, LayerNorm; then a pooler (first token → Gemm → Tanh).
    Inputs input_ids and attention_mask (int64 [batch, sequence])."""
    np, h, TP = g.np, g.h, g.TP
    r = g.rng(name)
    n = h.make_node
    dh = hidden // heads
    nodes, inits = [], []

    def const(nm, arr):
        inits.append(g.init(nm, arr))
        return nm

    def w(nm, *shape, scale=None):
        s = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        return const(nm, r.uniform(-s, s, size=shape).astype(np.float32))

    def layernorm(x, out, tag):
        const(tag + "_g", (1.0 + 0.1 * r.standard_normal(hidden)).astype(np.float32))
        const(tag + "_b", (0.1 * r.standard_normal(hidden)).astype(np.float32))
        nodes.append(n("LayerNormalization", [x, tag + "_g", tag + "_b"], [out], axis=-1, epsilon=1e-12))

    def linear(x, out, nin, nout, tag):
        w(tag + "_w", nin, nout)
        const(tag + "_b", (0.05 * r.standard_normal(nout)).astype(np.float32))
        nodes.append(n("MatMul", [x, tag + "_w"], [tag + "_mm"]))
        nodes.append(n("Add", [tag + "_mm", tag + "_b"], [out]))

    const("i0", np.array(0, dtype=np.int64))
    const("i1", np.array(1, dtype=np.int64))
    const("ax0", np.array([0], dtype=np.int64))
    const("heads_dh", np.array([heads, dh], dtype=np.int64))
    const("hid", np.array([hidden], dtype=np.int64))
    const("one_f", np.array(1.0, dtype=np.float32))
    const("neg_big", np.array(-10000.0, dtype=np.float32))
    const("sqrt_d", np.array(math.sqrt(dh), dtype=np.float32))
    const("half", np.array(0.5, dtype=np.float32))
    const("inv_sqrt2", np.array(1 / math.sqrt(2), dtype=np.float32))
    const("mask_axes", np.array([1, 2], dtype=np.int64))

    # Dynamic sizes: batch and sequence length from input_ids' shape.
    nodes += [
        n("Shape", ["input_ids"], ["ids_shape"]),
        n("Gather", ["ids_shape", "i0"], ["B"], axis=0),
        n("Gather", ["ids_shape", "i1"], ["S"], axis=0),
        n("Unsqueeze", ["B", "ax0"], ["B1"]),
        n("Unsqueeze", ["S", "ax0"], ["S1"]),
        n("Concat", ["B1", "S1", "heads_dh"], ["heads_shape"], axis=0),
        n("Concat", ["B1", "S1", "hid"], ["hidden_shape"], axis=0),
    ]
    # Embeddings.
    w("word_emb", vocab, hidden, scale=0.5)
    w("pos_emb", max_pos, hidden, scale=0.5)
    nodes += [
        n("Gather", ["word_emb", "input_ids"], ["we"], axis=0),
        n("Slice", ["pos_emb", "ax0", "S1", "ax0"], ["pe"]),
        n("Add", ["we", "pe"], ["emb"]),
    ]
    layernorm("emb", "x0", "emb_ln")
    # Mask: (1 - mask) * -10000 as [B, 1, 1, S].
    nodes += [
        n("Unsqueeze", ["attention_mask", "mask_axes"], ["m4"]),
        n("Cast", ["m4"], ["m4f"], to=TP.FLOAT),
        n("Sub", ["one_f", "m4f"], ["m_inv"]),
        n("Mul", ["m_inv", "neg_big"], ["mask_add"]),
    ]
    x = "x0"
    for li in range(layers):
        p = "l%d_" % li
        for t in ("q", "k", "v"):
            linear(x, p + t, hidden, hidden, p + t)
            nodes.append(n("Reshape", [p + t, "heads_shape"], [p + t + "_h"]))
        nodes += [
            n("Transpose", [p + "q_h"], [p + "qt"], perm=[0, 2, 1, 3]),
            n("Transpose", [p + "k_h"], [p + "kt"], perm=[0, 2, 3, 1]),
            n("Transpose", [p + "v_h"], [p + "vt"], perm=[0, 2, 1, 3]),
            n("MatMul", [p + "qt", p + "kt"], [p + "scores"]),
            n("Div", [p + "scores", "sqrt_d"], [p + "scaled"]),
            n("Add", [p + "scaled", "mask_add"], [p + "masked"]),
            n("Softmax", [p + "masked"], [p + "probs"], axis=-1),
            n("MatMul", [p + "probs", p + "vt"], [p + "ctx"]),
            n("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3]),
            n("Reshape", [p + "ctx_t", "hidden_shape"], [p + "ctx_r"]),
        ]
        linear(p + "ctx_r", p + "attn", hidden, hidden, p + "o")
        nodes.append(n("Add", [p + "attn", x], [p + "res1"]))
        layernorm(p + "res1", p + "x1", p + "ln1")
        linear(p + "x1", p + "f1", hidden, ffn, p + "ffn1")
        # GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt 2)).
        nodes += [
            n("Mul", [p + "f1", "inv_sqrt2"], [p + "g_s"]),
            n("Erf", [p + "g_s"], [p + "g_e"]),
            n("Add", [p + "g_e", "one_f"], [p + "g_1"]),
            n("Mul", [p + "f1", p + "g_1"], [p + "g_m"]),
            n("Mul", [p + "g_m", "half"], [p + "gelu"]),
        ]
        linear(p + "gelu", p + "f2", ffn, hidden, p + "ffn2")
        nodes.append(n("Add", [p + "f2", p + "x1"], [p + "res2"]))
        out = p + "out" if li + 1 < layers else "last_hidden_state"
        layernorm(p + "res2", out, p + "ln2")
        x = out
    # Pooler: the first token through Gemm and Tanh.
    w("pool_w", hidden, hidden)
    const("pool_b", (0.05 * r.standard_normal(hidden)).astype(np.float32))
    nodes += [
        n("Gather", [x, "i0"], ["first"], axis=1),
        n("Gemm", ["first", "pool_w", "pool_b"], ["pool_pre"]),
        n("Tanh", ["pool_pre"], ["pooler_output"]),
    ]
    b, s = batch or 1, seq or 128
    ids = r.integers(0, min(vocab, 100), size=(b, s)).astype(np.int64)
    mask = np.ones((b, s), dtype=np.int64)
    if b > 1:
        mask[1, s - s // 4:] = 0  # the second sequence is padded
    ins = [("input_ids", ids), ("attention_mask", mask)]
    dims = {"input_ids": ["batch", "sequence"], "attention_mask": ["batch", "sequence"]}
    outs = [("last_hidden_state", TP.FLOAT), ("pooler_output", TP.FLOAT)]
    if batch is None:
        save_no_inputs(g, name, nodes, ins, outs, inits, 17, dims)
    else:
        g.save(name, nodes, ins, outs, inits=inits, opset=17, dims=dims)


if __name__ == "__main__":
    sys.exit(main())

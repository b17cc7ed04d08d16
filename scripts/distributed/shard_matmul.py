#!/usr/bin/env python3
"""Cuts an ONNX model's first MatMul into column shards for a distributed servable.

Rank r of a stage of P ranks gets columns [r*N/P, (r+1)*N/P) of the MatMul's
constant weight [K, N] and a cairn.AllGather along the last axis, so every
rank of the stage holds the whole product again; the rest of the graph runs
after it. With --stage-size 2 the first stage ends at the gathered product
and the second stage's ranks run the rest of the graph on it. Files go to
OUT/device<rank>/<name>, MindSpore Serving's layout for agents' model files.

    shard_matmul.py model.onnx --rank-size 8 --stage-size 1 --out model/
    shard_matmul.py --seed-model matmul.onnx    # the seeds' MatMul(128x96 . 96x16, 0.5) + Neg

Needs Debian's python3-onnx and python3-numpy (/usr/bin/python3).
"""

import argparse
import copy
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def seed_model(path):
    """The MindSpore Serving example's network: y = -(x . W), W = 0.5 of [96, 16]."""
    w = numpy_helper.from_array(np.full((96, 16), 0.5, np.float32), "matmul_weight")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "matmul_weight"], ["matmul_out"], name="matmul"),
         helper.make_node("Neg", ["matmul_out"], ["y"], name="neg")],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 16])], [w])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def save(model, path):
    model.ir_version = 8
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx.save(model, path)


def with_cairn_opset(model):
    if not any(o.domain == "cairn" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("cairn", 1))
    return model


def find_matmul(graph):
    inits = {t.name: t for t in graph.initializer}
    for i, node in enumerate(graph.node):
        if node.op_type == "MatMul" and node.domain in ("", "ai.onnx") and node.input[1] in inits:
            w = numpy_helper.to_array(inits[node.input[1]])
            if w.ndim == 2:
                return i, node, w
    raise SystemExit("shard_matmul: no MatMul with a constant 2-d weight in the model")


def shard(model, rank_size, stage_size, out_dir, name):
    if stage_size not in (1, 2):
        raise SystemExit("shard_matmul: --stage-size is 1 or 2 with this helper")
    if rank_size % stage_size:
        raise SystemExit("shard_matmul: --stage-size must divide --rank-size")
    per_stage = rank_size // stage_size
    g = model.graph
    index, mm, w = find_matmul(g)
    k, n = w.shape
    if n % per_stage:
        raise SystemExit("shard_matmul: the weight's %d columns do not split over %d ranks" % (n, per_stage))
    cols = n // per_stage
    product = mm.output[0]
    x_info = next((v for v in g.input if v.name == mm.input[0]), None)
    files = []
    for rank in range(rank_size):
        stage, pos = divmod(rank, per_stage)
        m = with_cairn_opset(copy.deepcopy(model))
        mg = m.graph
        if stage == 0:
            # The shard, its MatMul, and the gather back to the whole product.
            for t in mg.initializer:
                if t.name == mm.input[1]:
                    t.CopyFrom(numpy_helper.from_array(
                        np.ascontiguousarray(w[:, pos * cols:(pos + 1) * cols]), t.name))
            node = mg.node[index]
            node.output[0] = product + "__shard"
            gather = helper.make_node("AllGather", [product + "__shard"], [product], domain="cairn",
                                      name="gather_" + product, axis=-1)
            mg.node.insert(index + 1, gather)
            if stage_size == 2:
                # The first stage ends at the gathered product.
                keep = list(mg.node)[:index + 2]
                del mg.node[:]
                mg.node.extend(keep)
                del mg.output[:]
                dims = [d.dim_value if d.HasField("dim_value") else -1
                        for d in x_info.type.tensor_type.shape.dim][:-1] if x_info else [-1]
                mg.output.append(helper.make_tensor_value_info(
                    product, TensorProto.FLOAT, [d if d >= 0 else None for d in dims] + [n]))
        else:
            # The rest of the graph, on the product.
            rest = list(mg.node)[index + 1:]
            del mg.node[:]
            mg.node.extend(rest)
            used = {i for nd in rest for i in nd.input}
            keep = [t for t in mg.initializer if t.name in used]
            del mg.initializer[:]
            mg.initializer.extend(keep)
            dims = [d.dim_value if d.HasField("dim_value") else -1
                    for d in x_info.type.tensor_type.shape.dim][:-1] if x_info else [-1]
            del mg.input[:]
            mg.input.append(helper.make_tensor_value_info(
                product, TensorProto.FLOAT, [d if d >= 0 else None for d in dims] + [n]))
        path = os.path.join(out_dir, "device%d" % rank, name)
        save(m, path)
        files.append(path)
    return files


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?")
    p.add_argument("--rank-size", type=int, default=8)
    p.add_argument("--stage-size", type=int, default=1)
    p.add_argument("--out", default="model")
    p.add_argument("--name", help="file name in each device folder (default: the model's)")
    p.add_argument("--seed-model", metavar="PATH", help="write the seeds' MatMul model to PATH and exit")
    a = p.parse_args(argv)
    if a.seed_model:
        seed_model(a.seed_model)
        return 0
    if not a.model:
        p.error("a model file is required")
    files = shard(onnx.load(a.model), a.rank_size, a.stage_size, a.out, a.name or os.path.basename(a.model))
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

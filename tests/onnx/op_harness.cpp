// tests/onnx/op_harness.cpp — see op_harness.h.
#include "op_harness.h"

#include <cstdlib>
#include <memory>

namespace cairn::onnx::harness {

Attribute attr_int(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = v;
  return a;
}
Attribute attr_ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute attr_float(double v) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.f = v;
  return a;
}
Attribute attr_string(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::String;
  a.s = std::move(v);
  return a;
}
Attribute attr_tensor(values::Tensor t) {
  Attribute a;
  a.kind = Attribute::Kind::Tensor;
  a.tensor = std::make_shared<values::Tensor>(std::move(t));
  return a;
}

Node make_node(const std::string& op, size_t n_in, size_t n_out, Attrs attrs, int64_t opset) {
  Node n;
  n.name = op + "_0";
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back("out" + std::to_string(i));
  n.attributes = std::move(attrs);
  return n;
}

ThreadPool& op_pool() {
  static ThreadPool p(2);
  return p;
}

Result<std::vector<values::Tensor>> run_op_node(Node node, const std::vector<OpInput>& ins, ThreadPool& pool) {
  for (size_t i = 0; i < ins.size() && i < node.inputs.size(); ++i)
    if (!ins[i].view) node.inputs[i] = "";
  OpFactory f = find_op(node.op_type);
  if (!f) return Status::not_found("no op " + node.op_type);
  std::vector<const TensorView*> constants(ins.size(), nullptr), in_ptrs(ins.size(), nullptr);
  std::vector<TensorInfo> infos(ins.size());
  std::unique_ptr<bool[]> present(new bool[ins.size() + 1]);
  for (size_t i = 0; i < ins.size(); ++i) {
    present[i] = ins[i].view != nullptr;
    if (!ins[i].view) continue;
    in_ptrs[i] = ins[i].view;
    infos[i] = TensorInfo{ins[i].view->dtype, ins[i].view->shape, ins[i].known ? ins[i].view : nullptr};
    if (ins[i].known) constants[i] = ins[i].view;
  }
  CAIRN_ASSIGN_OR_RETURN(auto op, f(NodeContext{node, constants}));
  std::vector<TensorInfo> outs(node.outputs.size());
  CAIRN_RETURN_IF_ERROR(op->infer(infos, std::span<const bool>(present.get(), ins.size()), outs));
  std::vector<values::Tensor> results(outs.size());
  std::vector<TensorView> out_views(outs.size());
  std::vector<TensorView*> out_ptrs(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    auto n = checked_count(outs[i].shape, values::dtype_size(outs[i].dtype));
    if (!n) return n.status();
    results[i].dtype = outs[i].dtype;
    results[i].shape = outs[i].shape;
    results[i].data.assign(size_t(*n) * values::dtype_size(outs[i].dtype), char(0xCD));
    out_views[i] = TensorView{outs[i].dtype, outs[i].shape, results[i].data.data()};
    out_ptrs[i] = &out_views[i];
  }
  const size_t sb = op->scratch_bytes(infos, outs);
  std::unique_ptr<void, decltype(&std::free)> scratch(std::aligned_alloc(64, (sb + 64) / 64 * 64), &std::free);
  if (!scratch) return Status::error("out of memory for " + std::to_string(sb) + " scratch bytes");
  RunArgs args{in_ptrs, out_ptrs, scratch.get(), pool};
  CAIRN_RETURN_IF_ERROR(op->run(args));
  return results;
}

}  // namespace cairn::onnx::harness

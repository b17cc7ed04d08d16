// onnx/ops_collective.cpp — cairn's collective operators (domain "cairn",
// opset 1), for a model cut into shards that run on several agents at once:
//   AllGather(x; axis = 0)   every rank's x concatenated along `axis`, in
//                            rank order (a column-parallel layer's outputs)
//   AllReduce(x; op = "sum") the element-wise sum over ranks (float32; a
//                            row-parallel layer's partial products)
//   Broadcast(x; root = 0)   root's x on every rank
// They run over the session's group (SessionOptions::group); a model using
// them loads only where there is one. Every rank must call them in the same
// order with the same shapes: a rank that disagrees or is gone makes the
// call fail within the group's timeout, on every rank.
#include <cstring>
#include <string>

#include "onnx/op.h"

namespace cairn::onnx {
namespace {

Status bad(std::string message) { return Status::invalid_argument(std::move(message)); }

class CollectiveOp : public Op {
 public:
  explicit CollectiveOp(std::shared_ptr<collective::GroupSlot> slot) : slot_(std::move(slot)) {}

 protected:
  // The group now (it may have been re-formed since the load), or an error.
  Result<collective::Group*> group(const char* op) const {
    collective::Group* g = slot_->get();
    if (!g) return Status::unavailable(std::string(op) + ": this agent is not in a group now");
    return g;
  }
  std::shared_ptr<collective::GroupSlot> slot_;
};

class AllGatherOp final : public CollectiveOp {
 public:
  AllGatherOp(std::shared_ptr<collective::GroupSlot> slot, int64_t axis) : CollectiveOp(std::move(slot)), axis_(axis) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>, std::span<TensorInfo> out) const override {
    CAIRN_ASSIGN_OR_RETURN(collective::Group * g, group("AllGather"));
    const int64_t rank = int64_t(in[0].shape.size());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank)
      return bad("AllGather's axis " + std::to_string(axis_) + " is outside a " + std::to_string(rank) + "-d input");
    out[0].dtype = in[0].dtype;
    out[0].shape = in[0].shape;
    out[0].shape[size_t(axis)] *= g->size();
    auto n = checked_count(out[0].shape, values::dtype_size(in[0].dtype));
    if (!n) return n.status();
    return Status::ok();
  }

  size_t scratch_bytes(std::span<const TensorInfo>, std::span<const TensorInfo> out) const override {
    auto n = checked_count(out[0].shape, values::dtype_size(out[0].dtype));
    return n ? size_t(*n) * values::dtype_size(out[0].dtype) : 0;
  }

  Status run(const RunArgs& args) const override {
    CAIRN_ASSIGN_OR_RETURN(collective::Group * g, group("AllGather"));
    const TensorView& x = *args.in[0];
    TensorView& y = *args.out[0];
    const int64_t rank = int64_t(x.shape.size());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    const size_t esize = values::dtype_size(x.dtype);
    const size_t bytes = size_t(x.count()) * esize;
    // Gathered rank-major into scratch, then interleaved along `axis`:
    // y[outer][r][inner] = gathered[r][outer][inner].
    char* gathered = static_cast<char*>(args.scratch);
    CAIRN_RETURN_IF_ERROR(g->all_gather(x.data, bytes, axis == 0 ? y.data : gathered));
    if (axis == 0 || bytes == 0) return Status::ok();
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.shape[size_t(i)];
    const size_t inner = bytes / size_t(outer);  // bytes of one rank's slice per outer index
    char* out = static_cast<char*>(y.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int r = 0; r < g->size(); ++r)
        std::memcpy(out + (size_t(o) * size_t(g->size()) + size_t(r)) * inner,
                    gathered + size_t(r) * bytes + size_t(o) * inner, inner);
    return Status::ok();
  }

 private:
  int64_t axis_;
};

class AllReduceOp final : public CollectiveOp {
 public:
  using CollectiveOp::CollectiveOp;

  Status infer(std::span<const TensorInfo> in, std::span<const bool>, std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(group("AllReduce").status());
    if (in[0].dtype != DType::Float32)
      return bad(std::string("AllReduce sums float32, got ") + values::dtype_name(in[0].dtype));
    out[0] = TensorInfo{in[0].dtype, in[0].shape, nullptr};
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    CAIRN_ASSIGN_OR_RETURN(collective::Group * g, group("AllReduce"));
    const TensorView& x = *args.in[0];
    TensorView& y = *args.out[0];
    const size_t n = size_t(x.count());
    if (n) std::memcpy(y.data, x.data, n * sizeof(float));
    return g->all_reduce_sum(y.as<float>(), n);
  }
};

class BroadcastOp final : public CollectiveOp {
 public:
  BroadcastOp(std::shared_ptr<collective::GroupSlot> slot, int64_t root) : CollectiveOp(std::move(slot)), root_(root) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>, std::span<TensorInfo> out) const override {
    CAIRN_ASSIGN_OR_RETURN(collective::Group * g, group("Broadcast"));
    if (root_ < 0 || root_ >= g->size())
      return bad("Broadcast's root " + std::to_string(root_) + " is not a rank of a group of " +
                 std::to_string(g->size()));
    out[0] = TensorInfo{in[0].dtype, in[0].shape, nullptr};
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    CAIRN_ASSIGN_OR_RETURN(collective::Group * g, group("Broadcast"));
    const TensorView& x = *args.in[0];
    TensorView& y = *args.out[0];
    const size_t bytes = size_t(x.count()) * values::dtype_size(x.dtype);
    if (bytes) std::memcpy(y.data, x.data, bytes);
    return g->broadcast(y.data, bytes, int(root_));
  }

 private:
  int64_t root_;
};

// The checks every collective's node shares: one input, one output, no
// attribute but `allowed`, and a group to run over.
Status check_collective(const NodeContext& ctx, const char* allowed) {
  const Node& n = ctx.node;
  if (n.inputs.size() != 1 || !n.has_input(0) || n.outputs.size() != 1)
    return bad(n.op_type + " takes one input and gives one output");
  for (const auto& [name, a] : n.attributes)
    if (name != allowed) return bad(n.op_type + " has no attribute '" + name + "'");
  if (!ctx.group)
    return bad("cairn." + n.op_type +
               " runs only in a distributed model's agent (`cairn agent`), where the ranks form a group");
  return Status::ok();
}

Result<std::unique_ptr<Op>> make_all_gather(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_collective(ctx, "axis"));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, ctx.node.get_int("axis", 0));
  return std::unique_ptr<Op>(new AllGatherOp(ctx.group, axis));
}

Result<std::unique_ptr<Op>> make_all_reduce(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_collective(ctx, "op"));
  CAIRN_ASSIGN_OR_RETURN(std::string op, ctx.node.get_string("op", "sum"));
  if (op != "sum") return bad("AllReduce's op is \"" + op + "\"; cairn sums (op \"sum\")");
  return std::unique_ptr<Op>(new AllReduceOp(ctx.group));
}

Result<std::unique_ptr<Op>> make_broadcast(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_collective(ctx, "root"));
  CAIRN_ASSIGN_OR_RETURN(int64_t root, ctx.node.get_int("root", 0));
  return std::unique_ptr<Op>(new BroadcastOp(ctx.group, root));
}

}  // namespace

void add_collective_ops(OpTable& table) {
  table.add("cairn.AllGather", make_all_gather);
  table.add("cairn.AllReduce", make_all_reduce);
  table.add("cairn.Broadcast", make_broadcast);
}

}  // namespace cairn::onnx

// onnx/session.cpp — loads a parsed graph onto operators and runs it.
// At load: one Op per node from its factory, and every node whose inputs are
// all constants run once (folded) so later factories see constant inputs.
// Per set of input shapes (a plan; small integer inputs that decide shapes
// add their values to the key): every tensor's shape, the small values
// computable before running (Shape -> Gather -> Concat -> Reshape chains),
// and one arena where tensors whose lifetimes do not overlap share bytes.
// A run binds the caller's inputs in place, runs the steps and copies the
// outputs out; nothing else is allocated.
#include "onnx/session.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <filesystem>
#include <fstream>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>

#include "onnx/graph.h"
#include "onnx/tensor.h"

namespace cairn::onnx {

namespace {

constexpr size_t kAlign = 64;
// Nodes whose inputs are all known at plan time are run then when their
// outputs are at most this many elements (shape arithmetic, not data).
constexpr int64_t kPlanEvalElems = 64 * 1024;
// Folding at load keeps its outputs for the session's life; bigger results
// (a ConstantOfShape of a huge shape) are left to run time.
constexpr uint64_t kLoadFoldBytes = uint64_t(64) << 20;
// An int32/int64 graph input whose values decide shapes (a Reshape target,
// Slice bounds, TopK's K: Op::needs_value) is keyed by value when it has at
// most this many elements; a bigger one is refused by the operator's infer().
constexpr int64_t kKeyedInputElems = 64;

// Operators whose outputs depend only on their inputs' shapes, never their
// data: the planner evaluates them (with no input data bound) so the shape
// arithmetic after them folds too.
bool reads_shapes_only(const std::string& op_type) { return op_type == "Shape" || op_type == "Size"; }

struct AlignedFree {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(kAlign)); }
};
using Buffer = std::unique_ptr<std::byte[], AlignedFree>;

// Null for n == 0 or when the memory is not there (callers check: a plan
// for a huge request must fail with an error, not throw).
Buffer alloc_aligned(size_t n) {
  if (n == 0) return {};
  return Buffer(static_cast<std::byte*>(::operator new[](n, std::align_val_t(kAlign), std::nothrow)));
}

Status no_memory(size_t n, const std::string& what) {
  return Status::error(StatusCode::Unavailable, "cannot allocate " + std::to_string(n) + " bytes for " + what);
}

std::string copy_bytes(const TensorView& v) {
  const size_t n = v.bytes();
  return n ? std::string(static_cast<const char*>(v.data), n) : std::string();
}

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where zero-byte tensors point, so no operator sees a null buffer.
alignas(kAlign) std::byte g_empty[kAlign];

std::string dims_string(const ValueInfo& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (i) s += ", ";
    if (v.dims[i] >= 0)
      s += std::to_string(v.dims[i]);
    else
      s += i < v.dim_names.size() && !v.dim_names[i].empty() ? v.dim_names[i] : "?";
  }
  return s + "]";
}

// A tensor of the graph, by id.
struct Value {
  std::string name;                    // "" for an omitted optional output
  const TensorView* constant = nullptr;  // initializers and load-time folds
  int input = -1;                      // graph input index
};

// CAIRN_ONNX_PROFILE=1: each run's steps are timed and the totals per
// operator type printed to stderr at exit (a developer's tool for finding
// where a model's time goes; off, it costs one branch per run).
// CAIRN_ONNX_PROFILE=nodes keys the totals by node (type, name, output shape).
struct OpProfile {
  bool per_node = false;
  std::mutex mu;
  std::map<std::string, std::pair<double, int64_t>> ms_calls;  // op_type -> (ms, calls)
  ~OpProfile() {
    if (ms_calls.empty()) return;
    double total = 0;
    for (const auto& [k, v] : ms_calls) total += v.first;
    std::fprintf(stderr, "cairn onnx profile (%.1f ms in operators):\n", total);
    for (const auto& [k, v] : ms_calls)
      std::fprintf(stderr, "  %-48s %10.1f ms %5.1f %%  %8lld calls\n", k.c_str(), v.first,
                   total > 0 ? 100.0 * v.first / total : 0.0, static_cast<long long>(v.second));
  }
};
// Null unless CAIRN_ONNX_PROFILE is set (and not "0"); the object lives
// until exit, when its destructor prints the totals.
OpProfile* op_profile() {
  static OpProfile profile;
  static const bool on = [] {
    const char* e = std::getenv("CAIRN_ONNX_PROFILE");
    profile.per_node = e && std::string_view(e) == "nodes";
    return e && *e && std::string_view(e) != "0";
  }();
  return on ? &profile : nullptr;
}

// How many times each value is read (a graph output counts as a read) and
// which node makes it: what the fusions check before merging nodes.
struct ValueUses {
  std::unordered_map<std::string, int> readers;
  std::unordered_map<std::string, size_t> made_by;  // value -> node index
};
ValueUses value_uses(const Graph& graph, const std::vector<ValueInfo>& outputs) {
  ValueUses u;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& name : graph.nodes[i].inputs)
      if (!name.empty()) ++u.readers[name];
    for (const auto& name : graph.nodes[i].outputs)
      if (!name.empty()) u.made_by[name] = i;
  }
  for (const auto& o : outputs) ++u.readers[o.name];  // graph.outputs is moved out by now
  return u;
}

// Removes the nodes marked in `drop`, the others keeping their order.
void drop_nodes(Graph& graph, const std::vector<bool>& drop) {
  size_t kept = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!drop[i]) {
      if (kept != i) graph.nodes[kept] = std::move(graph.nodes[i]);  // never a self-move
      ++kept;
    }
  graph.nodes.resize(kept);
}

// MatMul -> Add(X, b) with b a constant float [N] and X read by nothing
// else: the Add is dropped and the MatMul adds b in its GEMM's epilogue
// (one pass over the product instead of two). A bias of another shape, or
// a B whose column count is not b's length, is left alone.
template <class Values>
void fuse_matmul_bias(Graph& graph, const std::vector<ValueInfo>& outputs, const std::unordered_map<std::string, int>& ids,
                      const Values& values) {
  auto readers = value_uses(graph, outputs).readers;
  auto constant = [&](const std::string& name) -> const TensorView* {
    auto it = ids.find(name);
    return it == ids.end() ? nullptr : values[size_t(it->second)].constant;
  };
  std::unordered_map<std::string, size_t> producer;  // MatMul outputs -> node index
  std::vector<bool> drop(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& n = graph.nodes[i];
    if (!n.domain.empty()) continue;
    if (n.op_type == "MatMul" && n.inputs.size() == 2 && n.outputs.size() == 1 && !n.outputs[0].empty() &&
        !n.has(std::string(kFusedBiasAttr))) {
      producer[n.outputs[0]] = i;
      continue;
    }
    if (n.op_type != "Add" || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string& x = n.inputs[size_t(side)];
      const std::string& bname = n.inputs[size_t(1 - side)];
      auto p = producer.find(x);
      if (p == producer.end() || readers[x] != 1 || x == bname) continue;
      const TensorView* b = constant(bname);
      Node& mm = graph.nodes[p->second];
      const TensorView* w = constant(mm.inputs[1]);
      if (!b || !w || b->dtype != DType::Float32 || w->dtype != DType::Float32 || b->shape.size() != 1 ||
          w->shape.size() < 2 || b->shape[0] <= 0 || b->shape[0] != w->shape.back())
        continue;
      mm.inputs.push_back(bname);
      mm.outputs[0] = n.outputs[0];
      mm.attributes[std::string(kFusedBiasAttr)] = Attribute{};
      producer.erase(p);
      drop[i] = true;
      break;
    }
  }
  drop_nodes(graph, drop);
}

// GELU as exporters write it, x·0.5·(1 + erf(x/√2)) in five nodes
// (Div(x, √2) or Mul(x, 1/√2); Erf; Add 1; Mul by x; Mul by 0.5, operands
// in either order), becomes one Gelu node: one pass over the tensor, not
// five. Every intermediate must be read by the next node only.
template <class Values>
void fuse_erf_gelu(Graph& graph, const std::vector<ValueInfo>& outputs, const std::unordered_map<std::string, int>& ids,
                      const Values& values) {
  ValueUses uses = value_uses(graph, outputs);
  auto& readers = uses.readers;
  auto& made_by = uses.made_by;
  // The scalar float constant `name` holds, if it is one and near `want`.
  auto scalar_is = [&](const std::string& name, double want) {
    auto it = ids.find(name);
    if (it == ids.end()) return false;
    const TensorView* c = values[size_t(it->second)].constant;
    if (!c || c->dtype != DType::Float32 || c->count() != 1 || c->shape.size() > 1) return false;
    return std::abs(double(c->as<const float>()[0]) - want) <= 1e-6 * std::abs(want);
  };
  // The node making `name` if it is a default-domain `op` with 2 inputs,
  // one output, and `name` is read once; else null.
  auto single = [&](const std::string& name, const char* op) -> Node* {
    auto it = made_by.find(name);
    if (it == made_by.end() || readers[name] != 1) return nullptr;
    Node& n = graph.nodes[it->second];
    if (n.op_type != op || !n.domain.empty() || n.outputs.size() != 1) return nullptr;
    return &n;
  };
  // The operand of a binary node other than the constant one, or "".
  auto other = [&](const Node& n, double c) -> std::string {
    if (n.inputs.size() != 2) return "";
    if (scalar_is(n.inputs[1], c)) return n.inputs[0];
    if (scalar_is(n.inputs[0], c)) return n.inputs[1];
    return "";
  };
  std::vector<bool> drop(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& last = graph.nodes[i];
    if (last.op_type != "Mul" || !last.domain.empty() || last.outputs.size() != 1 || drop[i]) continue;
    const std::string m_name = other(last, 0.5);  // x·g1, times 0.5
    if (m_name.empty()) continue;
    Node* m = single(m_name, "Mul");
    if (!m || m->inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string& x = m->inputs[size_t(side)];
      Node* g1 = single(m->inputs[size_t(1 - side)], "Add");
      if (!g1) continue;
      const std::string e_name = other(*g1, 1.0);
      Node* e = e_name.empty() ? nullptr : single(e_name, "Erf");
      if (!e || e->inputs.size() != 1) continue;
      Node* t = single(e->inputs[0], "Mul");
      std::string tx = t ? other(*t, 0.70710678118654752) : "";
      if (!t) {
        t = single(e->inputs[0], "Div");
        if (t && t->inputs.size() == 2 && scalar_is(t->inputs[1], 1.4142135623730951)) tx = t->inputs[0];
      }
      if (tx.empty() || tx != x) continue;
      for (Node* d : {t, e, g1, m}) drop[size_t(d - graph.nodes.data())] = true;
      last.op_type = "Gelu";
      last.inputs = {x};
      last.attributes.clear();
      break;
    }
  }
  drop_nodes(graph, drop);
}

// MatMul, Gemm or Conv -> Relu, Sigmoid, Tanh or Gelu that alone reads its
// output: the activation node is dropped and the GEMM applies it to each
// row of the output as it finishes it, while the row is in L1 (one pass
// over the tensor instead of three). Runs after fuse_erf_gelu, so exported
// GELU chains fuse too.
void fuse_activation(Graph& graph, const std::vector<ValueInfo>& outputs) {
  ValueUses uses = value_uses(graph, outputs);
  auto& readers = uses.readers;
  auto& made_by = uses.made_by;
  const std::string key(kFusedActivationAttr);
  std::vector<bool> drop(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& act = graph.nodes[i];
    if (!act.domain.empty() || act.inputs.size() != 1 || act.outputs.size() != 1 || act.inputs[0].empty())
      continue;
    std::string kind = act.op_type;
    if (kind == "Gelu") {
      // Anything but a valid `approximate` is left for the Gelu op to refuse.
      auto it = act.attributes.find("approximate");
      if (act.attributes.size() > (it == act.attributes.end() ? 0u : 1u)) continue;
      if (it != act.attributes.end()) {
        if (it->second.kind != Attribute::Kind::String) continue;
        if (it->second.s == "tanh") kind = "Gelu:tanh";
        else if (it->second.s != "none") continue;
      }
    } else if (kind != "Relu" && kind != "Sigmoid" && kind != "Tanh") {
      continue;
    } else if (!act.attributes.empty()) {
      continue;
    }
    const std::string& x = act.inputs[0];
    auto p = made_by.find(x);
    if (p == made_by.end() || readers[x] != 1 || drop[p->second]) continue;
    Node& gemm = graph.nodes[p->second];
    if (!gemm.domain.empty() || gemm.outputs.size() != 1 || gemm.has(key) ||
        (gemm.op_type != "MatMul" && gemm.op_type != "Gemm" && gemm.op_type != "Conv"))
      continue;
    Attribute a;
    a.kind = Attribute::Kind::String;
    a.s = kind;
    gemm.attributes[key] = std::move(a);
    gemm.outputs[0] = act.outputs[0];
    drop[i] = true;
  }
  drop_nodes(graph, drop);
}

struct RNode {
  Node node;
  std::unique_ptr<Op> op;
  std::vector<int> in;   // value ids; -1 for an omitted optional input
  std::vector<int> out;  // value ids
};

struct Step {
  const RNode* node = nullptr;
  bool view = false;
  int view_src = -1, view_dst = -1;
  std::vector<const TensorView*> in;
  std::vector<TensorView*> out;
};

struct Plan {
  std::vector<Shape> key;
  std::vector<std::string> key_values;  // per input: its bytes when keyed by value, else ""
  std::vector<bool> keyed;
  std::vector<TensorView> views;             // per value id; never resized once built
  std::deque<values::Tensor> values;         // storage of plan-time evaluated tensors
  std::vector<Step> steps;
  Buffer arena;
  size_t arena_bytes = 0;
  void* scratch = nullptr;
};

class SessionImpl final : public Session {
 public:
  const std::vector<ValueInfo>& inputs() const override { return inputs_; }
  const std::vector<ValueInfo>& outputs() const override { return outputs_; }
  int64_t opset() const override { return opset_; }
  int plans_cached() const override {
    std::lock_guard lock(mu_);
    return int(plans_.size());
  }
  size_t node_count() const override { return nodes_.size(); }
  size_t arena_bytes() const override {
    std::lock_guard lock(mu_);
    return last_arena_bytes_;
  }
  Result<std::vector<values::Tensor>> run(std::span<const values::Tensor* const> inputs) override;

  Status init(Graph graph, SessionOptions options);

 private:
  int add_value(std::string name) {
    values_.push_back({std::move(name), nullptr, -1});
    return int(values_.size()) - 1;
  }
  const TensorView* add_constant(values::Tensor t) {
    const values::Tensor& stored = const_store_.emplace_back(std::move(t));
    return &const_views_.emplace_back(
        TensorView{stored.dtype, stored.shape, const_cast<char*>(stored.data.data())});
  }
  Result<bool> fold(const Node& node, const Op& op, const std::vector<int>& in);
  Status check_inputs(std::span<const values::Tensor* const> inputs) const;
  Result<std::unique_ptr<Plan>> make_plan(std::span<const values::Tensor* const> inputs,
                                          const std::vector<bool>& keyed) const;
  Result<std::unique_ptr<Plan>> plan_for(std::span<const values::Tensor* const> inputs);

  std::vector<ValueInfo> inputs_, outputs_;
  std::vector<bool> output_typed_;
  int64_t opset_ = 0;
  std::vector<Value> values_;
  std::deque<values::Tensor> const_store_;  // deques: constants' addresses never move
  std::deque<TensorView> const_views_;
  std::vector<RNode> nodes_;  // the nodes left to run (folded ones dropped)
  std::vector<int> input_ids_, output_ids_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  size_t max_plans_ = 16;
  std::vector<bool> value_keyed_;  // inputs whose values decide shapes (see kKeyedInputElems)

  mutable std::mutex mu_;
  std::list<std::unique_ptr<Plan>> plans_;  // most recently used first
  size_t last_arena_bytes_ = 0;
};

// Runs a node whose inputs are all constants once, making its outputs
// constants. False (not an error) when its outputs are too big to keep.
Result<bool> SessionImpl::fold(const Node& node, const Op& op, const std::vector<int>& in) {
  std::vector<TensorInfo> in_info(in.size());
  std::unique_ptr<bool[]> present(new bool[in.size() + 1]);
  std::vector<const TensorView*> in_views(in.size(), nullptr);
  for (size_t i = 0; i < in.size(); ++i) {
    present[i] = in[i] >= 0;
    if (in[i] < 0) continue;
    const TensorView* c = values_[size_t(in[i])].constant;
    in_info[i] = {c->dtype, c->shape, c};
    in_views[i] = c;
  }
  std::vector<TensorInfo> out_info(node.outputs.size());
  CAIRN_RETURN_IF_ERROR(
      op.infer(in_info, std::span<const bool>(present.get(), in.size()), out_info).with_context(node.describe()));
  uint64_t total = 0;
  for (const auto& o : out_info) {
    auto n = checked_count(o.shape, values::dtype_size(o.dtype));
    if (!n) return n.status().with_context(node.describe());
    total += uint64_t(*n) * values::dtype_size(o.dtype);
  }
  if (op.is_view()) {
    if (node.outputs.size() != 1 || in_views.empty() || !in_views[0])
      return Status::internal(node.describe() + ": a view operator needs one input and one output");
    const TensorView* src = in_views[0];
    if (TensorView{out_info[0].dtype, out_info[0].shape, nullptr}.bytes() != src->bytes())
      return Status::internal(node.describe() + ": view output's size differs from its input's");
    const TensorView* v = &const_views_.emplace_back(TensorView{out_info[0].dtype, out_info[0].shape, src->data});
    const int id = add_value(node.outputs[0]);
    values_[size_t(id)].constant = v;
    return true;
  }
  bool all_given = true;
  for (const auto& o : out_info) all_given = all_given && o.value != nullptr;
  if (total > kLoadFoldBytes && !all_given) return false;

  std::vector<const TensorView*> outs(node.outputs.size());
  if (all_given) {
    // infer() knew the values (a Constant): copy them, the op is dropped.
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorView* v = out_info[i].value;
      outs[i] = add_constant(values::Tensor{v->dtype, v->shape, copy_bytes(*v)});
    }
  } else {
    std::vector<TensorView*> out_views(node.outputs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorView* v = add_constant(values::Tensor{out_info[i].dtype, out_info[i].shape,
                                                         std::string(TensorView{out_info[i].dtype, out_info[i].shape, nullptr}.bytes(), '\0')});
      outs[i] = v;
      out_views[i] = const_cast<TensorView*>(v);
      if (out_views[i]->bytes() == 0) out_views[i]->data = g_empty;
    }
    const size_t scratch_bytes = op.scratch_bytes(in_info, out_info);
    Buffer scratch = alloc_aligned(scratch_bytes);
    if (scratch_bytes && !scratch) return no_memory(scratch_bytes, node.describe() + "'s scratch");
    const RunArgs args{in_views, out_views, scratch.get(), *pool_};
    CAIRN_RETURN_IF_ERROR(op.run(args).with_context(node.describe()));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    const int id = add_value(node.outputs[i]);
    values_[size_t(id)].constant = outs[i];
  }
  return true;
}

Status SessionImpl::init(Graph graph, SessionOptions options) {
  inputs_ = std::move(graph.inputs);
  outputs_ = std::move(graph.outputs);
  output_typed_ = std::move(graph.output_typed);
  opset_ = graph.opset;
  max_plans_ = size_t(std::max(options.max_plans, 1));
  if (options.pool) {
    pool_ = options.pool;
  } else {
    own_pool_ = std::make_unique<ThreadPool>(std::clamp(options.threads, 0, 1024));
    pool_ = own_pool_.get();
  }

  std::unordered_map<std::string, int> ids;
  for (auto& init : graph.initializers) {
    const int id = add_value(init.name);
    values_[size_t(id)].constant = add_constant(std::move(init.tensor));
    ids[init.name] = id;
  }
  graph.initializers.clear();
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const int id = add_value(inputs_[i].name);
    values_[size_t(id)].input = int(i);
    ids[inputs_[i].name] = id;
    input_ids_.push_back(id);
  }
  value_keyed_.assign(inputs_.size(), false);

  if (!options.op_lookup) {
    fuse_matmul_bias(graph, outputs_, ids, values_);
    fuse_erf_gelu(graph, outputs_, ids, values_);
    fuse_activation(graph, outputs_);
  }
  for (auto& node : graph.nodes) {
    OpFactory factory = options.op_lookup ? options.op_lookup(node.op_type) : find_op(node.op_type, node.domain);
    if (!factory) {
      std::string list;
      for (auto name : supported_ops()) list += (list.empty() ? "" : ", ") + std::string(name);
      return Status::invalid_argument(node.describe() + ": operator " + node.op_type +
                                      " is not supported; cairn runs: " + (list.empty() ? "(none)" : list));
    }
    std::vector<int> in;
    std::vector<const TensorView*> constants;
    bool all_constant = true;
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        in.push_back(-1);
        constants.push_back(nullptr);
        continue;
      }
      const int id = ids.at(name);  // graph.cpp checked every input is defined earlier
      in.push_back(id);
      constants.push_back(values_[size_t(id)].constant);
      all_constant = all_constant && values_[size_t(id)].constant;
    }
    auto op = factory(NodeContext{node, constants, options.group});
    if (!op) return op.status().with_context(node.describe());
    if (!*op) return Status::internal(node.describe() + ": the operator's factory made nothing");
    if (all_constant) {
      const size_t before = values_.size();
      CAIRN_ASSIGN_OR_RETURN(const bool folded, fold(node, **op, in));
      if (folded) {
        for (size_t i = 0; i < node.outputs.size(); ++i)
          if (!node.outputs[i].empty()) ids[node.outputs[i]] = int(before + i);
        continue;
      }
    }
    RNode r{std::move(node), std::move(*op), std::move(in), {}};
    for (const auto& name : r.node.outputs) {
      const int id = add_value(name);
      if (!name.empty()) ids[name] = id;
      r.out.push_back(id);
    }
    nodes_.push_back(std::move(r));
  }
  for (const auto& o : outputs_) output_ids_.push_back(ids.at(o.name));  // checked by graph.cpp

  // Which graph inputs' values decide shapes: walking back from the inputs
  // operators need values of (needs_value), through every node computing
  // them (Shape and Size read only shapes, so the walk stops there).
  std::vector<bool> needed(values_.size(), false);
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    bool out_needed = false;
    for (int o : it->out) out_needed = out_needed || needed[size_t(o)];
    const bool through = out_needed && !reads_shapes_only(it->node.op_type);
    for (size_t i = 0; i < it->in.size(); ++i)
      if (it->in[i] >= 0 && (through || it->op->needs_value(i))) needed[size_t(it->in[i])] = true;
  }
  for (size_t i = 0; i < inputs_.size(); ++i)
    value_keyed_[i] = needed[size_t(input_ids_[i])] &&
                      (inputs_[i].dtype == DType::Int64 || inputs_[i].dtype == DType::Int32);
  return Status::ok();
}

Status SessionImpl::check_inputs(std::span<const values::Tensor* const> inputs) const {
  if (inputs.size() != inputs_.size()) {
    std::string names;
    for (const auto& v : inputs_) names += (names.empty() ? "" : ", ") + v.name;
    return Status::invalid_argument("the model takes " + std::to_string(inputs_.size()) + " inputs (" + names +
                                    "), got " + std::to_string(inputs.size()));
  }
  // Messages are built only on failure: a planned forward allocates nothing here.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueInfo& want = inputs_[i];
    const values::Tensor* t = inputs[i];
    auto what = [&] { return "input '" + want.name + "'"; };
    if (!t) return Status::invalid_argument(what() + " is missing", want.name);
    if (t->dtype != want.dtype)
      return Status::invalid_argument(what() + " is " + values::dtype_name(t->dtype) + ", the model takes " +
                                          values::dtype_name(want.dtype),
                                      want.name);
    const size_t elem = values::dtype_size(t->dtype);
    auto n = checked_count(t->shape, elem);
    if (!n) return n.status().with_context(what()).with_param(want.name);
    if (uint64_t(t->data.size()) != uint64_t(*n) * elem)
      return Status::invalid_argument(what() + " has " + std::to_string(t->data.size()) + " bytes, its shape " +
                                          shape_string(t->shape) + " needs " + std::to_string(uint64_t(*n) * elem),
                                      want.name);
    if (!want.has_shape) continue;
    bool ok = t->shape.size() == want.dims.size();
    for (size_t d = 0; ok && d < want.dims.size(); ++d) ok = want.dims[d] < 0 || want.dims[d] == t->shape[d];
    if (!ok)
      return Status::invalid_argument(what() + " has shape " + shape_string(t->shape) + ", the model takes " +
                                          dims_string(want),
                                      want.name);
  }
  // A dimension named in several places (a shared "batch") takes one value.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueInfo& a = inputs_[i];
    if (!a.has_shape) continue;
    for (size_t d = 0; d < a.dim_names.size(); ++d) {
      if (a.dim_names[d].empty()) continue;
      for (size_t j = 0; j <= i; ++j) {
        const ValueInfo& b = inputs_[j];
        if (!b.has_shape) continue;
        for (size_t e = 0; e < b.dim_names.size() && (j < i || e < d); ++e)
          if (b.dim_names[e] == a.dim_names[d] && inputs[j]->shape[e] != inputs[i]->shape[d])
            return Status::invalid_argument(
                "input '" + a.name + "' has " + a.dim_names[d] + " = " + std::to_string(inputs[i]->shape[d]) +
                    " (dimension " + std::to_string(d) + ") but input '" + b.name + "' has " + b.dim_names[e] +
                    " = " + std::to_string(inputs[j]->shape[e]),
                a.name);
      }
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<Plan>> SessionImpl::make_plan(std::span<const values::Tensor* const> inputs,
                                                     const std::vector<bool>& keyed) const {
  auto plan = std::make_unique<Plan>();
  const size_t nv = values_.size();
  plan->views.resize(nv);
  std::vector<TensorView>& views = plan->views;
  std::vector<const TensorView*> known(nv, nullptr);  // values known before running
  std::vector<int> root(nv);                         // whose bytes a tensor is (views alias)
  std::vector<int> def(nv, -1), last(nv, -1);       // step indices, for arena tensors
  std::vector<bool> in_arena(nv, false);
  for (size_t id = 0; id < nv; ++id) {
    root[id] = int(id);
    if (values_[id].constant) {
      views[id] = *values_[id].constant;
      known[id] = values_[id].constant;
    } else if (values_[id].input >= 0) {
      const values::Tensor* t = inputs[size_t(values_[id].input)];
      views[id] = TensorView{t->dtype, t->shape, nullptr};
      if (keyed[size_t(values_[id].input)]) {
        // Known while planning: a copy, as the plan outlives the caller's tensor.
        values::Tensor& copy = plan->values.emplace_back(*t);
        views[id].data = copy.data.empty() ? static_cast<void*>(g_empty) : copy.data.data();
        known[id] = &views[id];
      }
    }
  }

  size_t scratch = 0;
  std::vector<TensorInfo> in_info, out_info;
  std::vector<const TensorView*> in_views;
  std::vector<TensorView*> out_views;
  for (const RNode& r : nodes_) {
    const Node& node = r.node;
    in_info.assign(r.in.size(), TensorInfo{});
    std::unique_ptr<bool[]> present(new bool[r.in.size() + 1]);
    bool all_known = true;
    for (size_t i = 0; i < r.in.size(); ++i) {
      present[i] = r.in[i] >= 0;
      if (r.in[i] < 0) continue;
      const TensorView& v = views[size_t(r.in[i])];
      in_info[i] = {v.dtype, v.shape, known[size_t(r.in[i])]};
      all_known = all_known && known[size_t(r.in[i])];
    }
    out_info.assign(r.out.size(), TensorInfo{});
    CAIRN_RETURN_IF_ERROR(r.op->infer(in_info, std::span<const bool>(present.get(), r.in.size()), out_info)
                              .with_context(node.describe()));
    int64_t out_elems = 0;
    bool all_given = true;
    for (size_t i = 0; i < r.out.size(); ++i) {
      auto n = checked_count(out_info[i].shape, values::dtype_size(out_info[i].dtype));
      if (!n) return n.status().with_context(node.describe() + ": output '" + node.outputs[i] + "'");
      out_elems += *n;
      views[size_t(r.out[i])] = TensorView{out_info[i].dtype, out_info[i].shape, nullptr};
      all_given = all_given && out_info[i].value;
    }
    if (all_given) {  // infer() knew the values outright
      for (size_t i = 0; i < r.out.size(); ++i) {
        views[size_t(r.out[i])] = *out_info[i].value;
        known[size_t(r.out[i])] = &views[size_t(r.out[i])];
      }
      continue;
    }
    if (r.op->is_view()) {
      if (r.out.size() != 1 || r.in.empty() || r.in[0] < 0)
        return Status::internal(node.describe() + ": a view operator needs one input and one output");
      const int src = r.in[0], dst = r.out[0];
      if (views[size_t(dst)].bytes() != views[size_t(src)].bytes())
        return Status::internal(node.describe() + ": view output's size differs from its input's");
      root[size_t(dst)] = root[size_t(src)];
      views[size_t(dst)].data = views[size_t(src)].data;
      if (known[size_t(src)]) {
        known[size_t(dst)] = &views[size_t(dst)];
        continue;
      }
      Step s;
      s.node = &r;
      s.view = true;
      s.view_src = src;
      s.view_dst = dst;
      const int at = int(plan->steps.size());
      if (in_arena[size_t(root[size_t(src)])]) last[size_t(root[size_t(src)])] = at;
      plan->steps.push_back(std::move(s));
      continue;
    }
    const bool shape_only = reads_shapes_only(node.op_type);
    if ((all_known || shape_only) && out_elems <= kPlanEvalElems) {
      // Evaluated now: its outputs become values the next infer() can read.
      in_views.assign(r.in.size(), nullptr);
      for (size_t i = 0; i < r.in.size(); ++i)
        if (r.in[i] >= 0) in_views[i] = &views[size_t(r.in[i])];
      out_views.assign(r.out.size(), nullptr);
      for (size_t i = 0; i < r.out.size(); ++i) {
        TensorView& v = views[size_t(r.out[i])];
        values::Tensor& t = plan->values.emplace_back(values::Tensor{v.dtype, v.shape, std::string(v.bytes(), '\0')});
        v.data = v.bytes() ? static_cast<void*>(t.data.data()) : g_empty;
        out_views[i] = &v;
        known[size_t(r.out[i])] = &v;
      }
      const size_t tmp_bytes = r.op->scratch_bytes(in_info, out_info);
      Buffer tmp = alloc_aligned(tmp_bytes);
      if (tmp_bytes && !tmp) return no_memory(tmp_bytes, node.describe() + "'s scratch");
      const RunArgs args{in_views, out_views, tmp.get(), *pool_};
      CAIRN_RETURN_IF_ERROR(r.op->run(args).with_context(node.describe()));
      continue;
    }
    scratch = std::max(scratch, r.op->scratch_bytes(in_info, out_info));
    const int at = int(plan->steps.size());
    for (int id : r.in)
      if (id >= 0 && in_arena[size_t(root[size_t(id)])]) last[size_t(root[size_t(id)])] = at;
    for (int id : r.out) {
      in_arena[size_t(id)] = true;
      def[size_t(id)] = at;
      last[size_t(id)] = at;
    }
    Step s;
    s.node = &r;
    plan->steps.push_back(std::move(s));
  }
  for (size_t i = 0; i < output_ids_.size(); ++i) {
    const int id = output_ids_[i];
    if (output_typed_[i] && views[size_t(id)].dtype != outputs_[i].dtype)
      return Status::invalid_argument("graph output '" + outputs_[i].name + "' is declared " +
                                      values::dtype_name(outputs_[i].dtype) + " but computed as " +
                                      values::dtype_name(views[size_t(id)].dtype));
    if (in_arena[size_t(root[size_t(id)])]) last[size_t(root[size_t(id)])] = INT_MAX;
  }

  // Arena layout: biggest tensors first, each at the best-fitting gap among
  // the tensors already placed whose lifetimes overlap its own.
  struct Slot {
    int id;
    size_t size, offset;
  };
  std::vector<Slot> slots;
  for (size_t id = 0; id < nv; ++id)
    if (in_arena[id] && views[id].bytes() > 0) slots.push_back({int(id), align_up(views[id].bytes()), 0});
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.size > b.size; });
  size_t total = 0;
  std::vector<const Slot*> placed, live;
  for (Slot& s : slots) {
    live.clear();
    for (const Slot* p : placed)
      if (def[size_t(p->id)] <= last[size_t(s.id)] && def[size_t(s.id)] <= last[size_t(p->id)]) live.push_back(p);
    std::sort(live.begin(), live.end(), [](const Slot* a, const Slot* b) { return a->offset < b->offset; });
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const Slot* p : live) {
      if (p->offset > cursor && p->offset - cursor >= s.size && p->offset - cursor < best_gap) {
        best = cursor;
        best_gap = p->offset - cursor;
      }
      cursor = std::max(cursor, p->offset + p->size);
    }
    s.offset = best != SIZE_MAX ? best : cursor;
    total = std::max(total, s.offset + s.size);
    placed.push_back(&s);
  }
  const size_t scratch_at = total;
  plan->arena_bytes = total + align_up(scratch);
  plan->arena = alloc_aligned(plan->arena_bytes);
  if (plan->arena_bytes && !plan->arena) return no_memory(plan->arena_bytes, "the plan's arena");
  std::byte* base = plan->arena.get();
  for (size_t id = 0; id < nv; ++id)
    if (in_arena[id]) views[id].data = g_empty;
  for (const Slot& s : slots) views[size_t(s.id)].data = base + s.offset;
  plan->scratch = scratch ? static_cast<void*>(base + scratch_at) : nullptr;
  // Views of arena tensors point where their roots now are.
  for (Step& s : plan->steps)
    if (s.view && in_arena[size_t(root[size_t(s.view_src)])]) views[size_t(s.view_dst)].data = views[size_t(s.view_src)].data;

  for (Step& s : plan->steps) {
    if (s.view) continue;
    for (int id : s.node->in) s.in.push_back(id >= 0 ? &views[size_t(id)] : nullptr);
    for (int id : s.node->out) s.out.push_back(&views[size_t(id)]);
  }
  return plan;
}

// A plan for these inputs; the small inputs whose values decide shapes are
// known while planning and join the key.
Result<std::unique_ptr<Plan>> SessionImpl::plan_for(std::span<const values::Tensor* const> inputs) {
  std::vector<bool> keyed(inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i)
    keyed[i] = value_keyed_[i] && inputs[i]->data.size() <= size_t(kKeyedInputElems) * values::dtype_size(inputs[i]->dtype);
  auto plan = make_plan(inputs, keyed);
  if (!plan) return plan.status();
  Plan& p = **plan;
  p.keyed = keyed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    p.key.push_back(inputs[i]->shape);
    p.key_values.push_back(keyed[i] ? inputs[i]->data : std::string());
  }
  return plan;
}

Result<std::vector<values::Tensor>> SessionImpl::run(std::span<const values::Tensor* const> inputs) {
  std::lock_guard lock(mu_);
  CAIRN_RETURN_IF_ERROR(check_inputs(inputs));
  auto it = plans_.begin();
  for (; it != plans_.end(); ++it) {
    const Plan& p = **it;
    bool same = true;
    for (size_t i = 0; same && i < inputs.size(); ++i)
      same = p.key[i] == inputs[i]->shape && (!p.keyed[i] || p.key_values[i] == inputs[i]->data);
    if (same) break;
  }
  if (it != plans_.end()) {
    plans_.splice(plans_.begin(), plans_, it);
  } else {
    CAIRN_ASSIGN_OR_RETURN(auto plan, plan_for(inputs));
    plans_.push_front(std::move(plan));
    while (plans_.size() > max_plans_) plans_.pop_back();
  }
  Plan& plan = *plans_.front();
  last_arena_bytes_ = plan.arena_bytes;

  // The caller's bytes are read in place: operators never write their inputs.
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorView& v = plan.views[size_t(input_ids_[i])];
    v.data = inputs[i]->data.empty() ? static_cast<void*>(g_empty) : const_cast<char*>(inputs[i]->data.data());
  }
  OpProfile* const prof = op_profile();
  for (const Step& s : plan.steps) {
    if (s.view) {
      plan.views[size_t(s.view_dst)].data = plan.views[size_t(s.view_src)].data;
      continue;
    }
    const RunArgs args{s.in, s.out, plan.scratch, *pool_};
    const auto t0 = prof ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    Status st = s.node->op->run(args);
    if (!st.is_ok()) return st.with_context(s.node->node.describe());  // describe() allocates: only on failure
    if (prof) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::string key = s.node->node.op_type;
      if (prof->per_node && !s.out.empty()) key += " " + s.node->node.name + " " + shape_string(s.out[0]->shape);
      std::lock_guard plock(prof->mu);
      auto& e = prof->ms_calls[key];
      e.first += ms;
      ++e.second;
    }
  }
  std::vector<values::Tensor> out;
  out.reserve(output_ids_.size());
  for (int id : output_ids_) {
    const TensorView& v = plan.views[size_t(id)];
    out.push_back(values::Tensor{v.dtype, v.shape, copy_bytes(v)});
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Session>> Session::load_bytes(std::string_view bytes, const std::string& base_dir,
                                                     SessionOptions options) {
  CAIRN_ASSIGN_OR_RETURN(Graph graph, parse_model(bytes, base_dir));
  auto session = std::make_unique<SessionImpl>();
  CAIRN_RETURN_IF_ERROR(session->init(std::move(graph), std::move(options)));
  return std::unique_ptr<Session>(std::move(session));
}

Result<std::unique_ptr<Session>> Session::load(const std::string& path, SessionOptions options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::invalid_argument("ONNX model '" + path + "': " + ec.message());
  if (size > kMaxModelBytes)
    return Status::invalid_argument("ONNX model '" + path + "' is " + std::to_string(size) +
                                    " bytes, over protobuf's 2 GiB limit (store the weights as external data)");
  std::ifstream in(path, std::ios::binary);
  std::string bytes(size, '\0');
  if (!in || !in.read(bytes.data(), std::streamsize(size)))
    return Status::invalid_argument("ONNX model '" + path + "' cannot be read");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  auto s = load_bytes(bytes, dir.string(), std::move(options));
  if (!s) return s.status().with_context("ONNX model '" + path + "'");
  return s;
}

}  // namespace cairn::onnx

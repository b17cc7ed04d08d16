// distributed/llm_step.cpp — see llm_step.h.
#include "distributed/llm_step.h"

#include <cstring>
#include <fstream>

namespace cairn::distributed {

namespace {

// The Run's tensors, in this order.
enum Slot { kTokens, kPositions, kSeqs, kWantsLogits, kTableSeqs, kTableSizes, kWritableFrom, kCapacity, kBlocks, kSlots };
constexpr const char* kNames[kSlots] = {"tokens",        "positions", "seqs",     "wants_logits", "table_seqs",
                                        "table_sizes",   "writable_from", "capacity", "blocks"};

template <typename T>
values::Tensor tensor_of(values::DType dtype, const std::vector<T>& v) {
  values::Tensor t;
  t.dtype = dtype;
  t.shape = {(int64_t)v.size()};
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return t;
}

template <typename T>
Result<std::vector<T>> vector_of(const values::Tensor& t, values::DType dtype, const char* name) {
  if (t.dtype != dtype || t.shape.size() != 1 || t.data.size() != (size_t)t.shape[0] * sizeof(T))
    return Status::invalid_argument(std::string("step tensor '") + name + "' must be a 1-D " +
                                    values::dtype_name(dtype) + " vector");
  std::vector<T> v((size_t)t.shape[0]);
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

}  // namespace

std::vector<values::Tensor> encode_step(const LlmStep& s) {
  using values::DType;
  std::vector<int32_t> seqs, sizes, writable, capacity, blocks;
  for (const kv::SeqTable& t : s.tables) {
    seqs.push_back(t.seq);
    sizes.push_back((int32_t)t.blocks.size());
    writable.push_back(t.writable_from);
    capacity.push_back(t.capacity);
    blocks.insert(blocks.end(), t.blocks.begin(), t.blocks.end());
  }
  return {tensor_of(DType::Int32, s.batch.tokens),       tensor_of(DType::Int32, s.batch.positions),
          tensor_of(DType::Int32, s.batch.seqs),         tensor_of(DType::UInt8, s.batch.wants_logits),
          tensor_of(DType::Int32, seqs),                 tensor_of(DType::Int32, sizes),
          tensor_of(DType::Int32, writable),             tensor_of(DType::Int32, capacity),
          tensor_of(DType::Int32, blocks)};
}

Result<LlmStep> decode_step(const std::vector<values::Tensor>& in) {
  using values::DType;
  if (in.size() != kSlots)
    return Status::invalid_argument("a step has " + std::to_string(kSlots) + " tensors, got " +
                                    std::to_string(in.size()));
  LlmStep s;
  CAIRN_ASSIGN_OR_RETURN(s.batch.tokens, vector_of<int32_t>(in[kTokens], DType::Int32, kNames[kTokens]));
  CAIRN_ASSIGN_OR_RETURN(s.batch.positions, vector_of<int32_t>(in[kPositions], DType::Int32, kNames[kPositions]));
  CAIRN_ASSIGN_OR_RETURN(s.batch.seqs, vector_of<int32_t>(in[kSeqs], DType::Int32, kNames[kSeqs]));
  CAIRN_ASSIGN_OR_RETURN(s.batch.wants_logits,
                         vector_of<uint8_t>(in[kWantsLogits], DType::UInt8, kNames[kWantsLogits]));
  const size_t n = s.batch.tokens.size();
  if (s.batch.positions.size() != n || s.batch.seqs.size() != n || s.batch.wants_logits.size() != n)
    return Status::invalid_argument("a step's token, position, sequence and logits vectors differ in length");
  std::vector<int32_t> seqs, sizes, writable, capacity, blocks;
  CAIRN_ASSIGN_OR_RETURN(seqs, vector_of<int32_t>(in[kTableSeqs], DType::Int32, kNames[kTableSeqs]));
  CAIRN_ASSIGN_OR_RETURN(sizes, vector_of<int32_t>(in[kTableSizes], DType::Int32, kNames[kTableSizes]));
  CAIRN_ASSIGN_OR_RETURN(writable, vector_of<int32_t>(in[kWritableFrom], DType::Int32, kNames[kWritableFrom]));
  CAIRN_ASSIGN_OR_RETURN(capacity, vector_of<int32_t>(in[kCapacity], DType::Int32, kNames[kCapacity]));
  CAIRN_ASSIGN_OR_RETURN(blocks, vector_of<int32_t>(in[kBlocks], DType::Int32, kNames[kBlocks]));
  if (sizes.size() != seqs.size() || writable.size() != seqs.size() || capacity.size() != seqs.size())
    return Status::invalid_argument("a step's block-table vectors differ in length");
  size_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (sizes[i] < 0 || (size_t)sizes[i] > blocks.size() - at)
      return Status::invalid_argument("a step's block tables are longer than its block list");
    s.tables.push_back(kv::SeqTable{seqs[i], std::vector<int32_t>(blocks.begin() + (ptrdiff_t)at,
                                                                  blocks.begin() + (ptrdiff_t)(at + sizes[i])),
                                    writable[i], capacity[i]});
    at += (size_t)sizes[i];
  }
  if (at != blocks.size()) return Status::invalid_argument("a step's block list has blocks no table uses");
  return s;
}

std::vector<values::Tensor> encode_logits(const model::Logits& l) {
  values::Tensor data;
  data.dtype = values::DType::Float32;
  data.shape = {(int64_t)l.rows(), l.n_vocab};
  data.data.assign(reinterpret_cast<const char*>(l.data.data()), l.data.size() * sizeof(float));
  return {std::move(data), tensor_of(values::DType::Int32, l.batch_index)};
}

Result<model::Logits> decode_logits(const std::vector<values::Tensor>& out, int64_t n_vocab) {
  if (out.size() != 2) return Status::internal("the last stage sent " + std::to_string(out.size()) + " tensors, not 2");
  model::Logits l;
  l.n_vocab = n_vocab;
  CAIRN_ASSIGN_OR_RETURN(l.batch_index, vector_of<int32_t>(out[1], values::DType::Int32, "batch_index"));
  const values::Tensor& d = out[0];
  if (d.dtype != values::DType::Float32 || d.shape.size() != 2 || d.shape[0] != (int64_t)l.batch_index.size() ||
      d.shape[1] != n_vocab || d.data.size() != l.batch_index.size() * (size_t)n_vocab * sizeof(float))
    return Status::internal("the last stage's logits are not [rows, " + std::to_string(n_vocab) + "] float32");
  l.data.resize(l.batch_index.size() * (size_t)n_vocab);
  if (!l.data.empty()) std::memcpy(l.data.data(), d.data.data(), d.data.size());
  return l;
}

std::string llm_fingerprint(const model::HParams& hp) {
  return hp.arch + ": " + std::to_string(hp.n_layer) + " layers, " + std::to_string(hp.n_embd) + " wide, " +
         std::to_string(hp.n_head) + "/" + std::to_string(hp.n_head_kv) + " heads of " +
         std::to_string(hp.head_dim) + ", FFN " + std::to_string(hp.n_ff) + ", vocabulary " +
         std::to_string(hp.n_vocab);
}

bool is_gguf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace cairn::distributed

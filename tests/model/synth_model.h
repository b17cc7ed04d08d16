// tests/model/synth_model.h — tiny random-weight GGUF models the tests write
// themselves (no ../shared needed), plus knobs to break them on purpose.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/quant.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/type_ops.h"

namespace cairn::model::test {

struct SynthSpec {
  std::string arch = "llama";
  int64_t n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 96, n_vocab = 48;
  int64_t n_ctx = 256;
  TensorType type = TensorType::F32;  // of the 2-D weights
  bool tied = false;
  uint32_t seed = 7;
  float rope_base = 10000.0f;
  std::set<std::string> omit_keys;     // suffixes after "<arch>." or full keys
  std::set<std::string> omit_tensors;
  std::map<std::string, std::vector<int64_t>> dims_override;
  std::map<std::string, uint32_t> uint_override;  // suffix -> value
  std::map<std::string, TensorType> type_override;  // zero-filled tensor of that type
  std::function<void(gguf::Writer&)> extra;        // last word on metadata
};

struct SynthWeights {  // float copies, for the tests' own reference forward
  std::map<std::string, std::vector<float>> t;
};

inline std::vector<uint8_t> encode(TensorType type, const std::vector<float>& v) {
  const TypeOps* ops = type_ops(type);
  auto bytes = row_bytes(type, (int64_t)v.size());
  std::vector<uint8_t> out(bytes ? *bytes : 0);
  if (ops && bytes) ops->from_float(v.data(), out.data(), (int64_t)v.size());
  return out;
}

// Writes the model into a byte buffer; `weights` (optional) receives the
// float values as the file stores them (after a round trip through `type`).
inline std::vector<uint8_t> synth_model_bytes(const SynthSpec& s, SynthWeights* weights = nullptr) {
  gguf::Writer w;
  std::mt19937 rng(s.seed);
  const auto key = [&](const std::string& suffix) { return s.arch + "." + suffix; };
  const auto omitted = [&](const std::string& k) {
    return s.omit_keys.count(k) || s.omit_keys.count(k.substr(k.find('.') + 1));
  };
  if (!s.omit_keys.count("general.architecture")) w.set_string("general.architecture", s.arch);
  const std::map<std::string, uint32_t> ints = {
      {"embedding_length", (uint32_t)s.n_embd},  {"block_count", (uint32_t)s.n_layer},
      {"attention.head_count", (uint32_t)s.n_head}, {"attention.head_count_kv", (uint32_t)s.n_head_kv},
      {"feed_forward_length", (uint32_t)s.n_ff}, {"context_length", (uint32_t)s.n_ctx}};
  for (const auto& [k, v] : ints)
    if (!omitted(key(k))) w.set_uint32(key(k), s.uint_override.count(k) ? s.uint_override.at(k) : v);
  for (const auto& [k, v] : s.uint_override)
    if (!ints.count(k)) w.set_uint32(key(k), v);
  if (!omitted(key("attention.layer_norm_rms_epsilon")))
    w.set_float32(key("attention.layer_norm_rms_epsilon"), 1e-5f);
  w.set_float32(key("rope.freq_base"), s.rope_base);

  const int64_t hd = s.n_embd / s.n_head;
  const auto add = [&](const std::string& name, std::vector<int64_t> dims, float scale, float bias,
                       TensorType type) {
    if (s.omit_tensors.count(name)) return;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float& x : v) x = bias + u(rng);
    std::vector<uint8_t> bytes = encode(type, v);
    if (weights) {
      std::vector<float> back((size_t)n);
      type_ops(type)->to_float(bytes.data(), back.data(), n);
      weights->t[name] = back;
    }
    if (s.dims_override.count(name)) {
      dims = s.dims_override.at(name);
      int64_t m = 1;
      for (int64_t d : dims) m *= d;
      auto rb = row_bytes(type, m);
      bytes.resize(rb ? *rb : 0);
    }
    if (s.type_override.count(name)) {
      type = s.type_override.at(name);
      auto rb = row_bytes(type, n);
      bytes.assign(rb ? *rb : 0, 0);
    }
    (void)w.add_tensor(name, type, dims, std::move(bytes));
  };
  const float ws = 1.0f / std::sqrt((float)s.n_embd);
  add("token_embd.weight", {s.n_embd, s.n_vocab}, 1.0f, 0.0f, s.type);
  add("output_norm.weight", {s.n_embd}, 0.2f, 1.0f, TensorType::F32);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, ws * 2, 0.0f, s.type);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, 0.2f, 1.0f, TensorType::F32);
    add(p + "attn_q.weight", {s.n_embd, s.n_head * hd}, ws * 2, 0.0f, s.type);
    add(p + "attn_k.weight", {s.n_embd, s.n_head_kv * hd}, ws * 2, 0.0f, s.type);
    add(p + "attn_v.weight", {s.n_embd, s.n_head_kv * hd}, ws * 2, 0.0f, s.type);
    add(p + "attn_output.weight", {s.n_head * hd, s.n_embd}, ws, 0.0f, s.type);
    if (s.arch == "qwen2") {
      add(p + "attn_q.bias", {s.n_head * hd}, 0.3f, 0.0f, TensorType::F32);
      add(p + "attn_k.bias", {s.n_head_kv * hd}, 0.3f, 0.0f, TensorType::F32);
      add(p + "attn_v.bias", {s.n_head_kv * hd}, 0.3f, 0.0f, TensorType::F32);
    }
    add(p + "ffn_norm.weight", {s.n_embd}, 0.2f, 1.0f, TensorType::F32);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, ws * 2, 0.0f, s.type);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, ws * 2, 0.0f, s.type);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, 1.0f / std::sqrt((float)s.n_ff), 0.0f, s.type);
  }
  if (s.extra) s.extra(w);
  return w.to_bytes();
}

inline Result<std::unique_ptr<gguf::File>> synth_file(const SynthSpec& s,
                                                      SynthWeights* weights = nullptr) {
  return gguf::File::parse(synth_model_bytes(s, weights));
}

}  // namespace cairn::model::test

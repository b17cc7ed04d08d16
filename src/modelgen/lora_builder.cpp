// modelgen/lora_builder.cpp — random LoRA adapters in the converter's layout.
#include "modelgen/lora_builder.h"

#include <cmath>
#include <random>

#include "core/quant.h"
#include "gguf/gguf_writer.h"
#include "kernels/type_ops.h"

namespace cairn::modelgen {

Result<std::vector<uint8_t>> random_lora(const gguf::File& base, const RandomLoraSpec& spec) {
  if (spec.rank < 1 || spec.rank > 4096)
    return Status::invalid_argument("make-lora: rank must be in [1, 4096]");
  if (!std::isfinite(spec.alpha) || spec.alpha < 0)
    return Status::invalid_argument("make-lora: alpha must be a finite number >= 0");
  if (spec.targets.empty()) return Status::invalid_argument("make-lora: no target tensors");
  const TypeOps* ops = type_ops(spec.type);
  if (!ops || !ops->from_float ||
      !(spec.type == TensorType::F32 || spec.type == TensorType::F16 ||
        spec.type == TensorType::BF16 || spec.type == TensorType::Q8_0))
    return Status::invalid_argument("make-lora: the adapter type must be f32, f16, bf16 or q8_0");
  auto arch = base.get_string("general.architecture");
  if (!arch || !arch->has_value()) return Status::error("make-lora: the base has no architecture");

  gguf::Writer w;
  w.set_string("general.architecture", std::string(**arch));
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  if (spec.alpha > 0) w.set_float32("adapter.lora.alpha", spec.alpha);
  std::mt19937_64 rng(spec.seed);
  // Rows x cols uniform values in +-bound (times `experts`, a 3-D tensor),
  // stored in the adapter's type.
  const auto add = [&](const std::string& name, int64_t cols, int64_t rows, float bound,
                       int64_t experts) -> Status {
    const auto row = row_bytes(spec.type, cols);
    if (!row)
      return Status::invalid_argument("make-lora: '" + name + "' rows of " + std::to_string(cols) +
                                      " do not fit " + std::string(type_info(spec.type).name) +
                                      " blocks");
    std::uniform_real_distribution<float> u(-bound, bound);
    std::vector<float> floats((size_t)cols);
    std::vector<uint8_t> bytes(*row * (size_t)(rows * experts));
    for (int64_t r = 0; r < rows * experts; ++r) {
      for (float& f : floats) f = u(rng);
      ops->from_float(floats.data(), bytes.data() + (size_t)r * *row, cols);
    }
    std::vector<int64_t> dims = {cols, rows};
    if (experts > 1) dims.push_back(experts);
    return w.add_tensor(name, spec.type, std::move(dims), std::move(bytes));
  };
  const int64_t r = spec.rank;
  for (const std::string& role : spec.targets) {
    std::vector<const gguf::TensorInfo*> found;
    if (role == "output" || role == "token_embd") {
      if (const auto* t = base.find_tensor(role + ".weight")) found.push_back(t);
    } else {
      for (int64_t il = 0;; ++il) {
        const auto* t = base.find_tensor("blk." + std::to_string(il) + "." + role + ".weight");
        if (!t) break;  // layers are numbered without gaps
        found.push_back(t);
      }
    }
    if (found.empty())
      return Status::invalid_argument("make-lora: the base has no tensor for '" + role + "'");
    for (const gguf::TensorInfo* t : found) {
      if (t->dims.size() != 2 && t->dims.size() != 3)
        return Status::invalid_argument("make-lora: '" + t->name + "' is neither 2-D nor 3-D");
      const int64_t in = t->dims[0], out = t->dims[1];
      const int64_t experts = t->dims.size() == 3 ? t->dims[2] : 1;
      const float a_bound = spec.a_scale / std::sqrt((float)(role == "token_embd" ? r : in));
      const float b_bound = spec.b_scale / std::sqrt((float)r);
      if (role == "token_embd") {  // flipped: A [r, n_vocab], B [r, n_embd]
        CAIRN_RETURN_IF_ERROR(add(t->name + ".lora_a", r, out, a_bound, 1));
        CAIRN_RETURN_IF_ERROR(add(t->name + ".lora_b", r, in, b_bound, 1));
      } else {  // A [in, r(, E)], B [r, out(, E)]
        CAIRN_RETURN_IF_ERROR(add(t->name + ".lora_a", in, r, a_bound, experts));
        CAIRN_RETURN_IF_ERROR(add(t->name + ".lora_b", r, out, b_bound, experts));
      }
    }
  }
  return w.to_bytes();
}

}  // namespace cairn::modelgen

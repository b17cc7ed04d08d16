// model/lora.cpp — reading LoRA adapter files, merging them at load, their run-time products.
#include "model/lora.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "core/half.h"
#include "core/quant.h"
#include "core/tensor_type.h"
#include "kernels/type_ops.h"

namespace cairn::model {
namespace {

constexpr int64_t kMaxRank = 1 << 16;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// The adapter tensor as a matrix of dims[0] columns and every other dim's
// rows stacked (an expert tensor's experts one after another), in a type the
// kernels multiply.
Result<kernels::WeightMatrix> pair_half(const gguf::TensorInfo& t) {
  if (t.dims.size() != 2 && t.dims.size() != 3)
    return Status::error("tensor '" + t.name + "' has shape " + dims_text(t.dims) +
                         ": LoRA tensors are 2-D, or 3-D for experts");
  const TypeOps* ops = type_ops(t.type);
  if (!ops || !ops->vec_dot || !ops->to_float || !kernels::matmul_supported(t.type))
    return Status::error("tensor '" + t.name + "' has type " + std::string(type_info(t.type).name) +
                         ", which cairn cannot compute with");
  const auto stride = row_bytes(t.type, t.dims[0]);
  if (!stride)
    return Status::error("tensor '" + t.name + "': a row of " + std::to_string(t.dims[0]) +
                         " is not a whole number of " + std::string(type_info(t.type).name) +
                         " blocks");
  const int64_t rows = t.dims[1] * (t.dims.size() == 3 ? t.dims[2] : 1);
  if (!t.data || *stride * (uint64_t)rows > t.n_bytes)
    return Status::error("tensor '" + t.name + "' data is smaller than its shape");
  kernels::WeightMatrix m;
  m.type = t.type;
  m.data = t.data;
  m.cols = t.dims[0];
  m.rows = rows;
  m.row_stride = *stride;
  return m;
}

// FILE or FILE:SCALE: the part after the last ':' is a scale only when it
// reads as a number (a path may hold colons).
LoraSpec split_scale(const std::string& text) {
  LoraSpec s;
  s.path = text;
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon + 1 < text.size()) {
    errno = 0;
    char* end = nullptr;
    const std::string tail = text.substr(colon + 1);
    const float v = std::strtof(tail.c_str(), &end);
    if (end == tail.c_str() + tail.size() && errno == 0 && std::isfinite(v)) {
      s.path = text.substr(0, colon);
      s.scale = v;
    }
  }
  return s;
}

// The reference multiplies adapter matrices kept apart from the repacked
// weights through its plain CPU path, which hands F16 weights F16
// activations: rounded so here too, so the products are its products.
void round_like_reference(TensorType weights, float* x, size_t n) {
  if (weights != TensorType::F16) return;
  for (size_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

// y[rows[i]] += scale * out[i] (rows of `width`): the reference scales the
// product, then adds it.
void add_scaled_rows(const LoraRows& lr, int64_t width, float scale, float* y, int64_t y_stride) {
  for (size_t i = 0; i < lr.rows.size(); ++i) {
    float* dst = y + (int64_t)lr.rows[i] * y_stride;
    const float* d = lr.out.data() + (int64_t)i * width;
    for (int64_t j = 0; j < width; ++j) dst[j] += d[j] * scale;
  }
}

}  // namespace

uint64_t LoraAdapter::bytes() const {
  uint64_t n = 0;
  for (const auto& [name, p] : pairs)
    n += p.a.row_stride * (uint64_t)p.a.rows + p.b.row_stride * (uint64_t)p.b.rows;
  return n;
}

Result<LoraSpec> parse_lora_flag(const std::string& text) {
  if (text.empty()) return Status::invalid_argument("empty file name");
  LoraSpec s = split_scale(text);
  if (s.path.empty()) return Status::invalid_argument("'" + text + "': empty file name");
  return s;
}

Result<LoraSpec> parse_lora_module_flag(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return Status::invalid_argument("'" + text + "': expected NAME=FILE[:SCALE]");
  LoraSpec s = split_scale(text.substr(eq + 1));
  s.name = text.substr(0, eq);
  if (s.path.empty())
    return Status::invalid_argument("'" + text + "': empty file name");
  return s;
}

Result<std::shared_ptr<const LoraAdapter>> open_lora(const std::string& path, std::string name,
                                                     float scale, const gguf::File& base) {
  auto opened = gguf::File::open(path);
  if (!opened) return opened.status();
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name = std::move(name);
  adapter->path = path;
  adapter->user_scale = scale;
  adapter->file = std::shared_ptr<const gguf::File>(std::move(*opened));
  const gguf::File& f = *adapter->file;
  const auto fail = [&](const std::string& m) { return Status::error(path + ": " + m); };
  const auto text = [&](const char* key) -> Result<std::string> {
    auto v = f.get_string(key);
    if (!v) return v.status().with_context(path);
    return v->has_value() ? std::string(**v) : std::string();
  };
  CAIRN_ASSIGN_OR_RETURN(const std::string general_type, text("general.type"));
  if (general_type != "adapter")
    return fail(general_type.empty()
                    ? "not a LoRA adapter: general.type is missing (a model, not an adapter?)"
                    : "not a LoRA adapter: general.type is '" + general_type +
                          "', expected 'adapter'");
  CAIRN_ASSIGN_OR_RETURN(const std::string adapter_type, text("adapter.type"));
  if (adapter_type != "lora")
    return fail("adapter.type is '" + adapter_type + "', cairn applies only 'lora' adapters");
  CAIRN_ASSIGN_OR_RETURN(const std::string arch, text("general.architecture"));
  auto base_arch = base.get_string("general.architecture");
  const std::string want = base_arch && base_arch->has_value() ? std::string(**base_arch) : "";
  if (arch != want)
    return fail("an adapter for architecture '" + arch + "', but the model is '" + want + "'");
  auto alpha = f.get_float("adapter.lora.alpha");
  if (!alpha) return alpha.status().with_context(path);
  adapter->alpha = alpha->has_value() ? (float)**alpha : 0.0f;
  if (!std::isfinite(adapter->alpha)) return fail("adapter.lora.alpha is not finite");

  struct Halves {
    const gguf::TensorInfo* a = nullptr;
    const gguf::TensorInfo* b = nullptr;
  };
  std::map<std::string, Halves> halves;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (ends_with(t.name, ".lora_a")) {
      halves[t.name.substr(0, t.name.size() - 7)].a = &t;
    } else if (ends_with(t.name, ".lora_b")) {
      halves[t.name.substr(0, t.name.size() - 7)].b = &t;
    } else if (!ends_with(t.name, "_norm.weight")) {  // norms: skipped, as the reference does
      return fail("tensor '" + t.name + "' is neither a .lora_a nor a .lora_b");
    }
  }
  if (halves.empty()) return fail("the adapter has no .lora_a / .lora_b tensors");
  for (const auto& [target, h] : halves) {
    if (!h.a || !h.b) return fail("tensor '" + target + "' has only one of .lora_a and .lora_b");
    const gguf::TensorInfo* w = base.find_tensor(target);
    if (!w) return fail("tensor '" + target + "' is not in the model (an adapter for another model?)");
    if (w->dims.size() != 2 && w->dims.size() != 3)
      return fail("tensor '" + target + "' of the model has shape " + dims_text(w->dims) +
                  ": LoRA applies to 2-D tensors and 3-D expert tensors only");
    auto a = pair_half(*h.a);
    if (!a) return a.status().with_context(path);
    auto b = pair_half(*h.b);
    if (!b) return b.status().with_context(path);
    const bool embd = target == "token_embd.weight";
    // The reference's layouts: A [in, r] and B [r, out] in GGUF dims order,
    // [in, r, E] and [r, out, E] for E experts; the embedding's pair
    // flipped, A [r, n_vocab] and B [r, n_embd].
    const int64_t experts = w->dims.size() == 3 ? w->dims[2] : 1;
    const bool same_experts = h.a->dims.size() == w->dims.size() &&
                              h.b->dims.size() == w->dims.size() &&
                              (experts == 1 || (h.a->dims[2] == experts && h.b->dims[2] == experts));
    const bool fits =
        same_experts &&
        (embd ? (a->cols == b->cols && a->rows == w->dims[1] && b->rows == w->dims[0])
              : (a->cols == w->dims[0] && b->rows == w->dims[1] * experts &&
                 a->rows == b->cols * experts));
    if (!fits)
      return fail("tensor '" + target + "': lora_a " + dims_text(h.a->dims) + " and lora_b " +
                  dims_text(h.b->dims) + " do not fit the model's " + dims_text(w->dims) +
                  " (an adapter for another model?)");
    LoraPair p;
    p.a = *a;
    p.b = *b;
    p.experts = experts;
    const int64_t rank = b->cols;
    if (rank < 1 || rank > kMaxRank)
      return fail("tensor '" + target + "' has rank " + std::to_string(rank) + ", outside [1, " +
                  std::to_string(kMaxRank) + "]");
    p.scale = adapter->alpha != 0 ? scale * adapter->alpha / (float)rank : scale;
    adapter->pairs.emplace(target, p);
  }
  return std::shared_ptr<const LoraAdapter>(std::move(adapter));
}

namespace {

// Rows of m as floats, row after row.
std::vector<float> to_floats(const kernels::WeightMatrix& m) {
  std::vector<float> out((size_t)(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) kernels::get_row(m, r, out.data() + r * m.cols);
  return out;
}

}  // namespace

Status merge_loras(gguf::File& base, const std::vector<std::shared_ptr<const LoraAdapter>>& adapters,
                   int n_threads) {
  std::map<std::string, std::vector<const LoraPair*>> by_tensor;
  for (const auto& ad : adapters)
    for (const auto& [name, pair] : ad->pairs) by_tensor[name].push_back(&pair);
  ThreadPool pool(std::max(1, n_threads));
  for (const auto& [name, pairs] : by_tensor) {
    const gguf::TensorInfo* t = base.find_tensor(name);
    if (!t || (t->dims.size() != 2 && t->dims.size() != 3))
      return Status::error("tensor '" + name + "': no 2-D or 3-D base tensor");
    const TypeOps* ops = type_ops(t->type);
    if (!ops || !ops->to_float || !ops->from_float)
      return Status::error("tensor '" + name + "' has type " + std::string(type_info(t->type).name) +
                           ", which cairn cannot merge a LoRA adapter into");
    const int64_t cols = t->dims[0], rows = t->rows();
    const auto stride = row_bytes(t->type, cols);
    if (!stride || !t->data || *stride * (uint64_t)rows > t->n_bytes)
      return Status::error("tensor '" + name + "' data is smaller than its shape");
    const bool embd = name == "token_embd.weight";
    // delta[o][i] = sum_k L[o][k] * R[e * rank + k][i] for row o of expert
    // e = o / (rows / experts): L = B and R = A (each expert's stacked), or
    // for the embedding's flipped pair L = A and R = B transposed.
    struct Factor {
      std::vector<float> left, right;  // rows x rank, experts * rank x cols
      int64_t rank = 0, rows_per_expert = 0;
      float scale = 0;
    };
    std::vector<Factor> factors;
    for (const LoraPair* p : pairs) {
      Factor f;
      f.rank = p->rank();
      f.rows_per_expert = rows / p->experts;
      f.scale = p->scale;
      if (!embd) {
        f.left = to_floats(p->b);
        f.right = to_floats(p->a);
      } else {
        f.left = to_floats(p->a);
        const std::vector<float> b = to_floats(p->b);  // cols rows of rank
        f.right.resize((size_t)(f.rank * cols));
        for (int64_t i = 0; i < cols; ++i)
          for (int64_t k = 0; k < f.rank; ++k) f.right[(size_t)(k * cols + i)] = b[(size_t)(i * f.rank + k)];
      }
      factors.push_back(std::move(f));
    }
    std::vector<uint8_t> merged((size_t)t->n_bytes);
    std::copy_n(t->data, t->n_bytes, merged.data());  // bytes past the rows, if any, kept
    pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
      std::vector<float> row((size_t)cols);
      for (int64_t o = begin; o < end; ++o) {
        ops->to_float(t->data + (size_t)o * *stride, row.data(), cols);
        for (const Factor& f : factors) {
          const float* right = f.right.data() + (o / f.rows_per_expert) * f.rank * cols;
          for (int64_t k = 0; k < f.rank; ++k) {
            const float l = f.scale * f.left[(size_t)(o * f.rank + k)];
            const float* r = right + k * cols;
            for (int64_t i = 0; i < cols; ++i) row[(size_t)i] += l * r[i];
          }
        }
        ops->from_float(row.data(), merged.data() + (size_t)o * *stride, cols);
      }
    });
    CAIRN_RETURN_IF_ERROR(base.replace_tensor_data(name, merged));
  }
  return Status::ok();
}

void lora_add(const LoraPair& pair, const float* x, int64_t x_stride, float* y, int64_t y_stride,
              LoraRows& lr, ThreadPool& pool) {
  const int64_t n = (int64_t)lr.rows.size();
  if (n == 0) return;
  const int64_t in = pair.a.cols, rank = pair.a.rows, out = pair.b.rows;
  lr.in.resize((size_t)(n * in));
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(x + (int64_t)lr.rows[(size_t)i] * x_stride, in, lr.in.data() + i * in);
  round_like_reference(pair.a.type, lr.in.data(), lr.in.size());
  lr.mid.resize((size_t)(n * rank));
  kernels::matmul(pair.a, lr.in.data(), n, lr.mid.data(), pool);
  round_like_reference(pair.b.type, lr.mid.data(), lr.mid.size());
  lr.out.resize((size_t)(n * out));
  kernels::matmul(pair.b, lr.mid.data(), n, lr.out.data(), pool);
  add_scaled_rows(lr, out, pair.scale, y, y_stride);
}

void lora_add_embedding(const LoraPair& pair, const int32_t* tokens, float* x, int64_t n_embd,
                        LoraRows& lr, ThreadPool& pool) {
  const int64_t n = (int64_t)lr.rows.size();
  if (n == 0) return;
  const int64_t rank = pair.a.cols;
  lr.mid.resize((size_t)(n * rank));
  for (int64_t i = 0; i < n; ++i)
    kernels::get_row(pair.a, tokens[lr.rows[(size_t)i]], lr.mid.data() + i * rank);
  round_like_reference(pair.b.type, lr.mid.data(), lr.mid.size());
  lr.out.resize((size_t)(n * n_embd));
  kernels::matmul(pair.b, lr.mid.data(), n, lr.out.data(), pool);
  add_scaled_rows(lr, n_embd, pair.scale, x, n_embd);
}

}  // namespace cairn::model

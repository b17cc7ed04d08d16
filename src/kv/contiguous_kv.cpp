// kv/contiguous_kv.cpp — contiguous K/V slabs per sequence, F16 (by default) or F32 rows.
#include "kv/contiguous_kv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/half.h"
#include "core/quant.h"
#include "kernels/type_ops.h"

namespace cairn::kv {

Result<std::unique_ptr<ContiguousKvCache>> ContiguousKvCache::create(const KvShape& shape,
                                                                     int n_seqs, int64_t n_ctx,
                                                                     TensorType dtype) {
  if (dtype != TensorType::F16 && dtype != TensorType::F32 && dtype != TensorType::Q8_0)
    return Status::error("KV cache type " + std::string(type_info(dtype).name) +
                         " is not supported (f16, f32, q8_0)");
  if (n_seqs <= 0) return Status::error("KV cache needs at least one sequence");
  if (n_ctx <= 0 || n_ctx > std::numeric_limits<int32_t>::max())
    return Status::error("KV cache context " + std::to_string(n_ctx) + " is out of range");
  if (shape.n_layer <= 0 || shape.row_elems <= 0)
    return Status::error("KV cache needs positive layer count and K/V row size");

  if (Status st = check_kv_type(dtype, shape.row_elems); !st.is_ok()) return st;
  const size_t row_bytes = (size_t)kv_row_bytes(dtype, shape.row_elems);
  // layers * seqs * 2 (K and V) * ctx * row bytes, checked for overflow.
  size_t total = row_bytes;
  for (uint64_t f : {(uint64_t)shape.n_layer, (uint64_t)n_seqs, uint64_t{2}, (uint64_t)n_ctx}) {
    if (total > std::numeric_limits<size_t>::max() / f)
      return Status::error("KV cache size overflows");
    total *= (size_t)f;
  }
  std::unique_ptr<ContiguousKvCache> c(new ContiguousKvCache());
  c->dtype_ = dtype;
  c->n_layer_ = shape.n_layer;
  c->n_seqs_ = n_seqs;
  c->n_ctx_ = n_ctx;
  c->row_elems_ = shape.row_elems;
  c->row_bytes_ = row_bytes;
  c->data_.assign(total, 0);
  return c;
}

int64_t ContiguousKvCache::capacity(SeqId seq) const {
  return seq >= 0 && seq < n_seqs_ ? n_ctx_ : 0;
}

size_t ContiguousKvCache::offset(int layer, SeqId seq, int32_t pos, int which) const {
  const size_t slab = ((size_t)layer * (size_t)n_seqs_ + (size_t)seq) * 2 + (size_t)which;
  return (slab * (size_t)n_ctx_ + (size_t)pos) * row_bytes_;
}

void ContiguousKvCache::write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) {
  uint8_t* dk = data_.data() + offset(layer, seq, pos, 0);
  uint8_t* dv = data_.data() + offset(layer, seq, pos, 1);
  if (dtype_ == TensorType::F32) {
    std::memcpy(dk, k, row_bytes_);
    std::memcpy(dv, v, row_bytes_);
    return;
  }
  // F16: the type table's bits; Q8_0: the reference cache's rounding.
  const auto from_float = kv_row_quantizer(dtype_);
  from_float(k, dk, row_elems_);
  from_float(v, dv, row_elems_);
}

const void* ContiguousKvCache::key(int layer, SeqId seq, int32_t pos) const {
  return data_.data() + offset(layer, seq, pos, 0);
}

const void* ContiguousKvCache::value(int layer, SeqId seq, int32_t pos) const {
  return data_.data() + offset(layer, seq, pos, 1);
}

// One slab per (layer, sequence, K|V): every position up to n_ctx is one run.
KvView::Rows ContiguousKvCache::rows(int layer, SeqId seq, int32_t pos, int32_t max_n) const {
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(max_n, n_ctx_ - pos));
  return {key(layer, seq, pos), value(layer, seq, pos), (int32_t)n};
}

}  // namespace cairn::kv

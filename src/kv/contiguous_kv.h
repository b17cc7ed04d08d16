// kv/contiguous_kv.h — a simple KvView: one contiguous slab per sequence.
// Owns K/V storage for a fixed number of sequences (ids 0..n_seqs-1), each up to
// n_ctx positions, in F16 (the default, as the reference stores K/V), F32 or Q8_0.
// For tests, `cairn run` and single-sequence use; the paged cache
// (kv/kv_cache.h) replaces it for serving. Never grows after creation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"
#include "kv/kv_view.h"

namespace cairn::kv {

class ContiguousKvCache final : public KvView {
 public:
  // Errors on non-positive sizes, a dtype other than F16/F32/Q8_0 (Q8_0: rows
  // a multiple of 32), or a size whose byte count overflows. `dtype` wins
  // over shape.dtype.
  static Result<std::unique_ptr<ContiguousKvCache>> create(const KvShape& shape, int n_seqs,
                                                           int64_t n_ctx,
                                                           TensorType dtype = TensorType::F16);

  TensorType dtype() const override { return dtype_; }
  int64_t capacity(SeqId seq) const override;
  void write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) override;
  const void* key(int layer, SeqId seq, int32_t pos) const override;
  const void* value(int layer, SeqId seq, int32_t pos) const override;
  Rows rows(int layer, SeqId seq, int32_t pos, int32_t max_n) const override;

  int64_t n_layer() const override { return n_layer_; }
  int64_t row_elems() const override { return row_elems_; }
  int n_seqs() const { return n_seqs_; }
  int64_t n_ctx() const { return n_ctx_; }
  size_t bytes() const { return data_.size(); }

 private:
  ContiguousKvCache() = default;
  size_t offset(int layer, SeqId seq, int32_t pos, int which) const;

  TensorType dtype_ = TensorType::F16;
  int n_layer_ = 0;
  int n_seqs_ = 0;
  int64_t n_ctx_ = 0;
  int64_t row_elems_ = 0;
  size_t row_bytes_ = 0;
  std::vector<uint8_t> data_;  // [layer][seq][K|V][pos][row]
};

}  // namespace cairn::kv

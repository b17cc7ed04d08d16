// kv/block_table_kv.h — K/V rows at block ids someone else hands out.
// A distributed model's agent (src/distributed) keeps its heads' K/V for
// the layers it runs, while the worker's PagedKvCache (tables_only) decides
// which block holds which positions. Owns the pool (laid out as the paged
// cache's blocks are) and the tables of the forward in flight, which the
// caller sets before each forward. Never allocates blocks or caches prefixes.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_view.h"

namespace cairn::kv {

struct SeqTable {
  SeqId seq = 0;
  std::vector<int32_t> blocks;
  int32_t writable_from = 0;  // earlier positions are in full (shared) blocks: writes skipped
  int32_t capacity = 0;       // positions [0, capacity) may be used
};

class BlockTableKv final : public KvView {
 public:
  // n_blocks blocks of block_tokens (a power of two) rows of `shape` (in shape.dtype).
  static Result<std::unique_ptr<BlockTableKv>> create(const KvShape& shape, int32_t n_blocks,
                                                      int32_t block_tokens);

  // The sequences of the next forward. Errors (nothing changed) when a
  // block id is outside the pool, a table is shorter than its capacity, or
  // a sequence appears twice.
  Status set_tables(std::vector<SeqTable> tables);

  int64_t pool_bytes() const { return (int64_t)n_blocks_ * (int64_t)block_bytes_; }

  TensorType dtype() const override { return shape_.dtype; }
  int64_t capacity(SeqId seq) const override;
  void write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) override;
  const void* key(int layer, SeqId seq, int32_t pos) const override;
  const void* value(int layer, SeqId seq, int32_t pos) const override;
  Rows rows(int layer, SeqId seq, int32_t pos, int32_t max_n) const override;
  int64_t n_layer() const override { return shape_.n_layer; }
  int64_t row_elems() const override { return shape_.row_elems; }

 private:
  BlockTableKv(const KvShape& shape, int32_t n_blocks, int32_t block_tokens, size_t block_bytes,
               std::unique_ptr<uint8_t[]> pool);
  const SeqTable* find(SeqId seq) const;
  uint8_t* row(const SeqTable& t, int layer, int32_t pos, int which) const;

  KvShape shape_;
  int32_t n_blocks_;
  int32_t bt_;
  size_t block_bytes_;
  size_t row_bytes_;
  std::unique_ptr<uint8_t[]> pool_;
  std::unordered_map<SeqId, SeqTable> tables_;
};

}  // namespace cairn::kv

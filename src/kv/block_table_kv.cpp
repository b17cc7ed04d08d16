// kv/block_table_kv.cpp — see block_table_kv.h. A block is laid out as the
// paged cache's: [layer][K|V][slot][row], rows of shape.dtype (F16 or Q8_0).
#include "kv/block_table_kv.h"

#include <algorithm>
#include <bit>
#include <new>
#include <string>

#include "kernels/type_ops.h"
#include "kv/kv_cache.h"

namespace cairn::kv {

Result<std::unique_ptr<BlockTableKv>> BlockTableKv::create(const KvShape& shape, int32_t n_blocks,
                                                           int32_t block_tokens) {
  if (block_tokens <= 0 || block_tokens > 1024 || !std::has_single_bit((uint32_t)block_tokens))
    return Status::error("KV block size " + std::to_string(block_tokens) +
                         " is not a power of two in [1, 1024]");
  if (shape.dtype != TensorType::F16 && shape.dtype != TensorType::Q8_0)
    return Status::error("KV cache type " + std::string(type_info(shape.dtype).name) +
                         " is not supported (f16, q8_0)");
  if (Status st = check_kv_type(shape.dtype, shape.row_elems); !st.is_ok()) return st;
  const int64_t bb = PagedKvCache::block_bytes(shape, block_tokens);
  if (bb <= 0) return Status::error("a KV block of this shape is empty or overflows");
  if (n_blocks < 1 || (uint64_t)n_blocks > SIZE_MAX / (uint64_t)bb)
    return Status::error("a KV pool of " + std::to_string(n_blocks) + " blocks cannot be made");
  // Uninitialised: a position is read only after a forward wrote it.
  std::unique_ptr<uint8_t[]> pool(new (std::nothrow) uint8_t[(size_t)n_blocks * (size_t)bb]);
  if (!pool)
    return Status::error("cannot allocate a KV pool of " +
                         std::to_string((int64_t)n_blocks * bb) + " bytes");
  return std::unique_ptr<BlockTableKv>(
      new BlockTableKv(shape, n_blocks, block_tokens, (size_t)bb, std::move(pool)));
}

BlockTableKv::BlockTableKv(const KvShape& shape, int32_t n_blocks, int32_t block_tokens,
                           size_t block_bytes, std::unique_ptr<uint8_t[]> pool)
    : shape_(shape),
      n_blocks_(n_blocks),
      bt_(block_tokens),
      block_bytes_(block_bytes),
      row_bytes_((size_t)kv_row_bytes(shape.dtype, shape.row_elems)),
      pool_(std::move(pool)) {}

Status BlockTableKv::set_tables(std::vector<SeqTable> tables) {
  std::unordered_map<SeqId, SeqTable> next;
  for (SeqTable& t : tables) {
    const std::string which = "sequence " + std::to_string(t.seq);
    if (t.capacity < 0 || t.writable_from < 0 ||
        (int64_t)t.capacity > (int64_t)t.blocks.size() * bt_)
      return Status::error(which + ": capacity " + std::to_string(t.capacity) + " does not fit its " +
                           std::to_string(t.blocks.size()) + " blocks");
    for (int32_t b : t.blocks)
      if (b < 0 || b >= n_blocks_)
        return Status::error(which + ": block " + std::to_string(b) + " is outside the pool of " +
                             std::to_string(n_blocks_));
    const SeqId id = t.seq;
    if (!next.emplace(id, std::move(t)).second) return Status::error(which + " appears twice");
  }
  tables_ = std::move(next);
  return Status::ok();
}

const SeqTable* BlockTableKv::find(SeqId seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? nullptr : &it->second;
}

uint8_t* BlockTableKv::row(const SeqTable& t, int layer, int32_t pos, int which) const {
  const size_t b = (size_t)t.blocks[(size_t)(pos / bt_)];
  const size_t slot = ((size_t)layer * 2 + (size_t)which) * (size_t)bt_ + (size_t)(pos % bt_);
  return pool_.get() + b * block_bytes_ + slot * row_bytes_;
}

int64_t BlockTableKv::capacity(SeqId seq) const {
  const SeqTable* t = find(seq);
  return t ? t->capacity : 0;
}

void BlockTableKv::write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) {
  const SeqTable* t = find(seq);
  if (!t || layer < 0 || layer >= shape_.n_layer || pos < t->writable_from || pos >= t->capacity) return;
  const auto from_float = kv_row_quantizer(shape_.dtype);
  from_float(k, row(*t, layer, pos, 0), shape_.row_elems);
  from_float(v, row(*t, layer, pos, 1), shape_.row_elems);
}

const void* BlockTableKv::key(int layer, SeqId seq, int32_t pos) const {
  return row(*find(seq), layer, pos, 0);
}

const void* BlockTableKv::value(int layer, SeqId seq, int32_t pos) const {
  return row(*find(seq), layer, pos, 1);
}

KvView::Rows BlockTableKv::rows(int layer, SeqId seq, int32_t pos, int32_t max_n) const {
  const SeqTable& t = *find(seq);
  const int32_t n = std::max<int32_t>(1, std::min<int32_t>(max_n, bt_ - pos % bt_));
  return {row(t, layer, pos, 0), row(t, layer, pos, 1), n};
}

}  // namespace cairn::kv

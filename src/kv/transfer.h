// kv/transfer.h — K/V rows that leave one cache and enter another (prefill → decode handoff).
// Owns the transfer's data types and their checks: the geometry both ends
// must share (format version, layers, row width, element type, block size),
// a run of positions' rows as bytes, and a whole prompt's rows as the decode
// side receives them. Never touches a cache itself (the engine reads and
// writes rows through PagedKvCache::read_raw / write_raw) nor the network.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_view.h"

namespace cairn::kv {

// Raised whenever the layout of KvRows::bytes changes.
inline constexpr uint32_t kTransferVersion = 1;

struct KvGeometry {
  uint32_t version = kTransferVersion;
  int32_t n_layer = 0;
  int32_t row_elems = 0;    // n_head_kv * head_dim
  int32_t elem_bytes = 2;   // 2: F16 (the paged cache's type); Q8_0 sends 1
  int32_t block_tokens = 16;
  // How rows are stored (--kv-type): rows of different types are never
  // copied into each other (geometry_mismatch refuses them).
  TensorType dtype = TensorType::F16;

  int64_t row_bytes() const {
    return dtype == TensorType::Q8_0 ? kv_row_bytes(dtype, row_elems) : (int64_t)row_elems * elem_bytes;
  }
  // Bytes of `n` positions: every layer's K and V row.
  int64_t bytes_for(int64_t n) const { return 2 * (int64_t)n_layer * row_bytes() * n; }
  bool operator==(const KvGeometry&) const = default;
};

// "" when `got` can be imported where `want` is the local geometry; else one
// line naming the first field that differs (both values).
std::string geometry_mismatch(const KvGeometry& want, const KvGeometry& got);

// Positions [first, first + n) of one sequence. `bytes` holds, layer by
// layer, the n K rows then the n V rows (geometry.row_bytes() each), so a
// layer's run is contiguous. Rows a sliding-window layer no longer held at
// export time are zeros (they are never read again: attention of the
// positions after the prompt does not reach back that far). A string so that
// a received message's bytes move in without a copy.
struct KvRows {
  int32_t first = 0;
  int32_t n = 0;
  std::string bytes;
};

// One run as the prefill side reports it: the first run (rows.first == 0)
// also carries the geometry and the prompt the rows belong to.
struct KvRun {
  KvGeometry geometry;
  std::vector<Token> prompt;
  KvRows rows;
};

// A prompt's rows as the decode side holds them before admission: the
// geometry, the prompt they were computed for, and runs that cover
// [0, prompt.size()) in order without gaps.
struct ImportedKv {
  KvGeometry geometry;
  std::vector<Token> prompt;
  std::vector<KvRows> runs;

  int64_t bytes() const;
  // ok when the runs are contiguous from 0, end at prompt.size(), and each
  // run's byte count matches its positions.
  Status check() const;
};

}  // namespace cairn::kv

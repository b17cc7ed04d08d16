// kv/kv_view.h — how a forward pass reads and writes K/V rows.
// The model layer (above) computes with this interface; the caches in this
// folder (paged: kv_cache.h, contiguous: contiguous_kv.h) implement it. Owns no memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"

namespace cairn {

using Token = int32_t;  // same alias as tokenizer/tokenizer.h (a redeclaration, not a clash)
using SeqId = int32_t;

namespace kv {

// The geometry of one model's K/V: what a cache (or one of its blocks) must hold.
struct KvShape {
  int32_t n_layer = 0;
  int32_t row_elems = 0;  // n_head_kv * head_dim
  // Sliding-window layers (gemma2/gemma3, mistral): with window > 0, layer l
  // with sliding[l] != 0 attends only to its last `window` positions, so a
  // paged cache may drop its older rows (kv_cache.h). Empty or 0: every layer
  // keeps every position. Other caches ignore both.
  int32_t window = 0;
  std::vector<uint8_t> sliding = {};
  // How a row is stored (--kv-type): F16 (the default), F32 (contiguous
  // caches only) or Q8_0 (blocks of 32 int8 and one F16 scale: 34 bytes per
  // 32 elements, so row_elems must be a multiple of 32).
  TensorType dtype = TensorType::F16;
};

// Bytes of one K (or V) row of `elems` elements stored as `type`; 0 when the
// type cannot store such a row (not F16/F32/Q8_0, or Q8_0 with elems % 32).
inline int64_t kv_row_bytes(TensorType type, int64_t elems) {
  if (elems <= 0) return 0;
  switch (type) {
    case TensorType::F32: return elems * 4;
    case TensorType::F16: return elems * 2;
    case TensorType::Q8_0: return elems % 32 == 0 ? elems / 32 * 34 : 0;
    default: return 0;
  }
}

// How a row of `type` is written from floats: the type table's quantizer,
// except Q8_0, which takes the activation rounding (ties to even, scale
// inverted as 127/amax) that the reference's own cache writes.
using KvRowQuantizer = void (*)(const float* src, void* dst, int64_t n);
KvRowQuantizer kv_row_quantizer(TensorType type);

// The --kv-type names: "f16" or "q8_0"; an error naming both otherwise.
Result<TensorType> parse_kv_type(const std::string& name);
// ok when rows of `row_elems` elements can be stored as `type` in a cache;
// else one line saying why (for a start-up error). With the model's
// `head_dim` (> 0), Q8_0 also needs whole blocks per head, as the reference
// does: a block spanning heads takes the largest head's scale for all.
Status check_kv_type(TensorType type, int64_t row_elems, int64_t head_dim = 0);

// Where K/V rows live. A row is n_head_kv * head_dim elements of dtype(), the
// K (or V) of one token in one layer. forward() writes every token's K/V of a
// layer before attention reads it, so a token sees itself and the earlier
// tokens of its own batch. Positions 0..pos of a sequence must have been
// written (by this or an earlier forward) before a token at pos attends.
class KvView {
 public:
  virtual ~KvView() = default;
  virtual TensorType dtype() const = 0;  // F16, F32 or Q8_0 (rows as kv_row_bytes lays them out)
  // Positions [0, capacity) of `seq` may be written; 0 for an unknown sequence.
  // forward() checks every token against it before touching anything.
  virtual int64_t capacity(SeqId seq) const = 0;
  // k and v are float rows; the view converts them to dtype(). Writes of
  // different (layer, seq, pos) may run concurrently (forward spreads a
  // prompt's rows over its threads), so write() changes nothing but that row.
  virtual void write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) = 0;
  virtual const void* key(int layer, SeqId seq, int32_t pos) const = 0;
  virtual const void* value(int layer, SeqId seq, int32_t pos) const = 0;
  // Positions [pos, pos + n) of `seq` whose rows lie back to back: K row
  // pos + i at k + i * row_bytes (row_bytes = kv_row_bytes(dtype(), the
  // model's n_head_kv * head_dim)), V likewise, with 1 <= n <= max_n. Lets attention
  // walk a sequence a block at a time instead of a virtual call per position.
  // The default is one row; caches that store runs override it.
  struct Rows {
    const void* k;
    const void* v;
    int32_t n;
  };
  virtual Rows rows(int layer, SeqId seq, int32_t pos, int32_t max_n) const {
    (void)max_n;
    return {key(layer, seq, pos), value(layer, seq, pos), 1};
  }
  // > 0: the view keeps only the last `n` positions of `layer` for each
  // sequence (older rows may be gone); forward() refuses it unless the model's
  // layer slides with a window of at most n. 0: every position is kept.
  virtual int64_t kept_window(int layer) const {
    (void)layer;
    return 0;
  }
  // The shape the view was built for; forward() refuses a view whose shape
  // differs from the model's (0 = not reported, not checked).
  virtual int64_t n_layer() const { return 0; }
  virtual int64_t row_elems() const { return 0; }
};

}  // namespace kv
}  // namespace cairn

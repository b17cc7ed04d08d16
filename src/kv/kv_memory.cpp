// kv/kv_memory.cpp — block keys and pool sizing: the parts of the cache that need no pool.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "core/quant_blocks.h"
#include "kernels/type_ops.h"
#include "kv/kv_cache.h"

namespace cairn::kv {
namespace {

// MurmurHash3's finalizer: a bijection on 64 bits with full avalanche.
uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

KvRowQuantizer kv_row_quantizer(TensorType type) {
  if (type == TensorType::Q8_0) return quant::q8_0_from_float_act;
  const TypeOps* ops = type_ops(type);
  return ops ? ops->from_float : nullptr;
}

Result<TensorType> parse_kv_type(const std::string& name) {
  if (name == "f16") return TensorType::F16;
  if (name == "q8_0") return TensorType::Q8_0;
  return Status::invalid_argument("--kv-type must be f16 or q8_0 (got '" + name.substr(0, 32) +
                                  "')");
}

Status check_kv_type(TensorType type, int64_t row_elems, int64_t head_dim) {
  if (type == TensorType::Q8_0 && head_dim > 0 && head_dim % 32 != 0)
    return Status::invalid_argument(
        "--kv-type q8_0 needs head_dim divisible by 32 (a Q8_0 block must not span two heads), "
        "this model's is " +
        std::to_string(head_dim));
  if (type == TensorType::Q8_0 && row_elems % 32 != 0)
    return Status::invalid_argument(
        "--kv-type q8_0 needs n_head_kv*head_dim divisible by 32, this model has " +
        std::to_string(row_elems));
  if (type != TensorType::F16 && type != TensorType::Q8_0 && type != TensorType::F32)
    return Status::invalid_argument("KV cache type " + std::string(type_info(type).name) +
                                    " is not supported (f16, q8_0)");
  if (kv_row_bytes(type, row_elems) <= 0)
    return Status::invalid_argument("KV rows of " + std::to_string(row_elems) +
                                    " elements are empty");
  return Status::ok();
}

// Two token ids per 64-bit word, each step a bijection of the state: blocks
// that differ in one word can never collide, and any other pair collides with
// probability ~2^-64. The length is folded in last so a block and its
// zero-padded extension differ.
uint64_t hash_block(uint64_t prev_key, std::span<const Token> tokens) {
  uint64_t h = fmix64(prev_key ^ 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
    h = fmix64(h ^ w) + 0x2545f4914f6cdd1dULL;
  }
  if (i < tokens.size()) h = fmix64(h ^ (uint64_t)(uint32_t)tokens[i]) + 0x2545f4914f6cdd1dULL;
  return fmix64(h ^ (uint64_t)tokens.size());
}

int64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t result = -1;
  while (std::fgets(line, sizeof line, f)) {
    long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
      if (kib >= 0 && kib < std::numeric_limits<int64_t>::max() / 1024) result = kib * 1024;
      break;
    }
  }
  std::fclose(f);
  return result;
}

int64_t default_pool_bytes(const KvShape& shape, int64_t n_ctx, int64_t available_bytes) {
  const int64_t block = PagedKvCache::block_bytes(shape);
  if (block <= 0) return 0;
  constexpr int64_t kTokens = 16;
  const int64_t want_tokens = std::max<int64_t>(4 * std::clamp<int64_t>(n_ctx, 0, 1 << 28), 4096);
  // Never more blocks than an int32 counts.
  // The same bytes per token as without sliding layers: they serve more sequences.
  int64_t blocks = std::min<int64_t>((want_tokens + kTokens - 1) / kTokens *
                                         std::max(1, PagedKvCache::tables(shape)),
                                     std::numeric_limits<int32_t>::max() / 2);
  if (blocks > std::numeric_limits<int64_t>::max() / block)
    blocks = std::numeric_limits<int64_t>::max() / block;
  if (available_bytes < 0) available_bytes = available_memory_bytes();
  if (available_bytes >= 0) blocks = std::min(blocks, available_bytes / 2 / block);
  blocks = std::max<int64_t>(blocks, kMinBlocks);
  return blocks * block;
}

}  // namespace cairn::kv

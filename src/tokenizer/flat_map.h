// tokenizer/flat_map.h — two open-addressing hash tables for vocabulary
// loading: text -> token id, and (token, token) -> merge. Internal to the
// tokenizer layer. Node-based maps spend most of a 128k-token vocabulary's
// load time on allocation and cache misses; these are flat arrays probed
// linearly, sized once, and never rehashed.
#pragma once

#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cairn::tok {

// Token texts -> ids. Keeps a pointer to the texts it indexes (which must not
// move or change afterwards).
class TextIndex {
 public:
  // Indexes texts[i] -> i, skipping empty texts. Returns -1, or the id of the
  // first text equal to an earlier one (*dup_of receives the earlier id).
  int32_t build(const std::vector<std::string>& texts, int32_t* dup_of) {
    texts_ = &texts;
    const size_t cap = std::bit_ceil(texts.size() + texts.size() / 2 + 2);
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string_view s = texts[i];
      if (s.empty()) continue;
      const uint64_t h = std::hash<std::string_view>{}(s);
      for (size_t k = h & mask_;; k = (k + 1) & mask_) {
        Slot& sl = slots_[k];
        if (sl.id < 0) {
          sl = Slot{static_cast<uint32_t>(h), static_cast<int32_t>(i)};
          break;
        }
        if (sl.hash == static_cast<uint32_t>(h) && texts[sl.id] == s) {
          *dup_of = sl.id;
          return static_cast<int32_t>(i);
        }
      }
    }
    return -1;
  }

  int32_t find(std::string_view s) const {
    if (slots_.empty() || s.empty()) return -1;
    const uint64_t h = std::hash<std::string_view>{}(s);
    for (size_t k = h & mask_;; k = (k + 1) & mask_) {
      const Slot& sl = slots_[k];
      if (sl.id < 0) return -1;
      if (sl.hash == static_cast<uint32_t>(h) && (*texts_)[sl.id] == s) return sl.id;
    }
  }

 private:
  struct Slot {
    uint32_t hash;  // low bits of the full hash: most mismatches skip the compare
    int32_t id;     // -1: empty
  };
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// (left id, right id) -> (rank, result id) for BPE merges.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t result;
  };
  explicit PairMap(size_t n = 0) {
    const size_t cap = std::bit_ceil(n + n / 2 + 2);  // load factor at most 2/3
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
  }
  // Keeps the first value inserted for a pair.
  void insert(int32_t a, int32_t b, Value v) {
    const uint64_t key = pack(a, b);
    for (size_t k = mix(key) & mask_;; k = (k + 1) & mask_) {
      if (slots_[k].key == key) return;
      if (slots_[k].key == kEmpty) {
        slots_[k] = Slot{key, v};
        return;
      }
    }
  }
  const Value* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t k = mix(key) & mask_;; k = (k + 1) & mask_) {
      if (slots_[k].key == key) return &slots_[k].value;
      if (slots_[k].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;  // ids are non-negative int32: never a key
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t mix(uint64_t x) {  // splitmix64's finalizer
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  struct Slot {
    uint64_t key;
    Value value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace cairn::tok

// kernels/amx_tiles.h — internal to the packed kernels (packed_q_amx.cpp,
// packed_k_amx.cpp, packed_float.cpp): the AMX tile configuration and the two
// ways to run tile operations, and which of them the process uses.
//
// The tile operations come from a policy: AmxHardware issues the instructions;
// AmxEmulated does the same arithmetic in plain C++ (CAIRN_AMX=emulate), so the
// kernels' layouts and indexing are tested on any host with AVX-512 VNNI. On a
// host with AMX, the hardware path is checked once against the VNNI kernels
// before it is used (amx_mode): a mismatch logs and falls back.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/packed.h"

namespace cairn::kernels {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

constexpr int kAmxTokens = 16;  // rows of the activation and sum tiles

// One configuration for every kernel (16-row groups of weights):
// 0, 1: two groups' sums, 16 tokens x 16 rows of int32;
// 2: 16 tokens' codes of a 32-element block (Q4_0, Q8_0, Q4_K sub-blocks);
// 3, 4: two groups' codes of such a block, 8 rows of 64 bytes (row k:
//       elements 4k..4k+3 of each of the 16 weight rows);
// 5: 16 tokens' codes of a 16-element block (Q6_K sub-blocks);
// 6, 7: two groups' codes of such a block, 4 rows of 64 bytes.
inline const TileConfig& amx_config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i : {0, 1}) t.rows[i] = kAmxTokens, t.colsb[i] = 64;
    t.rows[2] = kAmxTokens, t.colsb[2] = 32;
    for (int i : {3, 4}) t.rows[i] = 8, t.colsb[i] = 64;
    t.rows[5] = kAmxTokens, t.colsb[5] = 16;
    for (int i : {6, 7}) t.rows[i] = 4, t.colsb[i] = 64;
    return t;
  }();
  return c;
}

// The instructions (inline assembly: the compiler's AMX intrinsics declare no
// memory operands, so stores to a tile's source could move past its load).
struct AmxHardware {
  static void begin(const TileConfig& c) { asm volatile("ldtilecfg %0" ::"m"(c)); }
  static void end() { asm volatile("tilerelease" ::); }
  template <int T>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* p, size_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int C, int A, int B>  // C += A . B, signed bytes
  static void dot() {
    asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  template <int C, int A, int B>  // C += A . B, BF16 pairs into float
  static void dot_bf16() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  template <int T>
  static void store(void* p, size_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
};

// The same operations on a thread's array of tiles, as the instruction set
// reference defines them (rows and bytes per row from the configuration; the
// bytes of a row beyond its width read as zero).
struct AmxEmulated {
  struct State {
    TileConfig cfg;
    alignas(64) uint8_t tile[8][16 * 64];
  };
  static State& state() {
    static thread_local State s;
    return s;
  }
  static void begin(const TileConfig& c) {
    state().cfg = c;
    std::memset(state().tile, 0, sizeof(state().tile));
  }
  static void end() {}
  template <int T>
  static void zero() {
    std::memset(state().tile[T], 0, sizeof(state().tile[T]));
  }
  template <int T>
  static void load(const void* p, size_t stride) {
    State& s = state();
    zero<T>();
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(s.tile[T] + 64 * r, static_cast<const uint8_t*>(p) + r * stride, s.cfg.colsb[T]);
  }
  template <int C, int A, int B>
  static void dot() {
    State& s = state();
    const int m_rows = s.cfg.rows[C], n_cols = s.cfg.colsb[C] / 4, k_groups = s.cfg.colsb[A] / 4;
    for (int m = 0; m < m_rows; ++m) {
      for (int n = 0; n < n_cols; ++n) {
        int32_t sum;
        std::memcpy(&sum, s.tile[C] + 64 * m + 4 * n, 4);
        for (int k = 0; k < k_groups; ++k)
          for (int i = 0; i < 4; ++i)
            sum += (int32_t)(int8_t)s.tile[A][64 * m + 4 * k + i] *
                   (int32_t)(int8_t)s.tile[B][64 * k + 4 * n + i];
        std::memcpy(s.tile[C] + 64 * m + 4 * n, &sum, 4);
      }
    }
  }
  // Per output, pair by pair: the even elements' product added first, then
  // the odd ones' (products of BF16 values are exact in float; each add
  // rounds to nearest even); denormal inputs and results flushed to zero.
  template <int C, int A, int B>
  static void dot_bf16() {
    State& s = state();
    const int m_rows = s.cfg.rows[C], n_cols = s.cfg.colsb[C] / 4, k_pairs = s.cfg.colsb[A] / 4;
    const auto bf16 = [](const uint8_t* p) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const uint32_t bits = (uint32_t)h << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return flush(f);
    };
    for (int m = 0; m < m_rows; ++m) {
      for (int n = 0; n < n_cols; ++n) {
        float sum;
        std::memcpy(&sum, s.tile[C] + 64 * m + 4 * n, 4);
        for (int k = 0; k < k_pairs; ++k)
          for (int i = 0; i < 2; ++i)
            sum = flush(sum + bf16(s.tile[A] + 64 * m + 4 * k + 2 * i) *
                                  bf16(s.tile[B] + 64 * k + 4 * n + 2 * i));
        std::memcpy(s.tile[C] + 64 * m + 4 * n, &sum, 4);
      }
    }
  }
  static float flush(float x) {
    return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x;
  }
  template <int T>
  static void store(void* p, size_t stride) {
    const State& s = state();
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, s.tile[T] + 64 * r, s.cfg.colsb[T]);
  }
};

// What packed_tile_path and packed_bf16_tile_path print for a mode, the
// vector kernels' name when the tiles are off.
inline const char* amx_path_name(AmxMode mode, const char* vector_path) {
  switch (mode) {
    case AmxMode::kHardware:
      return "amx";
    case AmxMode::kEmulated:
      return "amx-emulated";
    case AmxMode::kOff:
      break;
  }
  return vector_path;
}

// The process's mode, resolved once (packed_dispatch.cpp): CAIRN_AMX=off
// turns the tiles off, =emulate runs them emulated (tests); otherwise they
// run where the ISA level includes AMX and every tile kernel agreed with its
// VNNI one. The families' drivers get it through the layout table.
AmxMode amx_mode();

}  // namespace cairn::kernels

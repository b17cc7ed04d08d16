// kernels/sgemm.cpp — float32 GEMM (sgemm.h): packers, microkernels, driver.
// One tile of C (MR rows × nr columns) is summed in registers over a K block
// (kc ≤ 384 steps: per step nr/8 (or /16) vector loads of B, MR broadcasts
// of A and MR·nr/8 FMAs), then finished by the epilogue. The driver walks
// N in blocks of 256 columns and K in blocks of 384 (B's block
// stays in L2), then MR-row strips of A (copied to a 9-18 KiB buffer that
// stays in L1) across the block's panels, each tile requesting a slice of
// the next block into L2 so that streaming B overlaps the multiply (small M).
// Threads split N's panels, and M when N has too few.
// Tiles with fewer than MR rows use kernels instantiated for their row count,
// so M = 1 costs one row's FMAs, not MR's.
#include "kernels/sgemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "core/simd.h"
#include "kernels/packed_layout.h"

namespace cairn::kernels {
namespace {

// Columns of B per block: 256 (a 384 KiB block of kc = 384 rows, inside
// Zen 3's 512 KiB L2 with A's strips and C's lines). Few rows of A (up to
// kFewStrips strips): the next block is requested while this one is
// multiplied (it partly displaces this one; 128 columns, which would keep
// both, measured no better on this host: more blocks, more strip copies).
// More rows: the multiply is the bottleneck, nothing requested ahead.
constexpr int64_t kNcFew = 256, kNcMany = 256;
constexpr int64_t kFewStrips = 8;
constexpr int kMaxMr = 12;

struct TileEpi {
  float alpha, beta;
  const float* col_bias;  // at the tile's first column, or null
  const float* row_bias;  // at the tile's first row, or null
  // Lines [pf, pf_end) to request into L2, one every pf_step steps of k.
  const char* pf;
  const char* pf_end;
  int64_t pf_step;
};

// a: the tile's A at its first row and the block's first k.
using TileFn = void (*)(int64_t kc, const float* a, int64_t rsa, int64_t csa, const float* b,
                        float* c, int64_t ldc, int mr, int nv, const TileEpi& e);

// Finishes one row of a tile from its sums (nv valid columns).
inline void finish_row(const float* sums, float* c, int nv, int i, const TileEpi& e) {
  for (int j = 0; j < nv; ++j) {
    float v = e.alpha * sums[j];
    if (e.row_bias) v += e.row_bias[i];
    if (e.col_bias) v += e.col_bias[j];
    if (e.beta != 0.0f) v += e.beta * c[j];
    c[j] = v;
  }
}

// ---- scalar: the reference path (and any host without AVX2) ----
constexpr int kScalarMr = 4;
constexpr int kScalarNr = 16;

void tile_scalar(int64_t kc, const float* a, int64_t rsa, int64_t csa, const float* b, float* c,
                 int64_t ldc, int mr, int nv, const TileEpi& e) {
  float acc[kScalarMr][kScalarNr] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kScalarNr;
    for (int i = 0; i < mr; ++i) {
      const float ai = a[i * rsa + k * csa];
      for (int j = 0; j < kScalarNr; ++j) acc[i][j] += ai * bk[j];
    }
  }
  for (int i = 0; i < mr; ++i) finish_row(acc[i], c + i * ldc, nv, i, e);
}

// ---- AVX2 + FMA: 6×16 (12 accumulators, 2 B vectors, 1 broadcast) ----
#define CAIRN_SGEMM_AVX2 CAIRN_SIMD_FN("avx2,fma")
constexpr int kAvx2Mr = 6;

template <int MR>
CAIRN_SGEMM_AVX2 void tile_avx2_t(int64_t kc, const float* a, int64_t rsa, int64_t csa,
                                  const float* b, float* c, int64_t ldc, int nv,
                                  const TileEpi& e) {
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  // A later K block reads the tile's C back (written a whole pass ago, so
  // out in L3 when M is large): requested now, it arrives while we multiply.
  if (e.beta != 0.0f) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
    }
  }
  // One line of the next B block requested every pf_step steps (see run_block).
  const char* pf = e.pf;
  for (int64_t k = 0; k < kc;) {
    const int64_t k_end = std::min(kc, k + e.pf_step);
    if (pf != e.pf_end) {
      _mm_prefetch(pf, _MM_HINT_T1);
      pf += 64;
    }
    for (; k < k_end; ++k) {
      const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + i * rsa);
        acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
      }
      a += csa;
      b += 16;
    }
  }
  const __m256 va = _mm256_set1_ps(e.alpha), vb = _mm256_set1_ps(e.beta);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    __m256 r0 = _mm256_mul_ps(acc0[i], va), r1 = _mm256_mul_ps(acc1[i], va);
    float* ci = c + i * ldc;
    if (nv == 16) {
      if (e.row_bias) {
        const __m256 rb = _mm256_set1_ps(e.row_bias[i]);
        r0 = _mm256_add_ps(r0, rb);
        r1 = _mm256_add_ps(r1, rb);
      }
      if (e.col_bias) {
        r0 = _mm256_add_ps(r0, _mm256_loadu_ps(e.col_bias));
        r1 = _mm256_add_ps(r1, _mm256_loadu_ps(e.col_bias + 8));
      }
      if (e.beta != 0.0f) {
        r0 = _mm256_add_ps(r0, _mm256_mul_ps(vb, _mm256_loadu_ps(ci)));
        r1 = _mm256_add_ps(r1, _mm256_mul_ps(vb, _mm256_loadu_ps(ci + 8)));
      }
      _mm256_storeu_ps(ci, r0);
      _mm256_storeu_ps(ci + 8, r1);
    } else {
      alignas(32) float sums[16];
      _mm256_store_ps(sums, acc0[i]);
      _mm256_store_ps(sums + 8, acc1[i]);
      finish_row(sums, ci, nv, i, e);
    }
  }
}

CAIRN_SGEMM_AVX2 void tile_avx2(int64_t kc, const float* a, int64_t rsa, int64_t csa,
                                const float* b, float* c, int64_t ldc, int mr, int nv,
                                const TileEpi& e) {
  switch (mr) {
    case 1: return tile_avx2_t<1>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 2: return tile_avx2_t<2>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 3: return tile_avx2_t<3>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 4: return tile_avx2_t<4>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 5: return tile_avx2_t<5>(kc, a, rsa, csa, b, c, ldc, nv, e);
    default: return tile_avx2_t<6>(kc, a, rsa, csa, b, c, ldc, nv, e);
  }
}

// ---- AVX-512: 12×32 (24 accumulators, 2 B vectors, 1 broadcast) ----
#define CAIRN_SGEMM_AVX512 CAIRN_SIMD_FN("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")
constexpr int kAvx512Mr = 12;

template <int MR>
CAIRN_SGEMM_AVX512 void tile_avx512_t(int64_t kc, const float* a, int64_t rsa, int64_t csa,
                                      const float* b, float* c, int64_t ldc, int nv,
                                      const TileEpi& e) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  // One line of the next B block requested every pf_step steps (see run_block).
  const char* pf = e.pf;
  for (int64_t k = 0; k < kc;) {
    const int64_t k_end = std::min(kc, k + e.pf_step);
    if (pf != e.pf_end) {
      _mm_prefetch(pf, _MM_HINT_T1);
      pf += 64;
    }
    for (; k < k_end; ++k) {
      const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i * rsa]);
        acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
        acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
      }
      a += csa;
      b += 32;
    }
  }
  const __m512 va = _mm512_set1_ps(e.alpha), vb = _mm512_set1_ps(e.beta);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    __m512 r0 = _mm512_mul_ps(acc0[i], va), r1 = _mm512_mul_ps(acc1[i], va);
    float* ci = c + i * ldc;
    if (nv == 32) {
      if (e.row_bias) {
        const __m512 rb = _mm512_set1_ps(e.row_bias[i]);
        r0 = _mm512_add_ps(r0, rb);
        r1 = _mm512_add_ps(r1, rb);
      }
      if (e.col_bias) {
        r0 = _mm512_add_ps(r0, _mm512_loadu_ps(e.col_bias));
        r1 = _mm512_add_ps(r1, _mm512_loadu_ps(e.col_bias + 16));
      }
      if (e.beta != 0.0f) {
        r0 = _mm512_add_ps(r0, _mm512_mul_ps(vb, _mm512_loadu_ps(ci)));
        r1 = _mm512_add_ps(r1, _mm512_mul_ps(vb, _mm512_loadu_ps(ci + 16)));
      }
      _mm512_storeu_ps(ci, r0);
      _mm512_storeu_ps(ci + 16, r1);
    } else {
      alignas(64) float sums[32];
      _mm512_store_ps(sums, acc0[i]);
      _mm512_store_ps(sums + 16, acc1[i]);
      finish_row(sums, ci, nv, i, e);
    }
  }
}

CAIRN_SGEMM_AVX512 void tile_avx512(int64_t kc, const float* a, int64_t rsa, int64_t csa,
                                    const float* b, float* c, int64_t ldc, int mr, int nv,
                                    const TileEpi& e) {
  switch (mr) {
    case 1: return tile_avx512_t<1>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 2: return tile_avx512_t<2>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 3: return tile_avx512_t<3>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 4: return tile_avx512_t<4>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 5: return tile_avx512_t<5>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 6: return tile_avx512_t<6>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 7: return tile_avx512_t<7>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 8: return tile_avx512_t<8>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 9: return tile_avx512_t<9>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 10: return tile_avx512_t<10>(kc, a, rsa, csa, b, c, ldc, nv, e);
    case 11: return tile_avx512_t<11>(kc, a, rsa, csa, b, c, ldc, nv, e);
    default: return tile_avx512_t<12>(kc, a, rsa, csa, b, c, ldc, nv, e);
  }
}

struct Path {
  TileFn tile;
  int mr, nr;
};

Path path_for(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return {tile_scalar, kScalarMr, kScalarNr};
    case Isa::Avx2: return {tile_avx2, kAvx2Mr, 16};
    default: return {tile_avx512, kAvx512Mr, 32};
  }
}

Isa cap(Isa isa) { return isa > Isa::Avx512 ? Isa::Avx512 : isa; }

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C = epilogue(0) when K is 0: no products, biases and beta only.
void finish_empty(int64_t m, int64_t n, float* c, int64_t ldc, const SgemmEpilogue& e) {
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      float v = 0.0f;
      if (e.row_bias) v += e.row_bias[i];
      if (e.col_bias) v += e.col_bias[j];
      if (e.beta != 0.0f) v += e.beta * ci[j];
      ci[j] = v;
    }
    if (e.post) e.post(ci, n, e.post_ctx);
  }
}

// Rows [m0, m1) × panels [p0, p1) of C, all of K. Each MR-row strip of A's
// K block is copied into a small contiguous buffer (L1) before it meets the
// block's panels (L2): rows of A far apart in memory would otherwise share
// cache sets and TLB entries.
void run_block(const Path& path, int64_t m0, int64_t m1, int64_t p0, int64_t p1, const float* a,
               int64_t rsa, int64_t csa, const PackedBView& b, float* c, int64_t ldc,
               const SgemmEpilogue& epi) {
  alignas(64) float strip[kMaxMr * kSgemmKc];
  // Strips of balanced heights (8 rows: 4 + 4, not 6 + 2).
  const int64_t rows = m1 - m0, strips = (rows + path.mr - 1) / path.mr;
  const bool few = strips <= kFewStrips;
  const int64_t nr = path.nr, npad = round_up(b.n, nr);
  const int64_t nc_panels = std::max<int64_t>(1, (few ? kNcFew : kNcMany) / nr);
  for (int64_t q0 = p0; q0 < p1; q0 += nc_panels) {
    const int64_t q1 = std::min(p1, q0 + nc_panels);
    for (int64_t k0 = 0; k0 < b.k; k0 += kSgemmKc) {
      const int64_t kc = std::min(kSgemmKc, b.k - k0);
      const bool first = k0 == 0, last = k0 + kc >= b.k;
      const float* block = b.data + k0 * npad;
      // The block after this one (the same panels' next K block, or the next
      // panels' first), fetched into L2 a slice per tile while this one is
      // multiplied: with few rows of A, the multiply would otherwise wait on
      // memory and memory on the multiply.
      const char* next = nullptr;  // stays null for the last block: nothing to request
      int64_t next_bytes = 0;
      if (!few) {
        // nothing requested ahead
      } else if (k0 + kc < b.k) {
        const int64_t kc2 = std::min(kSgemmKc, b.k - k0 - kc);
        next = reinterpret_cast<const char*>(b.data + (k0 + kc) * npad + q0 * kc2 * nr);
        next_bytes = (q1 - q0) * kc2 * nr * 4;
      } else if (q1 < p1) {
        const int64_t kc2 = std::min(kSgemmKc, b.k);
        next = reinterpret_cast<const char*>(b.data + q1 * kc2 * nr);
        next_bytes = (std::min(p1, q1 + nc_panels) - q1) * kc2 * nr * 4;
      }
      // Spread evenly over the block's tile steps: each tile requests a
      // slice, one line every pf_step of its k steps (a burst of requests
      // would stall the loads that the tile itself is waiting for).
      const int64_t tiles = strips * (q1 - q0), lines = next_bytes / 64;
      const int64_t per_tile = (lines + tiles - 1) / tiles;
      const int64_t pf_step = per_tile > 0 ? std::max<int64_t>(1, kc / per_tile) : kc;
      const char* pf_at = next;
      const char* const pf_stop = next + lines * 64;
      for (int64_t s = 0; s < strips; ++s) {
        const int64_t i = m0 + rows * s / strips;
        const int mr = int(m0 + rows * (s + 1) / strips - i);
        const float* ai = a + i * rsa + k0 * csa;
        // Row-major A: the strip keeps its rows (a memcpy each, read by the
        // tile with row stride kc); strided A: gathered k-major.
        int64_t s_rs = 1, s_cs = mr;
        if (csa == 1) {
          s_rs = kc, s_cs = 1;
          for (int r = 0; r < mr; ++r) std::memcpy(strip + r * kc, ai + r * rsa, size_t(kc) * 4);
        } else {
          for (int r = 0; r < mr; ++r) {
            const float* src = ai + r * rsa;
            for (int64_t k = 0; k < kc; ++k) strip[k * mr + r] = src[k * csa];
          }
        }
        for (int64_t p = q0; p < q1; ++p) {
          const int64_t j0 = p * nr;
          const char* pf_end = std::min(pf_stop, pf_at + per_tile * 64);
          const TileEpi te{epi.alpha, first ? epi.beta : 1.0f,
                           first && epi.col_bias ? epi.col_bias + j0 : nullptr,
                           first && epi.row_bias ? epi.row_bias + i : nullptr,
                           pf_at, pf_end, pf_step};
          pf_at = pf_end;
          path.tile(kc, strip, s_rs, s_cs, block + p * kc * nr, c + i * ldc + j0, ldc, mr,
                    int(std::min(nr, b.n - j0)), te);
        }
        // The strip's rows across these panels (a few KiB, still in L1).
        if (last && epi.post) {
          const int64_t j0 = q0 * nr, nv = std::min(q1 * nr, b.n) - j0;
          for (int r = 0; r < mr; ++r) epi.post(c + (i + r) * ldc + j0, nv, epi.post_ctx);
        }
      }
    }
  }
}

}  // namespace

Isa sgemm_isa() { return cap(active_isa()); }

int sgemm_nr(Isa isa) { return path_for(cap(isa)).nr; }

size_t sgemm_packed_bytes(int64_t k, int64_t n, Isa isa) {
  const int64_t nr = sgemm_nr(isa);
  return size_t(round_up(std::max<int64_t>(k, 0) * round_up(std::max<int64_t>(n, 0), nr) * 4, 64));
}

PackedBView pack_b_into(float* dst, const float* b, int64_t rsb, int64_t csb, int64_t k, int64_t n,
                        Isa isa) {
  isa = cap(isa);
  const int64_t nr = sgemm_nr(isa), npad = round_up(n, nr), panels = npad / nr;
  for (int64_t k0 = 0; k0 < k; k0 += kSgemmKc) {
    const int64_t kc = std::min(kSgemmKc, k - k0);
    float* block = dst + k0 * npad;
    for (int64_t p = 0; p < panels; ++p) {
      float* out = block + p * kc * nr;
      const int64_t j0 = p * nr, nv = std::min(nr, n - j0);
      if (csb == 1) {  // row-major [K,N]: runs of nv contiguous floats
        for (int64_t kk = 0; kk < kc; ++kk) {
          const float* src = b + (k0 + kk) * rsb + j0;
          float* o = out + kk * nr;
          std::memcpy(o, src, size_t(nv) * 4);
          for (int64_t j = nv; j < nr; ++j) o[j] = 0.0f;
        }
      } else {
        for (int64_t kk = 0; kk < kc; ++kk) {
          float* o = out + kk * nr;
          for (int64_t j = 0; j < nv; ++j) o[j] = b[(k0 + kk) * rsb + (j0 + j) * csb];
          for (int64_t j = nv; j < nr; ++j) o[j] = 0.0f;
        }
      }
    }
  }
  return PackedBView{dst, k, n, int(nr), isa};
}

PackedB pack_b(const float* b, int64_t k, int64_t n, bool transposed, Isa isa) {
  PackedB out;
  const size_t bytes = std::max<size_t>(sgemm_packed_bytes(k, n, isa), 64);
  auto [owner, ptr] = alloc_packed(bytes);
  if (!ptr) throw std::bad_alloc();
  out.mem_ = std::move(owner);
  out.view_ = transposed ? pack_b_into(reinterpret_cast<float*>(ptr), b, 1, k, k, n, isa)
                         : pack_b_into(reinterpret_cast<float*>(ptr), b, n, 1, k, n, isa);
  return out;
}

void sgemm_packed(int64_t m, const float* a, int64_t rsa, int64_t csa, const PackedBView& b,
                  float* c, int64_t ldc, const SgemmEpilogue& epi, ThreadPool* pool) {
  if (m <= 0 || b.n <= 0) return;
  if (b.k <= 0) return finish_empty(m, b.n, c, ldc, epi);
  const Path path = path_for(b.isa);
  const int64_t panels = (b.n + path.nr - 1) / path.nr;
  // Below ~2 MFLOP a fork/join costs more than it saves.
  int64_t threads = pool ? pool->size() : 1;
  if (double(m) * double(b.n) * double(b.k) < 1e6) threads = 1;
  // A tn × tm grid of (panels × strips) shares: the one whose largest share
  // has the fewest tiles, ties going to more N shares (each thread then
  // streams only its part of B, the big operand when M is small).
  const int64_t m_strips = (m + path.mr - 1) / path.mr;
  int64_t tn = 1, tm = 1, best = INT64_MAX;
  for (int64_t n_shares = threads; n_shares >= 1; --n_shares) {
    if (threads % n_shares != 0 || n_shares > panels) continue;
    const int64_t m_shares = std::min(threads / n_shares, m_strips);
    const int64_t cost = (panels + n_shares - 1) / n_shares * ((m_strips + m_shares - 1) / m_shares);
    if (cost < best) best = cost, tn = n_shares, tm = m_shares;
  }
  // A product of many strips goes out in 4x as many M shares as threads,
  // claimed on demand: a thread that loses its core for a while (a shared
  // host, another process) then holds up one small share, not half the
  // product. Each share still has dozens of strips to reuse a B block over.
  bool on_demand = false;
  if (threads > 1 && m_strips >= 32 * tm) {
    tm = std::min(m_strips / 8, tm * 4);
    on_demand = true;
  }
  const int64_t tasks = tn * tm;
  auto task = [&](int64_t t) {
    const int64_t ti = t / tn, tj = t % tn;
    const int64_t s0 = m_strips * ti / tm, s1 = m_strips * (ti + 1) / tm;
    const int64_t m0 = s0 * path.mr, m1 = std::min(m, s1 * path.mr);
    const int64_t p0 = panels * tj / tn, p1 = panels * (tj + 1) / tn;
    if (m0 < m1 && p0 < p1) run_block(path, m0, m1, p0, p1, a, rsa, csa, b, c, ldc, epi);
  };
  if (tasks == 1) return task(0);
  pool->parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) task(t);
  }, on_demand ? 1 : 0);
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa, int64_t csa,
           const float* b, int64_t rsb, int64_t csb, float* c, int64_t ldc,
           const SgemmEpilogue& epi, void* scratch, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  const PackedBView pb = pack_b_into(static_cast<float*>(scratch), b, rsb, csb, k, n);
  sgemm_packed(m, a, rsa, csa, pb, c, ldc, epi, pool);
}

}  // namespace cairn::kernels

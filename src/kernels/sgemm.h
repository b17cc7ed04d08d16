// kernels/sgemm.h — float32 GEMM: C = alpha·A·B (+ beta·C) (+ biases) over a packed B.
// Owns the packed-B layout (column panels as wide as the register tile, cut
// into K blocks so a small-M product streams B front to back), the packers
// (once at load for constant weights, or into caller scratch for operands
// computed at run time), the register-blocked microkernels (scalar, AVX2+FMA
// 6×16, AVX-512 12×32, chosen by core/cpu_features.h's active_isa) and the
// cache-blocked, thread-split driver. A is read through strides (a strip of
// rows at a time into a stack buffer), so a transposed or strided A needs no
// separate pass. Never allocates while
// multiplying; never checks shapes (callers do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace cairn::kernels {

// What is done with each product element C[i][j] = sum_k A[i][k]·B[k][j]:
//   C[i][j] = post(alpha·sum + row_bias[i] + col_bias[j] + beta·C[i][j])
// (a null bias adds nothing, a null post changes nothing; beta == 0 never
// reads C, so C may hold garbage).
struct SgemmEpilogue {
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* col_bias = nullptr;  // [N] (Gemm's C of shape [N], MatMul+Add)
  const float* row_bias = nullptr;  // [M] (Conv's bias, output channels as rows)
  // Applied in place to each finished run of a row of C (after the biases
  // and beta) while its tile is still in L1: a fused activation, saving a
  // pass over C through memory.
  void (*post)(float* row, int64_t n, const void* ctx) = nullptr;
  const void* post_ctx = nullptr;
};

// A packed B of K×N: for each K block of up to kSgemmKc rows, the ceil(N/nr)
// panels of that block, each kc×nr floats row by row (zero-padded past N).
// The layout (nr) belongs to the ISA it was packed for.
struct PackedBView {
  const float* data = nullptr;
  int64_t k = 0, n = 0;
  int nr = 16;
  Isa isa = Isa::Scalar;
};

inline constexpr int64_t kSgemmKc = 384;

// The kernel level sgemm uses: active_isa() capped at Avx512 (float tiles
// need nothing above it).
Isa sgemm_isa();
// Panel width of a level's layout (16 for scalar and AVX2, 32 for AVX-512).
int sgemm_nr(Isa isa);

// Bytes of a packed K×N B for `isa` (a multiple of 64).
size_t sgemm_packed_bytes(int64_t k, int64_t n, Isa isa = sgemm_isa());

// Packs B[k][j] = b[k*rsb + j*csb] into dst (sgemm_packed_bytes, 64-byte
// aligned). rsb = N, csb = 1 for a row-major [K,N]; rsb = 1, csb = K for a
// row-major [N,K] (B transposed).
PackedBView pack_b_into(float* dst, const float* b, int64_t rsb, int64_t csb, int64_t k, int64_t n,
                        Isa isa = sgemm_isa());

// A packed B that owns its memory (constant weights, packed once at load).
class PackedB {
 public:
  PackedB() = default;
  const PackedBView& view() const { return view_; }
  explicit operator bool() const { return view_.data != nullptr; }

 private:
  friend PackedB pack_b(const float*, int64_t, int64_t, bool, Isa);
  std::shared_ptr<uint8_t> mem_;
  PackedBView view_;
};

// b is a row-major [K,N], or [N,K] when `transposed`. Throws std::bad_alloc
// when out of memory.
PackedB pack_b(const float* b, int64_t k, int64_t n, bool transposed, Isa isa = sgemm_isa());

// C[M, b.n] (row stride ldc) from A[i][k] = a[i*rsa + k*csa] and a packed B.
// Splits the work over `pool` (null: the calling thread only); must not be
// called from inside a job of the same pool with the intent of parallelism
// (it then runs serially, see ThreadPool).
void sgemm_packed(int64_t m, const float* a, int64_t rsa, int64_t csa, const PackedBView& b,
                  float* c, int64_t ldc, const SgemmEpilogue& epi, ThreadPool* pool);

// Scratch sgemm() needs for a K×N B (its packed copy).
inline size_t sgemm_scratch_bytes(int64_t k, int64_t n) { return sgemm_packed_bytes(k, n); }

// Both operands computed at run time: packs B[k][j] = b[k*rsb + j*csb] into
// scratch (sgemm_scratch_bytes(k, n), 64-byte aligned), then sgemm_packed.
void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa, int64_t csa,
           const float* b, int64_t rsb, int64_t csb, float* c, int64_t ldc,
           const SgemmEpilogue& epi, void* scratch, ThreadPool* pool);

}  // namespace cairn::kernels

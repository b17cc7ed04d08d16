// kernels/float_order.h — float dot products in the summation orders of the
// reference's CPU kernels as the golden files' build has them (llama.cpp build
// 4748 compiled with -march=native on a Sapphire Rapids host: AVX-512, AMX;
// scripts/reference-oracle rebuilds it).
// Owns only the order of float operations; the golden tests compare
// log-probabilities to 1e-3, and a value on an F16 rounding boundary of the K/V
// cache turns any order difference into a visible one. Each function has a
// scalar form (lanes emulated, std::fma) and an AVX2/FMA form that gives the
// same bits; CAIRN_SCALAR=1 selects the scalar one. Never allocates.
#pragma once

#include <cstdint>

namespace cairn::kernels::order {

// _mm512_reduce_add_ps of 16 lanes: halves, quarters, then pairs.
float reduce16(const float* lanes);

// tinyBLAS (llamafile sgemm, batches of >= 2 tokens, k % 16 == 0): one 16-lane
// fma accumulator over k, then reduce16.
float tiny_f32(const float* w, const float* x, int64_t k);
float tiny_f16(const uint16_t* w, const float* x, int64_t k);  // x stays float
// tiny_f16 of four rows (row r at w + r * stride elements) against one x:
// out[r], the same bits; the AVX2 form runs the four rows' chains together,
// where one row's two chains leave the fma units waiting on each other.
void tiny_f16_x4(const uint16_t* w, int64_t stride, const float* x, int64_t k, float* out);

// ggml_vec_dot_f32 / _f16 with AVX-512 (STEP 64, four 16-lane accumulators,
// reduced pairwise then by reduce16; the tail of n % 64 elements added after).
float vec_f32(const float* w, const float* x, int64_t n);
float vec_f16(const uint16_t* w, const uint16_t* x, int64_t n);  // x rounded to F16

// ggml_vec_dot_f32's leftovers [i, n) added to `sum` as the reference's
// compiler vectorized that loop (see float_order.cpp); one form for all paths.
float vec_f32_tail(const float* w, const float* x, int64_t i, int64_t n, float sum);

// Whether the AVX2 forms are in use (CPU support and not CAIRN_SCALAR=1).
bool simd_enabled();

// The reference picks its F32 products' and attention's order by batch size.
// Speculative decoding verifies a lone stream's drafts as a batch of several
// tokens that stand for that stream's one-token steps; while a Scope lives on
// a thread, products and attention called from it take the one-token orders
// whatever their token count, so each row gets the bits its own step would.
class OneTokenOrder {
 public:
  static bool active();
  class Scope {
   public:
    explicit Scope(bool on);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    bool before_;
  };
};

// The scalar forms, always available (tests compare them with the above).
namespace scalar {
float tiny_f32(const float* w, const float* x, int64_t k);
float tiny_f16(const uint16_t* w, const float* x, int64_t k);
float vec_f32(const float* w, const float* x, int64_t n);
float vec_f16(const uint16_t* w, const uint16_t* x, int64_t n);
}  // namespace scalar

}  // namespace cairn::kernels::order

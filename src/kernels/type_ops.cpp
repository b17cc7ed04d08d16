// kernels/type_ops.cpp — the dispatched type table: the scalar one with SIMD entries swapped in.
#include "kernels/type_ops.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/cpu_features.h"
#include "kernels/row_dot.h"

namespace cairn {
namespace {

constexpr size_t kTypes = 18;

// The scalar table with SIMD entries swapped in where this CPU has them.
// CAIRN_ISA=scalar (or CAIRN_SCALAR=1) keeps the scalar one (see
// core/cpu_features.h).
std::array<TypeOps, kTypes> build_active() {
  std::array<TypeOps, kTypes> table{};
  const std::span<const TypeOps> scalar = scalar_type_table();
  if (scalar.size() != kTypes) std::abort();  // core's table gained a type: count it here
  std::copy(scalar.begin(), scalar.end(), table.begin());
  if (!isa_enabled(Isa::Avx2)) return table;
  struct Swap {
    TensorType type;
    float (*vec_dot)(int64_t, const void*, const void*);
  };
  const Swap swaps[] = {
      {TensorType::F32, quant::avx2::f32_dot},
      {TensorType::F16, quant::avx2::f16_dot},
      {TensorType::Q8_0, quant::avx2::q8_0_dot_q8_0},
      {TensorType::Q4_0, quant::avx2::q4_0_dot_q8_0},
      {TensorType::Q4_K, quant::avx2::q4_k_dot_q8_k},
      {TensorType::Q6_K, quant::avx2::q6_k_dot_q8_k},
      {TensorType::Q4_1, quant::avx2::q4_1_dot_q8_1},
      {TensorType::Q5_0, quant::avx2::q5_0_dot_q8_0},
      {TensorType::Q5_1, quant::avx2::q5_1_dot_q8_1},
      {TensorType::IQ4_NL, quant::avx2::iq4_nl_dot_q8_0},
      {TensorType::MXFP4, quant::avx2::mxfp4_dot_q8_0},
      {TensorType::Q2_K, quant::avx2::q2_k_dot_q8_k},
      {TensorType::Q3_K, quant::avx2::q3_k_dot_q8_k},
      {TensorType::Q5_K, quant::avx2::q5_k_dot_q8_k},
      {TensorType::IQ4_XS, quant::avx2::iq4_xs_dot_q8_k},
  };
  struct Tokens {
    TensorType type;
    void (*fn)(int64_t, const void*, const void*, size_t, int64_t, float*, size_t);
  };
  const Tokens tokens[] = {
      {TensorType::Q4_1, quant::avx2::q4_1_dot_tokens},     {TensorType::Q5_0, quant::avx2::q5_0_dot_tokens},
      {TensorType::Q5_1, quant::avx2::q5_1_dot_tokens},     {TensorType::IQ4_NL, quant::avx2::iq4_nl_dot_tokens},
      {TensorType::MXFP4, quant::avx2::mxfp4_dot_tokens},   {TensorType::Q5_K, quant::avx2::q5_k_dot_tokens},
      {TensorType::Q2_K, quant::avx2::q2_k_dot_tokens},     {TensorType::Q3_K, quant::avx2::q3_k_dot_tokens},
      {TensorType::IQ4_XS, quant::avx2::iq4_xs_dot_tokens},
  };
  struct Rows {
    TensorType type;
    void (*fn)(int64_t, const void*, size_t, int64_t, const void*, float*);
  };
  const Rows rows[] = {
      {TensorType::Q4_1, quant::avx2::q4_1_dot_rows},     {TensorType::Q5_0, quant::avx2::q5_0_dot_rows},
      {TensorType::Q5_1, quant::avx2::q5_1_dot_rows},     {TensorType::IQ4_NL, quant::avx2::iq4_nl_dot_rows},
      {TensorType::MXFP4, quant::avx2::mxfp4_dot_rows},
  };
  for (TypeOps& ops : table) {
    for (const Swap& s : swaps) {
      if (ops.type == s.type) ops.vec_dot = s.vec_dot;
    }
    for (const Tokens& t : tokens) {
      if (ops.type == t.type) ops.vec_dot_tokens = t.fn;
    }
    for (const Rows& r : rows) {
      if (ops.type == r.type) ops.vec_dot_rows = r.fn;
    }
    if (ops.type == TensorType::F16) ops.from_float = quant::avx2::f16_from_float;
    // BF16 has no scalar-exact SIMD form to keep (the reference sums in
    // double); these sum in float, all in vdpbf16ps's order.
    if (ops.type == TensorType::BF16) {
      if (bf16_enabled()) {
        ops.vec_dot = quant::avx512bf16::bf16_dot;
        ops.vec_dot_rows = quant::avx512bf16::bf16_dot_rows;
      } else if (isa_enabled(Isa::Avx512)) {
        ops.vec_dot = quant::avx512::bf16_dot;
        ops.vec_dot_rows = quant::avx512::bf16_dot_rows;
      } else {
        ops.vec_dot = quant::avx2::bf16_dot;
        ops.vec_dot_rows = quant::avx2::bf16_dot_rows;
      }
    }
  }
  // K-quants on AVX-512 VNNI (row_dot_k_vnni.cpp): the same bits, wider
  // steps, and a many-rows entry. Below VNNI they keep the AVX2 kernels.
  if (isa_enabled(Isa::Avx512Vnni)) {
    for (TypeOps& ops : table) {
      if (ops.type == TensorType::Q4_K) {
        ops.vec_dot = quant::avx512vnni::q4_k_dot_q8_k;
        ops.vec_dot_rows = quant::avx512vnni::q4_k_dot_rows;
      } else if (ops.type == TensorType::Q6_K) {
        ops.vec_dot = quant::avx512vnni::q6_k_dot_q8_k;
        ops.vec_dot_rows = quant::avx512vnni::q6_k_dot_rows;
      }
    }
    // The other integer types (row_dot_vnni_q.cpp, row_dot_vnni_k.cpp), each
    // entry giving the AVX2 kernels' (the scalar reference's) bits; nullptr
    // keeps the AVX2 one: Q2_K's one-token VNNI dot measured 4 % slower
    // (bench_matmul, docs/performance.md), its many-token one 28 % faster.
    struct Vnni {
      TensorType type;
      float (*vec_dot)(int64_t, const void*, const void*);
      void (*tokens)(int64_t, const void*, const void*, size_t, int64_t, float*, size_t);
      void (*rows)(int64_t, const void*, size_t, int64_t, const void*, float*);
    };
    namespace v = quant::avx512vnni;
    const Vnni vnni[] = {
        {TensorType::Q4_1, v::q4_1_dot_q8_1, v::q4_1_dot_tokens, v::q4_1_dot_rows},
        {TensorType::Q5_0, v::q5_0_dot_q8_0, v::q5_0_dot_tokens, v::q5_0_dot_rows},
        {TensorType::Q5_1, v::q5_1_dot_q8_1, v::q5_1_dot_tokens, v::q5_1_dot_rows},
        {TensorType::IQ4_NL, v::iq4_nl_dot_q8_0, v::iq4_nl_dot_tokens, v::iq4_nl_dot_rows},
        {TensorType::MXFP4, v::mxfp4_dot_q8_0, v::mxfp4_dot_tokens, v::mxfp4_dot_rows},
        {TensorType::Q2_K, nullptr, v::q2_k_dot_tokens, nullptr},
        {TensorType::Q3_K, v::q3_k_dot_q8_k, v::q3_k_dot_tokens, v::q3_k_dot_rows},
        {TensorType::Q5_K, v::q5_k_dot_q8_k, v::q5_k_dot_tokens, v::q5_k_dot_rows},
        {TensorType::IQ4_XS, v::iq4_xs_dot_q8_k, v::iq4_xs_dot_tokens, v::iq4_xs_dot_rows},
    };
    for (TypeOps& ops : table) {
      for (const Vnni& k : vnni) {
        if (ops.type != k.type) continue;
        if (k.vec_dot) ops.vec_dot = k.vec_dot;
        if (k.tokens) ops.vec_dot_tokens = k.tokens;
        if (k.rows) ops.vec_dot_rows = k.rows;
      }
    }
  }
  return table;
}

const std::array<TypeOps, kTypes> kActive = build_active();

}  // namespace

const TypeOps* type_ops(TensorType t) {
  for (const TypeOps& ops : kActive) {
    if (ops.type == t) return &ops;
  }
  return nullptr;
}

}  // namespace cairn

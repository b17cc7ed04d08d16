// core/quant_k_avx512.h — AVX-512 VNNI kernels for the K-quant dot products.
// Owns Q4_K x Q8_K and Q6_K x Q8_K on AVX-512 F/BW/VL/DQ + VNNI, for one row
// and for many rows against one activation row (TypeOps::vec_dot_rows). Each
// returns the bits of the scalar reference in quant_k.cpp: the same exact
// integer sums and the same float operations in the same order. Must never be
// called unless isa_enabled(Isa::Avx512Vnni) (the type table in quant.cpp
// checks); never allocates, never checks sizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cairn::quant::avx512vnni {

float q4_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q6_k_dot_q8_k(int64_t n, const void* w, const void* act);

// out[r] = *_dot_q8_k(n, (const char*)w + r * w_stride, act) for r < n_rows.
void q4_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);
void q6_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);

}  // namespace cairn::quant::avx512vnni

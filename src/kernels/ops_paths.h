// kernels/ops_paths.h — the float ops of kernels.h (rms_norm, softmax,
// silu_mul, RoPE's rotation) with the instruction-set path chosen by the caller, so tests
// can hold every SIMD form to the scalar form's exact bits on one machine.
// Owns nothing; kernels.h's functions pick the best path isa_enabled allows.
// A path the CPU (or the CAIRN_ISA cap) does not allow runs as Scalar.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace cairn::kernels::ops {

enum class Path { Scalar, Avx2, Avx512 };

bool supported(Path p);
void rms_norm(Path p, const float* x, const float* weight, int64_t n, float eps, float* out);
void softmax(Path p, float* x, int64_t n);
double log_sum_exp(Path p, const float* x, int64_t n, float* out);
void silu_mul(Path p, const float* gate, const float* up, int64_t n, float* out);
// Pairs [0, n_rot / 2) of every head rotated by (c[i], s[i]) (n_rot <= head_dim, even).
void rope_rotate(Path p, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* c,
                 const float* s, RopeStyle style);

}  // namespace cairn::kernels::ops

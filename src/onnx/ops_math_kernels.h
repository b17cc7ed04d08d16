// onnx/ops_math_kernels.h — the float32 loops under the elementwise,
// activation and normalisation operators (onnx/ops_math*.cpp).
// Owns each loop in two forms: Scalar (plain loops over the std:: functions,
// the reference) and Avx2 (AVX2+FMA; Exp, Erf, Tanh, Sigmoid and Gelu by
// polynomial approximations whose error against std:: the tests state). The
// caller picks the path, so tests can hold both to the reference on one
// machine; best_path() is what the operators use. Never allocates, never
// touches the thread pool: the operators split the work. Also declares the
// node checks the ops_math*.cpp files share.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "onnx/op.h"

namespace cairn::onnx::mathk {

// The node's input and output counts within [min, max] (the first min_in
// inputs present, output 0 named) and no attribute outside `attrs`; the error
// names what is wrong.
Status check_node(const Node& node, size_t min_in, size_t max_in, size_t max_out,
                  std::initializer_list<const char*> attrs);

// ops_math_norm.cpp: Softmax, LogSoftmax, LayerNormalization, BatchNormalization.
void add_norm_ops(OpTable& table);

// Elements per task when an operator splits a tensor over the pool: a cheap
// loop (add, copy) and one of a few dozen flops per element (exp, erf).
inline constexpr int64_t kGrainCheap = 32768;
inline constexpr int64_t kGrainHeavy = 8192;

enum class Path { Scalar, Avx2 };

// Avx2 when the CPU has it and the CAIRN_ISA cap allows it, else Scalar.
Path best_path();
// Whether `p` may run here (an unsupported path runs as Scalar).
bool supported(Path p);

enum class BinOp { Add, Sub, Mul, Div, Pow };
// out[i] = a[i * sa] op b[i * sb] for i in [0, n); sa and sb are 0 (one
// value broadcast along the row) or 1 (contiguous).
void binary(Path p, BinOp op, const float* a, int64_t sa, const float* b, int64_t sb, float* out,
            int64_t n);

enum class UnOp { Neg, Abs, Sqrt, Exp, Log, Erf, Relu, Sigmoid, Tanh, GeluErf, GeluTanh };
// out[i] = op(x[i]); out may equal x.
void unary(Path p, UnOp op, const float* x, float* out, int64_t n);

// Rows for Softmax and LayerNormalization (n >= 1).
float row_max(Path p, const float* x, int64_t n);
// out[i] = exp(x[i] - m); returns the sum of out.
float exp_sub_sum(Path p, const float* x, float m, float* out, int64_t n);
// out[i] = x[i] * s + t; out may equal x.
void affine(Path p, const float* x, float s, float t, float* out, int64_t n);
// out = (x - mean) * inv_std * scale + bias (bias may be null) with mean and
// the variance (mean of squared deviations, two passes) over the row;
// returns them through *mean and *inv_std = 1 / sqrt(var + eps).
void layer_norm_row(Path p, const float* x, const float* scale, const float* bias, float eps,
                    float* out, int64_t n, float* mean, float* inv_std);

}  // namespace cairn::onnx::mathk

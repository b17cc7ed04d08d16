// kernels/matmul.cpp — matmul and get_row over weights in their GGUF type.
// matmul and get_row: the only kernels that touch weights in their GGUF type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/quant.h"
#include "kernels/float_order.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/type_ops.h"

namespace cairn::kernels {

bool matmul_supported(TensorType t) {
  const TypeOps* ops = type_ops(t);
  return ops != nullptr && ops->vec_dot != nullptr && type_ops(ops->vec_dot_type) != nullptr;
}

namespace {

// F32/F16 weights as the reference multiplies them: a batch of >= 2 tokens with
// k % 16 == 0 goes through llamafile's tinyBLAS (float activations, also
// against F16 weights); anything else through ggml_vec_dot_f32/_f16, which
// for F16 weights first rounds the activations to F16.
void matmul_float(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out,
                  ThreadPool& pool) {
  const int64_t k = w.cols;
  const bool f16 = w.type == TensorType::F16;
  // As the golden files require: F16 weights meet float activations in the 16-lane
  // order even for one token; single-token F32 products follow ggml_vec_dot_f32.
  const bool tiny = k % 16 == 0 && (f16 || (n_tokens >= 2 && !order::OneTokenOrder::active()));
  thread_local std::vector<uint16_t> xh;
  if (f16 && !tiny) {
    xh.resize((size_t)(n_tokens * k));
    for (int64_t i = 0; i < n_tokens * k; ++i) xh[(size_t)i] = f32_to_f16(x[i]);
  }
  const uint16_t* xh_data = xh.data();
  const auto* wdata = static_cast<const unsigned char*>(w.data);
  // F16 rows in fours where the stride is whole halves (tiny_f16_x4).
  const bool x4 = f16 && tiny && w.row_stride % 2 == 0;
  pool.parallel_for(w.rows, [&](int64_t b, int64_t e) {
    int64_t r = b;
    for (; x4 && r + 4 <= e; r += 4) {
      const auto* wrow =
          reinterpret_cast<const uint16_t*>(wdata + static_cast<size_t>(r) * w.row_stride);
      for (int64_t t = 0; t < n_tokens; ++t) {
        float v[4];
        order::tiny_f16_x4(wrow, (int64_t)(w.row_stride / 2), x + t * k, k, v);
        for (int i = 0; i < 4; ++i) out[t * w.rows + r + i] = v[i];
      }
    }
    for (; r < e; ++r) {
      const void* wrow = wdata + static_cast<size_t>(r) * w.row_stride;
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * k;
        float v;
        if (!f16)
          v = tiny ? order::tiny_f32((const float*)wrow, xt, k)
                   : order::vec_f32((const float*)wrow, xt, k);
        else
          v = tiny ? order::tiny_f16((const uint16_t*)wrow, xt, k)
                   : order::vec_f16((const uint16_t*)wrow, xh_data + t * k, k);
        out[t * w.rows + r] = v;
      }
    }
  });
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out, ThreadPool& pool) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  if (w.packed) {
    packed_matmul(*w.packed, x, n_tokens, out, pool);
    return;
  }
  if (w.type == TensorType::F32 || w.type == TensorType::F16) {
    matmul_float(w, x, n_tokens, out, pool);
    return;
  }
  const TypeOps* ops = type_ops(w.type);
  const TypeOps* act_ops = ops ? type_ops(ops->vec_dot_type) : nullptr;
  const auto act_bytes = act_ops ? row_bytes(act_ops->type, w.cols) : std::nullopt;
  if (!ops || !ops->vec_dot || !act_ops || !act_bytes) {
    // A caller bug (the loader checks types with matmul_supported): make it loud
    // in the logits rather than crash the process.
    for (int64_t i = 0; i < n_tokens * w.rows; ++i)
      out[i] = std::numeric_limits<float>::quiet_NaN();
    return;
  }

  // Each token's activations are converted once, then shared by every row.
  const void* act = x;
  const size_t act_stride = *act_bytes;
  thread_local std::vector<unsigned char> scratch;
  if (act_ops->type != TensorType::F32) {
    scratch.resize(act_stride * static_cast<size_t>(n_tokens));
    unsigned char* dst = scratch.data();
    const int64_t cols = w.cols;
    const auto quantize = act_from_float(*act_ops);
    pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) quantize(x + t * cols, dst + t * act_stride, cols);
    });
    act = dst;
  }

  const auto* wdata = static_cast<const unsigned char*>(w.data);
  const auto* adata = static_cast<const unsigned char*>(act);
  const auto vec_dot = ops->vec_dot;
  // Rows go in runs small enough to stay in L2 while every token passes over
  // them, so a weight row leaves memory once per batch; a type with a
  // many-rows kernel (vec_dot_rows) does a whole run per call, one with a
  // many-tokens kernel (vec_dot_tokens) decodes each row once per few tokens.
  constexpr int64_t kRowRun = 64;
  const auto vec_dot_rows = ops->vec_dot_rows;
  const auto vec_dot_tokens = n_tokens > 1 ? ops->vec_dot_tokens : nullptr;
  pool.parallel_for(w.rows, [&](int64_t b, int64_t e) {
    for (int64_t r0 = b; r0 < e; r0 += kRowRun) {
      const int64_t r1 = std::min(e, r0 + kRowRun);
      const unsigned char* wrun = wdata + static_cast<size_t>(r0) * w.row_stride;
      if (vec_dot_tokens) {
        for (int64_t t = 0; t < n_tokens; t += kMaxDotTokens) {
          const int64_t nt = std::min(kMaxDotTokens, n_tokens - t);
          const unsigned char* at = adata + static_cast<size_t>(t) * act_stride;
          for (int64_t r = r0; r < r1; ++r)
            vec_dot_tokens(w.cols, wdata + static_cast<size_t>(r) * w.row_stride, at, act_stride, nt,
                           out + t * w.rows + r, (size_t)w.rows);
        }
        continue;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        const unsigned char* at = adata + static_cast<size_t>(t) * act_stride;
        float* o = out + t * w.rows;
        if (vec_dot_rows) {
          vec_dot_rows(w.cols, wrun, w.row_stride, r1 - r0, at, o + r0);
          continue;
        }
        for (int64_t r = r0; r < r1; ++r)
          o[r] = vec_dot(w.cols, wdata + static_cast<size_t>(r) * w.row_stride, at);
      }
    }
  });
}

namespace {

constexpr size_t kMaxFusedJobs = 8;

// Whether one pass of packed_matmul_many can run all the jobs.
bool one_packed_pass(std::span<const MatmulJob> jobs) {
  if (jobs.size() > kMaxFusedJobs || !jobs[0].w->packed) return false;
  for (const MatmulJob& j : jobs)
    if (!j.w->packed || !packed_compatible(*j.w->packed, *jobs[0].w->packed)) return false;
  return true;
}

void packed_pass(std::span<const MatmulJob> jobs, const ActRows& in, int64_t n_tokens,
                 ThreadPool& pool, std::span<const WeightMatrix* const> next) {
  PackedJob packed[kMaxFusedJobs];
  for (size_t i = 0; i < jobs.size(); ++i) packed[i] = {jobs[i].w->packed.get(), jobs[i].out};
  // The next call's packed copies, when it has them all (else nothing to warm).
  const PackedMatrix* next_packed[kMaxFusedJobs];
  size_t n_next = next.size() <= std::size(next_packed) ? next.size() : 0;
  for (size_t i = 0; i < n_next; ++i) {
    next_packed[i] = next[i]->packed.get();
    if (!next_packed[i]) n_next = 0;
  }
  packed_matmul_many({packed, jobs.size()}, in, n_tokens, pool, {next_packed, n_next});
}

}  // namespace

void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t n_tokens,
                 ThreadPool& pool, std::span<const WeightMatrix* const> next) {
  if (jobs.empty() || n_tokens <= 0) return;
  if (!one_packed_pass(jobs)) {
    for (const MatmulJob& j : jobs) matmul(*j.w, x, n_tokens, j.out, pool);
    return;
  }
  packed_pass(jobs, ActRows{x, nullptr, jobs[0].w->cols}, n_tokens, pool, next);
}

void matmul_many(std::span<const MatmulJob> jobs, const RowMaker& rows, float* scratch,
                 int64_t n_tokens, ThreadPool& pool, std::span<const WeightMatrix* const> next) {
  if (jobs.empty() || n_tokens <= 0) return;
  const int64_t cols = jobs[0].w->cols;
  if (one_packed_pass(jobs) && packed_quantizes_rows(*jobs[0].w->packed))
    return packed_pass(jobs, ActRows{nullptr, &rows, cols}, n_tokens, pool, next);
  // A few rows on this thread: waking the pool costs more than making them.
  const auto make = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) rows.make(t, scratch + t * cols);
  };
  if (n_tokens >= 8) {
    pool.parallel_for(n_tokens, make);
  } else {
    make(0, n_tokens);
  }
  matmul_many(jobs, scratch, n_tokens, pool, next);
}

std::span<const uint8_t> weight_stream(const WeightMatrix& w) {
  if (w.packed) {
    const PackedMatrix& p = *w.packed;
    return {p.data, (size_t)p.n_groups * (size_t)p.n_blocks * p.block_bytes};
  }
  return {static_cast<const uint8_t*>(w.data), w.row_stride * (size_t)w.rows};
}

void get_row(const WeightMatrix& w, int64_t row, float* dst) {
  const TypeOps* ops = type_ops(w.type);
  if (!ops || row < 0 || row >= w.rows) {
    for (int64_t i = 0; i < w.cols; ++i) dst[i] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  ops->to_float(static_cast<const unsigned char*>(w.data) + static_cast<size_t>(row) * w.row_stride,
                dst, w.cols);
}

}  // namespace cairn::kernels

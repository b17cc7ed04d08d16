// model/attention.cpp — causal attention: scalar reference, dispatch to the SIMD kernels.
// Causal attention over a KvView: the scalar reference (the reference's
// operation order written out lane by lane) and the dispatch to the SIMD
// kernels of kernels/attention_simd.cpp, which reproduce it bit for bit.
//
// Why the softmax is not online: the reference computes the whole padded
// score row, takes its max, then sums exp(s - max) in groups of 16 with each
// group's sum added in double, and scales every weight by 1 / sum before V.w.
// An online (flash) softmax rescales partial V sums whenever the running max
// grows, and multiplies by 1 / sum after V.w: both change the roundings, and
// the golden tests see that. So each (token, head) keeps one score row of
// n_pos floats in per-thread scratch (never a T x n_pos matrix) and makes two
// passes over it; the K and V rows are still read once per KV-head group. A
// prompt's K and V are gathered once per layer for all its tokens
// (gather_prompts: K transposed, V in order), the rows of the cache otherwise.
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "kernels/attention_q8.h"
#include "kernels/attention_simd.h"
#include "kernels/float_order.h"
#include "kernels/kernels.h"

namespace cairn::model {
namespace {

namespace attn_simd = kernels::attn_simd;

// F16 -> F32 for every half value: attention reads F16 K/V rows element by
// element, and the branchy scalar conversion would dominate it.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32((uint16_t)i);
    return t;
  }();
  return table.data();
}

// One query head against positions [0, n_pos) of its sequence, in the
// reference's arithmetic on an AVX-512 machine (no flash attention; K/V in
// F16; rows of n_kv = n_pos padded to 32, the padding masked):
// - K.q: q is a permuted (non-contiguous) tensor, so ggml converts it to F16
//   and takes ggml_vec_dot_f16 per position;
// - softmax over the padded row in groups of 16 (kernels::softmax);
// - V.w: the softmax rows are contiguous, so tinyBLAS multiplies F16 V with
//   float weights, position p in fma lane p % 16, reduced as reduce16.
float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

struct AttnScratch {
  std::vector<float> scores, lanes, q;
  std::vector<uint16_t> qh;
  std::vector<double> tail;
};

// One query head against positions [0, n_pos) of its sequence, in the
// reference's arithmetic (no flash attention, F16 K/V, rows of n_kv = n_pos
// padded to 32 with the padding masked). The query and the softmax weights are
// rounded to the cache type (ggml converts a matmul's second operand to the
// first one's type); the softmax runs over the padded rows (kernels::softmax).
// The products' order depends on the batch, as ggml's kernel choice does:
// - a single token (decode) takes ggml_vec_dot_f16 with AVX-512 for both
//   K.q (kernels::order::vec_f16) and V.w (positions p < n_kv & ~63 in four
//   16-lane accumulators by p % 64, the rest added in double);
// - a batch takes tinyBLAS: K.q in 16 fma lanes over head_dim (when
//   head_dim % 16 == 0; vec_f16 otherwise), V.w with position p in fma lane
//   p % 16, both reduced as _mm512_reduce_add_ps.
// These orders give the golden files' log-probs (docs/performance.md).
void attend_head(const KvView& kv, int layer, SeqId seq, int64_t n_pos, int64_t kv_offset,
                 int64_t head_dim, const AttnShape& sh, const float* q, bool batch,
                 AttnScratch& s, float* out, const float* sink) {
  const float scale = sh.scale;
  // A sliding window masks the positions before p0 (-inf scores, weight 0).
  const int64_t p0 = sh.window > 0 ? std::max<int64_t>(0, n_pos - sh.window) : 0;
  const float cap = sh.softcap, inv_cap = cap > 0 ? 1.0f / cap : 0.0f;
  const bool f16 = kv.dtype() == TensorType::F16;
  const float* h2f = f16_table();
  const int64_t n_pad = (n_pos + 31) & ~int64_t{31};
  s.scores.assign((size_t)n_pad, -INFINITY);
  s.q.resize((size_t)head_dim);
  s.qh.resize((size_t)head_dim);
  for (int64_t d = 0; d < head_dim; ++d) {
    s.qh[(size_t)d] = f32_to_f16(q[d]);
    s.q[(size_t)d] = f16 ? h2f[s.qh[(size_t)d]] : q[d];
  }
  s.lanes.resize((size_t)(64 * head_dim));
  const bool tiny_kq = batch && head_dim % 16 == 0;
  for (int64_t p = p0; p < n_pos; ++p) {
    float dot;
    if (f16) {
      const uint16_t* k = (const uint16_t*)kv.key(layer, seq, (int32_t)p) + kv_offset;
      if (tiny_kq) {
        for (int64_t d = 0; d < head_dim; ++d) s.lanes[(size_t)d] = h2f[k[d]];
        dot = kernels::order::tiny_f32(s.lanes.data(), s.q.data(), head_dim);
      } else {
        dot = kernels::order::vec_f16(k, s.qh.data(), head_dim);
      }
    } else {
      const float* k = (const float*)kv.key(layer, seq, (int32_t)p) + kv_offset;
      dot = tiny_kq ? kernels::order::tiny_f32(k, s.q.data(), head_dim)
                    : kernels::order::vec_f32(k, s.q.data(), head_dim);
    }
    if (cap > 0) dot = std::tanh(dot * inv_cap) * cap;
    s.scores[(size_t)p] = dot * scale;
  }
  if (sink)
    kernels::softmax_with_sink(s.scores.data(), n_pad, *sink);
  else
    kernels::softmax(s.scores.data(), n_pad);

  // Lanes of the V.w sum: 16 (tinyBLAS) or 64 (vec_dot's 4 x 16) by position.
  const int64_t n_lanes = batch ? 16 : 64;
  const int64_t n_simd = batch ? n_pos : (((n_pos + 31) & ~int64_t{31}) & ~int64_t{63});
  std::fill(s.lanes.begin(), s.lanes.begin() + n_lanes * head_dim, 0.0f);
  s.tail.assign((size_t)head_dim, 0.0);
  for (int64_t p = p0; p < n_pos; ++p) {
    const float w = f16 ? round_f16(s.scores[(size_t)p]) : s.scores[(size_t)p];
    const void* vrow = kv.value(layer, seq, (int32_t)p);
    const uint16_t* vh = (const uint16_t*)vrow + kv_offset;
    const float* vf = (const float*)vrow + kv_offset;
    if (p >= n_simd) {
      for (int64_t d = 0; d < head_dim; ++d)
        s.tail[(size_t)d] += (double)((f16 ? h2f[vh[d]] : vf[d]) * w);
      continue;
    }
    float* lane = s.lanes.data() + (p % n_lanes) * head_dim;
    if (f16) {
      for (int64_t d = 0; d < head_dim; ++d) lane[d] = std::fma(h2f[vh[d]], w, lane[d]);
    } else {
      for (int64_t d = 0; d < head_dim; ++d) lane[d] = std::fma(vf[d], w, lane[d]);
    }
  }
  for (int64_t d = 0; d < head_dim; ++d) {
    const float* l = s.lanes.data() + d;
    float r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = batch ? l[i * head_dim]
                   : (l[i * head_dim] + l[(32 + i) * head_dim]) +
                         (l[(16 + i) * head_dim] + l[(48 + i) * head_dim]);
    }
    const float red = kernels::order::reduce16(r);
    out[d] = batch ? red : (float)((double)red + s.tail[(size_t)d]);
  }
}

bool supported(AttnPath path, int64_t head_dim) {
  switch (path) {
    case AttnPath::Scalar:
      return true;
    case AttnPath::Avx2:
      return head_dim % 16 == 0 && isa_enabled(Isa::Avx2);
    case AttnPath::Avx512:
      return head_dim % 16 == 0 && isa_enabled(Isa::Avx512);
    case AttnPath::Auto:
      return true;
  }
  return false;
}

AttnPath resolve(AttnPath path, int64_t head_dim) {
  if (path == AttnPath::Auto) {
    for (AttnPath p : {AttnPath::Avx512, AttnPath::Avx2})
      if (supported(p, head_dim)) return p;
    return AttnPath::Scalar;
  }
  return supported(path, head_dim) ? path : AttnPath::Scalar;
}

void attend_scalar(const KvView& kv, int layer, std::span<const SeqId> seqs,
                   std::span<const int32_t> positions, const float* q, const AttnShape& sh,
                   float* out, ThreadPool& pool) {
  const int64_t T = (int64_t)seqs.size();
  const bool batch_order = T >= 2 && !kernels::order::OneTokenOrder::active();
  const int64_t hd = sh.head_dim;
  const int64_t nq = sh.n_head * hd;
  const int64_t group = sh.n_head / sh.n_head_kv;
  pool.parallel_for(T * sh.n_head, [&](int64_t begin, int64_t end) {
    AttnScratch scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / sh.n_head;
      const int64_t h = i % sh.n_head;
      attend_head(kv, layer, seqs[(size_t)t], (int64_t)positions[(size_t)t] + 1, (h / group) * hd,
                  hd, sh, q + t * nq + h * hd, batch_order, scratch, out + t * nq + h * hd,
                  sh.sinks ? sh.sinks + h : nullptr);
    }
  });
}

// How far ahead of the scores loop a decode step requests K/V rows (a little
// faster than requesting every row up front; docs/performance.md).
constexpr int64_t kPrefetchAhead = 32;

// Prompts: a sequence with at least this many tokens in a batch has its K
// rows converted to float and transposed, and its V rows copied out in
// order, once per layer, for every token's kernels to read (scores_kt and
// the V.w chains, kernels/attention_simd.inc).
constexpr int64_t kPromptMinTokens = 4;
// At most this many bytes of them per call (the buffers are kept for the next
// call): a sequence that would pass it (a long context of a wide model) reads
// the cache's rows as decode does.
constexpr int64_t kPromptMaxBytes = int64_t{96} << 20;

// The batch's prompt sequences: for slot i and KV head g, K transposed in
// stride[i] / 16 blocks of 16 positions (GroupJob::kt) from float kt_offset[i]
// + g * head_dim * stride[i], and V rows (GroupJob::vc) from byte v_offset[i]
// + g * head_dim * stride[i] elements of the cache's type.
struct PromptKv {
  std::vector<float> kt;
  std::vector<uint8_t> v;
  std::vector<int64_t> kt_offset, v_offset, stride;
  std::vector<int64_t> slot_of_token;  // -1: read the cache's rows
};

using TransposeFn = void (*)(const uint8_t* const*, int, int64_t, bool, float*);

void gather_prompts(const KvView& kv, int layer, std::span<const SeqId> seqs,
                    std::span<const int32_t> positions, int64_t n_kv, int64_t hd,
                    TransposeFn transpose, ThreadPool& pool, PromptKv& out) {
  const int64_t T = (int64_t)seqs.size();
  const bool f16 = kv.dtype() == TensorType::F16;
  const size_t elem = f16 ? 2 : 4;
  out.slot_of_token.assign((size_t)T, -1);
  out.kt_offset.clear();
  out.v_offset.clear();
  out.stride.clear();
  std::vector<int64_t> order((size_t)T);
  for (int64_t t = 0; t < T; ++t) order[(size_t)t] = t;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return seqs[(size_t)a] < seqs[(size_t)b]; });
  std::vector<SeqId> slot_seq;
  std::vector<int64_t> slot_pos;  // positions per slot: the largest n_pos of its tokens
  int64_t kt_total = 0, v_total = 0;
  for (size_t i = 0; i < order.size();) {
    size_t e = i;
    int64_t n_pos = 0;
    while (e < order.size() && seqs[(size_t)order[e]] == seqs[(size_t)order[i]])
      n_pos = std::max<int64_t>(n_pos, (int64_t)positions[(size_t)order[e++]] + 1);
    const int64_t elems = n_kv * hd * ((n_pos + 15) & ~int64_t{15});
    const int64_t bytes = 4 * (kt_total + elems) + (v_total + elems * (int64_t)elem);
    if ((int64_t)(e - i) >= kPromptMinTokens && bytes <= kPromptMaxBytes) {
      for (size_t k = i; k < e; ++k) out.slot_of_token[(size_t)order[k]] = (int64_t)slot_seq.size();
      slot_seq.push_back(seqs[(size_t)order[i]]);
      slot_pos.push_back(n_pos);
      out.kt_offset.push_back(kt_total);
      out.v_offset.push_back(v_total);
      out.stride.push_back((n_pos + 15) & ~int64_t{15});
      kt_total += elems;
      v_total += elems * (int64_t)elem;
    }
    i = e;
  }
  if (slot_seq.empty()) return;
  out.kt.resize((size_t)kt_total);
  out.v.resize((size_t)v_total);
  const size_t row_bytes = (size_t)(n_kv * hd) * elem;
  const size_t head_bytes = (size_t)hd * elem;
  pool.parallel_for((int64_t)slot_seq.size() * n_kv, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t slot = item / n_kv, g = item % n_kv;
      const int64_t n_pos = slot_pos[(size_t)slot], stride = out.stride[(size_t)slot];
      float* kt = out.kt.data() + out.kt_offset[(size_t)slot] + g * hd * stride;
      uint8_t* v = out.v.data() + out.v_offset[(size_t)slot] + (size_t)(g * stride) * head_bytes;
      const uint8_t* rows[16];
      int n = 0;
      int32_t first = 0;  // the position of rows[0]
      for (int32_t p = 0; p < n_pos;) {
        const KvView::Rows r = kv.rows(layer, slot_seq[(size_t)slot], p, (int32_t)(n_pos - p));
        for (int32_t k = 0; k < r.n; ++k) {
          const size_t at = k * row_bytes + (size_t)(g * hd) * elem;
          rows[n++] = (const uint8_t*)r.k + at;
          std::memcpy(v + (size_t)(p + k) * head_bytes, (const uint8_t*)r.v + at, head_bytes);
          if (n == 16 || p + k + 1 == n_pos) {
            transpose(rows, n, hd, f16, kt + first * hd);
            first += n;
            n = 0;
          }
        }
        p += r.n;
      }
    }
  });
}

struct GroupScratch {
  std::vector<const uint8_t*> krow, vrow;
  attn_simd::Scratch kernel;
};

// Q8_0 rows (--kv-type q8_0): the kernels of kernels/attention_q8.cpp, one
// work item per (token, KV head, run of its query heads) as for F16. The SIMD
// kernels need each head to start on a block (head_dim % 32 == 0); any other
// head_dim, sinks included, runs the scalar kernel. No batch/one-token orders:
// a token's result is the same whatever else its batch holds.
void attend_q8(const KvView& kv, int layer, std::span<const SeqId> seqs,
               std::span<const int32_t> positions, const float* q, const AttnShape& sh, float* out,
               ThreadPool& pool, AttnPath path) {
  namespace aq = kernels::attn_q8;
  const int64_t T = (int64_t)seqs.size();
  const int64_t hd = sh.head_dim;
  const int64_t nq = sh.n_head * hd;
  const int64_t n_kv = sh.n_head_kv;
  const int64_t group = sh.n_head / n_kv;
  const size_t row_bytes = (size_t)kv::kv_row_bytes(TensorType::Q8_0, n_kv * hd);
  if (hd % 32 != 0) path = AttnPath::Scalar;
  const auto kernel = path == AttnPath::Avx512 ? &aq::attend_avx512
                      : path == AttnPath::Avx2 ? &aq::attend_avx2
                                               : &aq::attend_scalar;
  int64_t sub = group;
  const auto items = [&](int64_t s) { return T * n_kv * ((group + s - 1) / s); };
  while (sub > 1 && items(sub) < 2 * pool.size()) sub = (sub + 1) / 2;
  const int64_t n_sub = (group + sub - 1) / sub;
  pool.parallel_for(
      items(sub),
      [&](int64_t begin, int64_t end) {
        thread_local std::vector<const uint8_t*> krow, vrow;
        thread_local aq::Scratch scratch;
        for (int64_t i = begin; i < end; ++i) {
          const int64_t t = (i / n_sub) % T;
          const int64_t g = i / (n_sub * T);
          const int64_t h0 = g * group + (i % n_sub) * sub;
          const int64_t n_pos = (int64_t)positions[(size_t)t] + 1;
          const int64_t first = sh.window > 0 ? std::max<int64_t>(0, n_pos - sh.window) : 0;
          // SIMD: rows start at the head's first block; scalar: at the row,
          // the head found by its element offset.
          const size_t off =
              path == AttnPath::Scalar ? 0 : (size_t)kv::kv_row_bytes(TensorType::Q8_0, g * hd);
          krow.resize((size_t)n_pos);
          vrow.resize((size_t)n_pos);
          for (int32_t p = (int32_t)first; p < n_pos;) {
            const KvView::Rows r = kv.rows(layer, seqs[(size_t)t], p, (int32_t)(n_pos - p));
            for (int32_t k = 0; k < r.n; ++k) {
              krow[(size_t)(p + k)] = (const uint8_t*)r.k + k * row_bytes + off;
              vrow[(size_t)(p + k)] = (const uint8_t*)r.v + k * row_bytes + off;
            }
            p += r.n;
          }
          aq::Job job;
          job.krow = krow.data();
          job.vrow = vrow.data();
          job.offset = path == AttnPath::Scalar ? g * hd : 0;
          job.n_pos = n_pos;
          job.head_dim = hd;
          job.nh = (int)std::min(sub, group * (g + 1) - h0);
          job.q = q + t * nq + h0 * hd;
          job.out = out + t * nq + h0 * hd;
          job.scale = sh.scale;
          job.softcap = sh.softcap;
          job.first = first;
          job.sinks = sh.sinks ? sh.sinks + h0 : nullptr;
          kernel(job, scratch);
        }
      },
      T >= 2 ? 1 : 0);
}

}  // namespace

bool attention_path_supported(AttnPath path, int64_t head_dim) { return supported(path, head_dim); }

void attend(const KvView& kv, int layer, std::span<const SeqId> seqs,
            std::span<const int32_t> positions, const float* q, const AttnShape& sh, float* out,
            ThreadPool& pool, AttnPath path) {
  path = resolve(path, sh.head_dim);
  if (kv.dtype() == TensorType::Q8_0)
    return attend_q8(kv, layer, seqs, positions, q, sh, out, pool, path);
  // The SIMD kernels have no sinks (window and soft-cap they take).
  if (sh.sinks) path = AttnPath::Scalar;
  if (path == AttnPath::Scalar) return attend_scalar(kv, layer, seqs, positions, q, sh, out, pool);

  const int64_t T = (int64_t)seqs.size();
  const bool batch_order = T >= 2 && !kernels::order::OneTokenOrder::active();
  const int64_t hd = sh.head_dim;
  const int64_t nq = sh.n_head * hd;
  const int64_t n_kv = sh.n_head_kv;
  const int64_t group = sh.n_head / n_kv;
  const bool f16 = kv.dtype() == TensorType::F16;
  const size_t elem = f16 ? 2 : 4;
  const size_t row_bytes = (size_t)(n_kv * hd) * elem;
  // A work item is (token, KV head, run of its query heads): each reads its K/V
  // rows once for all its heads. Groups are split only as far as needed to
  // give every thread work (single-token decode with few KV heads). Items go
  // KV head by KV head, so the threads work through one head's K/V (and
  // transposed K) together while it is in their caches.
  int64_t sub = group;
  const auto items = [&](int64_t s) { return T * n_kv * ((group + s - 1) / s); };
  while (sub > 1 && items(sub) < 2 * pool.size()) sub = (sub + 1) / 2;
  const int64_t n_sub = (group + sub - 1) / sub;
  const auto kernel =
      path == AttnPath::Avx512 ? &attn_simd::attend_group_avx512 : &attn_simd::attend_group_avx2;
  // The caller's (a local reference: a thread_local named inside the workers'
  // lambda would be each worker's own, empty one).
  thread_local PromptKv prompt_storage;
  PromptKv& prompt = prompt_storage;
  // Not for a sliding layer: the gather reads every position, and a paged
  // cache may have dropped those before the window.
  const bool use_prompt =
      batch_order && T >= kPromptMinTokens && (hd == 64 || hd == 128) && sh.window <= 0;
  if (use_prompt)
    gather_prompts(kv, layer, seqs, positions, n_kv, hd,
                   path == AttnPath::Avx512 ? &attn_simd::transpose_rows_avx512
                                            : &attn_simd::transpose_rows_avx2,
                   pool, prompt);

  pool.parallel_for(
      items(sub),
      [&](int64_t begin, int64_t end) {
        thread_local GroupScratch s;
        int64_t gathered = -1;  // (t, g) whose rows s holds
        for (int64_t i = begin; i < end; ++i) {
          const int64_t t = (i / n_sub) % T;
          const int64_t g = i / (n_sub * T);
          const int64_t h0 = g * group + (i % n_sub) * sub;
          const int64_t n_pos = (int64_t)positions[(size_t)t] + 1;
          // A sliding window's first visible position (attend_head's p0).
          const int64_t first = sh.window > 0 ? std::max<int64_t>(0, n_pos - sh.window) : 0;
          if (gathered != i / n_sub) {
            s.krow.resize((size_t)n_pos);
            s.vrow.resize((size_t)n_pos);
            const size_t off = (size_t)(g * hd) * elem;
            for (int32_t p = (int32_t)first; p < n_pos;) {
              const KvView::Rows r = kv.rows(layer, seqs[(size_t)t], p, (int32_t)(n_pos - p));
              for (int32_t k = 0; k < r.n; ++k) {
                s.krow[(size_t)(p + k)] = (const uint8_t*)r.k + k * row_bytes + off;
                s.vrow[(size_t)(p + k)] = (const uint8_t*)r.v + k * row_bytes + off;
              }
              p += r.n;
            }
            // Masked positions point at a kept row: never read for a result.
            std::fill(s.krow.begin(), s.krow.begin() + first, s.krow[(size_t)first]);
            std::fill(s.vrow.begin(), s.vrow.begin() + first, s.vrow[(size_t)first]);
            gathered = i / n_sub;
            // A decode step's K/V rows are out of cache: ask for the first ones
            // at once, not one miss at a time (the kernel asks kPrefetchAhead ahead
            // for the rest); a prompt's rows were just written, so it skips this.
            if (T < 32) {
              const size_t rb = (size_t)hd * elem;
              const int64_t ahead = std::min<int64_t>(n_pos, first + kPrefetchAhead + 16);
              for (int64_t p = first; p < ahead; ++p) {
                for (size_t o = 0; o < rb; o += 64) {
                  __builtin_prefetch((const char*)s.krow[(size_t)p] + o, 0, 3);
                  __builtin_prefetch((const char*)s.vrow[(size_t)p] + o, 0, 3);
                }
              }
            }
          }
          attn_simd::GroupJob job;
          job.krow = s.krow.data();
          job.vrow = s.vrow.data();
          job.n_pos = n_pos;
          job.head_dim = hd;
          job.nh = (int)std::min(sub, group * (g + 1) - h0);
          job.q = q + t * nq + h0 * hd;
          job.out = out + t * nq + h0 * hd;
          job.scale = sh.scale;
          job.softcap = sh.softcap;
          job.first = first;
          job.batch = batch_order;
          job.f16 = f16;
          job.prefetch_ahead = T < 32 ? kPrefetchAhead : 0;
          if (const int64_t slot = use_prompt ? prompt.slot_of_token[(size_t)t] : -1; slot >= 0) {
            const int64_t stride = prompt.stride[(size_t)slot];
            job.kt = prompt.kt.data() + prompt.kt_offset[(size_t)slot] + g * hd * stride;
            job.vc =
                prompt.v.data() + prompt.v_offset[(size_t)slot] + (size_t)(g * hd * stride) * elem;
          }
          kernel(job, s.kernel);
        }
      },
      T >= 2 ? 1 : 0);
}

}  // namespace cairn::model

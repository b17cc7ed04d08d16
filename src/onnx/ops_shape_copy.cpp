// onnx/ops_shape_copy.cpp — the shape family's shared checks and byte-copy
// primitives (ops_shape_common.h): arity and known-input checks, axis lists,
// contiguous block copies and strided gathers split over the pool.
#include <algorithm>

#include "onnx/ops_shape_common.h"

namespace cairn::onnx::shape_ops {

Status check_arity(const Node& node, size_t min_in, size_t max_in, int n_out) {
  const size_t n_in = node.inputs.size();
  if (n_in < min_in || n_in > max_in) {
    std::string want = min_in == max_in ? std::to_string(min_in)
                                        : std::to_string(min_in) + " to " + std::to_string(max_in);
    return Status::invalid_argument("expects " + want + " inputs, got " + std::to_string(n_in));
  }
  for (size_t i = 0; i < min_in; ++i)
    if (node.inputs[i].empty())
      return Status::invalid_argument("input " + std::to_string(i) + " is required");
  if (n_out >= 0 && node.outputs.size() != size_t(n_out))
    return Status::invalid_argument("expects " + std::to_string(n_out) + " outputs, got " +
                                    std::to_string(node.outputs.size()));
  if (n_out < 0 && node.outputs.empty())
    return Status::invalid_argument("expects at least one output");
  return Status::ok();
}

Result<std::vector<int64_t>> known_ints(std::span<const TensorInfo> in, size_t i,
                                        const char* what) {
  if (i >= in.size() || in[i].value == nullptr)
    return Status::invalid_argument(
        std::string("input '") + what +
        "' must be known before running (a constant, or computed from shapes)");
  auto v = int_values(*in[i].value);
  if (!v) return v.status().with_context(std::string("input '") + what + "'");
  if (in[i].shape.size() > 1)
    return Status::invalid_argument(std::string("input '") + what +
                                    "' must be a scalar or 1-D, got shape " +
                                    shape_string(in[i].shape));
  return v;
}

Result<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) {
    CAIRN_ASSIGN_OR_RETURN(int64_t n, normalize_axis(a, rank));
    if (std::find(out.begin(), out.end(), n) != out.end())
      return Status::invalid_argument("axis " + std::to_string(a) + " is listed twice");
    out.push_back(n);
  }
  return out;
}

Status refuse_moved_attribute(const Node& node, const char* attr, int64_t since_opset,
                              int input_index) {
  if (node.opset >= since_opset && node.has(attr))
    return Status::invalid_argument(std::string("attribute '") + attr + "' is input " +
                                    std::to_string(input_index) + " from opset " +
                                    std::to_string(since_opset));
  return Status::ok();
}

Result<IntsArg> IntsArg::make(const Node& node, const char* name, int64_t since, size_t index) {
  IntsArg a;
  a.index = index;
  a.from_input = node.opset >= since;
  CAIRN_RETURN_IF_ERROR(refuse_moved_attribute(node, name, since, int(index)));
  if (!a.from_input) {
    a.has_attr = node.has(name);
    CAIRN_ASSIGN_OR_RETURN(a.attr, node.get_ints(name));
  }
  return a;
}

Result<IntsArg::Value> IntsArg::get(std::span<const TensorInfo> in, std::span<const bool> present,
                                    const char* name) const {
  Value r;
  if (!from_input) {
    r.has = has_attr;
    r.v = attr;
    return r;
  }
  if (!is_present(present, index)) return r;
  r.has = true;
  CAIRN_ASSIGN_OR_RETURN(r.v, known_ints(in, index, name));
  return r;
}

bool IntsArg::read(const RunArgs& args, Dims& out) const {
  out.n = 0;
  if (!from_input) {
    if (!has_attr || attr.size() > kMaxRank) return false;
    for (int64_t x : attr) out.push(x);
    return true;
  }
  if (index >= args.in.size() || args.in[index] == nullptr) return false;
  return read_small_ints(*args.in[index], out);
}

bool read_small_ints(const TensorView& t, Dims& out) {
  out.n = 0;
  const int64_t n = t.count();
  if (n < 0 || n > int64_t(kMaxRank)) return false;
  if (t.dtype == DType::Int64) {
    for (int64_t i = 0; i < n; ++i) out.push(t.as<const int64_t>()[i]);
  } else if (t.dtype == DType::Int32) {
    for (int64_t i = 0; i < n; ++i) out.push(t.as<const int32_t>()[i]);
  } else {
    return false;
  }
  return true;
}

void copy_blocks(ThreadPool& pool, char* dst, int64_t dst_stride, const char* src,
                 int64_t src_stride, int64_t n, int64_t block) {
  if (n <= 0 || block <= 0) return;
  if (dst_stride == block && src_stride == block) {  // one contiguous range
    block *= n;
    n = 1;
  }
  const int64_t total = n * block;
  const int64_t threads = pool.size();
  if (total < kParallelBytes || threads <= 1) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + i * dst_stride, src + i * src_stride, size_t(block));
    return;
  }
  struct Job {
    char* dst;
    int64_t dst_stride;
    const char* src;
    int64_t src_stride;
    int64_t block, pieces, piece;
  };
  // Few big blocks: cut each into pieces so every thread gets some.
  const int64_t pieces = n >= threads * 4 ? 1 : (threads * 4 + n - 1) / n;
  const Job job{dst, dst_stride, src, src_stride, block, pieces, (block + pieces - 1) / pieces};
  pool.parallel_for(n * pieces, [&job](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int64_t i = j / job.pieces;
      const int64_t from = (j % job.pieces) * job.piece;
      const int64_t len = std::min(job.block - from, job.piece);
      if (len > 0)
        std::memcpy(job.dst + i * job.dst_stride + from, job.src + i * job.src_stride + from,
                    size_t(len));
    }
  });
}

namespace {

// One row of a strided copy: len elements of `elem` bytes, src stride `s`.
void copy_row(char* dst, const char* src, int64_t s, int64_t len, int64_t elem) {
  if (s == elem) {
    std::memcpy(dst, src, size_t(len * elem));
    return;
  }
  // Fixed-size memcpy compiles to one load and one store.
  switch (elem) {
    case 1:
      for (int64_t i = 0; i < len; ++i) dst[i] = src[i * s];
      return;
    case 2:
      for (int64_t i = 0; i < len; ++i) std::memcpy(dst + 2 * i, src + i * s, 2);
      return;
    case 4:
      for (int64_t i = 0; i < len; ++i) std::memcpy(dst + 4 * i, src + i * s, 4);
      return;
    case 8:
      for (int64_t i = 0; i < len; ++i) std::memcpy(dst + 8 * i, src + i * s, 8);
      return;
    default:
      for (int64_t i = 0; i < len; ++i) std::memcpy(dst + elem * i, src + i * s, size_t(elem));
  }
}

// Rows [b, e) of a coalesced copy whose last dim is the row.
void copy_rows(const StridedCopy& c, int64_t b, int64_t e) {
  const size_t r = c.dims.n;
  const int64_t len = c.dims[r - 1];
  const int64_t row_bytes = len * c.elem;
  Dims idx;
  idx.n = r - 1;
  int64_t off = 0;
  int64_t rest = b;
  for (size_t k = r - 1; k-- > 0;) {
    idx[k] = rest % c.dims[k];
    rest /= c.dims[k];
    off += idx[k] * c.src_stride[k];
  }
  for (int64_t row = b; row < e; ++row) {
    copy_row(c.dst + row * row_bytes, c.src + off, c.src_stride[r - 1], len, c.elem);
    for (size_t k = r - 1; k-- > 0;) {  // odometer step
      off += c.src_stride[k];
      if (++idx[k] < c.dims[k]) break;
      off -= idx[k] * c.src_stride[k];
      idx[k] = 0;
    }
  }
}

// A batch of 2-D transposes: the output's last two dims are the source's
// contiguous dim (rows) and a strided one (columns). Copied in square tiles
// so each source cache line is used for a whole tile row, not one element.
constexpr int64_t kTile = 32;

template <int E>
void tile_block(const StridedCopy& c, const char* src, char* dst, int64_t i0, int64_t i1,
                int64_t cols) {
  const int64_t s = c.src_stride[c.dims.n - 1];
  for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
    const int64_t j1 = std::min(cols, j0 + kTile);
    for (int64_t i = i0; i < i1; ++i) {
      char* d = dst + (i * cols) * E;
      const char* p = src + i * E;
      for (int64_t j = j0; j < j1; ++j) std::memcpy(d + j * E, p + j * s, E);
    }
  }
}

void transpose_tiles(ThreadPool& pool, const StridedCopy& c) {
  struct Job {
    const StridedCopy& c;
    size_t r;
    int64_t rows, cols, row_tiles;
  };
  const size_t r = c.dims.n;
  const int64_t rows = c.dims[r - 2], cols = c.dims[r - 1];
  int64_t batches = 1;
  for (size_t k = 0; k + 2 < r; ++k) batches *= c.dims[k];
  const Job job{c, r, rows, cols, (rows + kTile - 1) / kTile};
  // One pointer captured: std::function keeps it without allocating.
  auto work = [&job](int64_t b, int64_t e) {
    const StridedCopy& c = job.c;
    for (int64_t w = b; w < e; ++w) {
      const int64_t batch = w / job.row_tiles, t = w % job.row_tiles;
      int64_t off = 0, rest = batch;
      for (size_t k = job.r - 2; k-- > 0;) {
        off += (rest % c.dims[k]) * c.src_stride[k];
        rest /= c.dims[k];
      }
      const char* src = c.src + off;
      char* dst = c.dst + batch * job.rows * job.cols * c.elem;
      const int64_t i0 = t * kTile, i1 = std::min(job.rows, i0 + kTile);
      switch (c.elem) {
        case 1:
          tile_block<1>(c, src, dst, i0, i1, job.cols);
          break;
        case 2:
          tile_block<2>(c, src, dst, i0, i1, job.cols);
          break;
        case 4:
          tile_block<4>(c, src, dst, i0, i1, job.cols);
          break;
        case 8:
          tile_block<8>(c, src, dst, i0, i1, job.cols);
          break;
        default:
          for (int64_t i = i0; i < i1; ++i)
            copy_row(dst + i * job.cols * c.elem, src + i * c.elem, c.src_stride[job.r - 1],
                     job.cols, c.elem);
      }
    }
  };
  const int64_t n = batches * job.row_tiles;
  if (n * kTile * cols * c.elem < kParallelBytes || n < 2 || pool.size() <= 1)
    work(0, n);
  else
    pool.parallel_for(n, work);
}

}  // namespace

void strided_copy(ThreadPool& pool, const StridedCopy& in) {
  // Drop size-1 dims and merge neighbours that are contiguous in the source
  // (the destination is contiguous throughout), so the inner row is as long
  // as it can be.
  StridedCopy c;
  c.src = in.src;
  c.dst = in.dst;
  c.elem = in.elem;
  for (size_t k = 0; k < in.dims.n; ++k) {
    if (in.dims[k] == 0) return;
    if (in.dims[k] == 1) continue;
    if (c.dims.n > 0 && c.src_stride[c.dims.n - 1] == in.src_stride[k] * in.dims[k]) {
      c.dims[c.dims.n - 1] *= in.dims[k];
      c.src_stride[c.dims.n - 1] = in.src_stride[k];
      continue;
    }
    c.dims.push(in.dims[k]);
    c.src_stride.push(in.src_stride[k]);
  }
  if (c.dims.n == 0) {  // a single element
    c.dims.push(1);
    c.src_stride.push(c.elem);
  }
  const size_t r = c.dims.n;
  if (r >= 2 && c.src_stride[r - 1] != c.elem && c.src_stride[r - 2] == c.elem) {
    transpose_tiles(pool, c);
    return;
  }
  int64_t rows = 1;
  for (size_t k = 0; k + 1 < r; ++k) rows *= c.dims[k];
  const int64_t total = rows * c.dims[c.dims.n - 1] * c.elem;
  if (total < kParallelBytes || rows < 2 || pool.size() <= 1) {
    copy_rows(c, 0, rows);
    return;
  }
  pool.parallel_for(rows, [&c](int64_t b, int64_t e) { copy_rows(c, b, e); });
}

}  // namespace cairn::onnx::shape_ops

// model/pooling.cpp — pool_rows.
#include "model/pooling.h"

#include <algorithm>
#include <string>

namespace cairn::model {

Status pool_rows(Pooling pooling, const float* rows, int64_t n_rows, int64_t n_embd,
                 std::vector<float>& out) {
  if (!rows || n_rows <= 0) return Status::error("pooling needs at least one row");
  if (n_embd <= 0) return Status::error("pooling needs a positive row width");
  switch (pooling) {
    case Pooling::None:
      out.assign(rows, rows + n_rows * n_embd);
      return Status::ok();
    case Pooling::Mean: {
      // Summed in double: a long sequence's mean does not lose its tail.
      std::vector<double> sum((size_t)n_embd, 0.0);
      for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t i = 0; i < n_embd; ++i) sum[(size_t)i] += rows[r * n_embd + i];
      out.resize((size_t)n_embd);
      for (int64_t i = 0; i < n_embd; ++i) out[(size_t)i] = (float)(sum[(size_t)i] / (double)n_rows);
      return Status::ok();
    }
    case Pooling::Cls:
    case Pooling::Rank:
      out.assign(rows, rows + n_embd);
      return Status::ok();
    case Pooling::Last:
      out.assign(rows + (n_rows - 1) * n_embd, rows + n_rows * n_embd);
      return Status::ok();
    case Pooling::Unspecified:
      break;
  }
  return Status::error("pooling type " + std::to_string((int)pooling) +
                       " is not one of none, mean, cls, last, rank");
}

}  // namespace cairn::model

// model/pooling.h — one embedding from a sequence's final hidden rows, the
// way the file's (or the request's) pooling type says. Shared by the tests'
// goldens and the engine's embedding path.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace cairn::model {

// rows: n_rows rows of n_embd (one sequence's hidden rows in position order,
// as forward_hidden gives them). out becomes n_embd floats (Mean: the rows'
// average; Cls and Rank: the first row, which Rank's caller then passes to
// Model::classify; Last: the last row), or all n_rows * n_embd for None.
// No normalization: callers normalize as the request asks. Errors for no
// rows, a bad width or Unspecified (the caller picks a default first).
Status pool_rows(Pooling pooling, const float* rows, int64_t n_rows, int64_t n_embd,
                 std::vector<float>& out);

}  // namespace cairn::model

// core/npy.h — numpy's .npy file format for one tensor.
// Reads and writes version 1.0–3.0 files of the dtypes in core/value.h
// (little-endian or byte-order-free, C order). The header is parsed as the
// small Python dict literal the format defines; every size is checked before
// use. Used by `cairn client --input x=@file.npy` and its outputs.
// numpy has no bfloat16: to_npy writes such a tensor widened to float32
// (exactly); big-endian files are read and swapped to little-endian.
#pragma once

#include <string>

#include "core/status.h"
#include "core/value.h"

namespace cairn::values {

Result<Tensor> parse_npy(const std::string& bytes);
std::string to_npy(const Tensor& t);
Result<Tensor> read_npy_file(const std::string& path);
Status write_npy_file(const std::string& path, const Tensor& t);

}  // namespace cairn::values

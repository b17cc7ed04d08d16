// gguf/gguf_dump.h — a human-readable description of a parsed GGUF file, for
// `cairn gguf MODEL`. Owns formatting only: never reads the file itself, and
// never prints unbounded output (long strings and arrays are cut).
#pragma once

#include <functional>
#include <string>

#include "gguf/gguf.h"

namespace cairn::gguf {

// Version, metadata (key, type, value), the tensor table (name, type, dims,
// offset, bytes) and totals. Multi-line, ends with a newline. With `computes`
// the table gains a column saying whether it can compute each tensor (the
// model layer knows; this layer only formats).
std::string describe(const File& file,
                     const std::function<bool(const TensorInfo&)>& computes = {});

// One value as the dump shows it: strings quoted and cut, arrays as their first
// few elements and a count.
std::string describe_value(const Value& v);

}  // namespace cairn::gguf

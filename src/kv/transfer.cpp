// kv/transfer.cpp — checks of transferred K/V rows.
#include "kv/transfer.h"

namespace cairn::kv {

std::string geometry_mismatch(const KvGeometry& want, const KvGeometry& got) {
  auto differs = [](const char* what, int64_t w, int64_t g) {
    return std::string(what) + " " + std::to_string(g) + " where this worker has " +
           std::to_string(w);
  };
  if (want.version != got.version) return differs("transfer format version", want.version, got.version);
  if (want.dtype != got.dtype)
    return "K/V cache type " + std::string(type_info(got.dtype).name) + " where this worker has " +
           std::string(type_info(want.dtype).name) + " (give both workers the same --kv-type)";
  if (want.n_layer != got.n_layer) return differs("layer count", want.n_layer, got.n_layer);
  if (want.row_elems != got.row_elems) return differs("K/V row width", want.row_elems, got.row_elems);
  if (want.elem_bytes != got.elem_bytes)
    return differs("K/V element size (bytes)", want.elem_bytes, got.elem_bytes);
  if (want.block_tokens != got.block_tokens)
    return differs("KV block size (tokens)", want.block_tokens, got.block_tokens);
  return {};
}

int64_t ImportedKv::bytes() const {
  int64_t total = 0;
  for (const KvRows& r : runs) total += (int64_t)r.bytes.size();
  return total;
}

Status ImportedKv::check() const {
  if (geometry.n_layer <= 0 || geometry.row_elems <= 0 || geometry.elem_bytes <= 0 ||
      geometry.row_bytes() <= 0)
    return Status::invalid_argument("the handed-over K/V has an empty geometry");
  int64_t next = 0;
  for (const KvRows& r : runs) {
    if (r.first != next || r.n <= 0)
      return Status::invalid_argument("the handed-over K/V runs are not contiguous (a run starts at " +
                                      std::to_string(r.first) + ", expected " +
                                      std::to_string(next) + ")");
    if ((int64_t)r.bytes.size() != geometry.bytes_for(r.n))
      return Status::invalid_argument("a handed-over K/V run of " + std::to_string(r.n) +
                                      " positions has " + std::to_string(r.bytes.size()) +
                                      " bytes, expected " + std::to_string(geometry.bytes_for(r.n)));
    next += r.n;
  }
  if (next != (int64_t)prompt.size())
    return Status::invalid_argument("the handed-over K/V covers " + std::to_string(next) +
                                    " positions but the prompt has " +
                                    std::to_string(prompt.size()) + " tokens");
  return Status::ok();
}

}  // namespace cairn::kv

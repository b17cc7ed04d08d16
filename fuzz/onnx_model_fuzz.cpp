// libFuzzer target: any bytes as an ONNX model must load or be refused with
// an error, never crash, hang or leak. Session::load_bytes runs the whole
// load: the protobuf parse and checks (onnx/graph.cpp), every operator
// factory of the real table, and constant folding. No folder is given, so
// external data is refused without touching the file system.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "onnx/session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cairn;
  static ThreadPool pool(1);
  onnx::SessionOptions options;
  options.pool = &pool;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto session = onnx::Session::load_bytes(bytes, "", options);
  if (session.is_ok()) (void)(*session)->inputs();
  return 0;
}

// onnx/session.cpp — (being written)
#include "onnx/session.h"

namespace cairn::onnx {

Result<std::unique_ptr<Session>> Session::load(const std::string& path, SessionOptions options) {
  (void)options;
  return Status::error("ONNX models are not supported yet: " + path);
}

Result<std::unique_ptr<Session>> Session::load_bytes(std::string_view bytes, const std::string& base_dir,
                                                     SessionOptions options) {
  (void)bytes;
  (void)base_dir;
  (void)options;
  return Status::error("ONNX models are not supported yet");
}

}  // namespace cairn::onnx

#include "test_util.h"

#include <atomic>
#include <cstdlib>
#include <unistd.h>

namespace cairn::test {

std::optional<std::filesystem::path> shared_dir() {
  if (const char* env = std::getenv("CAIRN_SHARED_DIR")) {
    std::filesystem::path p(env);
    if (std::filesystem::is_directory(p)) return p;
    return std::nullopt;
  }
  std::filesystem::path p(CAIRN_SHARED_DIR);
  if (std::filesystem::is_directory(p / "models")) return p;
  return std::nullopt;
}

std::filesystem::path temp_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  std::filesystem::path p = std::filesystem::path(CAIRN_BINARY_DIR) / "test-tmp" /
                            (name + "-" + std::to_string(getpid()) + "-" +
                             std::to_string(counter++));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace cairn::test

// tests/test_util.cpp — helpers every test binary shares (the ../shared folder, temporary files, random data).
#include "test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <random>

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

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::filesystem::path temp_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  std::filesystem::path p =
      std::filesystem::path(CAIRN_BINARY_DIR) / "test-tmp" /
      (name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

std::vector<float> random_normal(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

}  // namespace cairn::test

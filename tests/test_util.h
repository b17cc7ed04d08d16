// tests/test_util.h — helpers shared by every test binary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cairn::test {

// ../shared beside the checkout, or nullopt when it is not there (tests that
// need it then GTEST_SKIP() with a message saying so).
std::optional<std::filesystem::path> shared_dir();

// A fresh, empty directory under the build tree, unique per call.
std::filesystem::path temp_dir(const std::string& name);

// A whole file's bytes ("" when it cannot be read).
std::string read_file(const std::filesystem::path& p);

// n draws of a normal distribution (mean 0, deviation `scale`), the same for
// the same seed.
std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f);

}  // namespace cairn::test

// Skips the current test, saying which shared file was missing.
#define CAIRN_REQUIRE_SHARED(relpath)                                            \
  do {                                                                           \
    auto cairn_shared_ = ::cairn::test::shared_dir();                            \
    if (!cairn_shared_ || !std::filesystem::exists(*cairn_shared_ / (relpath)))  \
      GTEST_SKIP() << "skipped: ../shared/" << (relpath) << " is not available"; \
  } while (0)

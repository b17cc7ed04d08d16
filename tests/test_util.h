// tests/test_util.h — helpers shared by every test binary.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace cairn::test {

// ../shared beside the checkout, or nullopt when it is not there (tests that
// need it then GTEST_SKIP() with a message saying so).
std::optional<std::filesystem::path> shared_dir();

// A fresh, empty directory under the build tree, unique per call.
std::filesystem::path temp_dir(const std::string& name);

}  // namespace cairn::test

// Skips the current test, saying which shared file was missing.
#define CAIRN_REQUIRE_SHARED(relpath)                                                      \
  do {                                                                                     \
    auto cairn_shared_ = ::cairn::test::shared_dir();                                      \
    if (!cairn_shared_ || !std::filesystem::exists(*cairn_shared_ / (relpath)))            \
      GTEST_SKIP() << "skipped: ../shared/" << (relpath) << " is not available";           \
  } while (0)

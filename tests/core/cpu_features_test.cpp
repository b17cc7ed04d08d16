// tests/core/cpu_features_test.cpp — CPU feature detection and the CAIRN_ISA cap.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace cairn {
namespace {

TEST(CpuFeaturesTest, NamesRoundTrip) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx}) {
    auto parsed = parse_isa(isa_name(isa));
    ASSERT_TRUE(parsed.has_value()) << isa_name(isa);
    EXPECT_EQ(*parsed, isa);
  }
  EXPECT_FALSE(parse_isa("avx9000").has_value());
}

TEST(CpuFeaturesTest, LevelsAreConsistentWithFlags) {
  const CpuFeatures& f = cpu_features();
  const Isa level = detected_isa();
  if (level >= Isa::Avx2) {
    EXPECT_TRUE(f.avx2 && f.fma && f.f16c && f.os_ymm);
  }
  if (level >= Isa::Avx512) {
    EXPECT_TRUE(f.avx512f && f.avx512bw && f.os_zmm);
  }
  if (level >= Isa::Avx512Vnni) {
    EXPECT_TRUE(f.avx512_vnni);
  }
  if (level >= Isa::Amx) {
    EXPECT_TRUE(f.amx_int8 && f.os_amx);
  }
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(level));
}

// The cap is read from the environment; ctest runs this binary under each cap.
TEST(CpuFeaturesTest, ActiveLevelHonoursTheCap) {
  const char* cap = std::getenv("CAIRN_ISA");
  if (!cap) GTEST_SKIP() << "CAIRN_ISA not set";
  auto want = parse_isa(cap);
  ASSERT_TRUE(want.has_value()) << cap;
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(*want));
}

}  // namespace
}  // namespace cairn

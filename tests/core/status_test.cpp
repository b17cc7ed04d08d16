// tests/core/status_test.cpp — Status kinds, param and context; Result and the early-return macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include <string>

namespace cairn {
namespace {

TEST(Status, OkAndPlainErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  EXPECT_EQ(Status::ok().code(), StatusCode::Ok);
  const Status e = Status::error("disk full");
  EXPECT_FALSE(e.is_ok());
  EXPECT_EQ(e.code(), StatusCode::Internal);  // the kind lower layers get by default
  EXPECT_EQ(e.message(), "disk full");
  EXPECT_TRUE(e.param().empty());
}

TEST(Status, KindParamAndContext) {
  const Status e = Status::invalid_argument("must be at least 1", "max_tokens");
  EXPECT_EQ(e.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(e.param(), "max_tokens");
  const Status c = e.with_context("request 3");
  EXPECT_EQ(c.message(), "request 3: must be at least 1");
  EXPECT_EQ(c.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(c.param(), "max_tokens");
  EXPECT_EQ(e.with_param("stream_options").param(), "stream_options");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
  EXPECT_EQ(Status::not_found("no model", "model").code(), StatusCode::NotFound);
  EXPECT_EQ(Status::unavailable("busy").code(), StatusCode::Unavailable);
  EXPECT_EQ(Status::error(StatusCode::DeadlineExceeded, "late").code(),
            StatusCode::DeadlineExceeded);
}

Result<int> half(int x) {
  if (x % 2) return Status::invalid_argument("odd", "x");
  return x / 2;
}

Result<int> quarter(int x) {
  CAIRN_ASSIGN_OR_RETURN(const int h, half(x));
  CAIRN_ASSIGN_OR_RETURN(const int q, half(h));
  return q;
}

Status check_even(int x) {
  CAIRN_RETURN_IF_ERROR(half(x).status());
  return Status::ok();
}

TEST(Status, ResultAndMacrosCarryTheKind) {
  ASSERT_TRUE(quarter(8).is_ok());
  EXPECT_EQ(*quarter(8), 2);
  const Result<int> r = quarter(6);  // 3 is odd
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(r.status().param(), "x");
  EXPECT_TRUE(check_even(4).is_ok());
  EXPECT_EQ(check_even(5).code(), StatusCode::InvalidArgument);
}

}  // namespace
}  // namespace cairn

// tests/rpc/handoff_convert_test.cpp — the prefill → decode handoff's fields on the wire:
// GenerateRequest handoff/resume, FinishEvent.handoff_error, the K/V header,
// WorkerStatus role and counters; and the refusals of sizes from the network.
#include <gtest/gtest.h>

#include "rpc/convert.h"

namespace cairn::rpc {
namespace {

template <class M>
M through_wire(const M& m) {
  M out;
  EXPECT_TRUE(out.ParseFromString(m.SerializeAsString()));
  return out;
}

TEST(HandoffConvert, GenerateRequestHandoffAndResumeRoundTrip) {
  serving::GenerateRequest r;
  r.prompt = std::string("hi");
  r.handoff = serving::GenerateRequest::Handoff{"10.0.0.2:6000", "h-1"};
  auto back = from_proto(through_wire(to_proto(r, "rid")));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_TRUE(back->handoff.has_value());
  EXPECT_EQ(back->handoff->peer, "10.0.0.2:6000");
  EXPECT_EQ(back->handoff->id, "h-1");
  EXPECT_FALSE(back->resume.has_value());

  serving::GenerateRequest d;
  d.prompt = std::vector<serving::Token>{1, 2};
  d.resume = serving::GenerateRequest::Resume{};
  d.resume->handoff_id = "h-1";
  d.resume->forced = {5, 6};
  // The rows never travel in the request.
  d.resume->kv = std::make_shared<const kv::ImportedKv>();
  auto msg = to_proto(d, "rid");
  EXPECT_TRUE(msg.has_resume());
  back = from_proto(through_wire(msg));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_TRUE(back->resume.has_value());
  EXPECT_EQ(back->resume->handoff_id, "h-1");
  EXPECT_EQ(back->resume->forced, (std::vector<serving::Token>{5, 6}));
  EXPECT_EQ(back->resume->kv, nullptr);
  EXPECT_FALSE(back->handoff.has_value());

  // Neither set: neither comes back.
  serving::GenerateRequest plain;
  plain.prompt = std::string("x");
  back = from_proto(to_proto(plain, ""));
  ASSERT_TRUE(back.is_ok());
  EXPECT_FALSE(back->handoff || back->resume);

  // An empty resume id (recompute) is kept as such.
  d.resume->handoff_id.clear();
  back = from_proto(to_proto(d, ""));
  ASSERT_TRUE(back.is_ok());
  ASSERT_TRUE(back->resume);
  EXPECT_TRUE(back->resume->handoff_id.empty());
}

TEST(HandoffConvert, GenerateRequestRefusesBadHandoffFields) {
  v1::GenerateRequest m;
  m.set_text("x");
  m.mutable_handoff()->set_peer("a:1");
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);  // no id
  m.mutable_handoff()->set_id(std::string(kMaxHandoffIdBytes + 1, 'i'));
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
  m.mutable_handoff()->set_id("ok");
  m.mutable_handoff()->set_peer("");
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
  m.clear_handoff();
  m.mutable_resume()->set_handoff_id(std::string(kMaxHandoffIdBytes + 1, 'i'));
  EXPECT_EQ(from_proto(m).status().param(), "resume");
  m.mutable_resume()->set_handoff_id("ok");
  m.mutable_resume()->mutable_forced_tokens()->Resize(kMaxPromptTokens + 1, 1);
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
}

TEST(HandoffConvert, FinishEventCarriesTheHandoffError) {
  serving::FinishEvent f;
  f.reason = "handoff";
  f.handoff_error = "decode worker refused: layer count 3 where this worker has 2";
  f.usage.prompt_tokens = 4;
  auto ev = through_wire(to_proto(f));
  ASSERT_TRUE(ev.has_finish());
  auto back = from_proto(ev.finish());
  EXPECT_EQ(back.reason, "handoff");
  EXPECT_EQ(back.handoff_error, f.handoff_error);
  EXPECT_EQ(back.usage.prompt_tokens, 4);
}

TEST(HandoffConvert, KvHeaderRoundTripsAndRefusesBadPrompts) {
  KvHeader h;
  h.model = "m";
  h.geometry.n_layer = 3;
  h.geometry.row_elems = 64;
  h.geometry.elem_bytes = 2;
  h.geometry.block_tokens = 16;
  h.prompt = {1, 2, 3};
  auto back = from_proto(through_wire(to_proto(h)));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->model, "m");
  EXPECT_EQ(back->geometry, h.geometry);
  EXPECT_EQ(back->prompt, h.prompt);

  v1::KvHeader m = to_proto(h);
  m.clear_prompt();
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
  m = to_proto(h);
  m.set_prompt(1, -5);
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
  m = to_proto(h);
  m.mutable_prompt()->Resize(kMaxPromptTokens + 1, 1);
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
  m = to_proto(h);
  m.set_model(std::string(kMaxModelNameBytes + 1, 'm'));
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
  // The version travels as sent; the store compares it with its own.
  m = to_proto(h);
  m.set_version(7);
  EXPECT_EQ(from_proto(m)->geometry.version, 7u);
}

// --kv-type: the header carries the row type, so a receiver can refuse rows
// of another layout; a header without one (an older sender) means F16 rows.
TEST(HandoffConvert, KvHeaderCarriesTheKvType) {
  KvHeader h;
  h.model = "m";
  h.geometry.n_layer = 3;
  h.geometry.row_elems = 64;
  h.geometry.elem_bytes = 1;
  h.geometry.dtype = TensorType::Q8_0;
  h.prompt = {1, 2, 3};
  auto back = from_proto(through_wire(to_proto(h)));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->geometry, h.geometry);
  EXPECT_EQ(back->geometry.row_bytes(), 2 * 34);

  v1::KvHeader m = to_proto(h);
  m.clear_kv_type();
  m.set_elem_bytes(2);
  EXPECT_EQ(from_proto(m)->geometry.dtype, TensorType::F16);
  m.set_kv_type("q4_0");
  EXPECT_EQ(from_proto(m).status().code(), StatusCode::InvalidArgument);
}

TEST(HandoffConvert, CountersRoundTrip) {
  serving::HandoffCounters c;
  c.sent = 3;
  c.send_failed = 1;
  c.bytes_sent = 1000;
  c.received = 2;
  c.bytes_received = 500;
  c.resumed = 2;
  c.expired = 1;
  c.observe_seconds(0.02);
  c.observe_seconds(7);
  auto back = from_proto(through_wire(to_proto(c.snapshot())));
  EXPECT_EQ(back.sent, 3u);
  EXPECT_EQ(back.send_failed, 1u);
  EXPECT_EQ(back.bytes_sent, 1000u);
  EXPECT_EQ(back.received, 2u);
  EXPECT_EQ(back.bytes_received, 500u);
  EXPECT_EQ(back.resumed, 2u);
  EXPECT_EQ(back.expired, 1u);
  EXPECT_EQ(back.seconds.bounds, serving::HandoffCounters::seconds_bounds());
  EXPECT_EQ(back.seconds.count, 2u);
  EXPECT_DOUBLE_EQ(back.seconds.sum, 7.02);
  EXPECT_EQ(back.seconds.counts.back(), 1u);

  // A histogram whose shape is wrong is left out, the counters kept.
  v1::HandoffCounters m = to_proto(c.snapshot());
  m.add_seconds_counts(1);
  auto bad = from_proto(m);
  EXPECT_EQ(bad.sent, 3u);
  EXPECT_TRUE(bad.seconds.counts.empty());
  EXPECT_EQ(bad.seconds.count, 0u);
}

}  // namespace
}  // namespace cairn::rpc

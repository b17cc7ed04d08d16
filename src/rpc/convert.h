// rpc/convert.h — serving types <-> the cairn.v1 protobuf messages.
// Owns the one mapping between the Backend vocabulary (serving/backend.h) and
// the wire, the one mapping between servable values (core/value.h) and
// cairn.v1.Value, used by both ends of every gRPC hop (worker service, remote
// backend, controller), and the one mapping from a Status to a gRPC status
// (to_grpc_status) that every gRPC service answers through. Never talks to
// the network and never runs a model.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "cairn/v1/serving.pb.h"
#include "cairn/v1/worker.pb.h"
#include "core/status.h"
#include "core/value.h"
#include "serving/backend.h"
#include "serving/handoff_store.h"

namespace cairn::rpc {

// Limits on what a peer may send; a message over them is refused with a
// clear error rather than handed to the engine.
inline constexpr size_t kMaxPromptTokens = 1 << 20;
inline constexpr size_t kMaxChatMessages = 4096;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxLogitBias = 4096;
inline constexpr size_t kMaxHandoffIdBytes = 256;
inline constexpr size_t kMaxPeerBytes = 512;
inline constexpr size_t kMaxModelNameBytes = 1024;

// handoff and resume travel too, except resume.kv (the worker fills it from
// its HandoffStore). from_proto refuses an empty or too long handoff id or
// peer, a too long resume id and more than kMaxPromptTokens forced tokens.
v1::GenerateRequest to_proto(const serving::GenerateRequest& req, const std::string& request_id);
Result<serving::GenerateRequest> from_proto(const v1::GenerateRequest& msg);

// A K/V transfer's first message: the rows' geometry, the model they are
// for and the prompt they were computed from. from_proto refuses an empty
// or too long prompt (kMaxPromptTokens), a negative token id and a too long
// model name; the geometry is checked against the local one by the store.
struct KvHeader {
  std::string model;
  kv::KvGeometry geometry;
  std::vector<serving::Token> prompt;
};
v1::KvHeader to_proto(const KvHeader& h);
Result<KvHeader> from_proto(const v1::KvHeader& msg);

v1::GenerateEvent to_proto(const serving::OutputSyntax& syntax);
v1::GenerateEvent to_proto(const serving::TokenEvent& ev);
v1::GenerateEvent to_proto(const serving::FinishEvent& ev);
v1::GenerateEvent to_proto(const Status& err);
serving::TokenEvent from_proto(const v1::TokenEvent& msg);
serving::FinishEvent from_proto(const v1::FinishEvent& msg);
serving::OutputSyntax from_proto(const v1::OutputSyntax& msg);
// A failure inside a stream or a reply (v1::Error): kind, message and param.
// The wire has four kinds (InvalidArgument, NotFound, Unavailable, Internal);
// any other kind travels as INTERNAL.
Status from_proto(const v1::Error& msg);
v1::Error to_proto_error(const Status& err);

v1::ModelInfo to_proto(const serving::ModelInfo& m);
serving::ModelInfo from_proto(const v1::ModelInfo& m);

// Embeddings and rerank. from_proto refuses a request with no inputs, an
// input with neither text nor tokens, or more than kMaxPromptTokens tokens.
inline constexpr size_t kMaxEmbedInputs = 1 << 16;
v1::EmbedRequest to_proto(const serving::EmbedRequest& req);
Result<serving::EmbedRequest> from_proto(const v1::EmbedRequest& msg);
v1::EmbedResponse to_proto(const serving::EmbedResult& result);
serving::EmbedResult from_proto(const v1::EmbedResponse& msg);

// A backend's whole load picture, as a worker reports it; with a role, the
// worker's role and (when given) its handoff counters too.
v1::WorkerStatus worker_status(const serving::Backend& backend);
v1::WorkerStatus worker_status(const serving::Backend& backend, const std::string& role,
                               const serving::HandoffCounters* handoff);
v1::HandoffCounters to_proto(const serving::HandoffCountersSnapshot& c);
// A histogram whose bucket count does not match its bounds comes back empty.
serving::HandoffCountersSnapshot from_proto(const v1::HandoffCounters& msg);
serving::Health health_of(const v1::WorkerStatus& st);
serving::BackendStats stats_of(const v1::WorkerStatus& st);

// Servable values. A tensor travels as its dtype's name, shape and raw
// little-endian bytes; from_proto checks all three through Tensor::make (an
// unknown dtype, a bad shape or data of the wrong length is InvalidArgument)
// and refuses a Value with no kind set. Instances: every input converted, an
// error naming the input ("input 'x': ...").
v1::Value to_proto(const values::Value& v);
Result<values::Value> from_proto(const v1::Value& v);
v1::Instance to_proto(const values::Instance& inst);
Result<values::Instance> from_proto(const v1::Instance& inst);

// The one place a Status becomes a gRPC status (message as the message, param
// as the details): InvalidArgument INVALID_ARGUMENT, NotFound NOT_FOUND,
// Unavailable UNAVAILABLE, Cancelled CANCELLED, DeadlineExceeded
// DEADLINE_EXCEEDED, Unauthenticated UNAUTHENTICATED, Internal and the
// HTTP-only kinds INTERNAL. Every gRPC service answers through it.
grpc::Status to_grpc_status(const Status& status);
// And back, for a call that failed: INVALID_ARGUMENT, OUT_OF_RANGE and
// FAILED_PRECONDITION are InvalidArgument; NOT_FOUND NotFound; UNAVAILABLE,
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and CANCELLED Unavailable (worth
// retrying elsewhere); everything else Internal.
Status from_grpc_status(const grpc::Status& st);

}  // namespace cairn::rpc

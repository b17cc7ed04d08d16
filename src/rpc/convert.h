// rpc/convert.h — serving types <-> the cairn.v1 protobuf messages.
// Owns the one mapping between the Backend vocabulary (serving/backend.h) and
// the wire, used by both ends of every gRPC hop (worker service, remote
// backend, controller). Never talks to the network and never runs a model.
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <variant>

#include "cairn/v1/worker.pb.h"
#include "serving/backend.h"

namespace cairn::rpc {

// Limits on what a peer may send; a message over them is refused with a
// clear error rather than handed to the engine.
inline constexpr size_t kMaxPromptTokens = 1 << 20;
inline constexpr size_t kMaxChatMessages = 4096;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxLogitBias = 4096;

v1::GenerateRequest to_proto(const serving::GenerateRequest& req, const std::string& request_id);
std::variant<serving::GenerateRequest, serving::Error> from_proto(const v1::GenerateRequest& msg);

v1::GenerateEvent to_proto(const serving::TokenEvent& ev);
v1::GenerateEvent to_proto(const serving::FinishEvent& ev);
v1::GenerateEvent to_proto(const serving::Error& err);
serving::TokenEvent from_proto(const v1::TokenEvent& msg);
serving::FinishEvent from_proto(const v1::FinishEvent& msg);
serving::Error from_proto(const v1::Error& msg);
v1::Error to_proto_error(const serving::Error& err);

v1::ModelInfo to_proto(const serving::ModelInfo& m);
serving::ModelInfo from_proto(const v1::ModelInfo& m);

// A backend's whole load picture, as a worker reports it.
v1::WorkerStatus worker_status(const serving::Backend& backend);
serving::Health health_of(const v1::WorkerStatus& st);
serving::BackendStats stats_of(const v1::WorkerStatus& st);

// Errors as gRPC statuses and back: InvalidRequest <-> INVALID_ARGUMENT,
// NotFound <-> NOT_FOUND, Unavailable <-> UNAVAILABLE (also DEADLINE_EXCEEDED
// and a broken connection), everything else INTERNAL.
grpc::Status to_grpc_status(const serving::Error& err);
serving::Error from_grpc_status(const grpc::Status& st);

}  // namespace cairn::rpc

// api/grpc_worker_service.h — the cairn.v1.Worker gRPC service over a Backend.
// Owns the translation of Worker calls into Backend calls: Generate streams a
// request's events as the engine produces them, Cancel stops a running
// Generate by the caller's request id, Embed answers once the backend's
// embedding sink fires, Status/Tokenize/Detokenize answer from the backend.
// Every message is checked (rpc::from_proto and the limits here) before it
// reaches the backend. Never owns the backend or the server, never
// blocks the engine thread (events are queued and written by the handler).
#pragma once

#include <memory>

#include "serving/backend.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace cairn::api {

// Longest request_id a caller may choose; longer ones are INVALID_ARGUMENT.
inline constexpr size_t kMaxRequestIdBytes = 256;

// The service borrows `backend`, which must outlive it. Register it with a
// GrpcServer; destroy it only after the server has shut down (the file that
// destroys it includes <grpcpp/impl/service_type.h>, a light header).
std::unique_ptr<grpc::Service> make_worker_service(serving::Backend& backend);

}  // namespace cairn::api

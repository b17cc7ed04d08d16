// api/grpc_worker_service.h — the cairn.v1.Worker gRPC service over a Backend.
// Owns the translation of Worker calls into Backend calls: Generate streams a
// request's events as the engine produces them, Cancel stops a running
// Generate by the caller's request id, Embed answers once the backend's
// embedding sink fires, Status/Tokenize/Detokenize answer from the backend.
// Every message is checked (rpc::from_proto and the limits here) before it
// reaches the backend. Never owns the backend or the server, never
// blocks the engine thread (events are queued and written by the handler).
// Prefill → decode handoff: PushKv fills the HandoffStore (decode side); a
// Generate with `handoff` pushes the engine's K/V runs to the decode worker
// while it streams the first token (prefill side); a Generate with `resume`
// takes its rows from the store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "serving/backend.h"
#include "serving/handoff_store.h"

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

struct WorkerServiceOptions {
  // The decode side's buffer (borrowed, outliving the service); null: PushKv
  // is refused and a resume with a handoff id finds nothing.
  serving::HandoffStore* handoff_store = nullptr;
  serving::HandoffCounters* handoff_counters = nullptr;  // borrowed; may be null
  std::string role = "both";  // "prefill", "decode" or "both" (WorkerStatus.role)
  // The deadline of one K/V push, from its first row.
  int64_t handoff_timeout_ms = 30000;
  // Row bytes per KvPush message (at least one position's); tests set it small.
  int64_t kv_push_chunk_bytes = int64_t(4) << 20;
};
std::unique_ptr<grpc::Service> make_worker_service(serving::Backend& backend,
                                                   WorkerServiceOptions options);

}  // namespace cairn::api

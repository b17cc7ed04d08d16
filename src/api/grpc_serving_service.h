// api/grpc_serving_service.h — the client-facing cairn.v1.Serving gRPC service
// (MindSpore Serving's shape: servable = model, methods "generate" and "chat",
// instances of named inputs) over any serving::Backend.
// Owns the mapping from Predict/PredictStream instances to GenerateRequests
// (every input checked: names, types, ranges, counts) and from backend events
// to replies, plus cancelling backend requests when the client cancels or its
// deadline passes. Never runs a model, never blocks a gRPC thread waiting on
// the engine (it uses the callback API), and never owns the server it is
// registered in. gRPC headers stay in the .cpp (grpcpp is slow to compile).
//
// Inputs of both methods (all optional unless said):
//   generate: prompt (string, required)      chat: messages (string, required:
//             a JSON array of {role, content})
//   max_tokens (int >= 1; default 16 for generate, until the context is full
//   for chat), temperature, top_p, min_p, presence_penalty, frequency_penalty
//   (numbers), top_k, seed (ints), stop (a string, or a string holding a JSON
//   array of strings), ignore_eos (bool), speculative (bool).
// Outputs per instance: text, finish_reason, prompt_tokens, completion_tokens.
// Errors carry an HTTP-like code: 400 bad input, 404 unknown servable, method
// or version, 503 busy or still loading, 500 anything else.
//
// Servables from a servable_config.py (when a ServableRuntime is given and
// knows the requested name; it wins over a model of the same name): the
// instances' values (tensors included) are converted with rpc/convert.h and
// the call goes to ServableRuntime::predict. An instance whose values cannot
// be converted fails alone (400 "instance i: input 'x': ...") and the others
// run. Predict replies once, one instance per request instance, with
// servable_spec.version_number the version that ran. PredictStream sends one
// reply (final=false, instances[0] = {output: new text}) per streamed piece
// of text, then one final=true reply per instance with all its outputs or its
// error. A client cancel or a passed deadline cancels the runtime's call.
// ListServables lists the served models (but those named like a servable,
// whose methods win), then the servables (n_ctx 0, their loaded versions).
#pragma once

#include <cstddef>
#include <memory>

#include "servable/runtime.h"
#include "serving/backend.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace cairn::api {

// The most instances one Predict or PredictStream call may carry.
inline constexpr size_t kMaxServingInstances = 64;

// The service borrows `backend` and `servables` (null: models only), which
// must outlive the server it is registered in (calls still running at
// shutdown are cancelled by gRPC and their backend requests or servable calls
// cancelled with them).
std::unique_ptr<grpc::Service> make_serving_service(serving::Backend& backend,
                                                    servable::ServableRuntime* servables = nullptr);

}  // namespace cairn::api

// api/grpc_servable_calls.h — Serving.Predict and PredictStream for a servable
// from a servable_config.py (servable/runtime.h), as the Serving service
// (grpc_serving_service.cpp) hands them over.
// Owns converting a request's instances to values (an instance that does not
// convert fails alone), the call to ServableRuntime::predict, the replies
// (one per instance, or streamed text then one final reply per instance),
// and cancelling the runtime's call when the client goes away. Never blocks a
// gRPC thread. gRPC types are only forward-declared here.
#pragma once

#include "servable/runtime.h"

namespace grpc {
class ServerUnaryReactor;
template <class Response>
class ServerWriteReactor;
}  // namespace grpc

namespace cairn::v1 {
class PredictRequest;
class PredictReply;
}  // namespace cairn::v1

namespace cairn::api {

grpc::ServerUnaryReactor* predict_servable(servable::ServableRuntime& runtime,
                                           const v1::PredictRequest& req, v1::PredictReply* reply);
grpc::ServerWriteReactor<v1::PredictReply>* predict_stream_servable(
    servable::ServableRuntime& runtime, const v1::PredictRequest& req);

}  // namespace cairn::api

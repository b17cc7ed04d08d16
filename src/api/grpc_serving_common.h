// api/grpc_serving_common.h — what the Serving service's two call paths share
// (served models in grpc_serving_service.cpp, servables in
// grpc_servable_calls.cpp): the one way a failure becomes an ErrorMsg, and a
// reactor base that hands OnCancel to its call. Included only by those two
// files: it pulls in grpcpp.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>

#include "api/openai_response.h"
#include "cairn/v1/serving.grpc.pb.h"
#include "core/status.h"
#include "rpc/convert.h"

namespace cairn::api::grpc_serving {

namespace v1 = cairn::v1;

// An instance's or a whole call's failure. The Serving API carries a message
// and a code, no field name: param is dropped so that the gRPC status (from
// rpc::to_grpc_status) has no details, and the reply's error_code is the HTTP
// status of the same failure (from to_http_error).
inline Status call_error(const Status& s) { return Status::error(s.code(), s.message()); }

inline void set_error(v1::ErrorMsg& out, const Status& err) {
  out.set_error_code(to_http_error(err).status);
  out.set_error_msg(err.message());
}

inline grpc::Status cancelled_status() {
  return rpc::to_grpc_status(Status::error(StatusCode::Cancelled, "the call was cancelled"));
}

// Both reactors hand OnCancel to their call; a cancel that comes before the
// call exists is remembered and applied when it is set.
template <typename Base, typename Call>
class CancellableReactor : public Base {
 public:
  void set_call(std::shared_ptr<Call> call) {
    bool cancelled = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    if (cancelled) call->cancel_all();
  }
  void OnCancel() override {
    std::shared_ptr<Call> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      call = call_;
    }
    if (call) call->cancel_all();
  }
  void OnDone() override { delete this; }

 protected:
  std::shared_ptr<Call> current() {
    std::lock_guard<std::mutex> lock(mu_);
    return call_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<Call> call_;  // null until the request is resolved
  bool cancelled_ = false;
};

}  // namespace cairn::api::grpc_serving

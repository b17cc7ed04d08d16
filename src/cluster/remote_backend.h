// cluster/remote_backend.h — a serving::Backend that is one worker over gRPC.
// Owns the channel to one worker's cairn.v1.Worker service and every call on
// it: submit starts a server-streaming Generate (with a deadline) whose events
// reach the sink from gRPC's callback threads, embed starts a unary Embed
// call, cancel cancels either, and a broken call ends the request with an
// Unavailable error (and tells the owner through on_broken). Never routes,
// retries or knows other workers (cluster/cluster_backend.h does); never
// blocks the caller of submit or embed.
// Destroying it cancels its calls and waits for them: no call or thread outlives it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "serving/backend.h"

namespace cairn::cluster {

struct RemoteBackendOptions {
  std::string address;             // host:port of the worker's gRPC server
  double request_timeout_s = 600;  // deadline of a whole Generate call
  double rpc_timeout_s = 10;       // deadline of Status / Tokenize / Detokenize
  // Called (from a gRPC thread, before the request's sink hears of it) when a
  // call failed because the worker could not be reached or the stream broke.
  std::function<void()> on_broken;
};

class RemoteBackend final : public serving::Backend {
 public:
  explicit RemoteBackend(RemoteBackendOptions options);
  ~RemoteBackend() override;
  RemoteBackend(const RemoteBackend&) = delete;
  RemoteBackend& operator=(const RemoteBackend&) = delete;

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override;
  // A unary Embed call (deadline request_timeout_s); the sink hears once,
  // from a gRPC thread. Shares ids with submit: cancel() cancels either.
  Result<serving::RequestId> embed(serving::EmbedRequest req,
                                   std::shared_ptr<serving::EmbedSink> sink) override;
  void cancel(serving::RequestId id) override;
  // These three ask the worker (Status RPC, bounded by rpc_timeout_s); an
  // unreachable worker reads as no models and Loading.
  std::vector<serving::ModelInfo> models() const override;
  serving::Health health() const override;
  serving::BackendStats stats() const override;
  Result<std::vector<serving::Token>> tokenize(const std::string& model, const std::string& text,
                                               bool add_special,
                                               bool parse_special = true) const override;
  Result<std::vector<std::string>> token_pieces(
      const std::string& model, const std::vector<serving::Token>& tokens) const override;
  Result<std::string> detokenize(const std::string& model,
                                 const std::vector<serving::Token>& tokens) const override;
  // Only stops this object from starting new calls; the worker keeps serving others.
  void start_draining() override;

  const std::string& address() const;
  int active_calls() const;  // Generate and Embed calls not yet finished (for tests)

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cairn::cluster

// servable/llm_router.h — the OpenAI routes over the GGUF models of servables.
// Owns one serving::Backend that sends a generation to the newest version's
// model of that name (the servable's name for its only GGUF model), keeps the
// version alive until the generation ends, and gives each request an id of
// its own (ids of different models' backends may collide). Sums the models'
// health and counters. Never loads anything.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "serving/backend.h"
#include "servable/version.h"

namespace cairn::servable {

class LlmRouter final : public serving::Backend {
 public:
  using VersionsFn = std::function<std::vector<std::shared_ptr<Version>>()>;
  using ReadyFn = std::function<bool()>;
  LlmRouter(VersionsFn versions, ReadyFn ready)
      : versions_(std::move(versions)), ready_(std::move(ready)) {}

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override;
  Result<serving::RequestId> embed(serving::EmbedRequest req,
                                   std::shared_ptr<serving::EmbedSink> sink) override;
  void cancel(serving::RequestId id) override;
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
  Result<std::string> apply_template(const serving::GenerateRequest& req) const override;
  void start_draining() override;

 private:
  struct Target {
    std::shared_ptr<Version> version;
    serving::Backend* backend = nullptr;
    std::string model;
  };
  Result<Target> find(const std::string& model) const;

  class Sink;
  class EmbedSink;
  // What a request's sink still needs after the router may be gone: the map
  // of running requests (shared with the sinks).
  struct Running {
    std::shared_ptr<Version> version;
    serving::Backend* backend;
    serving::RequestId inner;
  };
  struct Shared {
    std::mutex mu;
    serving::RequestId next_id = 1;
    std::map<serving::RequestId, Running> running;
    bool draining = false;
    void forget(serving::RequestId id);
    // Registers a request to `t` under a new id of the router's, then runs
    // `submit` (the backend's submit or embed, given the sink's id setter's
    // owner); the backend's id is kept for cancel.
    template <typename WrappedSink, typename Submit>
    Result<serving::RequestId> route(const Target& t, WrappedSink& wrapped, Submit submit);
  };
  VersionsFn versions_;
  ReadyFn ready_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

}  // namespace cairn::servable

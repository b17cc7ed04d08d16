// api/loading_backend.h — a Backend that stands in while the real one loads.
// Owns nothing but the hand-over: until set() it reports Loading (so /health
// answers 503 and generation gets 503), then forwards every call. Lets the
// server listen before a large model is read. Never blocks a caller.
#pragma once

#include <atomic>
#include <memory>

#include "serving/backend.h"

namespace cairn::api {

class LoadingBackend final : public serving::Backend {
 public:
  // Hands over the loaded backend; it lives as long as this object.
  void set(std::unique_ptr<serving::Backend> backend) {
    owned_ = std::move(backend);
    set_borrowed(*owned_);
  }
  // Hands over a backend someone else owns; it must outlive this object.
  void set_borrowed(serving::Backend& backend) {
    ready_.store(&backend, std::memory_order_release);
    if (draining_) backend.start_draining();
  }

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override {
    if (auto* b = get()) return b->submit(std::move(req), std::move(sink));
    return loading();
  }
  Result<serving::RequestId> embed(serving::EmbedRequest req,
                                   std::shared_ptr<serving::EmbedSink> sink) override {
    if (auto* b = get()) return b->embed(std::move(req), std::move(sink));
    return loading();
  }
  void cancel(serving::RequestId id) override {
    if (auto* b = get()) b->cancel(id);
  }
  std::vector<serving::ModelInfo> models() const override {
    if (auto* b = get()) return b->models();
    return {};
  }
  serving::Health health() const override {
    if (auto* b = get()) return b->health();
    serving::Health h;
    h.state = draining_ ? serving::HealthState::Draining : serving::HealthState::Loading;
    return h;
  }
  serving::BackendStats stats() const override {
    if (auto* b = get()) return b->stats();
    return {};
  }
  Result<std::vector<serving::Token>> tokenize(const std::string& model, const std::string& text,
                                               bool add_special,
                                               bool parse_special = true) const override {
    if (auto* b = get()) return b->tokenize(model, text, add_special, parse_special);
    return loading();
  }
  Result<std::vector<std::string>> token_pieces(
      const std::string& model, const std::vector<serving::Token>& tokens) const override {
    if (auto* b = get()) return b->token_pieces(model, tokens);
    return loading();
  }
  Result<std::string> detokenize(const std::string& model,
                                 const std::vector<serving::Token>& tokens) const override {
    if (auto* b = get()) return b->detokenize(model, tokens);
    return loading();
  }
  Result<std::string> apply_template(const serving::GenerateRequest& req) const override {
    if (auto* b = get()) return b->apply_template(req);
    return loading();
  }
  Result<kv::KvGeometry> kv_geometry(const std::string& model) const override {
    if (auto* b = get()) return b->kv_geometry(model);
    return loading();
  }
  void start_draining() override {
    draining_ = true;
    if (auto* b = get()) b->start_draining();
  }
  std::string extra_metrics() const override {
    if (auto* b = get()) return b->extra_metrics();
    return {};
  }

 private:
  serving::Backend* get() const { return ready_.load(std::memory_order_acquire); }
  static Status loading() { return Status::unavailable("the model is still loading"); }

  std::unique_ptr<serving::Backend> owned_;
  std::atomic<serving::Backend*> ready_{nullptr};
  std::atomic<bool> draining_{false};
};

}  // namespace cairn::api

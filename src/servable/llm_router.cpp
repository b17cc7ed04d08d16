// servable/llm_router.cpp — OpenAI requests to the servables' GGUF models.
#include "servable/llm_router.h"

#include <thread>

#include "serving/backend_stats.h"

namespace cairn::servable {

class LlmRouter::Sink final : public serving::EventSink {
 public:
  Sink(std::shared_ptr<Shared> shared, std::shared_ptr<serving::EventSink> inner)
      : shared_(std::move(shared)), inner_(std::move(inner)) {}
  void set_id(serving::RequestId id) { id_ = id; }
  void on_start(const serving::OutputSyntax& syntax) override { inner_->on_start(syntax); }
  void on_token(const serving::TokenEvent& ev) override { inner_->on_token(ev); }
  void on_finish(const serving::FinishEvent& ev) override {
    inner_->on_finish(ev);
    shared_->forget(id_);
  }
  void on_error(const Status& err) override {
    inner_->on_error(err);
    shared_->forget(id_);
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<serving::EventSink> inner_;
  serving::RequestId id_ = 0;
};

Result<LlmRouter::Target> LlmRouter::find(const std::string& model) const {
  if (!ready_()) return Status::unavailable("the servables are still loading");
  std::vector<Target> all;
  for (const auto& v : versions_())
    for (size_t i = 0; i < v->model_count(); ++i)
      if (auto* llm = v->llm(static_cast<int>(i)))
        all.push_back({v, llm, v->model_name(static_cast<int>(i))});
  if (all.empty()) return Status::not_found("no servable has a GGUF model");
  if (model.empty()) {
    if (all.size() == 1) return all.front();
    return Status::invalid_argument("several models are served: name one", "model");
  }
  for (auto& t : all)
    if (t.model == model) return t;
  return Status::not_found("the model '" + model.substr(0, 64) + "' does not exist", "model");
}

Result<serving::RequestId> LlmRouter::submit(serving::GenerateRequest req,
                                             std::shared_ptr<serving::EventSink> sink) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->draining) return Status::unavailable("the server is shutting down");
  }
  CAIRN_ASSIGN_OR_RETURN(Target t, find(req.model));
  req.model = t.model;
  auto wrapped = std::make_shared<Sink>(shared_, std::move(sink));
  return shared_->route(t, *wrapped, [&] { return t.backend->submit(std::move(req), wrapped); });
}

class LlmRouter::EmbedSink final : public serving::EmbedSink {
 public:
  EmbedSink(std::shared_ptr<Shared> shared, std::shared_ptr<serving::EmbedSink> inner)
      : shared_(std::move(shared)), inner_(std::move(inner)) {}
  void set_id(serving::RequestId id) { id_ = id; }
  void on_done(serving::EmbedResult result) override {
    inner_->on_done(std::move(result));
    shared_->forget(id_);
  }
  void on_error(const Status& err) override {
    inner_->on_error(err);
    shared_->forget(id_);
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<serving::EmbedSink> inner_;
  serving::RequestId id_ = 0;
};

Result<serving::RequestId> LlmRouter::embed(serving::EmbedRequest req,
                                            std::shared_ptr<serving::EmbedSink> sink) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->draining) return Status::unavailable("the server is shutting down");
  }
  CAIRN_ASSIGN_OR_RETURN(Target t, find(req.model));
  req.model = t.model;
  auto wrapped = std::make_shared<EmbedSink>(shared_, std::move(sink));
  return shared_->route(t, *wrapped, [&] { return t.backend->embed(std::move(req), wrapped); });
}

template <typename WrappedSink, typename Submit>
Result<serving::RequestId> LlmRouter::Shared::route(const Target& t, WrappedSink& wrapped,
                                                    Submit submit) {
  serving::RequestId id;
  {
    std::lock_guard<std::mutex> lock(mu);
    id = next_id++;
    // Registered before submit: events may arrive before submit returns.
    running[id] = {t.version, t.backend, 0};
  }
  wrapped.set_id(id);
  auto inner = submit();
  if (!inner.is_ok()) {
    forget(id);
    return inner.status();
  }
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = running.find(id); it != running.end()) it->second.inner = *inner;
  return id;
}

void LlmRouter::Shared::forget(serving::RequestId id) {
  std::shared_ptr<Version> keep;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = running.find(id);
    if (it == running.end()) return;
    keep = std::move(it->second.version);
    running.erase(it);
  }
  // This runs on the model's engine thread: if this was the version's last
  // holder (it was unloaded meanwhile), it must go on another thread, since
  // unloading joins that engine thread.
  if (keep.use_count() == 1) std::thread([v = std::move(keep)]() mutable { v.reset(); }).detach();
}

void LlmRouter::cancel(serving::RequestId id) {
  serving::Backend* backend = nullptr;
  serving::RequestId inner = 0;
  std::shared_ptr<Version> keep;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    auto it = shared_->running.find(id);
    if (it == shared_->running.end() || it->second.inner == 0) return;
    backend = it->second.backend;
    inner = it->second.inner;
    keep = it->second.version;
  }
  backend->cancel(inner);
}

std::vector<serving::ModelInfo> LlmRouter::models() const {
  std::vector<serving::ModelInfo> out;
  if (!ready_()) return out;
  for (const auto& v : versions_())
    for (size_t i = 0; i < v->model_count(); ++i)
      if (auto* llm = v->llm(static_cast<int>(i)))
        for (auto m : llm->models()) out.push_back(std::move(m));
  return out;
}

serving::Health LlmRouter::health() const {
  serving::Health h;
  h.state = ready_() ? serving::HealthState::Ready : serving::HealthState::Loading;
  for (const auto& v : versions_())
    for (size_t i = 0; i < v->model_count(); ++i) {
      auto* llm = v->llm(static_cast<int>(i));
      if (!llm) continue;
      auto mh = llm->health();
      h.running += mh.running;
      h.waiting += mh.waiting;
    }
  bool draining;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    draining = shared_->draining;
  }
  if (draining) h.state = serving::HealthState::Draining;
  return h;
}


serving::BackendStats LlmRouter::stats() const {
  serving::BackendStats s;
  for (const auto& v : versions_())
    for (size_t i = 0; i < v->model_count(); ++i)
      if (auto* llm = v->llm(static_cast<int>(i))) serving::add_stats(s, llm->stats());
  return s;
}

Result<std::vector<serving::Token>> LlmRouter::tokenize(const std::string& model,
                                                        const std::string& text,
                                                        bool add_special,
                                                        bool parse_special) const {
  CAIRN_ASSIGN_OR_RETURN(Target t, find(model));
  return t.backend->tokenize(t.model, text, add_special, parse_special);
}

Result<std::vector<std::string>> LlmRouter::token_pieces(
    const std::string& model, const std::vector<serving::Token>& tokens) const {
  CAIRN_ASSIGN_OR_RETURN(Target t, find(model));
  return t.backend->token_pieces(t.model, tokens);
}

Result<std::string> LlmRouter::detokenize(const std::string& model,
                                          const std::vector<serving::Token>& tokens) const {
  CAIRN_ASSIGN_OR_RETURN(Target t, find(model));
  return t.backend->detokenize(t.model, tokens);
}

Result<std::string> LlmRouter::apply_template(const serving::GenerateRequest& req) const {
  CAIRN_ASSIGN_OR_RETURN(Target t, find(req.model));
  serving::GenerateRequest r = req;
  r.model = t.model;
  return t.backend->apply_template(r);
}

void LlmRouter::start_draining() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->draining = true;
  }
  for (const auto& v : versions_()) v->start_draining();
}

}  // namespace cairn::servable

// cluster/cluster_backend.cpp — the controller's Backend: dispatch, retry, relay over workers.
#include "cluster/cluster_backend.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <variant>

#include "cluster/remote_backend.h"
#include "rpc/convert.h"
#include "serving/backend_stats.h"
#include "serving/prometheus.h"

namespace cairn::cluster {

namespace {

// Whether the worker's `model` (empty: its first, the one it serves when a
// request names none) makes completions; embeddings-only models do not.
bool generates(const WorkerView& w, const std::string& model) {
  for (const auto& m : w.status.models())
    if (model.empty() || m.id() == model) return !m.embeddings_only();
  return false;
}

}  // namespace

// One client request (a generation or an embedding) and the attempts made for it.
struct ClusterBackend::Flight {
  serving::RequestId id = 0;
  serving::GenerateRequest req;
  std::shared_ptr<serving::EventSink> client;
  // Set for an embedding request, which goes to Backend::embed instead.
  std::optional<serving::EmbedRequest> embed;
  std::shared_ptr<serving::EmbedSink> embed_client;
  std::string key;  // prefix-affinity key

  std::mutex mu;
  int attempts = 0;
  std::vector<std::string> tried;  // worker ids, in order
  std::string worker_id;           // the current attempt's worker
  std::weak_ptr<serving::Backend> worker;
  serving::RequestId inner_id = 0;
  bool inner_started = false;
  bool token_sent = false;
  bool cancelled = false;
  bool done = false;
};

// The sink one attempt's worker Backend pushes to: forwards to the client,
// or turns a failure before the first token into a retry.
class ClusterBackend::RelaySink final : public serving::EventSink {
 public:
  RelaySink(ClusterBackend* owner, std::shared_ptr<Flight> flight, std::string worker_id)
      : owner_(owner), flight_(std::move(flight)), worker_id_(std::move(worker_id)) {}

  // A retried request's next worker sends its own; the client takes the last.
  void on_start(const serving::OutputSyntax& syntax) override {
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done) return;
    }
    flight_->client->on_start(syntax);
  }

  void on_token(const serving::TokenEvent& ev) override {
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done) return;
      flight_->token_sent = true;
    }
    flight_->client->on_token(ev);
  }

  void on_finish(const serving::FinishEvent& ev) override {
    if (!end()) return;
    // The slot frees before the client hears: one who sends the next request
    // at once is not refused by a queue it no longer occupies.
    owner_->finished(flight_->id);
    flight_->client->on_finish(ev);
  }

  void on_error(const Status& err) override {
    if (ended_) return;
    ended_ = true;
    owner_->registry_.add_outstanding(worker_id_, -1);
    if (owner_->retry(flight_, err)) return;  // another worker has it now
    bool token_sent;
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done) return;
      flight_->done = true;
      token_sent = flight_->token_sent;
    }
    Status out = err;
    if (token_sent && err.code() == StatusCode::Unavailable)
      out = err.with_context("the worker failed during generation");
    owner_->finished(flight_->id);
    flight_->client->on_error(out);
  }

 private:
  // The attempt's last event: true when the client still waits for one.
  bool end() {
    if (ended_) return false;
    ended_ = true;
    owner_->registry_.add_outstanding(worker_id_, -1);
    std::lock_guard<std::mutex> lock(flight_->mu);
    if (flight_->done) return false;
    flight_->done = true;
    return true;
  }

  ClusterBackend* owner_;
  std::shared_ptr<Flight> flight_;
  std::string worker_id_;
  bool ended_ = false;  // a worker Backend calls its sink from one thread at a time
};

// The sink one embedding attempt's worker Backend answers: forwards to the
// client, or turns an Unavailable answer into a retry on another worker.
class ClusterBackend::EmbedRelaySink final : public serving::EmbedSink {
 public:
  EmbedRelaySink(ClusterBackend* owner, std::shared_ptr<Flight> flight, std::string worker_id)
      : owner_(owner), flight_(std::move(flight)), worker_id_(std::move(worker_id)) {}

  void on_done(serving::EmbedResult result) override {
    if (!end(false)) return;
    owner_->finished(flight_->id);  // as RelaySink: the slot frees before the client hears
    flight_->embed_client->on_done(std::move(result));
  }

  void on_error(const Status& err) override {
    if (!end(true)) return;
    if (owner_->retry(flight_, err)) return;  // another worker has it now
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done) return;
      flight_->done = true;
    }
    owner_->finished(flight_->id);
    flight_->embed_client->on_error(err);
  }

 private:
  // The attempt's answer: true when it is the first and the client still
  // waits (an error leaves `done` to the retry decision).
  bool end(bool error) {
    if (ended_.exchange(true)) return false;
    owner_->registry_.add_outstanding(worker_id_, -1);
    std::lock_guard<std::mutex> lock(flight_->mu);
    if (flight_->done) return false;
    if (!error) flight_->done = true;
    return true;
  }

  ClusterBackend* owner_;
  std::shared_ptr<Flight> flight_;
  std::string worker_id_;
  std::atomic<bool> ended_{false};
};

ClusterBackend::ClusterBackend(Registry& registry, ClusterOptions options,
                               WorkerBackendFactory factory)
    : registry_(registry),
      options_(options),
      factory_(std::move(factory)),
      picker_(options.routing) {
  if (options_.max_attempts < 1) options_.max_attempts = 1;
  if (!factory_) {
    const double timeout = options_.request_timeout_s, rpc_timeout = options_.rpc_timeout_s;
    factory_ = [timeout, rpc_timeout](const WorkerView& w, std::function<void()> on_broken) {
      RemoteBackendOptions o;
      o.address = w.address;
      o.request_timeout_s = timeout;
      o.rpc_timeout_s = rpc_timeout;
      o.on_broken = std::move(on_broken);
      return std::make_shared<RemoteBackend>(std::move(o));
    };
  }
}

ClusterBackend::~ClusterBackend() {
  stopping_ = true;
  // Destroying the worker Backends cancels their calls and waits for them;
  // their last events still find this object whole.
  std::map<std::string, std::shared_ptr<serving::Backend>> backends;
  std::vector<std::shared_ptr<serving::Backend>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    backends.swap(backends_);
    retired.swap(retired_);
  }
  backends.clear();
  retired.clear();
}

std::vector<WorkerView> ClusterBackend::candidates(const std::string& model,
                                                   const std::vector<std::string>& exclude,
                                                   bool generation) const {
  std::vector<WorkerView> out;
  for (auto& w : registry_.list()) {
    if (!w.ready() || !w.serves(model)) continue;
    if (generation && !generates(w, model)) continue;
    if (std::find(exclude.begin(), exclude.end(), w.id) != exclude.end()) continue;
    out.push_back(std::move(w));
  }
  return out;
}

std::shared_ptr<serving::Backend> ClusterBackend::backend_for(const WorkerView& w) const {
  const uint64_t version = registry_.membership_version();
  std::lock_guard<std::mutex> lock(mu_);
  if (version != seen_version_) {
    // Workers that left: their Backends retire (calls on them may still be finishing).
    std::set<std::string> alive;
    for (const auto& v : registry_.list()) alive.insert(v.id);
    for (auto it = backends_.begin(); it != backends_.end();) {
      if (alive.count(it->first) == 0 && it->first != w.id) {
        retired_.push_back(std::move(it->second));
        it = backends_.erase(it);
      } else {
        ++it;
      }
    }
    seen_version_ = version;
  }
  auto& slot = backends_[w.id];
  if (!slot) {
    Registry* registry = &registry_;
    std::string id = w.id;
    slot = factory_(w, [registry, id] { registry->mark_failed(id); });
  }
  return slot;
}

Status ClusterBackend::no_worker_error(const std::string& model, bool generation) const {
  bool any_ready = false;
  std::string embeddings_only;  // a model that is served, but only for embeddings
  for (const auto& w : registry_.list()) {
    if (!w.ready()) continue;
    any_ready = true;
    if (!w.serves(model)) continue;
    if (!generation || generates(w, model)) return Status::ok();
    embeddings_only = model.empty() ? w.status.models(0).id() : model;
  }
  // A request, not a worker, problem: 400, like a single server's refusal.
  if (!embeddings_only.empty())
    return Status::invalid_argument("the model '" + embeddings_only +
                                        "' is served for embeddings only by every worker that "
                                        "has it: use /v1/embeddings",
                                    "model");
  if (any_ready && !model.empty())
    return Status::not_found("model '" + model + "' is not served by any worker", "model");
  return Status::unavailable("no worker is ready");
}

Status ClusterBackend::dispatch(const std::shared_ptr<Flight>& flight) {
  Status last;  // ok: no attempt refused yet
  for (;;) {
    std::vector<std::string> tried;
    int attempt;
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      if (flight->attempts >= options_.max_attempts)
        return !last.is_ok() ? last : Status::unavailable("no worker could take the request");
      tried = flight->tried;
    }
    const bool generation = !flight->embed;
    auto workers =
        candidates(generation ? flight->req.model : flight->embed->model, tried, generation);
    const int pick = picker_.pick(workers, flight->key);
    if (pick < 0) {
      if (!last.is_ok()) return last;
      return Status::unavailable("no ready worker serves the model");
    }
    const WorkerView& w = workers[static_cast<size_t>(pick)];
    auto backend = backend_for(w);
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      attempt = ++flight->attempts;
      flight->tried.push_back(w.id);
      flight->worker_id = w.id;
      flight->worker = backend;
      flight->inner_started = false;
    }
    registry_.add_outstanding(w.id, +1);
    auto res = generation
                   ? backend->submit(flight->req, std::make_shared<RelaySink>(this, flight, w.id))
                   : backend->embed(*flight->embed,
                                    std::make_shared<EmbedRelaySink>(this, flight, w.id));
    if (res.is_ok()) {
      const serving::RequestId id = *res;
      bool cancel_now = false;
      {
        std::lock_guard<std::mutex> lock(flight->mu);
        if (flight->attempts == attempt) {
          flight->inner_id = id;
          flight->inner_started = true;
          cancel_now = flight->cancelled;
        }
      }
      if (cancel_now) backend->cancel(id);
      return Status::ok();
    }
    registry_.add_outstanding(w.id, -1);
    const Status& err = res.status();
    if (err.code() != StatusCode::Unavailable) return err;  // the request itself is wrong
    last = err;
  }
}

bool ClusterBackend::retry(const std::shared_ptr<Flight>& flight, const Status& err) {
  if (err.code() != StatusCode::Unavailable || stopping_) return false;
  {
    std::lock_guard<std::mutex> lock(flight->mu);
    if (flight->token_sent || flight->cancelled || flight->done) return false;
    if (flight->attempts >= options_.max_attempts) return false;
  }
  // On failure the caller reports the attempt's own error.
  return dispatch(flight).is_ok();
}

void ClusterBackend::finished(serving::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (flights_.erase(id) > 0) in_flight_.fetch_sub(1);
}

Result<serving::RequestId> ClusterBackend::submit(serving::GenerateRequest req,
                                                  std::shared_ptr<serving::EventSink> sink) {
  if (draining_ || stopping_) return Status::unavailable("the server is draining");
  if (!sink) return Status::internal("no event sink");
  CAIRN_RETURN_IF_ERROR(no_worker_error(req.model, true));
  auto flight = std::make_shared<Flight>();
  flight->id = next_id_.fetch_add(1);
  flight->key = prefix_key(req, picker_.options().prefix_chars);
  flight->req = std::move(req);
  flight->client = std::move(sink);
  return start(flight);
}

Result<serving::RequestId> ClusterBackend::embed(serving::EmbedRequest req,
                                                 std::shared_ptr<serving::EmbedSink> sink) {
  if (draining_ || stopping_) return Status::unavailable("the server is draining");
  if (!sink) return Status::internal("no embedding sink");
  CAIRN_RETURN_IF_ERROR(no_worker_error(req.model, false));
  auto flight = std::make_shared<Flight>();
  flight->id = next_id_.fetch_add(1);
  // Prefix-affinity hashes the first text input, as it hashes a prompt.
  if (!req.inputs.empty())
    if (const auto* text = std::get_if<std::string>(&req.inputs.front()))
      flight->key = text->substr(0, picker_.options().prefix_chars);
  flight->embed = std::move(req);
  flight->embed_client = std::move(sink);
  return start(flight);
}

Result<serving::RequestId> ClusterBackend::start(const std::shared_ptr<Flight>& flight) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_.load() >= options_.max_queue)
      return Status::unavailable("the queue is full (" + std::to_string(options_.max_queue) +
                                 " requests)");
    flights_.emplace(flight->id, flight);
    in_flight_.fetch_add(1);
  }
  if (Status err = dispatch(flight); !err.is_ok()) {
    std::lock_guard<std::mutex> lock(flight->mu);
    flight->done = true;
    finished(flight->id);
    return err;
  }
  return flight->id;
}

void ClusterBackend::cancel(serving::RequestId id) {
  std::shared_ptr<Flight> flight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = flights_.find(id);
    if (it == flights_.end()) return;
    flight = it->second;
  }
  std::shared_ptr<serving::Backend> backend;
  serving::RequestId inner = 0;
  {
    std::lock_guard<std::mutex> lock(flight->mu);
    flight->cancelled = true;
    if (!flight->inner_started) return;  // dispatch cancels once the id is known
    backend = flight->worker.lock();
    inner = flight->inner_id;
  }
  if (backend) backend->cancel(inner);
}

std::vector<serving::ModelInfo> ClusterBackend::models() const {
  std::vector<serving::ModelInfo> out;
  std::set<std::string> seen;
  for (const auto& w : registry_.list()) {
    if (!w.ready()) continue;
    for (const auto& m : w.status.models())
      if (seen.insert(m.id()).second) out.push_back(rpc::from_proto(m));
  }
  return out;
}

serving::Health ClusterBackend::health() const {
  serving::Health h;
  bool ready = false;
  for (const auto& w : registry_.list()) {
    ready = ready || w.ready();
    h.running += w.status.running();
    h.waiting += w.status.waiting();
  }
  h.state = draining_ ? serving::HealthState::Draining
            : ready   ? serving::HealthState::Ready
                      : serving::HealthState::Loading;
  return h;
}

serving::BackendStats ClusterBackend::stats() const {
  serving::BackendStats s;
  for (const auto& w : registry_.list()) serving::add_stats(s, rpc::stats_of(w.status));
  return s;
}

Result<std::vector<serving::Token>> ClusterBackend::tokenize(const std::string& model,
                                                             const std::string& text,
                                                             bool add_special,
                                                             bool parse_special) const {
  CAIRN_RETURN_IF_ERROR(no_worker_error(model, false));
  auto workers = candidates(model, {}, false);
  const int pick = picker_.pick(workers, {});
  if (pick < 0) return Status::unavailable("no worker is ready");
  return backend_for(workers[static_cast<size_t>(pick)])
      ->tokenize(model, text, add_special, parse_special);
}

Result<std::vector<std::string>> ClusterBackend::token_pieces(
    const std::string& model, const std::vector<serving::Token>& tokens) const {
  CAIRN_RETURN_IF_ERROR(no_worker_error(model, false));
  auto workers = candidates(model, {}, false);
  const int pick = picker_.pick(workers, {});
  if (pick < 0) return Status::unavailable("no worker is ready");
  return backend_for(workers[static_cast<size_t>(pick)])->token_pieces(model, tokens);
}

Result<std::string> ClusterBackend::detokenize(const std::string& model,
                                               const std::vector<serving::Token>& tokens) const {
  CAIRN_RETURN_IF_ERROR(no_worker_error(model, false));
  auto workers = candidates(model, {}, false);
  const int pick = picker_.pick(workers, {});
  if (pick < 0) return Status::unavailable("no worker is ready");
  return backend_for(workers[static_cast<size_t>(pick)])->detokenize(model, tokens);
}

void ClusterBackend::start_draining() { draining_ = true; }

std::string ClusterBackend::extra_metrics() const {
  const auto workers = registry_.list();
  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const WorkerView&);
  };
  static const Gauge gauges[] = {
      {"cairn_worker_up", "gauge", "1 when the worker is ready",
       [](const WorkerView& w) { return w.ready() ? 1.0 : 0.0; }},
      {"cairn_worker_outstanding", "gauge", "requests the controller has in flight to the worker",
       [](const WorkerView& w) { return double(w.outstanding); }},
      {"cairn_worker_routed_total", "counter", "requests the controller sent to the worker",
       [](const WorkerView& w) { return double(w.routed_total); }},
      {"cairn_worker_running", "gauge", "sequences running on the worker",
       [](const WorkerView& w) { return double(w.status.running()); }},
      {"cairn_worker_waiting", "gauge", "requests waiting on the worker",
       [](const WorkerView& w) { return double(w.status.waiting()); }},
      {"cairn_worker_kv_blocks_used", "gauge", "KV cache blocks in use on the worker",
       [](const WorkerView& w) { return double(w.status.kv_blocks_used()); }},
      {"cairn_worker_kv_blocks_total", "gauge", "KV cache blocks on the worker",
       [](const WorkerView& w) { return double(w.status.kv_blocks_total()); }},
      {"cairn_worker_requests_total", "counter", "requests the worker finished (its own count)",
       [](const WorkerView& w) { return double(w.status.requests_total()); }},
      {"cairn_worker_prefix_cache_queries_total", "counter",
       "prompt tokens looked up in the prefix cache",
       [](const WorkerView& w) { return double(w.status.prefix_cache_queries()); }},
      {"cairn_worker_prefix_cache_hits_total", "counter", "prompt tokens found in the prefix cache",
       [](const WorkerView& w) { return double(w.status.prefix_cache_hits()); }},
      {"cairn_worker_last_heartbeat_ms_ago", "gauge",
       "milliseconds since the worker's last heartbeat",
       [](const WorkerView& w) { return double(w.last_heartbeat_ms_ago); }},
  };
  std::string out =
      "# HELP cairn_workers workers registered with the controller\n"
      "# TYPE cairn_workers gauge\ncairn_workers " +
      std::to_string(workers.size()) + "\n";
  for (const auto& g : gauges) {
    out +=
        std::string("# HELP ") + g.name + " " + g.help + "\n# TYPE " + g.name + " " + g.type + "\n";
    for (const auto& w : workers) {
      char num[64];
      std::snprintf(num, sizeof num, "%.17g", g.value(w));
      out += std::string(g.name) + "{worker_id=\"" + serving::prometheus_label(w.id) + "\",name=\"" +
             serving::prometheus_label(w.name) + "\",address=\"" + serving::prometheus_label(w.address) + "\"} " + num + "\n";
    }
  }
  return out;
}

}  // namespace cairn::cluster

// cluster/cluster_backend.cpp — the controller's Backend: dispatch, retry, relay over workers.
#include "cluster/cluster_backend.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
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

// `workers` narrowed for one side of a handoff: those of `role` when any
// is there, else the "both" ones, else (with `any`) all of them.
std::vector<WorkerView> prefer_role(std::vector<WorkerView> workers, const std::string& role,
                                    bool any) {
  for (const std::string& r : {role, std::string("both")}) {
    std::vector<WorkerView> out;
    for (const auto& w : workers)
      if (w.role() == r) out.push_back(w);
    if (!out.empty()) return out;
  }
  return any ? workers : std::vector<WorkerView>{};
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
  uint64_t serial = 0;  // the current attempt's number (both phases); older sinks are stale
  bool inner_started = false;
  bool token_sent = false;
  bool start_sent = false;
  bool cancelled = false;
  bool done = false;

  // Prefill → decode (docs/cluster.md "Prefill and decode workers").
  bool pd = false;        // the prompt runs on a prefill worker that hands off
  bool decoding = false;  // the prefill part is over: attempts go to decode workers
  std::string handoff_id;
  std::string decode_id;  // the decode worker the current prefill attempt sends to
  bool reserved = false;  // decode_id is counted in pending_decode_
  std::vector<serving::Token> sent;  // token ids the client has, in order (the resume's forced)
  std::optional<int32_t> prefill_cached;  // from the prefill worker's handoff finish
  int decode_attempts = 0;
  std::vector<std::string> decode_tried;
};

// The sink one attempt's worker Backend pushes to: forwards to the client,
// or turns a failure into a retry (before the first token) or, for a
// prefill/decode flight, into a decode attempt elsewhere.
class ClusterBackend::RelaySink final : public serving::EventSink {
 public:
  enum class Kind { Plain, Prefill, Decode };
  RelaySink(ClusterBackend* owner, std::shared_ptr<Flight> flight, std::string worker_id,
            uint64_t serial, Kind kind)
      : owner_(owner),
        flight_(std::move(flight)),
        worker_id_(std::move(worker_id)),
        serial_(serial),
        kind_(kind) {}

  // A retried request's next worker sends its own; the client takes the
  // last. A decode worker's is dropped: the client has the prefill worker's.
  void on_start(const serving::OutputSyntax& syntax) override {
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done || flight_->serial != serial_) return;
      if (kind_ == Kind::Decode && flight_->start_sent) return;
      flight_->start_sent = true;
    }
    flight_->client->on_start(syntax);
  }

  void on_token(const serving::TokenEvent& ev) override {
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done || flight_->serial != serial_) return;
      flight_->token_sent = true;
      flight_->sent.push_back(ev.id);
    }
    flight_->client->on_token(ev);
  }

  void on_finish(const serving::FinishEvent& ev) override {
    if (kind_ == Kind::Prefill && ev.reason == "handoff") {
      handoff(ev);
      return;
    }
    if (!end()) return;
    serving::FinishEvent out = ev;
    if (kind_ == Kind::Decode) {
      // The prompt's cache hit happened on the prefill worker.
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->prefill_cached) out.usage.cached_prompt_tokens = *flight_->prefill_cached;
    }
    // The slot frees before the client hears: one who sends the next request
    // at once is not refused by a queue it no longer occupies.
    owner_->finished(flight_->id);
    flight_->client->on_finish(out);
  }

  void on_error(const Status& err) override {
    if (ended_) return;
    ended_ = true;
    owner_->registry_.add_outstanding(worker_id_, -1);
    if (owner_->recover(flight_, err)) return;  // another worker has it now
    fail(err);
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

  // The prefill worker's part is over (its attempt ends here): the decode
  // worker continues, with the rows when they all arrived, else recomputing.
  void handoff(const serving::FinishEvent& ev) {
    if (ended_) return;
    ended_ = true;
    owner_->registry_.add_outstanding(worker_id_, -1);
    owner_->pd_handoffs_.fetch_add(1);
    std::string id;
    bool no_token;
    {
      std::lock_guard<std::mutex> lock(flight_->mu);
      if (flight_->done || flight_->serial != serial_) return;
      flight_->prefill_cached = ev.usage.cached_prompt_tokens;
      flight_->decoding = true;
      // A cancel from now on is kept for the decode attempt's submit.
      flight_->inner_started = false;
      id = ev.handoff_error.empty() ? flight_->handoff_id : std::string();
      no_token = flight_->sent.empty();
    }
    if (no_token) {  // a resume needs the first token; the worker broke the protocol
      fail(Status::internal("the prefill worker handed off without a token"));
      return;
    }
    if (!ev.handoff_error.empty()) owner_->fallback_transfer_.fetch_add(1);
    Status st = owner_->dispatch_decode(flight_, std::move(id));
    if (!st.is_ok()) fail(st);
  }

  // Ends the flight with `err` unless it already ended.
  void fail(const Status& err) {
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

  ClusterBackend* owner_;
  std::shared_ptr<Flight> flight_;
  std::string worker_id_;
  uint64_t serial_;
  Kind kind_;
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
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x-", static_cast<unsigned>(rd()),
                static_cast<unsigned>(rd()));
  handoff_prefix_ = buf;
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
    bool pd;
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      if (flight->attempts >= options_.max_attempts)
        return !last.is_ok() ? last : Status::unavailable("no worker could take the request");
      tried = flight->tried;
      pd = flight->pd;
    }
    const bool generation = !flight->embed;
    auto workers =
        candidates(generation ? flight->req.model : flight->embed->model, tried, generation);
    // Prefill-capable first; with none left, a decode worker runs it whole.
    if (pd) workers = prefer_role(std::move(workers), "prefill", true);
    const int pick = picker_.pick(workers, flight->key);
    if (pick < 0) {
      if (!last.is_ok()) return last;
      return Status::unavailable("no ready worker serves the model");
    }
    const WorkerView& w = workers[static_cast<size_t>(pick)];
    auto backend = backend_for(w);
    serving::GenerateRequest req;
    auto kind = RelaySink::Kind::Plain;
    if (generation) {
      req = flight->req;
      if (pd && w.role() != "decode") {
        if (auto d = reserve_decode(flight, w.id)) {
          req.handoff = serving::GenerateRequest::Handoff{d->address, flight->handoff_id};
          kind = RelaySink::Kind::Prefill;
        }
        // else no decode-capable worker is left: this attempt generates whole.
      } else if (pd) {
        release_reservation(*flight);
      }
    }
    uint64_t attempt;
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      ++flight->attempts;
      attempt = ++flight->serial;
      flight->tried.push_back(w.id);
      flight->worker_id = w.id;
      flight->worker = backend;
      flight->inner_started = false;
    }
    registry_.add_outstanding(w.id, +1);
    auto res =
        generation
            ? backend->submit(std::move(req),
                              std::make_shared<RelaySink>(this, flight, w.id, attempt, kind))
            : backend->embed(*flight->embed, std::make_shared<EmbedRelaySink>(this, flight, w.id));
    if (res.is_ok()) {
      const serving::RequestId id = *res;
      bool cancel_now = false;
      {
        std::lock_guard<std::mutex> lock(flight->mu);
        if (flight->serial == attempt) {
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

Status ClusterBackend::dispatch_decode(const std::shared_ptr<Flight>& flight,
                                       std::string handoff_id) {
  Status last;  // ok: no attempt refused yet
  for (;;) {
    if (stopping_) return Status::unavailable("the server is stopping");
    std::vector<std::string> tried;
    std::vector<serving::Token> forced;
    std::string target;
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      if (flight->decode_attempts >= options_.max_attempts)
        return !last.is_ok() ? last : Status::unavailable("no worker could continue the request");
      tried = flight->decode_tried;
      forced = flight->sent;
      target = flight->decode_id;
    }
    auto workers = candidates(flight->req.model, tried, true);
    int pick = -1;
    if (!handoff_id.empty()) {
      // The rows wait on the worker the prefill worker sent them to.
      for (size_t i = 0; i < workers.size(); ++i)
        if (workers[i].id == target) pick = static_cast<int>(i);
      if (pick < 0) {
        handoff_id.clear();
        fallback_decode_lost_.fetch_add(1);
      }
    }
    release_reservation(*flight);  // from here the decode worker's own count says it
    if (pick < 0) {
      workers = prefer_role(std::move(workers), "decode", true);
      {
        // Requests about to decode somewhere count against that worker's blocks too.
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& w : workers)
          if (auto it = pending_decode_.find(w.id); it != pending_decode_.end())
            w.outstanding += it->second;
      }
      pick = pick_most_free_kv(workers, options_.decode_blocks_per_request);
    }
    if (pick < 0) {
      if (!last.is_ok()) return last;
      return Status::unavailable("no ready worker can continue the request");
    }
    const WorkerView& w = workers[static_cast<size_t>(pick)];
    auto backend = backend_for(w);
    serving::GenerateRequest req = flight->req;
    req.handoff.reset();
    req.resume = serving::GenerateRequest::Resume{handoff_id, std::move(forced), nullptr};
    uint64_t attempt;
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      ++flight->decode_attempts;
      attempt = ++flight->serial;
      flight->decoding = true;
      flight->decode_tried.push_back(w.id);
      flight->worker_id = w.id;
      flight->worker = backend;
      flight->inner_started = false;
    }
    registry_.add_outstanding(w.id, +1);
    auto res = backend->submit(
        std::move(req),
        std::make_shared<RelaySink>(this, flight, w.id, attempt, RelaySink::Kind::Decode));
    if (res.is_ok()) {
      bool cancel_now = false;
      {
        std::lock_guard<std::mutex> lock(flight->mu);
        if (flight->serial == attempt) {
          flight->inner_id = *res;
          flight->inner_started = true;
          cancel_now = flight->cancelled;  // a cancel that came while no worker had it
        }
      }
      if (cancel_now) backend->cancel(*res);
      return Status::ok();
    }
    registry_.add_outstanding(w.id, -1);
    const Status& err = res.status();
    if (err.code() != StatusCode::Unavailable) return err;  // the request itself is wrong
    last = err;
    if (!handoff_id.empty()) {
      handoff_id.clear();  // the rows stay with the worker that refused
      fallback_decode_lost_.fetch_add(1);
    }
  }
}

bool ClusterBackend::recover(const std::shared_ptr<Flight>& flight, const Status& err) {
  if (err.code() != StatusCode::Unavailable || stopping_) return false;
  bool pd, decoding, token_sent;
  {
    std::lock_guard<std::mutex> lock(flight->mu);
    if (flight->cancelled || flight->done) return false;
    pd = flight->pd;
    decoding = flight->decoding;
    token_sent = flight->token_sent;
  }
  if (!token_sent && !decoding) return retry(flight, err);
  // A prefill/decode flight continues from the tokens the client has, on
  // another worker that recomputes them (the rows, if any, are lost).
  if (!pd || !token_sent) return false;
  (decoding ? fallback_decode_lost_ : fallback_prefill_lost_).fetch_add(1);
  return dispatch_decode(flight, "").is_ok();
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

bool ClusterBackend::pd_mode(const std::string& model) const {
  bool prefill = false, decode = false;
  for (const auto& w : candidates(model, {}, true)) {
    const std::string role = w.role();
    prefill = prefill || role == "prefill";
    decode = decode || role == "decode";
  }
  return prefill && decode;
}

std::optional<WorkerView> ClusterBackend::reserve_decode(const std::shared_ptr<Flight>& flight,
                                                         const std::string& prefill_id) {
  release_reservation(*flight);  // a retried prefill attempt picks afresh
  auto workers = prefer_role(candidates(flight->req.model, {}, true), "decode", false);
  // Not the prefill worker itself ("both"), unless it is the only one.
  if (workers.size() > 1)
    std::erase_if(workers, [&](const WorkerView& w) { return w.id == prefill_id; });
  std::optional<WorkerView> d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : workers)
      if (auto it = pending_decode_.find(w.id); it != pending_decode_.end())
        w.outstanding += it->second;
    const int pick = pick_most_free_kv(workers, options_.decode_blocks_per_request);
    if (pick < 0) return std::nullopt;
    d = workers[static_cast<size_t>(pick)];
    ++pending_decode_[d->id];
  }
  // Only this flight's current dispatcher touches its reservation: no race here.
  std::lock_guard<std::mutex> lock(flight->mu);
  flight->decode_id = d->id;
  flight->reserved = true;
  return d;
}

void ClusterBackend::release_reservation(Flight& flight) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(flight.mu);
    if (!flight.reserved) return;
    flight.reserved = false;
    id = flight.decode_id;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pending_decode_.find(id); it != pending_decode_.end() && --it->second <= 0)
    pending_decode_.erase(it);
}

void ClusterBackend::finished(serving::RequestId id) {
  std::shared_ptr<Flight> flight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = flights_.find(id);
    if (it == flights_.end()) return;
    flight = std::move(it->second);
    flights_.erase(it);
    in_flight_.fetch_sub(1);
  }
  release_reservation(*flight);
}

Result<serving::RequestId> ClusterBackend::submit(serving::GenerateRequest req,
                                                  std::shared_ptr<serving::EventSink> sink) {
  if (draining_ || stopping_) return Status::unavailable("the server is draining");
  if (!sink) return Status::internal("no event sink");
  CAIRN_RETURN_IF_ERROR(no_worker_error(req.model, true));
  auto flight = std::make_shared<Flight>();
  flight->id = next_id_.fetch_add(1);
  flight->key = prefix_key(req, picker_.options().prefix_chars);
  req.handoff.reset();  // the controller's to set, never a client's
  req.resume.reset();
  if (pd_mode(req.model)) {
    flight->pd = true;
    flight->handoff_id = handoff_prefix_ + std::to_string(next_handoff_.fetch_add(1));
    pd_requests_.fetch_add(1);
  }
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
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      flight->done = true;
    }
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
      {"cairn_worker_kv_handoffs_sent_total", "counter",
       "K/V handoffs the worker sent whole (as prefill worker)",
       [](const WorkerView& w) { return double(w.status.handoff().sent()); }},
      {"cairn_worker_kv_handoffs_received_total", "counter",
       "K/V handoffs the worker received whole (as decode worker)",
       [](const WorkerView& w) { return double(w.status.handoff().received()); }},
      {"cairn_worker_kv_handoff_bytes_sent_total", "counter", "K/V bytes the worker sent",
       [](const WorkerView& w) { return double(w.status.handoff().bytes_sent()); }},
      {"cairn_worker_kv_handoff_bytes_received_total", "counter", "K/V bytes the worker received",
       [](const WorkerView& w) { return double(w.status.handoff().bytes_received()); }},
      {"cairn_worker_kv_handoff_expired_total", "counter",
       "received K/V handoffs dropped unclaimed or refused",
       [](const WorkerView& w) { return double(w.status.handoff().expired()); }},
  };
  std::string out =
      "# HELP cairn_workers workers registered with the controller\n"
      "# TYPE cairn_workers gauge\ncairn_workers " +
      std::to_string(workers.size()) + "\n";
  auto labels = [](const WorkerView& w) {
    return "worker_id=\"" + serving::prometheus_label(w.id) + "\",name=\"" +
           serving::prometheus_label(w.name) + "\",address=\"" +
           serving::prometheus_label(w.address) + "\"";
  };
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  auto header = [&out](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  for (const auto& g : gauges) {
    header(g.name, g.type, g.help);
    for (const auto& w : workers)
      out += std::string(g.name) + "{" + labels(w) + "} " + num(g.value(w)) + "\n";
  }
  // The role as an info-style series, so the other series keep their labels.
  header("cairn_worker_role", "gauge", "1 for the worker's role: prefill, decode or both");
  for (const auto& w : workers)
    out += "cairn_worker_role{" + labels(w) + ",role=\"" + w.role() + "\"} 1\n";
  header("cairn_worker_kv_handoff_seconds", "histogram",
         "seconds from a handoff's first K/V row to the decode worker's reply");
  for (const auto& w : workers) {
    const auto& h = w.status.handoff();
    uint64_t cumulative = 0;
    // Buckets only when the counts match the bounds (+Inf last); else just the totals.
    const bool whole = h.seconds_counts_size() == h.seconds_bounds_size() + 1;
    if (whole)
      for (int i = 0; i < h.seconds_bounds_size(); ++i) {
        cumulative += h.seconds_counts(i);
        char le[32];  // as the server's own histograms write their bounds
        std::snprintf(le, sizeof le, "%g", h.seconds_bounds(i));
        out += "cairn_worker_kv_handoff_seconds_bucket{" + labels(w) + ",le=\"" + le + "\"} " +
               std::to_string(cumulative) + "\n";
      }
    uint64_t count = 0;
    for (uint64_t c : h.seconds_counts()) count += c;
    out += "cairn_worker_kv_handoff_seconds_bucket{" + labels(w) + ",le=\"+Inf\"} " +
           std::to_string(count) + "\n";
    out += "cairn_worker_kv_handoff_seconds_sum{" + labels(w) + "} " + num(h.seconds_sum()) + "\n";
    out += "cairn_worker_kv_handoff_seconds_count{" + labels(w) + "} " + std::to_string(count) +
           "\n";
  }
  header("cairn_pd_requests_total", "counter",
         "generations routed as prefill on one worker, then decode on another");
  out += "cairn_pd_requests_total " + std::to_string(pd_requests_.load()) + "\n";
  header("cairn_pd_handoffs_total", "counter", "handoff finishes received from prefill workers");
  out += "cairn_pd_handoffs_total " + std::to_string(pd_handoffs_.load()) + "\n";
  header("cairn_pd_fallbacks_total", "counter",
         "decode attempts that recomputed the prompt: the transfer failed, the decode worker was "
         "lost, or the prefill worker was lost after its first token");
  out += "cairn_pd_fallbacks_total{reason=\"transfer\"} " +
         std::to_string(fallback_transfer_.load()) + "\n";
  out += "cairn_pd_fallbacks_total{reason=\"decode_lost\"} " +
         std::to_string(fallback_decode_lost_.load()) + "\n";
  out += "cairn_pd_fallbacks_total{reason=\"prefill_lost\"} " +
         std::to_string(fallback_prefill_lost_.load()) + "\n";
  return out;
}

}  // namespace cairn::cluster

// distributed/coordinator.cpp — see coordinator.h.
#include "distributed/coordinator.h"

#include <spdlog/spdlog.h>

#include "distributed/wire.h"
#include "rpc/convert.h"

namespace cairn::distributed {

namespace {

using clock = std::chrono::steady_clock;

grpc::Status refuse(grpc::ServerReaderWriter<v1::WorkerMessage, v1::AgentMessage>* stream, const std::string& why) {
  v1::WorkerMessage m;
  m.mutable_refused()->set_error_code(400);
  m.mutable_refused()->set_error_msg(why);
  stream->Write(m);
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why);
}

std::string error_text(const v1::ErrorMsg& e) { return e.error_msg().empty() ? "failed" : e.error_msg(); }

}  // namespace

struct Coordinator::Member {
  int rank = 0;
  grpc::ServerContext* ctx = nullptr;
  grpc::ServerReaderWriter<v1::WorkerMessage, v1::AgentMessage>* stream = nullptr;
  v1::Hello hello;
  clock::time_point last_heard;
  std::mutex write_mu;
  bool closed = false;  // the Join handler has returned: the stream is gone
  bool loaded = true;   // an LLM agent has its shard (Loaded)

  bool write(const v1::WorkerMessage& msg) {
    std::lock_guard lock(write_mu);
    return !closed && stream->Write(msg);
  }
};

Result<std::unique_ptr<Coordinator>> Coordinator::create(const CoordinatorOptions& o) {
  if (o.rank_size < 1 || o.rank_size > 4096)
    return Status::invalid_argument("rank_size " + std::to_string(o.rank_size) + " is not in 1..4096");
  if (o.stage_size < 1 || o.rank_size % o.stage_size != 0)
    return Status::invalid_argument("stage_size " + std::to_string(o.stage_size) + " does not divide rank_size " +
                                    std::to_string(o.rank_size));
  return std::unique_ptr<Coordinator>(new Coordinator(o));
}

Coordinator::Coordinator(const CoordinatorOptions& options) : options_(options) {
  watcher_ = std::thread([this] { watch(); });
}

Coordinator::~Coordinator() {
  shutdown();
  if (watcher_.joinable()) watcher_.join();
}

void Coordinator::shutdown() {
  std::lock_guard lock(mu_);
  if (stopping_) return;
  stopping_ = true;
  for (auto& [rank, m] : members_) m->ctx->TryCancel();
  cv_.notify_all();
}

std::string Coordinator::missing_locked() const {
  std::string out;
  for (int r = 0; r < options_.rank_size; ++r)
    if (!members_.count(r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

bool Coordinator::all_loaded_locked() const {
  if (int(members_.size()) < options_.rank_size) return false;
  for (const auto& [rank, m] : members_)
    if (!m->loaded) return false;
  return true;
}

std::string Coordinator::state() const {
  std::lock_guard lock(mu_);
  if (ready_) return "ready (" + std::to_string(options_.rank_size) + " agents, epoch " + std::to_string(epoch_) + ")";
  if (int(members_.size()) < options_.rank_size) return "waiting for agent ranks " + missing_locked();
  std::string loading;
  for (const auto& [rank, m] : members_)
    if (!m->loaded) loading += (loading.empty() ? "" : ", ") + std::to_string(rank);
  if (!loading.empty()) return "agent ranks " + loading + " are loading their shards";
  return "forming the agents' group (epoch " + std::to_string(epoch_) + ")";
}

uint64_t Coordinator::epoch() const { return epoch_seen_.load(); }

RunStats Coordinator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool Coordinator::ready() const {
  std::lock_guard lock(mu_);
  return ready_;
}

Status Coordinator::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto done = [&] { return ready_ || stopping_; };
  if (timeout.count() <= 0) {
    cv_.wait(lock, done);
  } else if (!cv_.wait_for(lock, timeout, done)) {
    return Status::unavailable(int(members_.size()) < options_.rank_size
                                   ? "agents did not all join within " + std::to_string(timeout.count() / 1000) +
                                         " s; missing ranks " + missing_locked()
                                   : "the agents' group did not form within the wait");
  }
  if (stopping_) return Status::unavailable("the distributed worker is shutting down");
  return Status::ok();
}

void Coordinator::start_forming_locked() {
  if (epoch_ > 0) store_.erase_prefix("e" + std::to_string(epoch_) + "/");
  epoch_seen_ = ++epoch_;
  formed_.clear();
  ready_ = false;
  retry_form_at_ = {};
  v1::WorkerMessage msg;
  msg.mutable_form()->set_epoch(epoch_);
  msg.mutable_form()->set_timeout_ms(uint32_t(options_.group_timeout.count()));
  spdlog::info("distributed: all {} agents joined; forming their group (epoch {})", options_.rank_size, epoch_);
  for (auto& [rank, m] : members_) m->write(msg);
}

void Coordinator::drop(int rank, const std::shared_ptr<Member>& m, const std::string& why) {
  std::lock_guard lock(mu_);
  auto it = members_.find(rank);
  if (it == members_.end() || it->second != m) return;
  members_.erase(it);
  const bool was_ready = ready_;
  ready_ = false;
  formed_.clear();
  store_.erase_prefix("e" + std::to_string(epoch_) + "/");
  epoch_seen_ = ++epoch_;  // Formed answers of the old epoch are ignored from now on
  for (auto& [id, p] : pending_) {
    if (!p.error)
      p.error = Status::unavailable("agent rank " + std::to_string(rank) + " left during the forward (" + why + ")");
    p.waiting.erase(rank);
  }
  spdlog::warn("distributed: agent rank {} left ({}); {}", rank, why,
               was_ready ? "the model is unavailable until it is back" : "still waiting");
  cv_.notify_all();
}

grpc::Status Coordinator::Join(grpc::ServerContext* ctx,
                               grpc::ServerReaderWriter<v1::WorkerMessage, v1::AgentMessage>* stream) {
  v1::AgentMessage first;
  if (!stream->Read(&first) || first.kind_case() != v1::AgentMessage::kHello)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "an agent's first message is its Hello");
  const v1::Hello& h = first.hello();
  const int rank = int(h.rank());
  if (h.rank() >= uint32_t(options_.rank_size))
    return refuse(stream, "rank " + std::to_string(h.rank()) + " is outside this servable's rank_size " +
                              std::to_string(options_.rank_size));
  if (llm() && h.fingerprint() != options_.llm_fingerprint)
    return refuse(stream, "rank " + std::to_string(rank) + "'s model " + h.model_file() + " is " +
                              (h.fingerprint().empty() ? std::string("not a GGUF model") : h.fingerprint()) +
                              "; this servable's is " + options_.llm_fingerprint);
  if (!llm() && !h.fingerprint().empty())
    return refuse(stream, "rank " + std::to_string(rank) + " holds a GGUF model; this servable's shards are ONNX");
  std::vector<onnx::ValueInfo> ins, outs;
  for (const auto& s : h.inputs()) {
    auto v = from_spec(s);
    if (!v.is_ok()) return refuse(stream, v.status().message());
    ins.push_back(std::move(*v));
  }
  for (const auto& s : h.outputs()) {
    auto v = from_spec(s);
    if (!v.is_ok()) return refuse(stream, v.status().message());
    outs.push_back(std::move(*v));
  }
  auto m = std::make_shared<Member>();
  m->rank = rank;
  m->ctx = ctx;
  m->stream = stream;
  m->hello = h;
  m->last_heard = clock::now();
  m->loaded = !llm();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return refuse(stream, "the distributed worker is shutting down");
    if (members_.count(rank))
      return refuse(stream, "rank " + std::to_string(rank) + " has already joined (pid " +
                                std::to_string(members_[rank]->hello.pid()) + ")");
    // The first stage's agents declare the model's inputs, the last stage's
    // its outputs; every agent of a stage must agree with the others.
    const bool first_stage = rank < per_stage(), last_stage = rank >= options_.rank_size - per_stage();
    auto same = [](const std::vector<onnx::ValueInfo>& a, const std::vector<onnx::ValueInfo>& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].dims != b[i].dims) return false;
      return true;
    };
    if (first_stage) {
      if (!inputs_.empty() && !same(inputs_, ins))
        return refuse(stream, "rank " + std::to_string(rank) + "'s model has other inputs than the first stage's");
      inputs_ = ins;
    }
    if (last_stage) {
      if (!outputs_.empty() && !same(outputs_, outs))
        return refuse(stream, "rank " + std::to_string(rank) + "'s model has other outputs than the last stage's");
      outputs_ = outs;
    }
    opset_ = h.opset();
    v1::WorkerMessage welcome;
    welcome.mutable_welcome()->set_rank_size(uint32_t(options_.rank_size));
    welcome.mutable_welcome()->set_stage_size(uint32_t(options_.stage_size));
    welcome.mutable_welcome()->set_kv_blocks(options_.kv_blocks);
    welcome.mutable_welcome()->set_kv_block_tokens(options_.kv_block_tokens);
    if (!m->write(welcome)) return grpc::Status::CANCELLED;
    members_[rank] = m;
    if (llm())
      spdlog::info("distributed: agent rank {} joined (pid {}, model {}); loading its shard", rank, h.pid(),
                   h.model_file());
    else
      spdlog::info("distributed: agent rank {} joined (pid {}, model {}, {} MiB resident)", rank, h.pid(),
                   h.model_file(), h.resident_bytes() >> 20);
    if (all_loaded_locked()) start_forming_locked();
  }
  v1::AgentMessage msg;
  std::string why = "its stream ended";
  while (stream->Read(&msg)) {
    std::lock_guard lock(mu_);
    m->last_heard = clock::now();
    if (members_.count(rank) == 0 || members_[rank] != m) break;
    if (msg.kind_case() == v1::AgentMessage::kLoaded) {
      const auto& l = msg.loaded();
      if (l.has_error()) {
        why = "its shard did not load: " + error_text(l.error());
        break;
      }
      m->loaded = true;
      spdlog::info("distributed: agent rank {} loaded {} ({} MiB resident)", rank, l.shard(),
                   l.resident_bytes() >> 20);
      if (all_loaded_locked()) start_forming_locked();
    } else if (msg.kind_case() == v1::AgentMessage::kFormed) {
      const auto& f = msg.formed();
      if (f.epoch() != epoch_) continue;  // an old epoch's answer
      if (f.has_error()) {
        spdlog::warn("distributed: agent rank {} could not form the group (epoch {}): {}", rank, f.epoch(),
                     error_text(f.error()));
        retry_form_at_ = clock::now() + std::chrono::seconds(1);
        continue;
      }
      formed_.insert(rank);
      if (int(formed_.size()) == options_.rank_size && !ready_) {
        ready_ = true;
        spdlog::info("distributed: the agents' group is formed (epoch {}); serving", epoch_);
        cv_.notify_all();
      }
    } else if (msg.kind_case() == v1::AgentMessage::kDone) {
      const auto& d = msg.done();
      auto found = pending_.find(d.id());
      if (found == pending_.end() || !found->second.waiting.count(rank)) continue;
      Pending& p = found->second;
      p.waiting.erase(rank);
      stats_.agent_forward_ns += d.forward_ns();
      stats_.agent_comm_ns += d.comm_ns();
      stats_.agent_comm_bytes += d.comm_bytes();
      if (d.has_error() && !p.error)
        p.error = Status::unavailable("agent rank " + std::to_string(rank) + ": " + error_text(d.error()));
      if (d.outputs_size() > 0 && !p.error) {
        for (const auto& t : d.outputs()) {
          auto v = from_proto(t);
          if (!v.is_ok()) {
            p.error = Status::internal("agent rank " + std::to_string(rank) + " sent a bad output: " +
                                               v.status().message());
            break;
          }
          p.outputs.push_back(std::move(*v));
        }
      }
      cv_.notify_all();
    }
  }
  if (ctx->IsCancelled()) why = "cancelled: silent, or the worker is stopping";
  drop(rank, m, why);
  std::lock_guard lock(m->write_mu);
  m->closed = true;
  return grpc::Status::OK;
}

void Coordinator::watch() {
  const auto silent_limit = options_.ping_interval * options_.missed_pings;
  uint64_t seq = 0;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.ping_interval, [&] { return stopping_; });
    if (stopping_) break;
    const auto now = clock::now();
    v1::WorkerMessage ping;
    ping.mutable_ping()->set_seq(++seq);
    for (auto& [rank, m] : members_) {
      if (now - m->last_heard > silent_limit) {
        spdlog::warn("distributed: agent rank {} silent for {} ms; dropping it", rank,
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - m->last_heard).count());
        m->ctx->TryCancel();
        continue;
      }
      m->write(ping);
    }
    if (!ready_ && all_loaded_locked() && retry_form_at_ != clock::time_point{} &&
        now >= retry_form_at_)
      start_forming_locked();
  }
}

grpc::Status Coordinator::StoreSet(grpc::ServerContext*, const v1::StoreSetRequest* req, v1::StoreSetReply*) {
  if (req->key().size() > 1024 || req->value().size() > (1u << 20))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "store keys are at most 1 KiB, values 1 MiB");
  return rpc::to_grpc_status(store_.set(req->key(), req->value()));
}

grpc::Status Coordinator::StoreGet(grpc::ServerContext*, const v1::StoreGetRequest* req, v1::StoreGetReply* reply) {
  if (req->key().size() > 1024) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "store keys are at most 1 KiB");
  const auto timeout = std::chrono::milliseconds(std::min<uint32_t>(req->timeout_ms(), 60000));
  auto v = store_.get(req->key(), timeout);
  reply->set_found(v.is_ok());
  if (v.is_ok()) reply->set_value(std::move(*v));
  return grpc::Status::OK;
}

Result<std::vector<values::Tensor>> Coordinator::run(std::vector<values::Tensor> inputs,
                                                     std::optional<uint64_t> epoch) {
  std::vector<std::vector<values::Tensor>> one;
  one.push_back(std::move(inputs));
  CAIRN_ASSIGN_OR_RETURN(auto outputs, run_pipelined(std::move(one), epoch));
  return std::move(outputs[0]);
}

Result<std::vector<std::vector<values::Tensor>>> Coordinator::run_pipelined(
    std::vector<std::vector<values::Tensor>> micro, std::optional<uint64_t> epoch) {
  std::lock_guard serial(run_mu_);
  std::unique_lock lock(mu_);
  // A group being (re-)formed with every agent present is worth a short wait.
  if (!ready_ && all_loaded_locked() && !stopping_)
    cv_.wait_for(lock, options_.group_timeout, [&] { return ready_ || stopping_; });
  if (!ready_ || stopping_) {
    const std::string why = int(members_.size()) < options_.rank_size ? "waiting for agent ranks " + missing_locked()
                                                                      : "the agents' group is being formed";
    return Status::unavailable("the distributed model is not available: " + why);
  }
  if (epoch && *epoch != epoch_)
    return Status::unavailable("the agents' group re-formed (epoch " + std::to_string(epoch_) +
                               "); the K/V of sequences started before it is gone");
  // Every Run goes out at once: an agent works through its Runs in order,
  // so a stage starts the next micro-batch while the next stage has this one.
  std::vector<uint64_t> ids;
  for (auto& inputs : micro) {
    ++stats_.forwards;
    Pending p;
    p.id = ++next_run_;
    for (const auto& [rank, m] : members_) p.waiting.insert(rank);
    ids.push_back(p.id);
    v1::WorkerMessage with_inputs, without_inputs;
    with_inputs.mutable_run()->set_id(p.id);
    without_inputs.mutable_run()->set_id(p.id);
    for (const auto& t : inputs) *with_inputs.mutable_run()->add_inputs() = to_proto(t);
    for (auto& [rank, m] : members_)
      if (!m->write(rank < per_stage() || llm() ? with_inputs : without_inputs) && !p.error)
        p.error = Status::unavailable("agent rank " + std::to_string(rank) + " could not be reached");
    pending_.emplace(p.id, std::move(p));
  }
  // Every agent answers (or leaves) before the next forward: after a failure
  // some may still be inside a collective until the group's timeout.
  const auto all_answered = [&] {
    for (uint64_t id : ids)
      if (!pending_.at(id).waiting.empty()) return false;
    return true;
  };
  const bool finished = cv_.wait_for(lock, options_.run_timeout, all_answered);
  std::optional<Status> error;
  std::vector<std::vector<values::Tensor>> outputs;
  for (uint64_t id : ids) {
    Pending done = std::move(pending_.at(id));
    pending_.erase(id);
    if (done.error && !error) error = done.error;
    outputs.push_back(std::move(done.outputs));
  }
  if (!finished && !error)
    error = Status::unavailable("the agents did not finish the forward within " +
                                std::to_string(options_.run_timeout.count() / 1000) + " s");
  if (error) {
    // Ranks may have stopped at different collectives: only a fresh group
    // is in step again.
    if (all_loaded_locked() && !stopping_) start_forming_locked();
    return *error;
  }
  for (const auto& o : outputs)
    if (!llm() && o.size() != outputs_.size())
      return Status::internal("the last stage returned " + std::to_string(o.size()) + " outputs, expected " +
                              std::to_string(outputs_.size()));
  return outputs;
}

std::vector<onnx::ValueInfo> Coordinator::inputs() const {
  std::lock_guard lock(mu_);
  return inputs_;
}
std::vector<onnx::ValueInfo> Coordinator::outputs() const {
  std::lock_guard lock(mu_);
  return outputs_;
}
int64_t Coordinator::opset() const {
  std::lock_guard lock(mu_);
  return opset_;
}

namespace {

class DistributedSession final : public onnx::Session {
 public:
  explicit DistributedSession(std::shared_ptr<Coordinator> c)
      : c_(std::move(c)), inputs_(c_->inputs()), outputs_(c_->outputs()) {}
  const std::vector<onnx::ValueInfo>& inputs() const override { return inputs_; }
  const std::vector<onnx::ValueInfo>& outputs() const override { return outputs_; }
  int64_t opset() const override { return c_->opset(); }
  Result<std::vector<values::Tensor>> run(std::span<const values::Tensor* const> inputs) override {
    std::vector<values::Tensor> copies;
    copies.reserve(inputs.size());
    for (const auto* t : inputs) copies.push_back(*t);
    return c_->run(std::move(copies));
  }
  int plans_cached() const override { return 0; }
  size_t node_count() const override { return 0; }
  size_t arena_bytes() const override { return 0; }

 private:
  std::shared_ptr<Coordinator> c_;
  std::vector<onnx::ValueInfo> inputs_, outputs_;
};

}  // namespace

std::unique_ptr<onnx::Session> make_distributed_session(std::shared_ptr<Coordinator> coordinator) {
  return std::make_unique<DistributedSession>(std::move(coordinator));
}

}  // namespace cairn::distributed

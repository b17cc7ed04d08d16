// distributed/agent.cpp — see agent.h.
#include "distributed/agent.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

#include "cairn/v1/agents.grpc.pb.h"
#include "collective/group.h"
#include "distributed/llm_shard.h"
#include "distributed/llm_step.h"
#include "distributed/wire.h"
#include "onnx/session.h"
#include "rpc/convert.h"

namespace cairn::distributed {

namespace {

uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

// The rendezvous table on the worker.
class RemoteStore final : public collective::Store {
 public:
  explicit RemoteStore(v1::Agents::Stub& stub) : stub_(stub) {}
  Status set(const std::string& key, const std::string& value) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::StoreSetRequest req;
    req.set_key(key);
    req.set_value(value);
    v1::StoreSetReply reply;
    const grpc::Status st = stub_.StoreSet(&ctx, req, &reply);
    return st.ok() ? Status::ok() : rpc::from_grpc_status(st);
  }
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(5));
    v1::StoreGetRequest req;
    req.set_key(key);
    req.set_timeout_ms(uint32_t(timeout.count()));
    v1::StoreGetReply reply;
    const grpc::Status st = stub_.StoreGet(&ctx, req, &reply);
    if (!st.ok()) return rpc::from_grpc_status(st);
    if (!reply.found()) return Status::unavailable("no rank published '" + key + "' in time");
    return reply.value();
  }

 private:
  v1::Agents::Stub& stub_;
};

v1::ErrorMsg error_msg(const Status& st) {
  v1::ErrorMsg e;
  e.set_error_code(503);
  e.set_error_msg(st.message());
  return e;
}

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o) {}

  Status run() {
    // An ONNX shard is loaded before joining; a GGUF model's shard depends
    // on the layout the worker tells (after the Welcome).
    std::string fingerprint;
    if (is_gguf_file(o_.model_file)) {
      auto file = gguf::File::open(o_.model_file);
      if (!file.is_ok()) return Status::invalid_argument("agent rank " + std::to_string(o_.rank) + ": " + file.status().message());
      auto hp = model::Model::read_hparams(**file);
      if (!hp.is_ok())
        return Status::invalid_argument("agent rank " + std::to_string(o_.rank) + ": " + o_.model_file + ": " +
                                        hp.status().message());
      fingerprint = llm_fingerprint(*hp);
    } else {
      onnx::SessionOptions so;
      so.threads = o_.threads;
      so.group = slot_;
      auto loaded = onnx::Session::load(o_.model_file, so);
      if (!loaded.is_ok())
        return Status::invalid_argument("agent rank " + std::to_string(o_.rank) + ": " + loaded.status().message());
      session_ = std::move(*loaded);
    }
    const uint64_t rss = resident_bytes();
    if (session_) spdlog::info("agent rank {}: model {} loaded, {} MiB resident", o_.rank, o_.model_file, rss >> 20);

    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(o_.distributed_address, grpc::InsecureChannelCredentials(), args);
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::milliseconds(int64_t(o_.join_timeout_s * 1000));
    if (!channel_->WaitForConnected(deadline))
      return Status::unavailable("could not reach the distributed worker at " + o_.distributed_address + " within " +
                                 std::to_string(int(o_.join_timeout_s)) + " s");
    stub_ = v1::Agents::NewStub(channel_);
    store_ = std::make_unique<RemoteStore>(*stub_);
    stream_ = stub_->Join(&ctx_);

    v1::AgentMessage hello;
    auto* h = hello.mutable_hello();
    h->set_rank(uint32_t(o_.rank));
    h->set_model_file(o_.model_file);
    if (session_) {
      for (const auto& v : session_->inputs()) *h->add_inputs() = to_spec(v);
      for (const auto& v : session_->outputs()) *h->add_outputs() = to_spec(v);
      h->set_opset(session_->opset());
    }
    h->set_fingerprint(fingerprint);
    h->set_resident_bytes(rss);
    h->set_pid(uint32_t(getpid()));
    if (!write(hello)) return Status::unavailable("the distributed worker closed the stream");
    v1::WorkerMessage first;
    if (!stream_->Read(&first)) return finish("the distributed worker ended the session before welcoming this agent");
    if (first.kind_case() == v1::WorkerMessage::kRefused)
      return Status::invalid_argument("the distributed worker refused rank " + std::to_string(o_.rank) + ": " +
                                      first.refused().error_msg());
    if (first.kind_case() != v1::WorkerMessage::kWelcome) return Status::internal("expected a Welcome");
    rank_size_ = int(first.welcome().rank_size());
    stage_size_ = int(first.welcome().stage_size());
    per_stage_ = rank_size_ / stage_size_;
    spdlog::info("agent rank {}: joined {} (rank_size {}, stage_size {}: stage {}, position {})", o_.rank,
                 o_.distributed_address, rank_size_, stage_size_, o_.rank / per_stage_, o_.rank % per_stage_);

    // Reads on their own thread so pings are answered while a shard loads
    // and while a forward runs.
    std::thread reader([this] { read_loop(); });
    Status loaded = session_ ? Status::ok() : load_shard(first.welcome());
    if (loaded.is_ok()) work_loop();
    ctx_.TryCancel();  // (a no-op once the worker has ended the stream)
    reader.join();
    if (!loaded.is_ok()) {
      (void)stream_->Finish();
      return loaded;
    }
    return finish("the distributed worker ended the session");
  }

 private:
  Status finish(const std::string& what) {
    grpc::Status st = stream_->Finish();
    if (!st.ok()) return Status::unavailable(what + ": " + st.error_message());
    spdlog::info("agent rank {}: {}", o_.rank, what);
    return Status::ok();
  }

  // This rank's shard of the GGUF model, for the layout the worker sent;
  // the worker hears Loaded either way (with the error when it failed).
  Status load_shard(const v1::Welcome& w) {
    auto shard = LlmShard::load(o_.model_file, o_.rank, rank_size_, stage_size_, o_.threads, int32_t(w.kv_blocks()),
                                int32_t(w.kv_block_tokens()));
    v1::AgentMessage msg;
    auto* l = msg.mutable_loaded();
    if (!shard.is_ok()) {
      *l->mutable_error() = error_msg(shard.status());
      write(msg);
      return Status::invalid_argument("agent rank " + std::to_string(o_.rank) + ": " + shard.status().message());
    }
    llm_ = std::move(*shard);
    const uint64_t rss = resident_bytes();
    spdlog::info("agent rank {}: {} loaded: {}; {} MiB resident", o_.rank, o_.model_file, llm_->describe(), rss >> 20);
    l->set_resident_bytes(rss);
    l->set_shard(llm_->describe());
    write(msg);
    return Status::ok();
  }

  bool write(const v1::AgentMessage& m) {
    std::lock_guard lock(write_mu_);
    return stream_->Write(m);
  }

  void read_loop() {
    v1::WorkerMessage msg;
    while (stream_->Read(&msg)) {
      if (msg.kind_case() == v1::WorkerMessage::kPing) {
        v1::AgentMessage pong;
        pong.mutable_pong()->set_seq(msg.ping().seq());
        write(pong);
        continue;
      }
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(msg));
      cv_.notify_one();
    }
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_one();
  }

  void work_loop() {
    for (;;) {
      v1::WorkerMessage msg;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        msg = std::move(queue_.front());
        queue_.pop_front();
      }
      if (msg.kind_case() == v1::WorkerMessage::kForm) {
        v1::AgentMessage reply;
        reply.mutable_formed()->set_epoch(msg.form().epoch());
        Status st = form(msg.form().epoch(), std::chrono::milliseconds(msg.form().timeout_ms()));
        if (!st.is_ok()) *reply.mutable_formed()->mutable_error() = error_msg(st);
        write(reply);
      } else if (msg.kind_case() == v1::WorkerMessage::kRun) {
        v1::AgentMessage reply;
        reply.mutable_done()->set_id(msg.run().id());
        Status st = forward(msg.run(), *reply.mutable_done());
        if (!st.is_ok()) {
          reply.mutable_done()->clear_outputs();
          *reply.mutable_done()->mutable_error() = error_msg(st);
        }
        write(reply);
      }
    }
  }

  // The stage's group (the collectives inside the model) and, with more
  // than one stage, every rank's (stage-to-stage activations).
  Status form(uint64_t epoch, std::chrono::milliseconds timeout) {
    slot_->set(nullptr);
    world_.reset();
    collective::GroupOptions go;
    go.host = o_.host;
    go.timeout = timeout.count() > 0 ? timeout : std::chrono::milliseconds(5000);
    const std::string e = "e" + std::to_string(epoch) + "/";
    const int stage = o_.rank / per_stage_;
    auto g = collective::Group::connect(*store_, e + "stage" + std::to_string(stage), o_.rank % per_stage_,
                                        per_stage_, go);
    if (!g.is_ok()) return g.status();
    if (stage_size_ > 1) {
      auto w = collective::Group::connect(*store_, e + "world", o_.rank, rank_size_, go);
      if (!w.is_ok()) return w.status();
      world_ = std::move(*w);
    }
    slot_->set(std::move(*g));
    spdlog::info("agent rank {}: group formed (epoch {})", o_.rank, epoch);
    return Status::ok();
  }

  Status send_frame(const std::string& bytes, int peer) {
    const uint64_t n = bytes.size();
    CAIRN_RETURN_IF_ERROR(world_->send(&n, sizeof n, peer, kStageTag));
    if (n) CAIRN_RETURN_IF_ERROR(world_->send(bytes.data(), n, peer, kStageTag));
    return Status::ok();
  }

  Status forward(const v1::Run& run, v1::Done& done) {
    if (llm_) return forward_llm(run, done);
    const int stage = o_.rank / per_stage_;
    const bool last = stage == stage_size_ - 1;
    v1::Run received;
    const v1::Run* in = &run;
    if (stage > 0) {
      if (!world_) return Status::unavailable("not in a group");
      uint64_t n = 0;
      CAIRN_RETURN_IF_ERROR(world_->recv(&n, sizeof n, o_.rank - per_stage_, kStageTag));
      if (n == 0) return fail_onward(last, Status::unavailable("stage " + std::to_string(stage - 1) + " failed"));
      if (n > (uint64_t(1) << 34)) return fail_onward(last, Status::internal("a stage frame of " + std::to_string(n) + " bytes"));
      std::string bytes(n, '\0');
      CAIRN_RETURN_IF_ERROR(world_->recv(bytes.data(), n, o_.rank - per_stage_, kStageTag));
      if (!received.ParseFromString(bytes)) return fail_onward(last, Status::internal("a malformed stage frame"));
      in = &received;
    }
    std::vector<values::Tensor> inputs;
    for (const auto& t : in->inputs()) {
      auto v = from_proto(t);
      if (!v.is_ok()) return fail_onward(last, v.status());
      inputs.push_back(std::move(*v));
    }
    if (inputs.size() != session_->inputs().size())
      return fail_onward(last, Status::invalid_argument("got " + std::to_string(inputs.size()) + " inputs, the model takes " +
                                                        std::to_string(session_->inputs().size())));
    std::vector<const values::Tensor*> ptrs;
    for (const auto& t : inputs) ptrs.push_back(&t);
    auto outs = session_->run(ptrs);
    if (!outs.is_ok()) return fail_onward(last, outs.status());
    if (!last) {
      v1::Run next;
      next.set_id(run.id());
      for (const auto& t : *outs) *next.add_inputs() = to_proto(t);
      return send_frame(next.SerializeAsString(), o_.rank + per_stage_);
    }
    if (o_.rank % per_stage_ == 0)
      for (const auto& t : *outs) *done.add_outputs() = to_proto(t);
    return Status::ok();
  }

  // An LLM step: every agent has the batch and block tables; a later stage
  // waits for the previous stage's rows (raw floats in a frame).
  Status forward_llm(const v1::Run& run, v1::Done& done) {
    const auto t0 = std::chrono::steady_clock::now();
    const int stage = o_.rank / per_stage_;
    const bool last = stage == stage_size_ - 1;
    std::vector<values::Tensor> inputs;
    for (const auto& t : run.inputs()) {
      auto v = from_proto(t);
      if (!v.is_ok()) return fail_onward(last, v.status());
      inputs.push_back(std::move(*v));
    }
    std::vector<float> hidden_in, hidden_out;
    if (stage > 0) {
      if (!world_) return Status::unavailable("not in a group");
      uint64_t n = 0;
      CAIRN_RETURN_IF_ERROR(world_->recv(&n, sizeof n, o_.rank - per_stage_, kStageTag));
      if (n == 0) return fail_onward(last, Status::unavailable("stage " + std::to_string(stage - 1) + " failed"));
      if (n % sizeof(float) != 0 || n > (uint64_t(1) << 34))
        return fail_onward(last, Status::internal("a stage frame of " + std::to_string(n) + " bytes"));
      hidden_in.resize(n / sizeof(float));
      CAIRN_RETURN_IF_ERROR(world_->recv(hidden_in.data(), n, o_.rank - per_stage_, kStageTag));
    }
    CommStats comm;
    model::Logits logits;
    Status st = llm_->forward(inputs, &hidden_in, slot_->get(), &hidden_out, &logits, &comm);
    done.set_comm_ns(comm.ns);
    done.set_comm_bytes(comm.bytes);
    if (!st.is_ok()) return fail_onward(last, st);
    if (!last) {
      // The stage hop counts as communication: the time to hand the rows
      // over (not the wait for them, which is the pipeline's bubble).
      const auto s0 = std::chrono::steady_clock::now();
      CAIRN_RETURN_IF_ERROR(send_frame(std::string(reinterpret_cast<const char*>(hidden_out.data()),
                                                   hidden_out.size() * sizeof(float)),
                                       o_.rank + per_stage_));
      done.set_comm_ns(comm.ns + uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - s0)
                                              .count()));
      done.set_comm_bytes(comm.bytes + hidden_out.size() * sizeof(float));
    } else if (o_.rank % per_stage_ == 0) {
      for (const auto& t : encode_logits(logits)) *done.add_outputs() = to_proto(t);
    }
    done.set_forward_ns(uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
    return Status::ok();
  }

  // A failed stage tells the next one, which would otherwise wait for its
  // activations until the group's timeout.
  Status fail_onward(bool last, Status st) {
    if (!last && world_) (void)send_frame(std::string(), o_.rank + per_stage_);
    return st;
  }

  AgentOptions o_;
  std::shared_ptr<collective::GroupSlot> slot_ = std::make_shared<collective::GroupSlot>();
  std::unique_ptr<collective::Group> world_;
  std::unique_ptr<onnx::Session> session_;  // an ONNX shard, or
  std::unique_ptr<LlmShard> llm_;            // a GGUF model's
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Agents::Stub> stub_;
  std::unique_ptr<RemoteStore> store_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::WorkerMessage>> stream_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::WorkerMessage> queue_;
  bool closed_ = false;
  int rank_size_ = 1, stage_size_ = 1, per_stage_ = 1;
};

}  // namespace

Status run_agent(const AgentOptions& options) {
  if (options.rank < 0) return Status::invalid_argument("--rank must be 0 or more");
  if (options.distributed_address.empty()) return Status::invalid_argument("--distributed-address is required");
  Agent agent(options);
  return agent.run();
}

}  // namespace cairn::distributed

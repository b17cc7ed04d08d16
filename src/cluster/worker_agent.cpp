// cluster/worker_agent.cpp — a worker's registration and heartbeats with its controller.
#include "cluster/worker_agent.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cairn/v1/controller.grpc.pb.h"
#include "rpc/convert.h"

namespace cairn::cluster {

namespace {

// The longest any one RPC to the controller may take. Short: the controller
// answers from memory, and a slow answer is as good as none for liveness.
constexpr int kMaxRpcDeadlineMs = 3000;

std::chrono::system_clock::time_point deadline_in(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

}  // namespace

struct WorkerAgent::Impl {
  WorkerAgentOptions options;
  const serving::Backend& backend;
  std::unique_ptr<v1::Controller::Stub> stub;
  int rpc_deadline_ms = kMaxRpcDeadlineMs;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  bool stopped = false;
  bool registered = false;
  bool register_failing = false;  // the last Register failed (warned once)
  std::string worker_id;
  int interval_ms = 0;
  grpc::ClientContext* in_flight = nullptr;  // cancelled by stop
  std::thread thread;

  Impl(WorkerAgentOptions o, const serving::Backend& b) : options(std::move(o)), backend(b) {
    interval_ms = options.heartbeat_ms;
    rpc_deadline_ms = std::clamp(options.heartbeat_ms, 500, kMaxRpcDeadlineMs);
    grpc::ChannelArguments args;
    // gRPC's reconnect backoff grows to two minutes by default; a restarted
    // controller must see us within two heartbeats, so retry at least that often.
    const int backoff = std::max(100, options.heartbeat_ms);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(backoff, 1000));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(backoff, 1000));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff);
    stub = v1::Controller::NewStub(
        grpc::CreateCustomChannel(options.controller, grpc::InsecureChannelCredentials(), args));
  }

  // Runs one RPC with a deadline, registered so that stop() can cancel it.
  // Returns CANCELLED without calling when stopping has begun.
  template <class F>
  grpc::Status call(F&& rpc) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_in(rpc_deadline_ms));
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return rpc::to_grpc_status(Status::error(StatusCode::Cancelled, "stopping"));
      in_flight = &ctx;
    }
    grpc::Status st = rpc(&ctx);
    std::lock_guard<std::mutex> lock(mu);
    in_flight = nullptr;
    return st;
  }

  void do_register() {
    v1::RegisterRequest req;
    req.set_name(options.name);
    req.set_address(options.advertise);
    *req.mutable_status() = rpc::worker_status(backend, options.role, options.handoff_counters);
    v1::RegisterResponse res;
    grpc::Status st =
        call([&](grpc::ClientContext* ctx) { return stub->Register(ctx, req, &res); });
    if (!st.ok()) {
      // Once per outage at warning level, so an unreachable controller is
      // visible without a line per retry.
      bool first;
      {
        std::lock_guard<std::mutex> lock(mu);
        first = !register_failing && !stopping;
        register_failing = true;
      }
      if (first) {
        spdlog::warn("cannot register with controller {} (retrying every {} ms): {}",
                     options.controller, options.heartbeat_ms, st.error_message());
      }
      return;
    }
    if (res.worker_id().empty() || res.worker_id().size() > 256) {
      spdlog::warn("controller {} answered Register without a usable worker id",
                   options.controller);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      worker_id = res.worker_id();
      registered = true;
      register_failing = false;
      // Never heartbeat more slowly than the controller expects.
      const int wanted = res.heartbeat_ms();
      interval_ms = options.heartbeat_ms;
      if (wanted >= kMinHeartbeatMs && wanted < interval_ms) interval_ms = wanted;
    }
    spdlog::info("registered with controller {} as {}", options.controller, res.worker_id());
    if (options.on_registered) options.on_registered(res.worker_id());
  }

  void do_heartbeat(const std::string& id) {
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    *req.mutable_status() = rpc::worker_status(backend, options.role, options.handoff_counters);
    v1::HeartbeatResponse res;
    grpc::Status st =
        call([&](grpc::ClientContext* ctx) { return stub->Heartbeat(ctx, req, &res); });
    bool known = st.ok() && res.known();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (registered && !st.ok() && !stopping)
        spdlog::warn("controller {} unreachable: {}", options.controller, st.error_message());
      registered = known;
    }
    // The controller restarted or dropped us: register again at once rather
    // than a heartbeat later.
    if (st.ok() && !res.known()) {
      spdlog::info("controller {} no longer knows worker {}: registering again", options.controller,
                   id);
      do_register();
    }
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      const std::string id = worker_id;
      lock.unlock();
      // Without an id we register; with one we heartbeat, even after the
      // controller was unreachable: if it merely blinked it still knows us,
      // and if it restarted its answer (known = false) makes us register.
      if (id.empty()) {
        do_register();
      } else {
        do_heartbeat(id);
      }
      lock.lock();
      cv.wait_for(lock, std::chrono::milliseconds(interval_ms), [&] { return stopping; });
    }
  }
};

WorkerAgent::WorkerAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Status WorkerAgent::validate(const WorkerAgentOptions& o) {
  if (o.controller.empty()) return Status::error("the controller address is empty");
  if (o.controller.size() > 1024) return Status::error("the controller address is too long");
  if (o.advertise.empty()) return Status::error("the advertised address is empty");
  if (o.advertise.size() > 1024) return Status::error("the advertised address is too long");
  if (o.name.size() > 256) return Status::error("the worker name is longer than 256 bytes");
  if (o.role != "prefill" && o.role != "decode" && o.role != "both")
    return Status::error("the role must be prefill, decode or both");
  if (o.heartbeat_ms < kMinHeartbeatMs || o.heartbeat_ms > kMaxHeartbeatMs)
    return Status::error("the heartbeat interval must be " + std::to_string(kMinHeartbeatMs) +
                         ".." + std::to_string(kMaxHeartbeatMs) + " ms");
  return Status::ok();
}

std::unique_ptr<WorkerAgent> WorkerAgent::start(WorkerAgentOptions options,
                                                const serving::Backend& backend) {
  if (!validate(options).is_ok()) return nullptr;
  auto impl = std::make_unique<Impl>(std::move(options), backend);
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<WorkerAgent>(new WorkerAgent(std::move(impl)));
}

WorkerAgent::~WorkerAgent() { stop_and_deregister(); }

bool WorkerAgent::registered() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->registered;
}

std::string WorkerAgent::worker_id() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->worker_id;
}

void WorkerAgent::stop_and_deregister() {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    impl_->stopping = true;
    if (impl_->in_flight) impl_->in_flight->TryCancel();
    id = impl_->worker_id;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (id.empty()) return;
  // Deregister even when the last heartbeat failed: the controller may be
  // back, and an unknown id costs it nothing.
  v1::DeregisterRequest req;
  req.set_worker_id(id);
  v1::DeregisterResponse res;
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline_in(impl_->rpc_deadline_ms));
  grpc::Status st = impl_->stub->Deregister(&ctx, req, &res);
  if (st.ok()) {
    spdlog::info("deregistered {} from controller {}", id, impl_->options.controller);
  } else {
    spdlog::warn("deregister from controller {} failed: {}", impl_->options.controller,
                 st.error_message());
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->registered = false;
}

}  // namespace cairn::cluster

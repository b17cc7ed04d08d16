// collective/group.cpp — see group.h.
#include "collective/group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <exception>
#include <typeinfo>
#include <stdexcept>
#include <vector>

namespace cairn::collective {

Status MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    table_[key] = value;
  }
  cv_.notify_all();
  return Status::ok();
}

Result<std::string> MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return table_.count(key) != 0; }))
    return Status::unavailable("no rank published '" + key + "' within " + std::to_string(timeout.count()) + " ms");
  return table_[key];
}

void MemoryStore::erase_prefix(const std::string& prefix) {
  std::lock_guard lock(mu_);
  for (auto it = table_.lower_bound(prefix); it != table_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
    it = table_.erase(it);
}

size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return table_.size();
}

namespace {

// gloo's store interface over ours. gloo reports a failed wait by throwing;
// the exception is caught at the Group boundary.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(collective::Store& store, std::chrono::milliseconds timeout) : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Status st = store_.set(key, std::string(data.begin(), data.end()));
    if (!st.is_ok()) throw std::runtime_error("publishing '" + key + "': " + st.message());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_.get(key, timeout_);
    if (!v.is_ok()) throw std::runtime_error("reading '" + key + "': " + v.status().message());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) {
      auto v = store_.get(k, timeout);
      if (!v.is_ok()) throw std::runtime_error("waiting for '" + k + "': " + v.status().message());
    }
  }

 private:
  collective::Store& store_;
  std::chrono::milliseconds timeout_;
};

// Runs a gloo call, turning whatever it throws into an Unavailable status
// that names the operation.
template <class F>
Status guarded(const char* what, F&& f) {
  try {
    f();
    return Status::ok();
  } catch (const std::exception& e) {
    const std::string why = e.what();
    return Status::unavailable(std::string(what) + " failed: " + (why.empty() ? typeid(e).name() : why));
  } catch (...) {
    return Status::unavailable(std::string(what) + " failed");
  }
}

}  // namespace

struct Group::Impl {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

Group::Group(std::unique_ptr<Impl> impl, int rank, int size, std::chrono::milliseconds timeout)
    : impl_(std::move(impl)), rank_(rank), size_(size), timeout_(timeout) {}

Group::~Group() = default;

Result<std::unique_ptr<Group>> Group::connect(Store& store, const std::string& prefix, int rank, int size,
                                              const GroupOptions& options) {
  if (size < 1 || size > 4096) return Status::invalid_argument("group size " + std::to_string(size) + " is not in 1..4096");
  if (rank < 0 || rank >= size)
    return Status::invalid_argument("rank " + std::to_string(rank) + " is not in 0.." + std::to_string(size - 1));
  if (options.timeout.count() <= 0) return Status::invalid_argument("the group's timeout must be positive");
  auto impl = std::make_unique<Impl>();
  Status st = guarded("joining the group", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    impl->device = gloo::transport::tcp::CreateDevice(attr);
    impl->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    impl->context->setTimeout(options.timeout);
    GlooStore base(store, options.timeout);
    gloo::rendezvous::PrefixStore scoped(prefix, base);
    impl->context->connectFullMesh(scoped, impl->device);
  });
  if (!st.is_ok())
    return Status::unavailable("rank " + std::to_string(rank) + " of group '" + prefix + "': " + st.message());
  return std::unique_ptr<Group>(new Group(std::move(impl), rank, size, options.timeout));
}

Status Group::all_reduce_sum(float* data, size_t count) {
  if (size_ == 1 || count == 0) return Status::ok();
  return guarded("all-reduce", [&] {
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

Status Group::all_gather(const void* in, size_t bytes, void* out) {
  if (size_ == 1) {
    if (bytes) std::memcpy(out, in, bytes);
    return Status::ok();
  }
  if (bytes == 0) return Status::ok();
  return guarded("all-gather", [&] {
    gloo::AllgatherOptions opts(impl_->context);
    opts.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
    opts.setOutput(static_cast<char*>(out), bytes * size_t(size_));
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

Status Group::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_) return Status::invalid_argument("broadcast root " + std::to_string(root) + " is not a rank");
  if (size_ == 1 || bytes == 0) return Status::ok();
  return guarded("broadcast", [&] {
    gloo::BroadcastOptions opts(impl_->context);
    opts.setOutput(static_cast<char*>(data), bytes);
    opts.setRoot(root);
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

Status Group::barrier() {
  if (size_ == 1) return Status::ok();
  return guarded("barrier", [&] {
    gloo::BarrierOptions opts(impl_->context);
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

Status Group::send(const void* data, size_t bytes, int peer, uint32_t tag) {
  if (peer < 0 || peer >= size_ || peer == rank_) return Status::invalid_argument("send to rank " + std::to_string(peer));
  return guarded("send", [&] {
    auto buf = impl_->context->createUnboundBuffer(const_cast<void*>(data), bytes);
    buf->send(peer, uint64_t(tag) | (uint64_t(1) << 63));
    if (!buf->waitSend(timeout_)) throw std::runtime_error("timed out");
  });
}

Status Group::recv(void* data, size_t bytes, int peer, uint32_t tag) {
  if (peer < 0 || peer >= size_ || peer == rank_) return Status::invalid_argument("recv from rank " + std::to_string(peer));
  return guarded("recv", [&] {
    auto buf = impl_->context->createUnboundBuffer(data, bytes);
    buf->recv(peer, uint64_t(tag) | (uint64_t(1) << 63));
    if (!buf->waitRecv(timeout_)) throw std::runtime_error("timed out");
  });
}

}  // namespace cairn::collective

// cluster/registry.cpp — the controller's table of workers: registration, heartbeats, expiry.
#include "cluster/registry.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>

namespace cairn::cluster {

namespace {

constexpr size_t kMaxName = 256;
constexpr size_t kMaxAddress = 256;
constexpr int kMaxModels = 64;
constexpr size_t kMaxModelId = 512;

// host:port, [v6]:port or unix:path; the port is 1..65535.
Status check_address(const std::string& address) {
  if (address.empty()) return Status::error("address is empty");
  if (address.size() > kMaxAddress) return Status::error("address is longer than 256 bytes");
  for (char c : address)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      return Status::error("address contains a space or control character");
  if (address.rfind("unix:", 0) == 0) return Status::ok();
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return Status::error("address is not host:port");
  const std::string port = address.substr(colon + 1);
  int value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535)
    return Status::error("address has no valid port (1..65535): '" + address + "'");
  return Status::ok();
}

Status check_status(const v1::WorkerStatus& st) {
  if (st.models_size() > kMaxModels) return Status::error("status lists more than 64 models");
  for (const auto& m : st.models()) {
    if (m.id().empty()) return Status::error("status lists a model without an id");
    if (m.id().size() > kMaxModelId) return Status::error("a model id is longer than 512 bytes");
  }
  if (st.running() < 0 || st.waiting() < 0 || st.kv_blocks_used() < 0 || st.kv_blocks_total() < 0 ||
      st.queue_length() < 0)
    return Status::error("status has a negative count");
  return Status::ok();
}

}  // namespace

bool WorkerView::serves(const std::string& model) const {
  if (model.empty()) return status.models_size() > 0;
  for (const auto& m : status.models())
    if (m.id() == model) return true;
  return false;
}

std::string WorkerView::role() const {
  const std::string& r = status.role();
  return r == "prefill" || r == "decode" ? r : std::string("both");
}

int64_t Registry::steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Registry::Registry(RegistryOptions options, Clock clock)
    : options_(options), clock_(std::move(clock)) {
  std::random_device rd;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
  id_prefix_ = buf;
}

Result<std::string> Registry::register_worker(const std::string& name, const std::string& address,
                                              const v1::WorkerStatus& status) {
  if (name.size() > kMaxName) return Status::error("worker name is longer than 256 bytes");
  if (Status s = check_address(address); !s) return s;
  if (Status s = check_status(status); !s) return s;
  const int64_t now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  expire_locked(now);
  // A worker that restarted (or re-registers after a lost reply) at the same
  // address replaces its old entry instead of being listed twice.
  std::erase_if(workers_, [&](const auto& kv) { return kv.second.address == address; });
  if (workers_.size() >= options_.max_workers)
    return Status::error("too many workers registered (" + std::to_string(workers_.size()) + ")");
  const uint64_t order = next_++;
  std::string id = id_prefix_ + "-" + std::to_string(order);
  Entry e;
  e.order = order;
  e.name = name.empty() ? address : name;
  e.address = address;
  e.status = status;
  e.last_seen_ms = now;
  workers_.emplace(id, std::move(e));
  ++version_;
  return id;
}

bool Registry::heartbeat(const std::string& id, const v1::WorkerStatus& status) {
  if (!check_status(status)) return false;  // a malformed status is treated as unknown: re-register
  const int64_t now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  expire_locked(now);
  auto it = workers_.find(id);
  if (it == workers_.end()) return false;
  it->second.status = status;
  it->second.last_seen_ms = now;
  return true;
}

bool Registry::deregister(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (workers_.erase(id) == 0) return false;
  ++version_;
  return true;
}

void Registry::mark_failed(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (workers_.erase(id) > 0) ++version_;
}

std::vector<WorkerView> Registry::list() {
  const int64_t now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  expire_locked(now);
  std::vector<std::pair<uint64_t, WorkerView>> rows;
  rows.reserve(workers_.size());
  for (const auto& [id, e] : workers_) {
    WorkerView v;
    v.id = id;
    v.name = e.name;
    v.address = e.address;
    v.status = e.status;
    v.last_heartbeat_ms_ago = std::max<int64_t>(0, now - e.last_seen_ms);
    v.outstanding = e.outstanding;
    v.routed_total = e.routed_total;
    rows.emplace_back(e.order, std::move(v));
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<WorkerView> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(std::move(r.second));
  return out;
}

void Registry::add_outstanding(const std::string& id, int delta) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.outstanding = std::max<int64_t>(0, it->second.outstanding + delta);
  if (delta > 0) it->second.routed_total += static_cast<uint64_t>(delta);
}

uint64_t Registry::membership_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void Registry::expire_locked(int64_t now) {
  const size_t before = workers_.size();
  std::erase_if(workers_,
                [&](const auto& kv) { return now - kv.second.last_seen_ms > options_.timeout_ms; });
  if (workers_.size() != before) ++version_;
}

}  // namespace cairn::cluster

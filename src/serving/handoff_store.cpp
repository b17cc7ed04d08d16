// serving/handoff_store.cpp — incoming K/V transfers, checked and bounded.
#include "serving/handoff_store.h"

#include <algorithm>

namespace cairn::serving {

const std::vector<double>& HandoffCounters::seconds_bounds() {
  static const std::vector<double> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                              0.1,   0.25,   0.5,   1,    2.5,   5};
  return kBounds;
}

void HandoffCounters::observe_seconds(double s) {
  std::lock_guard lock(mu_);
  seconds_.observe(s);
}

HandoffCountersSnapshot HandoffCounters::snapshot() const {
  HandoffCountersSnapshot s;
  s.sent = sent.load();
  s.send_failed = send_failed.load();
  s.bytes_sent = bytes_sent.load();
  s.received = received.load();
  s.bytes_received = bytes_received.load();
  s.resumed = resumed.load();
  s.expired = expired.load();
  std::lock_guard lock(mu_);
  s.seconds = seconds_;
  return s;
}

HandoffStore::HandoffStore(const Backend& backend, HandoffStoreOptions options,
                           HandoffCounters* counters)
    : backend_(backend), options_(std::move(options)), counters_(counters) {}

std::chrono::steady_clock::time_point HandoffStore::now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

void HandoffStore::erase_locked(std::map<std::string, Entry>::iterator it, bool count_expired) {
  bytes_ -= it->second.reserved;
  entries_.erase(it);
  if (count_expired && counters_) ++counters_->expired;
}

void HandoffStore::expire_locked(std::chrono::steady_clock::time_point t) {
  const auto limit = std::chrono::milliseconds(options_.timeout_ms);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (t - it->second.touched >= limit) erase_locked(it, /*count_expired=*/true);
    it = next;
  }
}

Status HandoffStore::begin(const std::string& id, const std::string& model,
                           const kv::KvGeometry& geometry, std::vector<Token> prompt) {
  auto refused = [&](Status s) {
    if (counters_) ++counters_->expired;
    return s;
  };
  if (id.empty() || id.size() > options_.max_id_bytes)
    return refused(Status::invalid_argument("the handoff id must have 1 to " +
                                            std::to_string(options_.max_id_bytes) + " bytes"));
  if (prompt.empty()) return refused(Status::invalid_argument("the handed-over prompt is empty"));
  if (prompt.size() > options_.max_prompt_tokens)
    return refused(Status::invalid_argument("the handed-over prompt has more than " +
                                            std::to_string(options_.max_prompt_tokens) +
                                            " tokens"));
  for (Token t : prompt)
    if (t < 0)
      return refused(Status::invalid_argument("the handed-over prompt has a negative token id"));
  auto local = backend_.kv_geometry(model);
  if (!local.is_ok()) return refused(local.status());
  if (std::string why = kv::geometry_mismatch(*local, geometry); !why.empty())
    return refused(Status::invalid_argument("the handed-over K/V does not fit here: " + why));
  // Checked equal to the local geometry, so this cannot overflow.
  const int64_t need = geometry.bytes_for((int64_t)prompt.size());

  const auto t = now();
  std::lock_guard lock(mu_);
  expire_locked(t);
  if (entries_.count(id))
    return refused(Status::invalid_argument("handoff " + id + " is already held here"));
  if (entries_.size() >= options_.max_entries || bytes_ + need > options_.max_bytes)
    return refused(Status::unavailable("handoff buffer full (" + std::to_string(bytes_ >> 20) +
                                       " MiB held, " + std::to_string(need >> 20) +
                                       " MiB more asked, at most " +
                                       std::to_string(options_.max_bytes >> 20) + " MiB)"));
  Entry e;
  e.model = model;
  e.kv.geometry = geometry;
  e.kv.prompt = std::move(prompt);
  e.reserved = need;
  e.touched = t;
  bytes_ += need;
  entries_.emplace(id, std::move(e));
  return Status::ok();
}

Status HandoffStore::append(const std::string& id, kv::KvRows rows) {
  const auto t = now();
  std::lock_guard lock(mu_);
  expire_locked(t);
  auto it = entries_.find(id);
  if (it == entries_.end())
    return Status::not_found("handoff " + id.substr(0, 64) + " is not being received");
  Entry& e = it->second;
  auto fail = [&](std::string why) {
    erase_locked(it, /*count_expired=*/true);
    return Status::invalid_argument(std::move(why));
  };
  if (e.whole) return fail("rows arrived after the transfer was marked whole");
  const int64_t end = (int64_t)rows.first + rows.n;
  if (rows.n < 1 || rows.first != e.next || end > (int64_t)e.kv.prompt.size())
    return fail("a K/V run covers positions [" + std::to_string(rows.first) + ", " +
                std::to_string(end) + ") where [" + std::to_string(e.next) +
                ", ...) up to the prompt's " + std::to_string(e.kv.prompt.size()) +
                " was expected");
  if ((int64_t)rows.bytes.size() != e.kv.geometry.bytes_for(rows.n))
    return fail("a K/V run of " + std::to_string(rows.n) + " positions has " +
                std::to_string(rows.bytes.size()) + " bytes, expected " +
                std::to_string(e.kv.geometry.bytes_for(rows.n)));
  if (counters_) counters_->bytes_received += rows.bytes.size();
  e.next = (int32_t)end;
  e.touched = t;
  e.kv.runs.push_back(std::move(rows));
  return Status::ok();
}

Status HandoffStore::finish(const std::string& id) {
  const auto t = now();
  std::lock_guard lock(mu_);
  expire_locked(t);
  auto it = entries_.find(id);
  if (it == entries_.end())
    return Status::not_found("handoff " + id.substr(0, 64) + " is not being received");
  if (it->second.whole) return Status::ok();
  Status ok = it->second.kv.check();
  if (!ok.is_ok()) {
    erase_locked(it, /*count_expired=*/true);
    return ok;
  }
  it->second.whole = true;
  it->second.touched = t;
  if (counters_) ++counters_->received;
  return Status::ok();
}

void HandoffStore::drop_incomplete(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && !it->second.whole) erase_locked(it, /*count_expired=*/true);
}

Result<std::shared_ptr<const kv::ImportedKv>> HandoffStore::take(const std::string& id) {
  const auto t = now();
  std::lock_guard lock(mu_);
  expire_locked(t);
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.whole)
    return Status::not_found("handoff " + id.substr(0, 64) +
                             " not found: expired, refused or never arrived");
  auto kv = std::make_shared<const kv::ImportedKv>(std::move(it->second.kv));
  erase_locked(it, /*count_expired=*/false);
  return kv;
}

int64_t HandoffStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t HandoffStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace cairn::serving

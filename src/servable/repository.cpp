// servable/repository.cpp — loading servables and their versions, and running calls.
#include "servable/repository.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "servable/llm_router.h"

namespace cairn::servable {

namespace fs = std::filesystem;

namespace {

std::string shown(const std::string& s) {
  return "'" + (s.size() > 64 ? s.substr(0, 64) + "..." : s) + "'";
}

// A version folder's number: digits only, no leading zero, at most 18 digits.
bool version_number(const std::string& name, uint64_t* out) {
  if (name.empty() || name.size() > 18 || name[0] == '0') return false;
  uint64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Repository::Repository(RepositoryOptions options)
    : opt_(std::move(options)) {
  llm_ = std::make_unique<LlmRouter>([this] { return newest_versions(); },
                                     [this] { return ready_.load(); });
}

Result<std::unique_ptr<Repository>> Repository::open(RepositoryOptions options) {
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec))
    return Status::invalid_argument("the servable directory " + shown(options.dir) +
                                    " is not a directory");
  std::unique_ptr<Repository> repo(new Repository(options));
  std::vector<std::string> names = options.names;
  if (names.empty()) {
    for (const auto& entry : fs::directory_iterator(options.dir, ec)) {
      if (!entry.is_directory(ec)) continue;
      if (fs::exists(entry.path() / "servable_config.py", ec))
        names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    if (names.empty())
      return Status::invalid_argument("no servable in " + shown(options.dir) +
                                      " (a servable is a folder with a servable_config.py)");
  }
  for (const auto& name : names) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      return Status::invalid_argument("bad servable name " + shown(name));
    const fs::path dir = fs::path(options.dir) / name;
    if (!fs::exists(dir / "servable_config.py", ec))
      return Status::invalid_argument("servable " + shown(name) + " has no servable_config.py in " +
                                      shown(dir.string()));
    Servable s;
    s.name = name;
    s.dir = dir.string();
    repo->servables_.emplace(name, std::move(s));
  }
  return repo;
}

Repository::~Repository() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stop_watch_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  // Calls still running end now (cancelled); the pool then joins their threads.
  std::vector<std::shared_ptr<CallControl>> calls;
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    for (auto& [id, c] : calls_) calls.push_back(c);
  }
  for (auto& c : calls) c->cancel();
}

std::vector<uint64_t> Repository::version_folders(const std::string& dir) const {
  std::vector<uint64_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    uint64_t v = 0;
    if (entry.is_directory(ec) && version_number(entry.path().filename().string(), &v))
      out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t Repository::folder_signature(const std::string& dir) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {
    mix(fs::file_size(dir, ec));
    mix(static_cast<uint64_t>(fs::last_write_time(dir, ec).time_since_epoch().count()));
    return h;
  }
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it.depth() > 2) {
      it.disable_recursion_pending();
      continue;
    }
    for (char c : it->path().string()) mix(static_cast<unsigned char>(c));
    std::error_code e2;
    if (it->is_regular_file(e2)) mix(it->file_size(e2));
    mix(static_cast<uint64_t>(it->last_write_time(e2).time_since_epoch().count()));
  }
  return h;
}

// Loads the newest versions of one servable that are not loaded yet, and
// drops versions whose folder went or that fall out of the newest
// max_versions. Called under load_mu_.
void Repository::load_servable(const std::string& name) {
  std::string dir;
  std::vector<uint64_t> loaded;
  std::map<uint64_t, uint64_t> failed, seen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto& s = servables_.at(name);
    dir = s.dir;
    for (const auto& [v, _] : s.versions) loaded.push_back(v);
    failed = s.failed;
    seen = s.seen;
  }
  const auto present = version_folders(dir);
  if (present.empty() && loaded.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = servables_.at(name);
    const std::string err = "servable '" + name + "' has no version folder (1/, 2/, ...) in " + dir;
    if (s.load_error != err) spdlog::error("{}", err);
    s.load_error = err;
    return;
  }
  const size_t keep = static_cast<size_t>(std::max(1, opt_.max_versions));
  // The newest `keep` folders are wanted; load those missing, newest first.
  std::vector<uint64_t> wanted(present.end() - static_cast<long>(std::min(keep, present.size())),
                               present.end());
  std::map<uint64_t, uint64_t> now_seen;
  for (auto it = wanted.rbegin(); it != wanted.rend(); ++it) {
    const uint64_t v = *it;
    if (std::count(loaded.begin(), loaded.end(), v)) continue;
    // The config is part of every version: a fixed config retries a failed one.
    const uint64_t sig = folder_signature((fs::path(dir) / std::to_string(v)).string()) * 31 +
                         folder_signature((fs::path(dir) / "servable_config.py").string());
    now_seen[v] = sig;
    if (auto f = failed.find(v); f != failed.end() && f->second == sig) continue;
    // While serving, a new or changed folder waits one scan to settle.
    auto prev = seen.find(v);
    if (ready_ && (prev == seen.end() || prev->second != sig)) continue;
    spdlog::info("servable '{}': loading version {}", name, v);
    auto version = Version::load(name, dir, v, opt_.version);
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = servables_.at(name);
    if (!version.is_ok()) {
      spdlog::error("{}", version.status().message());
      s.failed[v] = sig;
      s.load_error = version.status().message();
      continue;
    }
    s.failed.erase(v);
    s.versions[v] = std::move(version.value());
    s.load_error.clear();
    spdlog::info("servable '{}': version {} is served{}", name, v,
                 s.versions.rbegin()->first == v ? " (newest)" : "");
  }
  // Drop what is no longer wanted; calls running on a dropped version keep it
  // alive until they end.
  std::vector<std::shared_ptr<Version>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = servables_.at(name);
    for (auto it = s.versions.begin(); it != s.versions.end();) {
      const bool present_now = std::count(present.begin(), present.end(), it->first) > 0;
      const bool newest_kept = std::count(wanted.begin(), wanted.end(), it->first) > 0;
      // Without a newer version loaded, an old one stays rather than leave nothing.
      const bool only_one = s.versions.size() == 1;
      if ((!present_now || !newest_kept) && !only_one) {
        spdlog::info("servable '{}': version {} is unloaded", name, it->first);
        dropped.push_back(std::move(it->second));
        it = s.versions.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = s.failed.begin(); it != s.failed.end();)
      it = std::count(present.begin(), present.end(), it->first) ? std::next(it) : s.failed.erase(it);
    s.seen = std::move(now_seen);
  }
  dropped.clear();  // outside the lock: unloading a model joins its engine
}

Status Repository::load() {
  {
    std::lock_guard<std::mutex> lock(load_mu_);
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [name, _] : servables_) names.push_back(name);
    }
    for (const auto& name : names) load_servable(name);
  }
  size_t served = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, s] : servables_) served += s.versions.empty() ? 0 : 1;
  }
  if (served == 0) {
    auto errors = load_errors();
    return Status::invalid_argument(errors.empty() ? "no servable could be loaded"
                                                   : "no servable could be loaded: " + errors.front());
  }
  ready_ = true;
  if (opt_.poll_seconds > 0) watcher_ = std::thread([this] { watch(); });
  return Status::ok();
}

void Repository::rescan() {
  std::lock_guard<std::mutex> lock(load_mu_);
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, _] : servables_) names.push_back(name);
  }
  for (const auto& name : names) load_servable(name);
}

void Repository::watch() {
  std::unique_lock<std::mutex> lock(watch_mu_);
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(opt_.poll_seconds));
  while (!stop_watch_) {
    if (watch_cv_.wait_for(lock, period, [this] { return stop_watch_; })) break;
    lock.unlock();
    if (!draining_) rescan();
    lock.lock();
  }
}

bool Repository::has_servable(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return servables_.count(name) > 0;
}

std::vector<ServableInfo> Repository::servables() const {
  std::vector<ServableInfo> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, s] : servables_) {
    ServableInfo info;
    info.name = name;
    info.load_error = s.load_error;
    for (const auto& [v, version] : s.versions) info.versions.push_back(v);
    if (!s.versions.empty()) {
      const auto& newest = s.versions.rbegin()->second;
      for (const auto& m : newest->config().methods) info.methods.push_back(newest->info(m));
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> Repository::load_errors() const {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, s] : servables_)
    if (!s.load_error.empty()) out.push_back(s.load_error);
  return out;
}

std::vector<std::shared_ptr<Version>> Repository::newest_versions() const {
  std::vector<std::shared_ptr<Version>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, s] : servables_)
    if (!s.versions.empty()) out.push_back(s.versions.rbegin()->second);
  return out;
}

serving::Backend& Repository::llm_backend() { return *llm_; }

void Repository::start_draining() {
  draining_ = true;
  llm_->start_draining();
}

Result<uint64_t> Repository::predict(PredictCall call, std::shared_ptr<PredictSink> sink) {
  if (draining_) return Status::unavailable("the server is shutting down");
  if (!ready_) return Status::unavailable("the servables are still loading");
  std::shared_ptr<Version> version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = servables_.find(call.servable);
    if (it == servables_.end()) return Status::not_found("unknown servable " + shown(call.servable));
    const auto& s = it->second;
    if (s.versions.empty())
      return Status::unavailable("servable " + shown(call.servable) + " is not loaded: " +
                                 s.load_error);
    if (call.version == 0) {
      version = s.versions.rbegin()->second;
    } else {
      auto v = s.versions.find(call.version);
      if (v == s.versions.end()) {
        std::string loaded;
        for (const auto& [n, _] : s.versions) loaded += (loaded.empty() ? "" : ", ") + std::to_string(n);
        return Status::not_found("version " + std::to_string(call.version) + " of servable " +
                                 shown(call.servable) + " is not loaded (loaded: " + loaded + ")");
      }
      version = v->second;
    }
  }
  const MethodSpec* method = version->method(call.method);
  if (!method) {
    std::string names;
    for (const auto& m : version->config().methods) names += (names.empty() ? "" : ", ") + m.name;
    if (call.method.empty())
      return Status::invalid_argument("the method name is required (methods: " + names + ")");
    return Status::not_found("unknown method " + shown(call.method) + " of servable " +
                             shown(call.servable) + " (methods: " + names + ")");
  }
  if (call.instances.empty()) return Status::invalid_argument("the request has no instances");
  if (call.instances.size() > kMaxPredictInstances)
    return Status::invalid_argument("the request has " + std::to_string(call.instances.size()) +
                                    " instances, at most " + std::to_string(kMaxPredictInstances) +
                                    " are allowed");
  auto control = std::make_shared<CallControl>();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    id = next_call_++;
    calls_[id] = control;
  }
  RunOptions ro;
  ro.stage_timeout_s = opt_.version.stage_timeout_s;
  pool_.post([this, id, version, method, call = std::move(call), sink, control, ro]() mutable {
    run_method(version, *method, std::move(call), sink, *control, pool_, ro);
    std::lock_guard<std::mutex> lock(calls_mu_);
    calls_.erase(id);
  });
  return id;
}

void Repository::cancel(uint64_t call_id) {
  std::shared_ptr<CallControl> control;
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return;
    control = it->second;
  }
  control->cancel();
}

}  // namespace cairn::servable

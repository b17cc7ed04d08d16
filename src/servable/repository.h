// servable/repository.h — the servables of a folder, their versions, and calls to them.
// Owns the servable repository (SERVABLES/<name>/servable_config.py and
// numeric version folders): the initial load, a watcher that loads a new
// version folder in the background while the old version keeps serving (and
// drops versions whose folder went or that fall out of the newest
// max_versions), the load errors /health reports, and every method call
// (ServableRuntime). A call holds its version until it ends, so a swap never
// fails a request in flight. Its GGUF models are also reachable as a
// serving::Backend (llm_backend()) for the OpenAI routes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "servable/method_runner.h"
#include "servable/runtime.h"
#include "servable/task_pool.h"
#include "servable/version.h"

namespace cairn::servable {

struct RepositoryOptions {
  std::string dir;
  std::vector<std::string> names;  // empty: every servable in dir
  VersionOptions version;
  int max_versions = 2;       // versions kept loaded per servable, newest first
  double poll_seconds = 2.0;  // how often the watcher looks for version folders; <= 0: never
};

class Repository final : public ServableRuntime {
 public:
  // Checks the folder (and that every named servable has a folder); loads nothing yet.
  static Result<std::unique_ptr<Repository>> open(RepositoryOptions options);
  ~Repository() override;

  // Loads every servable's newest versions (blocking; errors are logged and
  // kept for /health, other servables still serve), then starts the watcher.
  // Fails only when no servable could be loaded at all.
  Status load();

  bool has_servable(const std::string& name) const override;
  std::vector<ServableInfo> servables() const override;
  Result<uint64_t> predict(PredictCall call, std::shared_ptr<PredictSink> sink) override;
  void cancel(uint64_t call_id) override;

  // The servables that failed to load, one line each.
  std::vector<std::string> load_errors() const;
  // A serving::Backend over the newest version's GGUF models (by model name).
  serving::Backend& llm_backend();
  // Stops the watcher and refuses new calls; running calls finish.
  void start_draining();
  // Looks for new or removed version folders once (the watcher's step).
  void rescan();

  // The newest version of each servable, for llm_backend().
  std::vector<std::shared_ptr<Version>> newest_versions() const;

 private:
  struct Servable {
    std::string name;
    std::string dir;
    std::map<uint64_t, std::shared_ptr<Version>> versions;  // loaded
    // Version folders by the contents they had when last looked at (see
    // folder_signature): one that failed is retried only once its contents
    // change; a new one is loaded only once they stay the same for a scan
    // (a model file still being copied is not read half-written).
    std::map<uint64_t, uint64_t> failed;
    std::map<uint64_t, uint64_t> seen;
    std::string load_error;
  };

  explicit Repository(RepositoryOptions options);
  // Version folders present now, ascending.
  std::vector<uint64_t> version_folders(const std::string& dir) const;
  // A hash of a folder's file names, sizes and modification times (or of a
  // file's size and modification time).
  static uint64_t folder_signature(const std::string& dir);
  void load_servable(const std::string& name);
  void watch();

  RepositoryOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, Servable> servables_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::mutex load_mu_;  // one load or rescan at a time

  std::mutex calls_mu_;
  std::map<uint64_t, std::shared_ptr<CallControl>> calls_;
  uint64_t next_call_ = 1;

  std::unique_ptr<serving::Backend> llm_;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stop_watch_ = false;
  std::thread watcher_;

  // Last: destroyed first, so running calls end before what they use goes.
  TaskPool pool_;
};

}  // namespace cairn::servable

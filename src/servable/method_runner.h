// servable/method_runner.h — runs one method call on one version, stage by stage.
// Owns a call's progress: each instance's inputs checked against the method,
// each stage run for every instance still alive (Python stages on the task
// pool, one instance or a batch per call, with a deadline; LLM stages through
// their backend, streaming text when asked), an instance that fails dropped
// from later stages with its error kept, and the outputs gathered by name.
// Runs on a task-pool thread and blocks it; never blocks the caller of
// ServableRuntime::predict.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "servable/runtime.h"
#include "servable/task_pool.h"
#include "servable/version.h"

namespace cairn::servable {

// What cancel() reaches while a call runs.
class CallControl {
 public:
  void cancel();
  bool cancelled() const { return cancelled_.load(); }
  // LLM generations in flight, so that cancel() stops them.
  void track(serving::Backend* backend, serving::RequestId id);
  void untrack(serving::RequestId id);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::vector<std::pair<serving::Backend*, serving::RequestId>> running_;
};

struct RunOptions {
  double stage_timeout_s = 60;
  int max_batch = 64;  // instances per call of a batch_size=0 Python stage
};

// Runs the call and ends it with sink->on_done (always, exactly once).
void run_method(const std::shared_ptr<Version>& version, const MethodSpec& method,
                PredictCall call, const std::shared_ptr<PredictSink>& sink, CallControl& control,
                TaskPool& pool, const RunOptions& options);

}  // namespace cairn::servable

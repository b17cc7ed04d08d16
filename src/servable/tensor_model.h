// servable/tensor_model.h — an ONNX model as a servable's model stage, with its batcher.
// Owns one onnx::Session and the thread that feeds it: instances from any
// number of calls are queued, checked one by one against the model's inputs
// (a bad one fails alone, before any batching), merged along the batch
// dimension up to the model's batch size (a fixed first dimension B is
// padded with zero rows that are dropped again; a dynamic one takes up to
// max_batch_size), run, and split back to their callers in order. Instances
// are merged only when their per-instance shapes and their shared
// (without-batch-dim) inputs agree. Never blocks a caller: results arrive
// through callbacks on the batcher's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "core/value.h"
#include "onnx/session.h"
#include "servable/method_spec.h"

namespace cairn::servable {

// The batching settings of one model: declare_model(options={...}) keys
// "max_batch_size", "max_queue_delay_microseconds" and "batching" (False:
// one instance per run), over these defaults.
struct BatchSettings {
  int max_batch_size = 32;           // for a dynamic batch dimension
  int64_t max_queue_delay_us = 0;    // wait at most this long for a fuller batch
  bool batching = true;
};

// Parses the options a tensor model's declaration may carry; an unknown key
// or a bad value is an error naming it.
Result<BatchSettings> batch_settings(const ModelDecl& decl);

struct TensorModelStats {
  uint64_t runs = 0;       // forwards
  uint64_t instances = 0;  // real instances run (padding not counted)
  uint64_t padded = 0;     // padding rows run
  uint64_t largest_batch = 0;
};

class TensorModel {
 public:
  using Done = std::function<void(Result<std::vector<values::Value>>)>;

  // Loads decl.path; `pool` runs the kernels (shared by the repository's
  // tensor models). The error names the file and what is wrong.
  static Result<std::unique_ptr<TensorModel>> load(const ModelDecl& decl,
                                                   std::shared_ptr<ThreadPool> pool);
  // Over a session made elsewhere (a distributed model's agents); the same
  // checks and batching.
  static Result<std::unique_ptr<TensorModel>> from_session(const ModelDecl& decl,
                                                           std::unique_ptr<onnx::Session> session,
                                                           std::shared_ptr<ThreadPool> pool);
  ~TensorModel();  // fails what is still queued (Unavailable), joins the thread

  // Queues one instance (args in the order of the model's inputs) and calls
  // done with its outputs, or its own error, exactly once. A job whose
  // `abandoned` flag is set by the time its batch forms is dropped unrun
  // (done is not called).
  struct Job {
    std::vector<values::Value> args;
    Done done;
    std::shared_ptr<std::atomic<bool>> abandoned;  // may be null
  };
  void submit(std::vector<Job> jobs);

  size_t input_count() const { return session_->inputs().size(); }
  size_t output_count() const { return session_->outputs().size(); }
  const std::string& file() const { return file_; }
  // The largest batch one forward takes (1 without a batch dimension).
  int64_t batch_limit() const { return batch_limit_; }
  TensorModelStats stats() const;

 private:
  struct Item {
    std::vector<values::Tensor> tensors;  // one per model input, checked
    Done done;
    std::shared_ptr<std::atomic<bool>> abandoned;
    std::string key;  // instances with equal keys may share a forward
    std::chrono::steady_clock::time_point queued;
  };

  TensorModel() = default;
  Result<std::string> check(const std::vector<values::Value>& args,
                            std::vector<values::Tensor>& tensors) const;
  void loop();
  void run_batch(std::vector<Item>& batch);
  Result<std::vector<std::vector<values::Value>>> forward(const std::vector<Item*>& items);

  std::string file_;
  std::unique_ptr<onnx::Session> session_;
  std::shared_ptr<ThreadPool> pool_;
  bool with_batch_dim_ = true;
  std::vector<bool> shared_input_;  // without_batch_dim_inputs
  int64_t fixed_batch_ = 0;         // B when the batch dimension is fixed, else 0
  int64_t batch_limit_ = 1;
  int64_t delay_us_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  TensorModelStats stats_;
  std::thread thread_;
};

}  // namespace cairn::servable

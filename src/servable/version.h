// servable/version.h — one loaded version of a servable.
// Owns what a version folder becomes: its recorded config (Python functions
// included) and its models (a GGUF model is a serving::Backend, a
// LocalBackend with its own engine; an ONNX model a TensorModel with its
// batcher), plus the ModelCaller that Python stages' model.call() reaches. Shared by every call that runs on it, so a version
// replaced by a newer one lives until its last call ends.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/backend.h"
#include "serving/local_backend.h"
#include "servable/method_spec.h"
#include "servable/python_runtime.h"
#include <functional>

#include "servable/runtime.h"
#include "servable/tensor_model.h"

namespace cairn::servable {

struct VersionOptions {
  serving::LocalBackendOptions llm;  // model_path and model_name are set per model
  double stage_timeout_s = 60;
  // The kernel threads of the tensor models; null: one pool shared by every
  // tensor model of the process.
  std::shared_ptr<ThreadPool> tensor_pool;
  // Makes the session of a distributed model (distributed.declare_servable):
  // the agents behind onnx::Session's interface, once they have all joined.
  // Null: such servables are refused.
  std::function<Result<std::unique_ptr<onnx::Session>>(const ModelDecl&)> distributed_session;
  // The same for a distributed LLM (declare_servable with a GGUF
  // model_file): its backend, an engine here over the agents' shards, made
  // from these options (model_path and model_name set). Null: refused.
  std::function<Result<std::unique_ptr<serving::Backend>>(const ModelDecl&, serving::LocalBackendOptions)>
      distributed_llm;
};

// One declared model: exactly one of the two is set.
struct LoadedModel {
  std::unique_ptr<serving::Backend> llm;
  std::unique_ptr<TensorModel> tensor;
};

// The models of a version, as model.call() and the LLM stages reach them.
// Owned by its Version; Python's Model objects hold it only weakly.
class VersionModels final : public ModelCaller {
 public:
  VersionModels(const ServableConfig* config, double timeout_s)
      : config_(config), timeout_s_(timeout_s) {}
  Result<std::vector<Value>> call_model(int model, std::vector<Value> args,
                                        std::map<std::string, Value> kwargs) override;
  void set(std::vector<LoadedModel> models);

 private:
  std::mutex mu_;
  const ServableConfig* config_;  // valid while models_ is set
  double timeout_s_;
  std::vector<LoadedModel> models_;
};

// One instance through a tensor model, waited for up to timeout_s (a
// Python stage's model.call()).
Result<std::vector<Value>> call_tensor_model(TensorModel& model, std::vector<Value> args,
                                             double timeout_s);

class Version {
 public:
  // Loads `dir`/servable_config.py for version folder `dir`/<number>, then its
  // models. The error names the servable, version and file.
  static Result<std::shared_ptr<Version>> load(const std::string& servable_name,
                                               const std::string& servable_dir, uint64_t number,
                                               const VersionOptions& options);

  uint64_t number() const { return number_; }
  const ServableConfig& config() const { return config_; }
  const MethodSpec* method(const std::string& name) const;
  MethodInfo info(const MethodSpec& m) const;
  size_t model_count() const { return models_.size(); }
  // The model behind a Model stage: its LLM backend (GGUF) or its tensor
  // model (ONNX); the other is null.
  serving::Backend* llm(int index) const { return models_[index].llm; }
  TensorModel* tensor_model(int index) const { return models_[index].tensor; }
  // The OpenAI name of LLM `index`: the servable's name for its only GGUF
  // model, else "<servable>/<file stem>".
  const std::string& model_name(int index) const { return names_[index]; }
  void start_draining();

 private:
  Version() = default;
  uint64_t number_ = 0;
  ServableConfig config_;
  std::shared_ptr<VersionModels> caller_;
  struct ModelRef {
    serving::Backend* llm = nullptr;
    TensorModel* tensor = nullptr;
  };
  std::vector<ModelRef> models_;  // owned by caller_
  std::vector<std::string> names_;
};

}  // namespace cairn::servable

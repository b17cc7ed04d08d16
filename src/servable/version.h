// servable/version.h — one loaded version of a servable.
// Owns what a version folder becomes: its recorded config (Python functions
// included) and its models, each a serving::Backend (a GGUF model is a
// LocalBackend with its own engine), plus the ModelCaller that Python stages'
// model.call() reaches. Shared by every call that runs on it, so a version
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
#include "servable/runtime.h"

namespace cairn::servable {

struct VersionOptions {
  serving::LocalBackendOptions llm;  // model_path and model_name are set per model
  double stage_timeout_s = 60;
};

// The models of a version, as model.call() and the LLM stages reach them.
// Owned by its Version; Python's Model objects hold it only weakly.
class VersionModels final : public ModelCaller {
 public:
  VersionModels(const ServableConfig* config, double timeout_s)
      : config_(config), timeout_s_(timeout_s) {}
  Result<std::vector<Value>> call_model(int model, std::vector<Value> args,
                                        std::map<std::string, Value> kwargs) override;
  void set(std::vector<std::unique_ptr<serving::Backend>> backends);

 private:
  std::mutex mu_;
  const ServableConfig* config_;  // valid while backends_ is set
  double timeout_s_;
  std::vector<std::unique_ptr<serving::Backend>> backends_;
};

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
  // The model behind a Model stage; never null while the version lives.
  serving::Backend& model(int index) const { return *backends_[index]; }
  size_t model_count() const { return backends_.size(); }
  // The OpenAI name of model `index`: the servable's name for its only GGUF
  // model, else "<servable>/<file stem>".
  const std::string& model_name(int index) const { return names_[index]; }
  void start_draining();

 private:
  Version() = default;
  uint64_t number_ = 0;
  ServableConfig config_;
  std::shared_ptr<VersionModels> caller_;
  std::vector<serving::Backend*> backends_;  // owned by caller_
  std::vector<std::string> names_;
};

}  // namespace cairn::servable

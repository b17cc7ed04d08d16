// servable/version.cpp — a version folder to a recorded config and running models.
#include "servable/version.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "servable/llm_stage.h"

namespace cairn::servable {

Result<std::vector<Value>> VersionModels::call_model(int model, std::vector<Value> args,
                                                     std::map<std::string, Value> kwargs) {
  serving::Backend* backend = nullptr;
  std::map<std::string, Value> defaults;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (backends_.empty()) return Status::unavailable("the servable's models are not loaded");
    if (model < 0 || model >= static_cast<int>(backends_.size()))
      return Status::invalid_argument("model.call(): no such model");
    backend = backends_[model].get();
    defaults = config_->models[model].options;
    name = config_->models[model].file;
  }
  // The backend outlives this call: it belongs to this object, which the
  // Python side holds (its weak reference locked) for the call's duration.
  CAIRN_ASSIGN_OR_RETURN(auto req, llm_request(name, args, defaults, kwargs));
  return call_llm(*backend, std::move(req), 1, timeout_s_);
}

void VersionModels::set(std::vector<std::unique_ptr<serving::Backend>> backends) {
  std::lock_guard<std::mutex> lock(mu_);
  backends_ = std::move(backends);
}

Result<std::shared_ptr<Version>> Version::load(const std::string& servable_name,
                                               const std::string& servable_dir, uint64_t number,
                                               const VersionOptions& options) {
  namespace fs = std::filesystem;
  const std::string where = "servable '" + servable_name + "' version " + std::to_string(number);
  CAIRN_ASSIGN_OR_RETURN(PythonRuntime * py, PythonRuntime::get());
  std::shared_ptr<Version> v(new Version());
  v->number_ = number;
  const std::string version_dir = (fs::path(servable_dir) / std::to_string(number)).string();
  // The caller is created before the config exists; it reads the config only
  // once models are set, after load_config has returned it.
  v->caller_ = std::make_shared<VersionModels>(&v->config_, options.stage_timeout_s);
  auto config = py->load_config(servable_name, (fs::path(servable_dir) / "servable_config.py").string(),
                                version_dir, v->caller_);
  if (!config.is_ok()) return config.status();
  v->config_ = std::move(config.value());

  int gguf = 0;
  for (const auto& m : v->config_.models)
    if (m.format == "GGUF") ++gguf;
  std::vector<std::unique_ptr<serving::Backend>> backends;
  for (const auto& m : v->config_.models) {
    if (m.format != "GGUF")
      return Status::invalid_argument(where + ": model '" + m.file + "' has format '" + m.format +
                                      "', which cairn cannot run (formats: GGUF)");
    for (const auto& method : v->config_.methods)
      for (const auto& st : method.stages)
        if (st.kind == StageSpec::Kind::Model && st.outputs_count > kMaxLlmOutputs)
          return Status::invalid_argument(
              where + " method '" + method.name + "': stage '" + st.name + "' asks for " +
              std::to_string(st.outputs_count) +
              " outputs; an LLM stage gives at most 3 (text, token ids, finish reason)");
    const std::string stem = fs::path(m.file).stem().string();
    std::string name = gguf == 1 ? servable_name : servable_name + "/" + stem;
    serving::LocalBackendOptions o = options.llm;
    o.model_path = m.path;
    o.model_name = name;
    auto local = serving::LocalBackend::create(o);
    if (!local.is_ok()) return Status::invalid_argument(where + ": " + local.status().message());
    spdlog::info("{}: model '{}' loaded (context {} tokens)", where, m.file, (*local)->n_ctx());
    v->names_.push_back(std::move(name));
    backends.push_back(std::move(local.value()));
  }
  for (auto& b : backends) v->backends_.push_back(b.get());
  v->caller_->set(std::move(backends));
  return v;
}

const MethodSpec* Version::method(const std::string& name) const {
  for (const auto& m : config_.methods)
    if (m.name == name) return &m;
  return nullptr;
}

MethodInfo Version::info(const MethodSpec& m) const {
  MethodInfo info;
  info.name = m.name;
  info.inputs = m.inputs;
  info.outputs = m.output_names;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    const auto& ref = m.outputs[o];
    if (ref.source == ValueRef::Source::Stage && ref.output == 0 &&
        m.stages[ref.index].kind == StageSpec::Kind::Model)
      info.streamed_outputs.push_back(m.output_names[o]);
  }
  return info;
}

void Version::start_draining() {
  for (auto* b : backends_) b->start_draining();
}

}  // namespace cairn::servable

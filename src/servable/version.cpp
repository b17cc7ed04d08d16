// servable/version.cpp — a version folder to a recorded config and running models.
#include "servable/version.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <optional>

#include "servable/llm_stage.h"

namespace cairn::servable {

Result<std::vector<Value>> VersionModels::call_model(int model, std::vector<Value> args,
                                                     std::map<std::string, Value> kwargs) {
  serving::Backend* backend = nullptr;
  TensorModel* tensor = nullptr;
  std::map<std::string, Value> defaults;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (models_.empty()) return Status::unavailable("the servable's models are not loaded");
    if (model < 0 || model >= static_cast<int>(models_.size()))
      return Status::invalid_argument("model.call(): no such model");
    backend = models_[model].llm.get();
    tensor = models_[model].tensor.get();
    defaults = config_->models[model].options;
    name = config_->models[model].file;
  }
  // The model outlives this call: it belongs to this object, which the
  // Python side holds (its weak reference locked) for the call's duration.
  if (tensor) {
    if (!kwargs.empty())
      return Status::invalid_argument("model.call(): model '" + name +
                                      "' is a tensor model and takes no keyword arguments");
    return call_tensor_model(*tensor, std::move(args), timeout_s_);
  }
  if (is_embed_task(kwargs)) {
    CAIRN_ASSIGN_OR_RETURN(auto req, llm_embed_request(name, args, kwargs));
    return call_llm_embed(*backend, std::move(req), timeout_s_);
  }
  CAIRN_ASSIGN_OR_RETURN(auto req, llm_request(name, args, defaults, kwargs));
  return call_llm(*backend, std::move(req), 1, timeout_s_);
}

void VersionModels::set(std::vector<LoadedModel> models) {
  std::lock_guard<std::mutex> lock(mu_);
  models_ = std::move(models);
}

Result<std::vector<Value>> call_tensor_model(TensorModel& model, std::vector<Value> args,
                                             double timeout_s) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<std::vector<Value>>> result;
  };
  auto w = std::make_shared<Wait>();
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  TensorModel::Job job;
  job.args = std::move(args);
  job.abandoned = abandoned;
  job.done = [w](Result<std::vector<Value>> r) {
    std::lock_guard<std::mutex> lock(w->mu);
    w->result = std::move(r);
    w->cv.notify_all();
  };
  std::vector<TensorModel::Job> jobs;
  jobs.push_back(std::move(job));
  model.submit(std::move(jobs));
  std::unique_lock<std::mutex> lock(w->mu);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(timeout_s));
  if (!w->cv.wait_until(lock, until, [&] { return w->result.has_value(); })) {
    *abandoned = true;
    return Status::error(StatusCode::DeadlineExceeded,
                         "model '" + model.file() + "' did not answer within the " +
                             std::to_string(static_cast<int64_t>(timeout_s)) + " s stage timeout");
  }
  return std::move(*w->result);
}

namespace {

// The kernel pool of every tensor model in the process, made when the first
// one loads and gone with the last: forwards of different models take turns
// on all cores rather than each model owning threads that fight for them.
std::shared_ptr<ThreadPool> shared_tensor_pool() {
  static std::mutex mu;
  static std::weak_ptr<ThreadPool> pool;
  std::lock_guard<std::mutex> lock(mu);
  auto p = pool.lock();
  if (!p) {
    p = std::make_shared<ThreadPool>(0);
    pool = p;
  }
  return p;
}

}  // namespace

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

  // A distributed model with a model_file is a GGUF LLM cut over agents.
  const auto is_llm = [](const ModelDecl& m) {
    return m.format == "GGUF" || (m.format == "DISTRIBUTED" && !m.file.empty() && !m.path.empty());
  };
  int gguf = 0;
  for (const auto& m : v->config_.models)
    if (is_llm(m)) ++gguf;
  std::shared_ptr<ThreadPool> tensor_pool = options.tensor_pool;
  std::vector<LoadedModel> models;
  for (size_t index = 0; index < v->config_.models.size(); ++index) {
    const auto& m = v->config_.models[index];
    LoadedModel loaded;
    std::string name;
    if ((m.format == "ONNX" || m.format == "DISTRIBUTED") && !is_llm(m)) {
      for (const auto& method : v->config_.methods)
        for (const auto& st : method.stages)
          if (st.kind == StageSpec::Kind::Model && st.model == static_cast<int>(index) &&
              !st.kwargs.empty())
            return Status::invalid_argument(where + " method '" + method.name + "': stage '" +
                                            st.name + "' passes keyword arguments to tensor model '" +
                                            m.file + "', which takes only its inputs");
      if (!tensor_pool) tensor_pool = shared_tensor_pool();
      Result<std::unique_ptr<TensorModel>> tm = Status::internal("unset");
      if (m.format == "ONNX") {
        tm = TensorModel::load(m, tensor_pool);
      } else if (!options.distributed_session) {
        return Status::invalid_argument(where + ": a distributed model (declare_servable) is served only by "
                                        "`cairn serve --servable-dir`");
      } else {
        auto session = options.distributed_session(m);
        if (!session.is_ok()) return Status::invalid_argument(where + ": " + session.status().message());
        tm = TensorModel::from_session(m, std::move(session.value()), tensor_pool);
      }
      if (!tm.is_ok()) return Status::invalid_argument(where + ": " + tm.status().message());
      for (const auto& method : v->config_.methods)
        for (const auto& st : method.stages)
          if (st.kind == StageSpec::Kind::Model && st.model == static_cast<int>(index) &&
              static_cast<size_t>(st.outputs_count) != (*tm)->output_count())
            return Status::invalid_argument(
                where + " method '" + method.name + "': stage '" + st.name + "' asks for " +
                std::to_string(st.outputs_count) + " outputs; model '" + m.file + "' has " +
                std::to_string((*tm)->output_count()));
      spdlog::info("{}: model '{}' loaded ({} inputs, {} outputs, up to {} instances per forward)",
                   where, m.file, (*tm)->input_count(), (*tm)->output_count(),
                   (*tm)->batch_limit());
      loaded.tensor = std::move(tm.value());
    } else if (is_llm(m)) {
      for (const auto& method : v->config_.methods)
        for (const auto& st : method.stages)
          if (st.kind == StageSpec::Kind::Model && st.model == static_cast<int>(index) &&
              st.outputs_count > kMaxLlmOutputs)
            return Status::invalid_argument(
                where + " method '" + method.name + "': stage '" + st.name + "' asks for " +
                std::to_string(st.outputs_count) +
                " outputs; an LLM stage gives at most 3 (text, token ids, finish reason)");
      const std::string stem = fs::path(m.file).stem().string();
      name = gguf == 1 ? servable_name : servable_name + "/" + stem;
      serving::LocalBackendOptions o = options.llm;
      o.model_path = m.path;
      o.model_name = name;
      if (m.format == "DISTRIBUTED") {
        if (!options.distributed_llm)
          return Status::invalid_argument(where + ": a distributed model (declare_servable) is served only by "
                                          "`cairn serve --servable-dir`");
        auto backend = options.distributed_llm(m, o);
        if (!backend.is_ok()) return Status::invalid_argument(where + ": " + backend.status().message());
        spdlog::info("{}: model '{}' served by {} agents in {} stages", where, m.file, m.rank_size, m.stage_size);
        loaded.llm = std::move(backend.value());
      } else {
        auto local = serving::LocalBackend::create(o);
        if (!local.is_ok()) return Status::invalid_argument(where + ": " + local.status().message());
        spdlog::info("{}: model '{}' loaded (context {} tokens)", where, m.file, (*local)->n_ctx());
        loaded.llm = std::move(local.value());
      }
    } else {
      return Status::invalid_argument(where + ": model '" + m.file + "' has format '" + m.format +
                                      "', which cairn cannot run (formats: GGUF, ONNX; distributed.declare_servable for a model over agents)");
    }
    v->names_.push_back(std::move(name));
    models.push_back(std::move(loaded));
  }
  for (auto& m : models) v->models_.push_back({m.llm.get(), m.tensor.get()});
  v->caller_->set(std::move(models));
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
        m.stages[ref.index].kind == StageSpec::Kind::Model && models_[m.stages[ref.index].model].llm)
      info.streamed_outputs.push_back(m.output_names[o]);
  }
  return info;
}

void Version::start_draining() {
  for (auto& m : models_)
    if (m.llm) m.llm->start_draining();
}

}  // namespace cairn::servable

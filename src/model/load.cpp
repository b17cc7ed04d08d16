// model/load.cpp — load_model: a GGUF file's network and tokenizer, checked against each other.
#include "model/load.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/type_ops.h"

namespace cairn::model {

bool tensor_computable(const gguf::TensorInfo& t) {
  if (t.dims.size() >= 2) return kernels::matmul_supported(t.type);
  const TypeOps* ops = type_ops(t.type);
  return ops != nullptr && ops->to_float != nullptr;
}

Status check_computable(const gguf::File& file) {
  std::map<std::string, std::vector<std::string>> missing;  // type name -> tensor names
  size_t n_missing = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (tensor_computable(t)) continue;
    missing[std::string(type_info(t.type).name)].push_back(t.name);
    ++n_missing;
  }
  if (missing.empty()) return Status::ok();
  std::string msg = std::to_string(n_missing) + " tensor" + (n_missing == 1 ? "" : "s") +
                    " in types cairn cannot compute:";
  for (const auto& [type, names] : missing) {
    msg += " " + type + " (" + std::to_string(names.size()) + ": ";
    for (size_t i = 0; i < names.size() && i < 3; ++i) msg += (i ? ", " : "") + names[i];
    msg += names.size() > 3 ? ", ...)" : ")";
  }
  msg += "; cairn computes";
  bool first = true;
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeInfo* info = type_info(id);
    if (!info || !kernels::matmul_supported(info->type)) continue;
    msg += (first ? " " : ", ") + std::string(info->name);
    first = false;
  }
  return Status::error(msg);
}

namespace {

// A progress bar on stderr while a load takes more than a second and stderr
// is a terminal: the share of the file's tensor bytes the loader has
// prefetched (it prefetches each matrix before building it).
class LoadProgress {
 public:
  LoadProgress(const gguf::File& file, std::string name) : file_(file), name_(std::move(name)) {
    if (!::isatty(STDERR_FILENO)) return;
    for (const gguf::TensorInfo& t : file.tensors()) total_ += t.n_bytes;
    if (total_ == 0) return;
    thread_ = std::thread([this] { run(); });
  }
  ~LoadProgress() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(1), [this] { return done_; })) return;
    bool drawn = false;
    for (;;) {
      const bool finished = cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return done_; });
      const double share = finished ? 1.0 : std::min(1.0, (double)file_.prefetched_bytes() / (double)total_);
      const int filled = (int)(share * 30);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "\rloading %s [%.*s%*s] %3d%% %.1f s", name_.c_str(), filled,
                   "##############################", 30 - filled, "", (int)(share * 100), secs);
      drawn = true;
      if (finished) break;
    }
    if (drawn) std::fprintf(stderr, "\n");
  }

  const gguf::File& file_;
  std::string name_;
  uint64_t total_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options,
                               const RemoteModelFn& remote, const AdapterOptions& adapters) {
  auto file = gguf::File::open(path);
  if (!file.is_ok()) return file.status();  // already names the file
  if (auto t = (*file)->get_string("general.type"); t && t->has_value() && **t == "adapter")
    return Status::error(path + " is a LoRA adapter, not a model: give it with --lora or "
                                "--lora-modules beside the model it adapts");
  if (remote && (!adapters.merged.empty() || !adapters.runtime.empty()))
    return Status::error(path + ": LoRA adapters cannot be applied to a model computed by agents");
  if (!adapters.merged.empty()) {
    std::vector<std::shared_ptr<const LoraAdapter>> merged;
    for (const LoraSpec& s : adapters.merged) {
      CAIRN_ASSIGN_OR_RETURN(auto a, open_lora(s.path, s.path, s.scale, **file));
      merged.push_back(std::move(a));
    }
    const int threads = options.n_threads > 0 ? options.n_threads
                                              : (int)std::max(1u, std::thread::hardware_concurrency());
    CAIRN_RETURN_IF_ERROR(merge_loras(**file, merged, threads).with_context(path));
  }
  LoadedModel m;
  m.file = std::shared_ptr<const gguf::File>(std::move(*file));
  // Before anything is built: every tensor cairn cannot compute, in one message.
  if (!remote) CAIRN_RETURN_IF_ERROR(check_computable(*m.file).with_context(path));
  auto tok = Tokenizer::from_gguf(*m.file);
  if (!tok.is_ok()) return tok.status().with_context(path);
  Result<std::unique_ptr<Model>> net = Status::internal("unset");
  if (remote) {
    auto hp = Model::read_hparams(*m.file);
    if (!hp.is_ok()) return hp.status().with_context(path);
    net = remote(*hp);
  } else {
    const size_t slash = path.find_last_of('/');
    LoadProgress progress(*m.file, slash == std::string::npos ? path : path.substr(slash + 1));
    net = Model::load(m.file, options);
  }
  if (!net.is_ok()) return net.status().with_context(path);
  m.tokenizer = std::move(*tok);
  m.model = std::move(*net);
  for (size_t i = 0; i < adapters.runtime.size(); ++i) {
    const LoraSpec& s = adapters.runtime[i];
    if (s.name.empty()) return Status::invalid_argument("a run-time LoRA adapter needs a name");
    for (size_t j = 0; j < i; ++j)
      if (adapters.runtime[j].name == s.name)
        return Status::invalid_argument("two LoRA adapters are named '" + s.name + "'");
    CAIRN_ASSIGN_OR_RETURN(auto a, open_lora(s.path, s.name, s.scale, *m.file));
    m.adapters.push_back(std::move(a));
  }
  CAIRN_RETURN_IF_ERROR(m.model->set_adapters(m.adapters).with_context(path));
  if (m.tokenizer->vocab_size() > m.model->hparams().n_vocab)
    return Status::error(path + ": the tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                         " tokens but the model only " +
                         std::to_string(m.model->hparams().n_vocab) + " output rows");
  return m;
}

}  // namespace cairn::model

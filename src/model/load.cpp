// model/load.cpp — load_model: a GGUF file's network and tokenizer, checked against each other.
#include "model/load.h"

#include <map>
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

Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options,
                               const RemoteModelFn& remote) {
  auto file = gguf::File::open(path);
  if (!file.is_ok()) return file.status();  // already names the file
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
    net = Model::load(m.file, options);
  }
  if (!net.is_ok()) return net.status().with_context(path);
  m.tokenizer = std::move(*tok);
  m.model = std::move(*net);
  if (m.tokenizer->vocab_size() > m.model->hparams().n_vocab)
    return Status::error(path + ": the tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                         " tokens but the model only " +
                         std::to_string(m.model->hparams().n_vocab) + " output rows");
  return m;
}

}  // namespace cairn::model

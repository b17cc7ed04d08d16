// model/load.cpp — load_model: a GGUF file's network and tokenizer, checked against each other.
#include "model/load.h"

#include <utility>

namespace cairn::model {

Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options,
                               const RemoteModelFn& remote) {
  auto file = gguf::File::open(path);
  if (!file.is_ok()) return file.status();  // already names the file
  LoadedModel m;
  m.file = std::shared_ptr<const gguf::File>(std::move(*file));
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

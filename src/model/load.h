// model/load.h — a model file opened for use: the mapping, the network and its tokenizer.
// Owns opening a GGUF file, building its Model and Tokenizer, and checking that
// the two agree on the vocabulary. Never generates (engine/ does that).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace cairn::model {

struct LoadedModel {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Opens, validates and loads `path`. The error is one line naming the file.
Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace cairn::model

// model/load.h — a model file opened for use: the mapping, the network and its tokenizer.
// Owns opening a GGUF file, building its Model and Tokenizer, and checking that
// the two agree on the vocabulary. Never generates (engine/ does that).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/lora.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace cairn::model {

struct LoadedModel {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  // The run-time LoRA adapters the model applies (AdapterOptions::runtime),
  // in id order: Batch::adapters id i + 1 is adapters[i].
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
};

// LoRA adapters (model/lora.h) to load with a model: merged into its weights
// at load (--lora), or applied at run time per request (--lora-modules).
struct AdapterOptions {
  std::vector<LoraSpec> merged;
  std::vector<LoraSpec> runtime;  // each with a name, unique, not the model's
};

// Makes the network of a model computed elsewhere (a distributed model's
// agents) from the file's hyper-parameters, instead of loading its weights.
using RemoteModelFn = std::function<Result<std::unique_ptr<Model>>(const HParams&)>;

// Whether cairn computes with a tensor of this file: a matrix (2-D or more)
// of a type the kernels multiply, or a vector it can read as floats.
bool tensor_computable(const gguf::TensorInfo& t);

// Every tensor of `file` cairn cannot compute, at once: an error listing them
// by type (a few names each) and the types cairn computes; ok when none.
Status check_computable(const gguf::File& file);

// Opens, validates and loads `path` (its network from `remote` when given).
// The error is one line naming the file.
// Adapters need a model computed here (not `remote`).
Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options = {},
                               const RemoteModelFn& remote = {},
                               const AdapterOptions& adapters = {});

}  // namespace cairn::model

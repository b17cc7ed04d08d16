// servable/method_spec.h — a servable as its servable_config.py declares it.
// Owns the recorded pipeline: the declared models, and per method its inputs,
// its stages (a Python function or a declared model, each reading method
// inputs, earlier stages' outputs or constants) and where each output comes
// from. Produced by PythonRuntime::load_config, checked by validate(), run by
// the method runner. Holds Python functions only as opaque handles.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/value.h"

namespace cairn::servable {

using values::Instance;
using values::Value;

// Where a stage argument or a method output comes from.
struct ValueRef {
  enum class Source { Input, Stage, Constant };
  Source source = Source::Input;
  int index = 0;   // Input: the method input; Stage: the stage
  int output = 0;  // Stage: which of its outputs
  Value constant;  // Constant
};

// A Python callable kept alive for as long as a servable version is loaded
// (python_runtime.h makes them; dropping the last handle takes the GIL).
class PythonFunction {
 public:
  virtual ~PythonFunction() = default;
  virtual const std::string& name() const = 0;
};

struct ModelDecl {
  std::string file;    // as written in the config
  std::string path;    // resolved against the version folder
  std::string format;  // upper-cased: "GGUF", "ONNX", or "DISTRIBUTED" (distributed.declare_servable)
  bool with_batch_dim = true;
  std::vector<int> without_batch_dim_inputs;
  // Generation defaults of an LLM stage (max_tokens, temperature, top_p,
  // top_k, min_p, seed, stop, ignore_eos, ...), from declare_model(options=).
  std::map<std::string, Value> options;
  // DISTRIBUTED: the agents the model is cut over (file and path are empty).
  int rank_size = 0;
  int stage_size = 0;
};

struct StageSpec {
  enum class Kind { Python, Model };
  // MindSpore's batch_size: None (one instance per call), 0 (the server picks
  // how many), k >= 1 (up to k instances per call).
  static constexpr int kOneInstance = -1;

  Kind kind = Kind::Python;
  std::string name;  // the function's or the model file's name, for errors
  std::shared_ptr<PythonFunction> function;  // Python
  int model = -1;                            // Model: index in ServableConfig::models
  std::vector<ValueRef> args;
  // Model stages: generation options for this stage, by name (method inputs
  // or constants), over the model's defaults.
  std::map<std::string, ValueRef> kwargs;
  int outputs_count = 1;
  int batch_size = kOneInstance;
  std::string tag;
};

struct MethodSpec {
  std::string name;
  std::vector<std::string> inputs;        // the function's parameters, in order
  std::vector<std::string> output_names;  // register_method(output_names=...)
  std::vector<StageSpec> stages;          // in order; each reads only inputs and earlier stages
  std::vector<ValueRef> outputs;          // one per output name
};

struct ServableConfig {
  std::string name;
  std::string version_dir;
  std::vector<ModelDecl> models;
  std::vector<MethodSpec> methods;
};

// Checks what the recording cannot: every reference points at an input, an
// earlier stage (so no cycles) and an output it has; outputs_count >= 1;
// output names unique and as many as outputs; model indices declared;
// method names unique. The error names the servable, method and stage.
Status validate(const ServableConfig& config);

// Gives each GGUF model a method of its own that embeds a text: `embed`
// (`embed_<file stem>` when the servable declares several GGUF models),
// input "text" (a str or token ids), output "embedding" (float32, unit
// length), unless the config already has a method of that name.
void add_embed_methods(ServableConfig& config);

}  // namespace cairn::servable

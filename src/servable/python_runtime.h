// servable/python_runtime.h — the embedded CPython that runs servable configs
// and Python stages.
// Owns the one interpreter of the process (started on first use, the GIL
// released between calls), the `register` API's recording (python/cairn/
// server/register.py, also importable as mindspore_serving.server.register),
// and the conversion between core/value.h values and Python objects (numpy
// arrays for tensors, str, bytes, bool, int, float). The GIL is held only
// while Python code or a conversion runs; a Python exception becomes a Status
// carrying its type and message. Never runs a model itself: `model.call()`
// from Python goes back to C++ through a ModelCaller, with the GIL released.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/value.h"
#include "servable/method_spec.h"

namespace cairn::servable {

// Runs a declared model for Python code (`model.call(*args, **kwargs)`);
// implemented by the servable version that owns the models.
class ModelCaller {
 public:
  virtual ~ModelCaller() = default;
  virtual Result<std::vector<Value>> call_model(int model, std::vector<Value> args,
                                                std::map<std::string, Value> kwargs) = 0;
};

class PythonRuntime {
 public:
  // The process's interpreter, started on the first call: sys.path gains the
  // repository's python/ folder (CAIRN_PYTHON_DIR at build time, or the
  // CAIRN_PYTHON_DIR environment variable). Thread-safe. Fails with a clear
  // error when Python or numpy cannot start.
  static Result<PythonRuntime*> get();

  // Runs `config_path` (a servable_config.py) as a fresh module while the
  // register API records into a new ServableConfig: declared models (paths
  // resolved against `version_dir`) and methods (each method body is run once
  // with placeholders to record its stages). The result is validated. Any
  // Python error, or a malformed pipeline, fails with a message naming the
  // servable (and method and stage when known). `caller` serves model.call();
  // it is held weakly (the version that owns the models keeps it alive), so a
  // model.call() after the version went fails cleanly.
  Result<ServableConfig> load_config(const std::string& servable_name,
                                     const std::string& config_path,
                                     const std::string& version_dir,
                                     std::shared_ptr<ModelCaller> caller);

  // Calls a Python stage for one instance: positional args, and the result
  // split into exactly `outputs_count` values (a tuple of that length, or one
  // value when outputs_count is 1). Errors: the Python exception's type and
  // message; a result of the wrong arity or of a type with no Value.
  Result<std::vector<Value>> call(const PythonFunction& fn, const std::vector<Value>& args,
                                  int outputs_count);

  // Calls a batched Python stage (batch_size 0 or k): the function gets one
  // argument, a list of instances, each a tuple of its args, and returns or
  // yields one result per instance (a tuple of outputs_count, or one value).
  // The whole call fails if the function raises or returns the wrong count.
  Result<std::vector<std::vector<Value>>> call_batched(
      const PythonFunction& fn, const std::vector<std::vector<Value>>& instances,
      int outputs_count);

  // The calling thread's Python thread id (for interrupt()).
  static unsigned long current_thread_id();
  // Raises TimeoutError in that thread the next time it runs Python bytecode
  // (a stage that ran past its deadline). A thread that is not running
  // Python is unaffected.
  void interrupt(unsigned long thread_id);

 private:
  PythonRuntime() = default;
};

}  // namespace cairn::servable

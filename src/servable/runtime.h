// servable/runtime.h — the seam the REST and gRPC front-ends call servables through.
// Owns the vocabulary of a method call (servable, version, method, instances
// in; per-instance outputs or errors out, streamed text on the way) and
// nothing else: the repository (servable/repository.h) implements it, and
// tests fake it. Failures of a whole call are Status values (NotFound for an
// unknown servable, version or method; InvalidArgument for a malformed call;
// Unavailable while loading or draining); an instance's own failure travels
// with that instance.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/value.h"

namespace cairn::servable {

inline constexpr size_t kMaxPredictInstances = 1024;

struct MethodInfo {
  std::string name;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  // Outputs that come straight from an LLM stage: their text streams.
  std::vector<std::string> streamed_outputs;
};

struct ServableInfo {
  std::string name;
  std::vector<uint64_t> versions;  // loaded, ascending; the last is served by default
  std::vector<MethodInfo> methods;  // of the newest version
  std::string load_error;           // the last failed load, or empty
};

struct PredictCall {
  std::string servable;
  uint64_t version = 0;  // 0: the newest
  std::string method;
  std::vector<values::Instance> instances;
  bool stream = false;  // deliver LLM text through on_text as it is generated
};

using InstanceResult = Result<values::Instance>;

// Receives one call's events from the runtime's threads; never blocks.
class PredictSink {
 public:
  virtual ~PredictSink() = default;
  // New text of instance `instance`'s output `output` (streamed calls only).
  virtual void on_text(size_t instance, const std::string& output, const std::string& text) {
    (void)instance, (void)output, (void)text;
  }
  // The last event: one result per instance, in order, and the version run.
  virtual void on_done(uint64_t version, std::vector<InstanceResult> results) = 0;
};

class ServableRuntime {
 public:
  virtual ~ServableRuntime() = default;
  virtual bool has_servable(const std::string& name) const = 0;
  virtual std::vector<ServableInfo> servables() const = 0;
  // Resolves servable, version and method and checks the instance count
  // synchronously; then runs the call and ends it with sink->on_done.
  // Returns the call's id for cancel().
  virtual Result<uint64_t> predict(PredictCall call, std::shared_ptr<PredictSink> sink) = 0;
  // The client went away: running stages are cancelled and on_done still
  // arrives (the unfinished instances fail as cancelled). Idempotent.
  virtual void cancel(uint64_t call_id) = 0;
};

}  // namespace cairn::servable

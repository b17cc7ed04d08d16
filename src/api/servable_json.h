// api/servable_json.h — MindSpore Serving's REST shape: JSON <-> servable values.
// Owns the rules by which a request body {"instances": [...]} becomes
// values::Instance objects (nested lists, {"b64": ...} objects, strings and
// scalars), the reply body {"instances": [...]} / {"error_msg": ...} built from
// a call's results, the streamed text events, the /model/<servable>[/version/
// <n>]:<method> path, and base64. Every size and depth in a request is checked
// before anything is allocated for it. Pure functions: never touches sockets or
// the runtime.
//
// Where MindSpore Serving's rules are followed and where cairn differs:
//   - JSON int / float / bool scalars become int64 / double / bool values (not
//     MindSpore's 0-d int32 / float32 / bool tensors), as the gRPC front-end
//     and Python stages see them.
//   - A list of numbers is a tensor: all ints -> int32 (int64 when a value is
//     outside int32's range), any float -> float32 (MindSpore refuses ints
//     mixed with floats), bools -> bool; [] -> an empty float32 tensor.
//   - {"b64": s} is bytes; with "type" (numpy's names, MindSpore's "fp16",
//     "fp32", "fp64", "str", "bytes", and "bfloat16") and optional "shape"
//     (absent: a 0-d tensor, as MindSpore) it is a tensor whose data size must
//     equal dtype size x element count.
//   - A list of one string (or one {"b64"} object) is that value, as MindSpore
//     allows; longer lists of strings are refused.
//   - Replies: tensors as nested lists (0-d as a scalar; float16 and bfloat16 as
//     numbers; uint8 as numbers, as MindSpore), str as a string, bytes as
//     {"b64": ...}; a non-finite float becomes null (JSON has no NaN).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/value.h"
#include "servable/runtime.h"

namespace cairn::api {

struct ServableJsonLimits {
  size_t max_instances = servable::kMaxPredictInstances;
  size_t max_depth = values::kMaxTensorRank;  // nesting of a list value
  uint64_t max_elements = uint64_t(1) << 26;  // numbers in one list value
};

// The parts of "/model/<servable>[/version/<n>]:<method>" (the query string
// already removed). version 0: the newest.
struct ModelPath {
  std::string servable;
  uint64_t version = 0;
  std::string method;
};
// InvalidArgument for a malformed path, naming what is wrong.
Result<ModelPath> parse_model_path(std::string_view path);

// A parsed request body: the instances and whether to stream.
struct PredictBody {
  std::vector<values::Instance> instances;
  bool stream = false;
};
// InvalidArgument naming the instance and input at fault.
Result<PredictBody> parse_predict_body(std::string_view body,
                                       const ServableJsonLimits& limits = {});
Result<PredictBody> parse_predict_json(const nlohmann::json& body,
                                       const ServableJsonLimits& limits = {});

// One input's JSON value; `name` is used in error messages.
Result<values::Value> value_from_json(const nlohmann::json& j, const std::string& name,
                                      const ServableJsonLimits& limits = {});
nlohmann::json value_to_json(const values::Value& v);
nlohmann::json tensor_to_json(const values::Tensor& t);

// {"instances": [{name: value, ...} | {"error_msg": "..."}, ...]}
nlohmann::json predict_reply_json(const std::vector<servable::InstanceResult>& results);
// {"error_msg": "..."}: a whole request's failure.
nlohmann::json servable_error_json(const Status& status);
// One streamed text piece: {"instance": i, "output": name, "text": delta}.
nlohmann::json stream_text_json(size_t instance, const std::string& output,
                                const std::string& text);

// Standard base64 (RFC 4648, "+/"), padded on output; on input the padding
// may be omitted. InvalidArgument for anything else.
std::string base64_encode(std::string_view data);
Result<std::string> base64_decode(std::string_view text);

}  // namespace cairn::api

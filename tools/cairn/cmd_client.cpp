// `cairn client`: one call to a cairn.v1.Serving endpoint (`cairn serve
// --grpc-port`, `cairn controller`) with cairn::Client. Prints the output
// text (as it arrives with --stream), or with --list the servables.
//
// A model's methods (generate, chat): inputs are typed by name
// (prompt/messages/stop are strings, max_tokens/top_k/seed integers,
// ignore_eos a bool, the sampling floats numbers), so `--input prompt=42`
// stays a string; an unknown name is guessed and left to the server to refuse.
//
// Any other input takes a typed VALUE: `@file.npy` (a tensor), `@file` (its
// bytes), `int:5`, `float:0.5`, `bool:true`, `str:text`; anything else is a
// str (for a model's method: guessed as before). A servable's outputs are
// printed one per line (`y: float32 [2, 2] [[1, 2], [3, 4]]`, `s: str "..."`,
// `b: bytes (12 bytes)`), a failed instance as `instance 0: error: ...`;
// --output-dir writes each tensor output as DIR/<name>.npy (DIR/<i>_<name>.npy
// with several instances).
#include <spdlog/spdlog.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "api/openai_response.h"
#include "client/client.h"
#include "commands.h"
#include "core/half.h"
#include "core/npy.h"
#include "servable/runtime.h"

namespace cairn::cli {
namespace {

struct ClientFlags {
  std::string address;
  std::string servable;
  std::string method = "generate";
  std::vector<std::string> inputs;
  uint64_t version = 0;
  int instances = 1;
  std::string output_dir;
  bool stream = false;
  bool list = false;
  double timeout_s = 600;
};

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}
bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  out = v;
  return true;
}
bool parse_bool(const std::string& s, bool& out) {
  if (s != "true" && s != "1" && s != "false" && s != "0") return false;
  out = s == "true" || s == "1";
  return true;
}

bool one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// A file's bytes, refused beyond the largest tensor a request may carry.
Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::error("cannot open " + path);
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::error("cannot read " + path);
  if (static_cast<uint64_t>(size) > values::kMaxTensorBytes)
    return Status::error(path + " is larger than " + std::to_string(values::kMaxTensorBytes >> 20) +
                         " MiB");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return Status::error("cannot read " + path);
  return bytes;
}

// A typed VALUE (`@file.npy`, `@file`, `int:`, `float:`, `bool:`, `str:`),
// or nullopt when it has no type prefix.
Result<std::optional<InferValue>> typed_value(const std::string& name, const std::string& value) {
  const std::string flag = "--input " + name;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  if (starts_with(value, "@")) {
    const std::string path = value.substr(1);
    if (path.empty()) return Status::error(flag + ": '@' names no file");
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0) {
      auto t = values::read_npy_file(path);
      if (!t.is_ok()) return Status::error(flag + ": " + t.status().message());
      return std::optional<InferValue>(InferValue(std::move(t).value()));
    }
    auto bytes = read_file(path);
    if (!bytes.is_ok()) return Status::error(flag + ": " + bytes.status().message());
    return std::optional<InferValue>(InferValue(values::Bytes{std::move(bytes).value()}));
  }
  if (starts_with(value, "int:")) {
    if (!parse_int(value.substr(4), i))
      return Status::error(flag + " must be an integer after int:");
    return std::optional<InferValue>(InferValue(i));
  }
  if (starts_with(value, "float:")) {
    if (!parse_double(value.substr(6), d))
      return Status::error(flag + " must be a number after float:");
    return std::optional<InferValue>(InferValue(d));
  }
  if (starts_with(value, "bool:")) {
    if (!parse_bool(value.substr(5), b))
      return Status::error(flag + " must be true or false after bool:");
    return std::optional<InferValue>(InferValue(b));
  }
  if (starts_with(value, "str:")) return std::optional<InferValue>(InferValue(value.substr(4)));
  return std::optional<InferValue>();
}

bool is_model_method(const std::string& method) { return method == "generate" || method == "chat"; }

// "NAME=VALUE" into the instance, typed by NAME for a model's method, else by
// VALUE's prefix; an error names the flag.
Status add_input(const std::string& flag, const std::string& method, InferInstance& inst) {
  const auto eq = flag.find('=');
  if (eq == std::string::npos || eq == 0)
    return Status::error("--input '" + flag.substr(0, 64) + "' is not NAME=VALUE");
  const std::string name = flag.substr(0, eq);
  const std::string value = flag.substr(eq + 1);
  if (inst.count(name)) return Status::error("--input " + name + " is given twice");
  int64_t i = 0;
  double d = 0;
  bool b = false;
  const bool model = is_model_method(method);
  const bool by_name =
      model &&
      one_of(name, {"prompt", "messages", "stop", "max_tokens", "top_k", "seed", "temperature",
                    "top_p", "min_p", "presence_penalty", "frequency_penalty", "ignore_eos"});
  if (!by_name) {
    auto typed = typed_value(name, value);
    if (!typed.is_ok()) return typed.status();
    if (*typed) {
      inst[name] = std::move(**typed);
      return Status::ok();
    }
    if (!model) {
      inst[name] = value;
      return Status::ok();
    }
  }
  if (one_of(name, {"prompt", "messages", "stop"})) {
    inst[name] = value;
  } else if (one_of(name, {"max_tokens", "top_k", "seed"})) {
    if (!parse_int(value, i)) return Status::error("--input " + name + " must be an integer");
    inst[name] = i;
  } else if (one_of(name,
                    {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"})) {
    if (!parse_double(value, d)) return Status::error("--input " + name + " must be a number");
    inst[name] = d;
  } else if (name == "ignore_eos") {
    if (!parse_bool(value, b)) return Status::error("--input ignore_eos must be true or false");
    inst[name] = b;
  } else if (parse_int(value, i)) {
    inst[name] = i;
  } else if (parse_double(value, d)) {
    inst[name] = d;
  } else if (value == "true" || value == "false") {
    inst[name] = value == "true";
  } else {
    inst[name] = value;
  }
  return Status::ok();
}

// The message and the failure's HTTP-like code, e.g. "unknown servable 'x' (404)".
std::string failure_text(const Status& e) {
  return e.message() + " (" + std::to_string(api::to_http_error(e).status) + ")";
}
Status failure(const Status& e) { return Status::error(failure_text(e)); }

// Shortest round-trip text of a number.
template <typename T>
std::string number(T v) {
  if (std::isnan(static_cast<double>(v))) return "nan";
  if (std::isinf(static_cast<double>(v))) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string element(const values::Tensor& t, int64_t i) {
  const char* p = t.data.data() + static_cast<size_t>(i) * values::dtype_size(t.dtype);
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t.dtype) {
    case values::DType::Bool:
      return get(uint8_t{}) ? "true" : "false";
    case values::DType::Int8:
      return std::to_string(get(int8_t{}));
    case values::DType::Int16:
      return std::to_string(get(int16_t{}));
    case values::DType::Int32:
      return std::to_string(get(int32_t{}));
    case values::DType::Int64:
      return std::to_string(get(int64_t{}));
    case values::DType::UInt8:
      return std::to_string(get(uint8_t{}));
    case values::DType::UInt16:
      return std::to_string(get(uint16_t{}));
    case values::DType::UInt32:
      return std::to_string(get(uint32_t{}));
    case values::DType::UInt64:
      return std::to_string(get(uint64_t{}));
    case values::DType::Float16:
      return number(f16_to_f32(get(uint16_t{})));
    case values::DType::BFloat16:
      return number(bf16_to_f32(get(uint16_t{})));
    case values::DType::Float32:
      return number(get(float{}));
    case values::DType::Float64:
      return number(get(double{}));
  }
  return "?";
}

// Nested lists in row-major order, cut after kMaxShown elements with "...".
constexpr int64_t kMaxShown = 64;
void show_elements(const values::Tensor& t, size_t dim, int64_t& index, std::string& out,
                   bool& cut) {
  if (dim == t.shape.size()) {
    out += element(t, index++);
    return;
  }
  out += '[';
  for (int64_t j = 0; j < t.shape[dim] && !cut; ++j) {
    if (j) out += ", ";
    if (index >= kMaxShown) {
      out += "...";
      cut = true;
      break;
    }
    show_elements(t, dim + 1, index, out, cut);
  }
  out += ']';
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// One output as `cairn client` prints it, without its name.
std::string show_value(const InferValue& v) {
  if (const auto* t = v.as_tensor()) {
    std::string out = std::string(values::dtype_name(t->dtype)) + " [";
    for (size_t i = 0; i < t->shape.size(); ++i)
      out += (i ? ", " : "") + std::to_string(t->shape[i]);
    out += "] ";
    int64_t index = 0;
    bool cut = false;
    show_elements(*t, 0, index, out, cut);
    return out;
  }
  if (const auto* b = v.as_bytes()) return "bytes (" + std::to_string(b->data.size()) + " bytes)";
  if (v.is_string()) return "str " + quoted(v.as_string());
  if (v.is_int()) return "int " + std::to_string(v.as_int());
  if (v.is_double()) return "float " + number(v.as_double());
  return std::string("bool ") + (v.as_bool() ? "true" : "false");
}

// An output name as a file name: anything but [A-Za-z0-9_.-] becomes '_', and
// a leading '.' too, so a server cannot name a path outside DIR.
std::string file_name(const std::string& name) {
  std::string out = name.substr(0, 128);
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

// A servable's outputs, one per line; tensors also to --output-dir. Fails
// when an instance failed (after printing every instance).
Status print_outputs(const ClientFlags& f, const std::vector<InferOutput>& out) {
  namespace fs = std::filesystem;
  const bool several = out.size() > 1;
  size_t failed = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string prefix = several ? "instance " + std::to_string(i) + ": " : "";
    if (!out[i].ok()) {
      ++failed;
      std::printf("instance %zu: error: %s\n", i, failure_text(*out[i].error).c_str());
      continue;
    }
    for (const auto& [name, value] : out[i].values) {
      std::printf("%s%s: %s\n", prefix.c_str(), name.c_str(), show_value(value).c_str());
      if (const auto* t = value.as_tensor(); t && !f.output_dir.empty()) {
        const fs::path path = fs::path(f.output_dir) /
                              ((several ? std::to_string(i) + "_" : "") + file_name(name) + ".npy");
        CAIRN_RETURN_IF_ERROR(values::write_npy_file(path.string(), *t));
      }
    }
  }
  std::fflush(stdout);
  if (failed)
    return Status::error(std::to_string(failed) + " of " + std::to_string(out.size()) +
                         " instances failed");
  return Status::ok();
}

Status run_client(const ClientFlags& f) {
  if (!(f.timeout_s > 0) || f.timeout_s > 86400)
    return Status::error("--timeout must be in (0, 86400] seconds");
  ClientOptions options;
  options.deadline = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  options.version = f.version;
  if (f.instances < 1 || static_cast<size_t>(f.instances) > servable::kMaxPredictInstances)
    return Status::error("--instances must be in [1, " +
                         std::to_string(servable::kMaxPredictInstances) + "]");
  if (!f.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.output_dir, ec);
    if (ec) return Status::error("--output-dir " + f.output_dir + ": " + ec.message());
  }
  Client client(f.address, f.servable, f.method, options);
  if (f.list) {
    auto r = client.list_servables();
    if (!r.is_ok()) return failure(r.status());
    for (const auto& s : *r) {
      std::string methods;
      for (const auto& m : s.methods) methods += (methods.empty() ? "" : ",") + m;
      std::string versions;
      for (auto v : s.versions) versions += (versions.empty() ? "" : ",") + std::to_string(v);
      std::printf("%s\tmethods=%s\tn_ctx=%d%s%s\n", s.name.c_str(), methods.c_str(), s.n_ctx,
                  versions.empty() ? "" : "\tversions=", versions.c_str());
    }
    std::fflush(stdout);
    return Status::ok();
  }
  InferInstance inst;
  for (const auto& in : f.inputs) CAIRN_RETURN_IF_ERROR(add_input(in, f.method, inst));
  bool streamed = false;
  auto print_text = [&streamed](const StreamEvent& ev) {
    if (ev.text.empty()) return;
    streamed = true;
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
  };
  const std::vector<InferInstance> insts(static_cast<size_t>(f.instances), inst);
  ClientResult<std::vector<InferOutput>> r =
      f.stream ? client.infer_stream(insts, print_text) : client.infer(insts);
  if (!r.is_ok()) {
    if (f.stream) std::fputc('\n', stdout);
    return failure(r.status());
  }
  const auto& out = *r;
  if (out.size() != insts.size()) return Status::error("the server replied with no output");
  // A model's reply (text and usage) prints as it always has; anything else,
  // output by output.
  const bool model_reply = is_model_method(f.method) && out.size() == 1 && f.output_dir.empty() &&
                           (!out[0].ok() || out[0].values.count("finish_reason"));
  if (!model_reply) {
    if (streamed) std::fputc('\n', stdout);
    return print_outputs(f, out);
  }
  if (!out[0].ok()) {
    if (f.stream) std::fputc('\n', stdout);
    return failure(*out[0].error);
  }
  if (!f.stream) std::fwrite(out[0].text().data(), 1, out[0].text().size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto& v = out[0].values;
  auto get_int = [&](const char* k) {
    auto it = v.find(k);
    return it == v.end() ? int64_t(-1) : it->second.as_int(-1);
  };
  auto fr = v.find("finish_reason");
  spdlog::debug("finish_reason={} prompt_tokens={} completion_tokens={}",
                fr == v.end() ? "" : fr->second.as_string(), get_int("prompt_tokens"),
                get_int("completion_tokens"));
  return Status::ok();
}

}  // namespace

void register_client(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("client", "call a cairn.v1.Serving endpoint over gRPC");
  auto f = std::make_shared<ClientFlags>();
  cmd->add_option("--address", f->address, "the Serving endpoint, HOST:PORT")->required();
  cmd->add_option("--servable", f->servable,
                  "the model or servable (empty: the only model served)");
  cmd->add_option("--method", f->method, "generate or chat, or a servable's method")
      ->capture_default_str();
  cmd->add_option("--version", f->version, "the servable version (0: the newest loaded)")
      ->capture_default_str();
  cmd->add_option("--input", f->inputs,
                  "NAME=VALUE, repeatable: prompt (generate), messages (chat, a JSON array), "
                  "max_tokens, temperature, top_p, top_k, min_p, seed, stop, ignore_eos, "
                  "presence_penalty, frequency_penalty; for other inputs VALUE is @file.npy "
                  "(a tensor), @file (bytes), int:N, float:X, bool:true|false, str:TEXT or text");
  cmd->add_option("--instances", f->instances, "send the inputs as this many instances")
      ->capture_default_str();
  cmd->add_option("--output-dir", f->output_dir,
                  "write tensor outputs as DIR/NAME.npy (DIR/I_NAME.npy with several instances)");
  cmd->add_flag("--stream", f->stream, "print the text as it is generated (PredictStream)");
  cmd->add_flag("--list", f->list, "list the servables instead of calling one");
  cmd->add_option("--timeout", f->timeout_s, "the call's deadline in seconds")
      ->capture_default_str();
  cmd->callback([&result, f] { result.status = run_client(*f); });
}

}  // namespace cairn::cli

// `cairn client`: one call to a cairn.v1.Serving endpoint (`cairn serve
// --grpc-port`, `cairn controller`) with cairn::Client. Prints the output
// text (as it arrives with --stream), or with --list the servables. Inputs
// are typed by name (prompt/messages/stop are strings, max_tokens/top_k/seed
// integers, ignore_eos a bool, the sampling floats numbers), so `--input
// prompt=42` stays a string; an unknown name is guessed and left to the
// server to refuse.
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "api/openai_response.h"
#include "client/client.h"
#include "commands.h"

namespace cairn::cli {
namespace {

struct ClientFlags {
  std::string address;
  std::string servable;
  std::string method = "generate";
  std::vector<std::string> inputs;
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

// "NAME=VALUE" into the instance, typed by NAME; an error names the flag.
Status add_input(const std::string& flag, InferInstance& inst) {
  const auto eq = flag.find('=');
  if (eq == std::string::npos || eq == 0)
    return Status::error("--input '" + flag.substr(0, 64) + "' is not NAME=VALUE");
  const std::string name = flag.substr(0, eq);
  const std::string value = flag.substr(eq + 1);
  if (inst.count(name)) return Status::error("--input " + name + " is given twice");
  int64_t i = 0;
  double d = 0;
  bool b = false;
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
Status failure(const Status& e) {
  return Status::error(e.message() + " (" + std::to_string(api::to_http_error(e).status) + ")");
}

Status run_client(const ClientFlags& f) {
  if (!(f.timeout_s > 0) || f.timeout_s > 86400)
    return Status::error("--timeout must be in (0, 86400] seconds");
  ClientOptions options;
  options.deadline = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  Client client(f.address, f.servable, f.method, options);
  if (f.list) {
    auto r = client.list_servables();
    if (!r.is_ok()) return failure(r.status());
    for (const auto& s : *r) {
      std::string methods;
      for (const auto& m : s.methods) methods += (methods.empty() ? "" : ",") + m;
      std::printf("%s\tmethods=%s\tn_ctx=%d\n", s.name.c_str(), methods.c_str(), s.n_ctx);
    }
    std::fflush(stdout);
    return Status::ok();
  }
  InferInstance inst;
  for (const auto& in : f.inputs) CAIRN_RETURN_IF_ERROR(add_input(in, inst));
  auto print_text = [](const StreamEvent& ev) {
    if (ev.text.empty()) return;
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
  };
  ClientResult<std::vector<InferOutput>> r =
      f.stream ? client.infer_stream({inst}, print_text) : client.infer({inst});
  if (!r.is_ok()) {
    if (f.stream) std::fputc('\n', stdout);
    return failure(r.status());
  }
  const auto& out = *r;
  if (out.size() != 1) return Status::error("the server replied with no output");
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
  cmd->add_option("--servable", f->servable, "the model (empty: the only one served)");
  cmd->add_option("--method", f->method, "generate or chat")->capture_default_str();
  cmd->add_option("--input", f->inputs,
                  "NAME=VALUE, repeatable: prompt (generate), messages (chat, a JSON array), "
                  "max_tokens, temperature, top_p, top_k, min_p, seed, stop, ignore_eos, "
                  "presence_penalty, frequency_penalty");
  cmd->add_flag("--stream", f->stream, "print the text as it is generated (PredictStream)");
  cmd->add_flag("--list", f->list, "list the servables instead of calling one");
  cmd->add_option("--timeout", f->timeout_s, "the call's deadline in seconds")
      ->capture_default_str();
  cmd->callback([&result, f] { result.status = run_client(*f); });
}

}  // namespace cairn::cli

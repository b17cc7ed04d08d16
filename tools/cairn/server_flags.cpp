// tools/cairn/server_flags.cpp — registers the flags that serve, controller and worker share (HTTP server, gRPC port, engine).
#include "server_flags.h"

#include <fstream>
#include <sstream>

#include "chat/tool_calls.h"

namespace cairn::cli {

void add_http_server_flags(CLI::App* cmd, api::ServerOptions& s, int32_t& max_queue,
                           const std::string& port_flag) {
  cmd->add_option("--host", s.host, "address to bind")->capture_default_str();
  cmd->add_option(port_flag, s.port, "HTTP port to bind; 0: any free port")->capture_default_str();
  cmd->add_option("--api-key", s.routes.api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--cors-origin", s.routes.cors_origin,
                  "allow browser requests from this origin ('*' for any); default: CORS off");
  cmd->add_option("--max-body-bytes", s.max_body_bytes, "largest request body (413 beyond)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 34))
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", s.max_header_bytes, "largest request header (431 beyond)")
      ->check(CLI::Range(1024u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--max-queue", max_queue, "requests waiting to run (503 beyond)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--request-timeout", s.request_timeout_s,
                  "seconds to receive a request, and for a whole generation")
      ->check(CLI::Range(0.001, 1e7))
      ->capture_default_str();
  cmd->add_option("--drain-seconds", s.drain_seconds,
                  "on SIGTERM/SIGINT, seconds running requests may finish")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--http-threads", s.threads, "network I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

void add_grpc_port_flag(CLI::App* cmd, int& grpc_port, const std::string& help) {
  cmd->add_option("--grpc-port", grpc_port, help)->check(CLI::Range(-1, 65535));
}

void add_speculative_flags(CLI::App* cmd, int32_t& lookup_max, std::string& draft_model,
                           int32_t& draft_max, float& p_min) {
  cmd->add_option("--spec-lookup", lookup_max,
                  "speculative decoding by prompt lookup: up to N draft tokens per sequence and "
                  "step, copied from earlier in its prompt and output and verified in the same "
                  "forward (output unchanged; a request opts out with \"speculative\": false); "
                  "0: off")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--draft-model", draft_model,
                  "speculative decoding with a small model of the same vocabulary (checked at "
                  "load): it drafts greedily, the model verifies in one forward (output "
                  "unchanged); with --spec-lookup, lookup drafts first and the draft model when "
                  "lookup finds nothing")
      ->type_name("FILE");
  cmd->add_option("--draft-max", draft_max,
                  "the most draft-model tokens per sequence and step (adaptive below it)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--draft-p-min", p_min,
                  "the draft model stops drafting at a token it gives less than this "
                  "probability (a likely rejection); 0: drafts --draft-max every time")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
}

void add_kv_type_flag(CLI::App* cmd, TensorType& type) {
  cmd->add_option_function<std::string>(
         "--kv-type",
         [&type](const std::string& name) {
           auto t = kv::parse_kv_type(name);
           if (!t.is_ok()) throw CLI::ValidationError("--kv-type", t.status().message());
           type = *t;
         },
         "how K/V rows are stored: f16, or q8_0 (8-bit blocks of 32, about half the memory "
         "per token; needs head_dim divisible by 32)")
      ->type_name("f16|q8_0")
      ->default_str("f16");
}

void add_lora_flags(CLI::App* cmd, model::AdapterOptions& ad, bool runtime) {
  cmd->add_option_function<std::vector<std::string>>(
         "--lora",
         [&ad](const std::vector<std::string>& v) {
           for (const std::string& text : v) {
             auto s = model::parse_lora_flag(text);
             if (!s) throw CLI::ValidationError("--lora", s.status().message());
             ad.merged.push_back(*s);
           }
         },
         "a LoRA adapter (GGUF) merged into the weights at load, FILE or FILE:SCALE; repeatable")
      ->type_name("FILE[:SCALE]");
  if (!runtime) return;
  cmd->add_option_function<std::vector<std::string>>(
         "--lora-modules",
         [&ad](const std::vector<std::string>& v) {
           for (const std::string& text : v) {
             auto s = model::parse_lora_module_flag(text);
             if (!s) throw CLI::ValidationError("--lora-modules", s.status().message());
             ad.runtime.push_back(*s);
           }
         },
         "LoRA adapters served by name over the base weights (a request's model field picks "
         "one), NAME=FILE or NAME=FILE:SCALE; repeatable")
      ->type_name("NAME=FILE[:SCALE]");
}

void add_engine_flags(CLI::App* cmd, serving::LocalBackendOptions& b, int64_t& kv_cache_mb) {
  cmd->add_option("--model-name", b.model_name, "model id clients use (default: file name)");
  // Left out (0), the pool takes one thread per physical core this process may run on.
  cmd->add_option("-t,--threads", b.threads,
                  "kernel threads, engine thread included (default: one per physical core)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--ctx", b.n_ctx, "context per sequence; 0: the model's, at most 4096")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--kv-cache-mb", kv_cache_mb, "KV cache pool in MiB; 0: sized automatically")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  add_kv_type_flag(cmd, b.kv_type);
  cmd->add_option("--max-batch-tokens", b.max_batch_tokens, "tokens per engine step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-step-ms", b.max_step_ms,
                  "stall-free batching: while streams decode, prompt chunks are sized so a step "
                  "takes about this long (from measured costs); 0: automatic (4x a decode step), "
                  "negative: off (chunks of --max-batch-tokens)")
      ->check(CLI::Range(-1.0, 600000.0))
      ->capture_default_str();
  cmd->add_option("--max-seqs", b.max_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  add_speculative_flags(cmd, b.spec_lookup_max, b.draft_model_path, b.spec_draft_max,
                        b.draft_p_min);
  add_lora_flags(cmd, b.adapters, /*runtime=*/true);
  cmd->add_option_function<std::string>(
         "--chat-template",
         [&b](const std::string& path) {
           std::ifstream in(path, std::ios::binary);
           std::ostringstream text;
           text << in.rdbuf();
           if (!in || text.str().empty())
             throw CLI::ValidationError("--chat-template", "cannot read the file '" + path + "'");
           b.chat_template = text.str();
         },
         "a Jinja chat template file used instead of the model file's")
      ->type_name("FILE");
  std::string parsers;
  for (const auto& n : chat::tool_format_names()) parsers += (parsers.empty() ? "" : ", ") + n;
  cmd->add_option("--tool-parser", b.tool_parser,
                  "how tool calls are read from the output (" + parsers +
                      "); default: chosen by the chat template")
      ->check([](const std::string& v) {
        auto f = chat::tool_format_from_name(v);
        return f.is_ok() ? std::string() : f.status().message();
      });
  cmd->add_option("--reasoning-format", b.reasoning_format,
                  "auto: <think>...</think> goes to reasoning_content; none: left in the content")
      ->check(CLI::IsMember({"auto", "deepseek", "none"}))
      ->capture_default_str();
  cmd->add_flag("--embeddings", b.embeddings_only,
                "serve the model for /v1/embeddings (and /v1/rerank) only; completions are refused");
  cmd->add_option("--pooling", b.pooling,
                  "how embeddings are pooled: mean, cls, last or rank (a reranker's head); "
                  "default: the model file's pooling_type, else last")
      ->check(CLI::IsMember({"mean", "cls", "last", "rank"}));
}

}  // namespace cairn::cli

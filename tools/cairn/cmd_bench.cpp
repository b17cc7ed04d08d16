// `cairn bench`: a serving benchmark against a running OpenAI-compatible
// server (or a servable's method, --servable/--method). For each concurrency level it runs C streaming clients back to back
// and prints requests/s, aggregate output tokens/s, TTFT and inter-token
// latency percentiles (a table, or JSON with --json). The client itself lives
// in loadgen/bench_client.h; this file is only the command line.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "loadgen/bench_client.h"
#include "commands.h"

namespace cairn::cli {

namespace {

struct BenchArgs {
  std::string url;
  std::string model;
  std::vector<int> concurrency{1, 4, 16, 64};
  int prompt_tokens = 128;
  int max_tokens = 64;
  int requests = 0;
  double timeout_s = 600;
  uint64_t seed = 1;
  bool json = false;
  std::string servable;
  std::string method;
};

void log_level(const loadgen::LevelResult& l) {
  spdlog::info("concurrency {}: {} requests, {} errors, {:.2f} output tok/s in {:.1f} s",
               l.concurrency, l.requests, l.errors, l.output_tok_per_s, l.wall_s);
}

Status bench(const BenchArgs& a) {
  auto url = loadgen::parse_url(a.url);
  if (!url.is_ok()) return url.status();
  loadgen::BenchOptions o;
  o.url = *url;
  o.model = a.model;
  o.concurrency = a.concurrency;
  o.prompt_tokens = a.prompt_tokens;
  o.max_tokens = a.max_tokens;
  o.requests = a.requests;
  o.request_timeout_s = a.timeout_s;
  o.seed = a.seed;
  o.servable = a.servable;
  o.method = a.method;
  if (o.servable.empty() != o.method.empty())
    return Status::invalid_argument("--servable and --method go together");
  spdlog::info("bench {}: prompt {} tokens, max_tokens {}", a.url, a.prompt_tokens, a.max_tokens);
  auto levels = loadgen::run(o, &log_level);
  if (!levels.is_ok()) return levels.status();
  std::string text = a.json ? loadgen::to_json(*levels).dump(2) + "\n"
                            : loadgen::format_table(*levels);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  return Status::ok();
}

}  // namespace

void register_bench(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("bench", "benchmark a running server with streaming completions");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("--url", a->url, "server, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--model", a->model, "model id to request (default: the server's only model)");
  cmd->add_option("--concurrency", a->concurrency, "concurrency levels, e.g. 1,4,16,64")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "prompt length in tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "output tokens per request (ignore_eos)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--requests", a->requests, "requests per level (default: max(2*C, 8))")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--timeout", a->timeout_s, "seconds one request may take, connect to [DONE]")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed for prompts and sampling")->capture_default_str();
  cmd->add_flag("--json", a->json, "print JSON instead of a table");
  cmd->add_option("--servable", a->servable,
                  "call this servable's method (POST /model/S:M, streamed) instead of "
                  "/v1/completions");
  cmd->add_option("--method", a->method, "the servable's method (with --servable)");
  cmd->callback([a, &result] { result.status = bench(*a); });
}

}  // namespace cairn::cli

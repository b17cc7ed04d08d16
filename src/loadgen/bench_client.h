// loadgen/bench_client.h — the load generator behind `cairn bench`.
// Owns the client side of a serving benchmark: parsing the target URL,
// splitting a Server-Sent-Events byte stream into `data:` payloads, running C
// concurrent streaming /v1/completions clients on one io_context (no thread
// per client), and reducing per-request timings to percentiles. Must never
// start a server, touch the backend, or run without a deadline: every request
// has a timeout, so a run always ends by itself.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cairn::loadgen {

struct Url {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix" without a trailing slash
};

// Accepts http://HOST[:PORT][/PATH]; anything else (https, no host, a bad
// port) is a one-line error naming the URL.
Result<Url> parse_url(std::string_view url);

// Splits an SSE byte stream that arrives in arbitrary pieces into the
// payloads of its events. Only `data:` fields matter here; comments and
// other fields are skipped, several data lines of one event are joined by
// "\n" as the SSE spec says.
class SseParser {
 public:
  // Appends the payload of every event completed by `bytes` to `out`.
  void feed(std::string_view bytes, std::vector<std::string>& out);
  // Bytes of a not yet finished line or event are pending.
  bool has_partial() const { return !line_.empty() || have_data_; }

 private:
  void end_line(std::vector<std::string>& out);
  std::string line_;
  std::string data_;
  bool have_data_ = false;
  bool after_cr_ = false;
};

// Linear interpolation between closest ranks (numpy's default); p in [0,100].
// An empty sample gives 0.
double percentile(std::vector<double> values, double p);

// What one streaming request measured. Times are seconds.
struct RequestRecord {
  bool ok = false;
  std::string error;           // why it failed, when !ok
  double ttft = 0;             // send to first chunk with text
  std::vector<double> itl;     // gaps between consecutive content chunks
  double e2e = 0;              // send to [DONE]
  int64_t output_tokens = 0;   // from the usage chunk
  // Sent on a kept-alive connection that the server had already closed
  // (nothing came back): worth one more try on a new connection.
  bool stale_connection = false;
};

struct Stat {
  double p50 = 0, p99 = 0, mean = 0;
  size_t n = 0;
};
Stat stat_of(const std::vector<double>& values);

struct LevelResult {
  int concurrency = 0;
  int requests = 0;
  int errors = 0;
  double wall_s = 0;
  double requests_per_s = 0;    // successful requests / wall
  double output_tok_per_s = 0;  // output tokens of successful requests / wall
  int64_t output_tokens = 0;
  Stat ttft, itl, e2e;          // over successful requests
  std::string first_error;
};

// Reduces one level's records; wall_s is the level's duration.
LevelResult summarize(int concurrency, double wall_s, const std::vector<RequestRecord>& records);

// Fixed-width table, one row per level, times in milliseconds.
std::string format_table(const std::vector<LevelResult>& levels);
nlohmann::json to_json(const std::vector<LevelResult>& levels);

struct BenchOptions {
  Url url;
  std::string model;  // "" leaves "model" out of the request
  std::vector<int> concurrency{1, 4, 16, 64};
  int prompt_tokens = 128;
  int max_tokens = 64;
  int requests = 0;                // per level; 0: max(2*C, 8)
  double request_timeout_s = 600;  // whole request, connect to [DONE]
  uint64_t seed = 1;
  float temperature = 0.8f;
  // Set: each request calls this servable's method over MindSpore Serving's
  // REST route, streamed (POST /model/<servable>:<method>, instances
  // [{"prompt": <token ids>, "max_tokens": N}]); output tokens are read from
  // an output named "n_tokens" in the final event, else counted as streamed
  // pieces. Empty: OpenAI /v1/completions.
  std::string servable;
  std::string method;
};

// The request body for the i-th request of a run: token-id prompt drawn from
// ids 3..258 (byte tokens in llama-style vocabularies, so any vocab has them).
nlohmann::json request_body(const BenchOptions& o, uint64_t index);
// The request path: /v1/completions or /model/<servable>:<method>.
std::string request_path(const BenchOptions& o);

// Checks the server answers at all, then runs every level in turn. Fails only
// for an unreachable server; failed requests are counted, not fatal.
// `progress` (may be null) is told after each level.
Result<std::vector<LevelResult>> run(const BenchOptions& o,
                                     void (*progress)(const LevelResult&) = nullptr);

}  // namespace cairn::loadgen

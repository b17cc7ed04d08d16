// loadgen/bench_client.cpp — the benchmark client: URL parsing, streaming HTTP requests, per-token timing and the summary statistics.
#include "loadgen/bench_client.h"

// g++ 12 misreads Boost 1.74's recycling coroutine-frame allocator (its
// operator new/delete pair is matched, through thread_info_base) and warns at
// every coroutine in this file; the warning is a known false positive there.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <algorithm>
#include <limits>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <random>

namespace cairn::loadgen {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

Result<Url> parse_url(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return Status::error("bad --url '" + std::string(url.substr(0, 200)) + "': " + why);
  };
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme)
    return bad("expected http://HOST:PORT (https is not supported)");
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Url out;
  if (slash != std::string_view::npos) {
    out.base_path = std::string(rest.substr(slash));
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  size_t colon = authority.rfind(':');
  std::string_view host = authority;
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    host = authority.substr(0, colon);
    std::string_view port = authority.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return bad("port must be a number");
    int p = std::stoi(std::string(port));
    if (p < 1 || p > 65535) return bad("port must be 1..65535");
    out.port = static_cast<uint16_t>(p);
  }
  if (host.empty()) return bad("missing host");
  out.host = std::string(host);
  return out;
}

void SseParser::end_line(std::vector<std::string>& out) {
  if (line_.empty()) {  // a blank line dispatches the event
    if (have_data_) out.push_back(std::move(data_));
    data_.clear();
    have_data_ = false;
    return;
  }
  std::string_view l = line_;
  if (l.front() == ':') return;  // comment
  size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (have_data_) data_ += '\n';
  data_ += value;
  have_data_ = true;
}

void SseParser::feed(std::string_view bytes, std::vector<std::string>& out) {
  for (char c : bytes) {
    // CRLF, LF and CR all end a line; the LF of a CRLF split across feeds
    // must not end a second, empty line.
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      end_line(out);
      line_.clear();
    } else {
      line_ += c;
    }
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  p = std::clamp(p, 0.0, 100.0);
  double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

Stat stat_of(const std::vector<double>& values) {
  Stat s;
  s.n = values.size();
  if (values.empty()) return s;
  s.p50 = percentile(values, 50);
  s.p99 = percentile(values, 99);
  double sum = 0;
  for (double x : values) sum += x;
  s.mean = sum / static_cast<double>(values.size());
  return s;
}

LevelResult summarize(int concurrency, double wall_s, const std::vector<RequestRecord>& records) {
  LevelResult r;
  r.concurrency = concurrency;
  r.requests = static_cast<int>(records.size());
  r.wall_s = wall_s;
  std::vector<double> ttft, itl, e2e;
  int ok = 0;
  for (const auto& rec : records) {
    if (!rec.ok) {
      ++r.errors;
      if (r.first_error.empty()) r.first_error = rec.error;
      continue;
    }
    ++ok;
    r.output_tokens += rec.output_tokens;
    ttft.push_back(rec.ttft);
    e2e.push_back(rec.e2e);
    itl.insert(itl.end(), rec.itl.begin(), rec.itl.end());
  }
  if (wall_s > 0) {
    r.requests_per_s = ok / wall_s;
    r.output_tok_per_s = static_cast<double>(r.output_tokens) / wall_s;
  }
  r.ttft = stat_of(ttft);
  r.itl = stat_of(itl);
  r.e2e = stat_of(e2e);
  return r;
}

std::string format_table(const std::vector<LevelResult>& levels) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%5s %5s %4s %8s %9s %10s %10s %8s %8s %9s %9s\n", "conc",
                "reqs", "err", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
                "E2E p50", "wall s");
  out += line;
  for (const auto& l : levels) {
    std::snprintf(line, sizeof(line),
                  "%5d %5d %4d %8.3f %9.2f %8.0fms %8.0fms %6.0fms %6.0fms %7.0fms %9.2f\n",
                  l.concurrency, l.requests, l.errors, l.requests_per_s, l.output_tok_per_s,
                  l.ttft.p50 * 1e3, l.ttft.p99 * 1e3, l.itl.p50 * 1e3, l.itl.p99 * 1e3,
                  l.e2e.p50 * 1e3, l.wall_s);
    out += line;
  }
  for (const auto& l : levels)
    if (!l.first_error.empty())
      out += "concurrency " + std::to_string(l.concurrency) + ": first error: " + l.first_error +
             "\n";
  return out;
}

json to_json(const std::vector<LevelResult>& levels) {
  auto stat = [](const Stat& s) {
    return json{{"p50_ms", s.p50 * 1e3}, {"p99_ms", s.p99 * 1e3}, {"mean_ms", s.mean * 1e3},
                {"n", s.n}};
  };
  json arr = json::array();
  for (const auto& l : levels) {
    json j{{"concurrency", l.concurrency},       {"requests", l.requests},
           {"errors", l.errors},                 {"wall_s", l.wall_s},
           {"requests_per_s", l.requests_per_s}, {"output_tokens_per_s", l.output_tok_per_s},
           {"output_tokens", l.output_tokens},   {"ttft", stat(l.ttft)},
           {"itl", stat(l.itl)},                 {"e2e", stat(l.e2e)}};
    if (!l.first_error.empty()) j["first_error"] = l.first_error;
    arr.push_back(std::move(j));
  }
  return json{{"levels", std::move(arr)}};
}

json request_body(const BenchOptions& o, uint64_t index) {
  std::mt19937_64 rng(o.seed * 1000003u + index);
  std::uniform_int_distribution<int> id(3, 258);
  std::vector<int> prompt(static_cast<size_t>(std::max(o.prompt_tokens, 1)));
  for (int& t : prompt) t = id(rng);
  if (!o.servable.empty())
    return json{{"instances", json::array({{{"prompt", prompt}, {"max_tokens", o.max_tokens}}})},
                {"stream", true}};
  json body{{"prompt", prompt},
            {"max_tokens", o.max_tokens},
            {"temperature", o.temperature},
            {"seed", static_cast<int64_t>((o.seed + index) & 0x7fffffff)},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"ignore_eos", true}};
  if (!o.model.empty()) body["model"] = o.model;
  return body;
}

std::string request_path(const BenchOptions& o) {
  if (o.servable.empty()) return o.url.base_path + "/v1/completions";
  return o.url.base_path + "/model/" + o.servable + ":" + o.method;
}

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The per-level shared state all clients of one level draw work from.
struct Level {
  const BenchOptions* opts = nullptr;
  tcp::resolver::results_type endpoints;
  int total = 0;
  int next = 0;
  uint64_t index_base = 0;
  std::vector<RequestRecord> records;
};

// Reads one chunk of a streaming completion; returns false (with rec.error)
// when the chunk is malformed.
void on_content(RequestRecord& rec, Clock::time_point t0, std::optional<Clock::time_point>& last) {
  auto now = Clock::now();
  if (!last)
    rec.ttft = std::chrono::duration<double>(now - t0).count();
  else
    rec.itl.push_back(std::chrono::duration<double>(now - *last).count());
  last = now;
}

// A servable method's stream: {"instance", "output", "text"} pieces, then the
// final {"instances": [...]}, whose "n_tokens" output (if any) counts tokens.
bool on_servable_event(const json& j, RequestRecord& rec, Clock::time_point t0,
                       std::optional<Clock::time_point>& last, bool& saw_final) {
  if (auto inst = j.find("instances"); inst != j.end()) {
    if (!inst->is_array() || inst->size() != 1 || !(*inst)[0].is_object()) {
      rec.error = "malformed stream: a final event without one instance";
      return false;
    }
    const auto& out = (*inst)[0];
    if (out.contains("error_msg")) {
      rec.error = "instance error: " + out["error_msg"].dump().substr(0, 200);
      return false;
    }
    if (auto n = out.find("n_tokens"); n != out.end() && n->is_number_integer())
      rec.output_tokens = n->get<int64_t>();
    saw_final = true;
    return true;
  }
  auto text = j.find("text");
  if (text == j.end() || !text->is_string()) {
    rec.error = "malformed stream: an event without 'text'";
    return false;
  }
  if (text->get_ref<const std::string&>().empty()) return true;
  if (!saw_final) ++rec.output_tokens;  // replaced by n_tokens when the method gives it
  on_content(rec, t0, last);
  return true;
}

bool on_event(const std::string& data, RequestRecord& rec, Clock::time_point t0,
              std::optional<Clock::time_point>& last, bool& done, bool& saw_usage,
              bool servable) {
  if (data == "[DONE]") {
    done = true;
    return true;
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    rec.error = "malformed stream: a chunk is not a JSON object";
    return false;
  }
  if (j.contains("error")) {
    rec.error = "error chunk: " + j["error"].dump().substr(0, 200);
    return false;
  }
  if (servable) return on_servable_event(j, rec, t0, last, saw_usage);
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    auto ct = u->find("completion_tokens");
    if (ct == u->end() || !ct->is_number_integer()) {
      rec.error = "malformed stream: usage without completion_tokens";
      return false;
    }
    rec.output_tokens = ct->get<int64_t>();
    saw_usage = true;
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) {
    rec.error = "malformed stream: a chunk without 'choices'";
    return false;
  }
  bool content = false;
  for (const auto& c : *choices)
    if (c.is_object() && c.contains("text") && c["text"].is_string() &&
        !c["text"].get_ref<const std::string&>().empty())
      content = true;
  if (!content) return true;
  on_content(rec, t0, last);
  return true;
}

asio::awaitable<RequestRecord> one_request(beast::tcp_stream& stream, Level& lv, uint64_t index) {
  const BenchOptions& o = *lv.opts;
  RequestRecord rec;
  beast::error_code ec;
  auto t0 = Clock::now();
  stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1e3)));
  const bool reused = stream.socket().is_open();
  if (!reused) {
    co_await stream.async_connect(lv.endpoints, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      rec.error = "connect: " + ec.message();
      co_return rec;
    }
  }
  http::request<http::string_body> req{http::verb::post, request_path(o), 11};
  req.set(http::field::host, o.url.host + ":" + std::to_string(o.url.port));
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.keep_alive(true);
  req.body() = request_body(o, index).dump();
  req.prepare_payload();
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    rec.error = "send: " + ec.message();
    rec.stale_connection = reused;
    co_return rec;
  }
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  // A number, not boost::none: Boost 1.74 compares a Content-Length with an
  // empty optional as "over the limit" and fails every non-chunked response.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  co_await http::async_read_header(stream, buf, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    rec.error = "read header: " + ec.message();
    // Servers close idle kept-alive connections; a request that met one
    // got no answer at all (an end of stream before any byte).
    rec.stale_connection = reused && buf.size() == 0 &&
                           (ec == http::error::end_of_stream || ec == asio::error::eof ||
                            ec == asio::error::connection_reset);
    co_return rec;
  }
  int status = parser.get().result_int();
  SseParser sse;
  std::vector<std::string> events;
  std::string error_body;
  std::optional<Clock::time_point> last;
  bool done = false, saw_usage = false, bad = false;
  char tmp[16384];
  while (!parser.is_done()) {
    parser.get().body().data = tmp;
    parser.get().body().size = sizeof(tmp);
    // read_some, not read: read() would keep going until the buffer fills,
    // delivering a whole stream at once and hiding the inter-token gaps.
    co_await http::async_read_some(stream, buf, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      rec.error = "read body: " + ec.message();
      co_return rec;
    }
    size_t got = sizeof(tmp) - parser.get().body().size;
    if (status != 200) {
      error_body.append(tmp, std::min(got, size_t(300) - std::min(error_body.size(), size_t(300))));
      continue;
    }
    events.clear();
    sse.feed(std::string_view(tmp, got), events);
    for (const auto& e : events)
      if (!bad && !done && !on_event(e, rec, t0, last, done, saw_usage, !o.servable.empty()))
        bad = true;
  }
  if (!parser.get().keep_alive()) stream.socket().close(ec);
  if (status != 200) {
    for (char& c : error_body)
      if (c == '\n' || c == '\r') c = ' ';
    rec.error = "HTTP " + std::to_string(status) + ": " + error_body;
    co_return rec;
  }
  if (bad) co_return rec;
  if (!done) {
    rec.error = "malformed stream: ended without [DONE]";
  } else if (!saw_usage) {
    rec.error = o.servable.empty() ? "malformed stream: no usage chunk"
                                   : "malformed stream: no final event";
  } else if (!last) {
    rec.error = "no content chunk";
  } else {
    rec.e2e = seconds_since(t0);
    rec.ok = true;
  }
  co_return rec;
}

asio::awaitable<void> client(Level& lv) {
  auto ex = co_await asio::this_coro::executor;
  beast::tcp_stream stream(ex);
  while (lv.next < lv.total) {
    int i = lv.next++;
    const uint64_t index = lv.index_base + static_cast<uint64_t>(i);
    RequestRecord rec = co_await one_request(stream, lv, index);
    if (!rec.ok) {  // the connection's state is unknown after a failure
      beast::error_code ec;
      stream.socket().close(ec);
      if (rec.stale_connection) rec = co_await one_request(stream, lv, index);  // on a new one
      if (!rec.ok) stream.socket().close(ec);
    }
    lv.records[static_cast<size_t>(i)] = std::move(rec);
  }
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
}

Status check_reachable(asio::io_context& io, const Url& url,
                       tcp::resolver::results_type& endpoints) {
  std::string where = "http://" + url.host + ":" + std::to_string(url.port);
  tcp::resolver resolver(io);
  beast::error_code ec;
  endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) return Status::error("cannot resolve " + url.host + ": " + ec.message());
  beast::tcp_stream probe(io);
  probe.expires_after(std::chrono::seconds(10));
  probe.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
  io.run();
  io.restart();
  if (ec) return Status::error("cannot connect to " + where + ": " + ec.message());
  probe.socket().close(ec);
  return Status::ok();
}

}  // namespace

Result<std::vector<LevelResult>> run(const BenchOptions& o,
                                     void (*progress)(const LevelResult&)) {
  try {
    asio::io_context io;
    tcp::resolver::results_type endpoints;
    CAIRN_RETURN_IF_ERROR(check_reachable(io, o.url, endpoints));
    std::vector<LevelResult> out;
    uint64_t base = 0;
    for (int c : o.concurrency) {
      Level lv;
      lv.opts = &o;
      lv.endpoints = endpoints;
      lv.total = o.requests > 0 ? o.requests : std::max(2 * c, 8);
      lv.index_base = base;
      base += static_cast<uint64_t>(lv.total);
      lv.records.resize(static_cast<size_t>(lv.total));
      auto t0 = Clock::now();
      for (int k = 0; k < c; ++k) asio::co_spawn(io, client(lv), asio::detached);
      io.run();
      io.restart();
      out.push_back(summarize(c, seconds_since(t0), lv.records));
      if (progress) progress(out.back());
    }
    return out;
  } catch (const std::exception& e) {
    return Status::error(std::string("bench: ") + e.what());
  }
}

}  // namespace cairn::loadgen

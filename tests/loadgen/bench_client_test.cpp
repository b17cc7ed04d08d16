// Tests for `cairn bench`'s client: SSE splitting, percentile math, URL
// parsing, the unreachable-server error, a server that closes kept-alive
// connections, and one end-to-end run of the bench against `cairn serve` on
// the demo model.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "loadgen/bench_client.h"

namespace cairn::loadgen {
namespace {

std::vector<std::string> feed_all(const std::vector<std::string>& pieces) {
  SseParser p;
  std::vector<std::string> out;
  for (const auto& s : pieces) p.feed(s, out);
  return out;
}

TEST(BenchSse, SplitsEventsAcrossArbitraryPieces) {
  std::string stream = "data: {\"a\":1}\n\ndata: [DONE]\n\n";
  auto whole = feed_all({stream});
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0], "{\"a\":1}");
  EXPECT_EQ(whole[1], "[DONE]");
  // One byte at a time gives the same events.
  std::vector<std::string> bytes;
  for (char c : stream) bytes.emplace_back(1, c);
  EXPECT_EQ(feed_all(bytes), whole);
}

TEST(BenchSse, CrLfCommentsMultiLineDataAndPartialEvents) {
  SseParser p;
  std::vector<std::string> out;
  p.feed(": keep-alive\r\n\r\ndata: x\r", out);
  EXPECT_TRUE(out.empty());  // the comment-only event carries no data
  p.feed("\ndata:y\r\nevent: other\r\n", out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(p.has_partial());
  p.feed("\r\n", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], "x\ny");
  EXPECT_FALSE(p.has_partial());
}

TEST(BenchMath, PercentileInterpolatesBetweenRanks) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 100), 5);
  std::vector<double> v;
  for (int i = 0; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 99), 9.9);
}

TEST(BenchMath, SummaryCountsOnlySuccessfulRequests) {
  std::vector<RequestRecord> recs(3);
  recs[0] = {true, "", 0.1, {0.01, 0.03}, 1.0, 4};
  recs[1] = {true, "", 0.3, {0.02}, 2.0, 6};
  recs[2].error = "HTTP 500: boom";
  LevelResult r = summarize(2, 2.0, recs);
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.errors, 1);
  EXPECT_EQ(r.first_error, "HTTP 500: boom");
  EXPECT_EQ(r.output_tokens, 10);
  EXPECT_DOUBLE_EQ(r.output_tok_per_s, 5.0);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(r.ttft.p50, 0.2);
  EXPECT_EQ(r.itl.n, 3u);
  EXPECT_DOUBLE_EQ(r.itl.p50, 0.02);
  EXPECT_DOUBLE_EQ(r.e2e.mean, 1.5);
  auto j = to_json({r});
  EXPECT_EQ(j["levels"][0]["errors"], 1);
  EXPECT_NE(format_table({r}).find("first error: HTTP 500"), std::string::npos);
}

TEST(BenchUrl, ParsesAndRejects) {
  auto u = parse_url("http://127.0.0.1:8080");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "");
  auto v = parse_url("http://localhost/api/");
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->port, 80);
  EXPECT_EQ(v->base_path, "/api");
  for (const char* bad : {"https://x:1", "127.0.0.1:8080", "http://:80", "http://h:0",
                          "http://h:99999", "http://h:8o"}) {
    auto r = parse_url(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("bad --url"), std::string::npos);
    }
  }
}

TEST(BenchRequest, BodyIsSeededStreamingWithUsage) {
  BenchOptions o;
  o.prompt_tokens = 5;
  o.max_tokens = 3;
  auto a = request_body(o, 7), b = request_body(o, 7), c = request_body(o, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a["prompt"], c["prompt"]);
  EXPECT_EQ(a["prompt"].size(), 5u);
  EXPECT_TRUE(a["stream"].get<bool>());
  EXPECT_TRUE(a["stream_options"]["include_usage"].get<bool>());
  EXPECT_TRUE(a["ignore_eos"].get<bool>());
  EXPECT_FALSE(a.contains("model"));
}

TEST(BenchRun, ConnectionRefusedIsOneClearError) {
  BenchOptions o;
  o.url = *parse_url("http://127.0.0.1:1");
  o.concurrency = {1};
  auto r = run(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot connect to http://127.0.0.1:1"), std::string::npos)
      << r.status().message();
}

// A server that answers one request per connection (a whole stream, the
// connection left "kept alive") and then closes it, as servers close idle
// connections: the client's next request there meets a closed socket and
// must go again on a new connection, not count an error.
TEST(BenchRun, AKeptAliveConnectionTheServerClosedIsRetriedOnANewOne) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  int answered = 0;
  std::thread server([&] {
    const std::string body =
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
        "data: {\"choices\":[{\"text\":\"b\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
        "data: [DONE]\n\n";
    const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
    for (;;) {
      const int c = accept(listener, nullptr, nullptr);
      if (c < 0) return;  // the listener was shut down: the test is over
      std::string got;
      char buf[4096];
      // The request: headers, then Content-Length bytes (the reachability
      // probe connects and closes without sending anything).
      for (;;) {
        const size_t head = got.find("\r\n\r\n");
        if (head != std::string::npos) {
          const size_t cl = got.find("Content-Length: ");
          const size_t want = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
          if (got.size() >= head + 4 + want) break;
        }
        const ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
      if (got.find("\r\n\r\n") != std::string::npos) {
        EXPECT_EQ(write(c, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
        ++answered;
      }
      close(c);
    }
  });
  BenchOptions o;
  o.url = *parse_url("http://127.0.0.1:" + std::to_string(port));
  o.concurrency = {1};
  o.requests = 4;
  o.request_timeout_s = 30;
  auto r = run(o);
  shutdown(listener, SHUT_RDWR);
  close(listener);
  server.join();
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].errors, 0) << (*r)[0].first_error;
  EXPECT_EQ((*r)[0].requests, 4);
  EXPECT_EQ((*r)[0].output_tokens, 4 * 2);
  EXPECT_EQ(answered, 4);
}

// Starts `cairn serve --port 0` on the demo model and benches it.
TEST(BenchRun, EndToEndAgainstCairnServe) {
  std::string bin = std::string(CAIRN_BINARY_DIR) + "/cairn";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "skipped: " << bin << " is not built";
  int err_pipe[2];
  ASSERT_EQ(pipe(err_pipe), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(err_pipe[1]);
    execl(bin.c_str(), bin.c_str(), "serve", "--port", "0", "--host", "127.0.0.1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err_pipe[1]);
  std::string log;
  int port = 0;
  bool ready = false;
  for (int waited = 0; !ready && waited < 120;) {
    pollfd pfd{err_pipe[0], POLLIN, 0};
    if (poll(&pfd, 1, 1000) <= 0) {
      ++waited;
      continue;
    }
    char buf[4096];
    ssize_t n = read(err_pipe[0], buf, sizeof(buf));
    if (n <= 0) break;
    log.append(buf, static_cast<size_t>(n));
    size_t at = log.find("listening on http://127.0.0.1:");
    if (at != std::string::npos && port == 0)
      port = std::atoi(log.c_str() + at + std::string("listening on http://127.0.0.1:").size());
    ready = port > 0 && log.find("cairn: ready") != std::string::npos;
  }
  BenchOptions o;
  if (ready) {
    o.url = *parse_url("http://127.0.0.1:" + std::to_string(port));
    o.concurrency = {1, 2};
    o.prompt_tokens = 8;
    o.max_tokens = 4;
    o.request_timeout_s = 60;
  }
  auto r = ready ? run(o) : Result<std::vector<LevelResult>>(Status::error("server not ready"));
  // A prompt longer than the demo model's context: the server's 400 (a
  // Content-Length body, not a stream) must reach the report as it was sent.
  BenchOptions too_long = o;
  too_long.concurrency = {1};
  too_long.prompt_tokens = 100000;
  auto bad = ready ? run(too_long) : Result<std::vector<LevelResult>>(Status::error("server not ready"));
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  close(err_pipe[0]);
  ASSERT_TRUE(ready) << "server log:\n" << log;
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  for (const auto& l : *r) {
    EXPECT_EQ(l.errors, 0) << l.first_error;
    EXPECT_EQ(l.requests, 8);
    EXPECT_EQ(l.output_tokens, 8 * 4);
    EXPECT_GT(l.output_tok_per_s, 0);
    EXPECT_GT(l.ttft.p50, 0);
    EXPECT_GE(l.ttft.p99, l.ttft.p50);
  }
  ASSERT_TRUE(bad.is_ok()) << bad.status().message();
  ASSERT_EQ(bad->size(), 1u);
  EXPECT_EQ((*bad)[0].errors, (*bad)[0].requests);
  EXPECT_NE((*bad)[0].first_error.find("HTTP 400"), std::string::npos) << (*bad)[0].first_error;
  EXPECT_NE((*bad)[0].first_error.find("context"), std::string::npos) << (*bad)[0].first_error;
}

}  // namespace
}  // namespace cairn::loadgen

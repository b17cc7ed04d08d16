// End-to-end tests of the cairn binary: real processes, real files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_process.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using cairn::test::cairn_binary;
using cairn::test::expect_one_error_line;
using cairn::test::Proc;
using cairn::test::run_cairn;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(cairn_binary())) << cairn_binary() << " is not built (ninja cairn)";
  }
  // The demo model's cache, private to this test so runs never share state.
  std::map<std::string, std::string> private_cache(const std::string& name) {
    cache_ = cairn::test::temp_dir(name);
    return {{"CAIRN_CACHE_DIR", cache_.string()}};
  }
  fs::path cache_;
};

TEST_F(Cli, GoldenGreedyTextForEveryFloatModel) {
  CAIRN_REQUIRE_SHARED("golden/stories260K.json");
  const fs::path shared = *cairn::test::shared_dir();
  for (const char* name :
       {"stories260K", "syn-llama-gqa-f32", "syn-qwen2-f32", "syn-llama-tied-f16"}) {
    const fs::path golden = shared / "golden" / (std::string(name) + ".json");
    const fs::path model = shared / "models" / (std::string(name) + ".gguf");
    if (!fs::exists(golden) || !fs::exists(model)) {
      ADD_FAILURE() << "shared folder present but " << name << " missing";
      continue;
    }
    auto doc = nlohmann::json::parse(slurp(golden));
    for (const auto& c : doc["cases"]) {
      const std::string prompt = c["prompt"];
      Proc r = run_cairn({"run", "-m", model.string(), "-p", prompt, "-n",
                          std::to_string(c["n_predict"].get<int>()), "--temp", "0"});
      EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
      EXPECT_EQ(r.out, c["text"].get<std::string>()) << name << " prompt: " << prompt;
    }
  }
}

TEST_F(Cli, StoriesOnceUponATime) {
  CAIRN_REQUIRE_SHARED("models/stories260K.gguf");
  const fs::path shared = *cairn::test::shared_dir();
  auto doc = nlohmann::json::parse(slurp(shared / "golden" / "stories260K.json"));
  Proc r = run_cairn({"run", "-m", (shared / "models" / "stories260K.gguf").string(), "-p",
                      "Once upon a time", "-n", "48", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, doc["cases"][0]["text"].get<std::string>());
}

TEST_F(Cli, DemoModelRunsWithoutAModel) {
  auto env = private_cache("cli-demo");
  Proc r = run_cairn({"run", "-p", "Once upon a time", "-n", "24"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_TRUE(fs::exists(cache_ / "demo-llama-v1.gguf"));
  EXPECT_NE(r.err.find("gibberish"), std::string::npos);  // the log says what this model is
  // Second run reuses the cached file; greedy output is stable across runs.
  const auto mtime = fs::last_write_time(cache_ / "demo-llama-v1.gguf");
  Proc a = run_cairn({"run", "-p", "hello", "-n", "16", "--temp", "0"}, env);
  Proc b = run_cairn({"run", "-p", "hello", "-n", "16", "--temp", "0"}, env);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(fs::last_write_time(cache_ / "demo-llama-v1.gguf"), mtime);
}

TEST_F(Cli, DemoModelCacheFallsBackToXdgAndHome) {
  const fs::path xdg = cairn::test::temp_dir("cli-xdg");
  Proc r =
      run_cairn({"run", "-n", "4"}, {{"CAIRN_CACHE_DIR", ""}, {"XDG_CACHE_HOME", xdg.string()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(xdg / "cairn" / "demo-llama-v1.gguf"));
  const fs::path home = cairn::test::temp_dir("cli-home");
  r = run_cairn({"run", "-n", "4"},
                {{"CAIRN_CACHE_DIR", ""}, {"XDG_CACHE_HOME", ""}, {"HOME", home.string()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(home / ".cache" / "cairn" / "demo-llama-v1.gguf"));
}

TEST_F(Cli, SeededSamplingRepeats) {
  auto env = private_cache("cli-seed");
  auto sample = [&](const char* seed) {
    Proc r = run_cairn(
        {"run", "-p", "The", "-n", "40", "--temp", "0.8", "--seed", seed, "--ignore-eos"}, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string a = sample("5");
  EXPECT_FALSE(a.empty());
  Proc quiet = run_cairn({"run", "-n", "4", "--log-level", "warn"}, env);
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_TRUE(quiet.err.empty()) << quiet.err;
  EXPECT_EQ(a, sample("5"));
  EXPECT_NE(a, sample("6"));
}

TEST_F(Cli, SeededSamplingRepeatsOnARealModel) {
  CAIRN_REQUIRE_SHARED("models/stories260K.gguf");
  const std::string model = (*cairn::test::shared_dir() / "models" / "stories260K.gguf").string();
  auto sample = [&] {
    Proc r = run_cairn(
        {"run", "-m", model, "-p", "Once upon a time", "-n", "48", "--temp", "0.8", "--seed", "5"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string a = sample();
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, sample());
}

TEST_F(Cli, BadPathIsOneErrorLine) {
  Proc r = run_cairn({"run", "-m", "/no/such/model.gguf", "-p", "hi"});
  expect_one_error_line(r, "/no/such/model.gguf");
  expect_one_error_line(run_cairn({"gguf", "/no/such/model.gguf"}), "/no/such/model.gguf");
  // Logs can be silenced (the global option also works after the subcommand); errors still show.
  expect_one_error_line(run_cairn({"run", "--log-level", "off", "-m", "/no/such/model.gguf"}),
                        "/no/such");
}

TEST_F(Cli, MalformedFilesAreOneErrorLine) {
  const fs::path dir = cairn::test::temp_dir("cli-malformed");
  const fs::path junk = dir / "junk.gguf";
  { std::ofstream(junk, std::ios::binary) << "this is not a gguf file at all"; }
  expect_one_error_line(run_cairn({"run", "-m", junk.string(), "-p", "hi"}), "magic");
  expect_one_error_line(run_cairn({"gguf", junk.string()}), "magic");

  // A good model cut in half: the tensor data runs past the end.
  const fs::path good = dir / "good.gguf";
  Proc made = run_cairn({"make-model", good.string(), "--dim", "64", "--layers", "1", "--heads",
                         "2", "--kv-heads", "2", "--ffn", "128"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string bytes = slurp(good);
  const fs::path cut = dir / "cut.gguf";
  { std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2); }
  expect_one_error_line(run_cairn({"run", "-m", cut.string(), "-p", "hi"}), "cut.gguf");

  // A directory is not a model either.
  expect_one_error_line(run_cairn({"run", "-m", dir.string()}), dir.string());
}

TEST_F(Cli, UsageErrorsAreOneLine) {
  expect_one_error_line(run_cairn({"run", "--no-such-flag"}), "--no-such-flag");
  expect_one_error_line(run_cairn({}), "subcommand");
  auto env = private_cache("cli-usage");
  expect_one_error_line(run_cairn({"run", "--temp", "-1"}, env), "temperature");
  expect_one_error_line(run_cairn({"run", "--top-p", "nan"}, env), "top_p");
  expect_one_error_line(run_cairn({"make-model", (cache_ / "x.gguf").string(), "--type", "q9_9"}),
                        "q9_9");
  expect_one_error_line(
      run_cairn({"make-model", (cache_ / "x.gguf").string(), "--dim", "100", "--heads", "3"}),
      "--heads");
  expect_one_error_line(
      run_cairn({"make-model", (cache_ / "x.gguf").string(), "--vocab-from", "/no/vocab.gguf"}),
      "/no/vocab.gguf");
  EXPECT_FALSE(fs::exists(cache_ / "x.gguf"));
  Proc help = run_cairn({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("make-model"), std::string::npos);
}

// --kv-type: an unknown value is one error line; a model whose K/V rows Q8_0
// cannot hold (n_head_kv * head_dim = 48) stops serve and run at start-up,
// saying why; run on a model it can hold generates with 8-bit rows.
TEST_F(Cli, KvTypeErrorsAreOneLine) {
  expect_one_error_line(run_cairn({"serve", "-m", "/no/such/model.gguf", "--kv-type", "q4"}),
                        "--kv-type must be f16 or q8_0");
  const fs::path dir = cairn::test::temp_dir("cli-kv-type");
  const fs::path model = dir / "hd48.gguf";
  Proc made = run_cairn({"make-model", model.string(), "--dim", "96", "--layers", "1", "--heads",
                         "2", "--kv-heads", "1", "--ffn", "128"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  // serve says where it listens before the model loads; then the error, and it exits.
  Proc r = run_cairn(
      {"serve", "--log-level", "off", "-m", model.string(), "--port", "0", "--kv-type", "q8_0"});
  EXPECT_NE(r.exit_code, 0);
  auto lines = r.err_lines();
  ASSERT_FALSE(lines.empty()) << r.err;
  EXPECT_NE(lines.back().find("error: --kv-type q8_0 needs head_dim divisible by 32 (a Q8_0 "
                              "block must not span two heads), this model's is 48"),
            std::string::npos)
      << r.err;
  expect_one_error_line(run_cairn({"run", "-m", model.string(), "-n", "4", "--kv-type", "q8_0"}),
                        "--kv-type q8_0 needs head_dim divisible by 32");
  const fs::path ok = dir / "hd32.gguf";
  ASSERT_EQ(run_cairn({"make-model", ok.string(), "--dim", "128", "--layers", "2", "--heads", "4",
                       "--kv-heads", "2", "--ffn", "256"})
                .exit_code,
            0);
  Proc f16 = run_cairn({"run", "-m", ok.string(), "-p", "hello", "-n", "12", "--temp", "0",
                        "--ignore-eos"});
  Proc q8 = run_cairn({"run", "-m", ok.string(), "-p", "hello", "-n", "12", "--temp", "0",
                       "--ignore-eos", "--kv-type", "q8_0"});
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  ASSERT_EQ(q8.exit_code, 0) << q8.err;
  EXPECT_FALSE(q8.out.empty());
  EXPECT_NE(q8.err.find("generated 12 tokens"), std::string::npos) << q8.err;
}

TEST_F(Cli, MakeModelEveryTypeListsAndRuns) {
  const fs::path dir = cairn::test::temp_dir("cli-make");
  auto env = private_cache("cli-make-cache");
  // A vocabulary donor the test writes itself (the demo vocabulary).
  const fs::path donor = dir / "donor.gguf";
  ASSERT_EQ(run_cairn({"make-model", donor.string(), "--dim", "64", "--layers", "1", "--heads", "2",
                       "--kv-heads", "1", "--ffn", "64"})
                .exit_code,
            0);
  for (const char* type : {"f32", "f16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    for (const char* arch : {"llama", "qwen2"}) {
      const fs::path out = dir / (std::string(arch) + "-" + type + ".gguf");
      Proc made = run_cairn({"make-model",   out.string(), "--arch", arch,      "--dim",
                             "256",          "--layers",   "2",      "--heads", "4",
                             "--kv-heads",   "2",          "--ffn",  "512",     "--vocab-from",
                             donor.string(), "--type",     type,     "--seed",  "3",
                             "--ctx",        "512"});
      ASSERT_EQ(made.exit_code, 0) << type << ": " << made.err;
      EXPECT_TRUE(made.out.empty());
      Proc listed = run_cairn({"gguf", out.string()});
      ASSERT_EQ(listed.exit_code, 0) << listed.err;
      EXPECT_NE(listed.out.find("blk.1.ffn_down.weight"), std::string::npos);
      EXPECT_NE(listed.out.find(type), std::string::npos) << listed.out;
      EXPECT_NE(listed.out.find("tokenizer.ggml.tokens"), std::string::npos);
      EXPECT_EQ(listed.out.find("attn_q.bias") != std::string::npos, std::string(arch) == "qwen2");
      Proc ran = run_cairn({"run", "-m", out.string(), "-p", "Once upon a time", "-n", "12",
                            "--temp", "0", "--ignore-eos"});
      EXPECT_EQ(ran.exit_code, 0) << type << " " << arch << ": " << ran.err;
      EXPECT_FALSE(ran.out.empty()) << type << " " << arch;
    }
  }
}

TEST_F(Cli, MakeModelFallsBackForOddRows) {
  const fs::path out = cairn::test::temp_dir("cli-fallback") / "m.gguf";
  Proc made = run_cairn({"make-model", out.string(), "--dim", "64", "--layers", "1", "--heads", "2",
                         "--kv-heads", "2", "--ffn", "96", "--type", "q4_k"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(made.err.find("stored as q5_0"), std::string::npos) << made.err;  // llama.cpp's fallback for Q4_K
  Proc ran = run_cairn({"run", "-m", out.string(), "-n", "4", "--temp", "0", "--ignore-eos"});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
}

TEST_F(Cli, MakeModelWithSharedVocab) {
  CAIRN_REQUIRE_SHARED("tokenizer/ggml-vocab-llama-spm.gguf");
  const fs::path out = cairn::test::temp_dir("cli-shared-vocab") / "m.gguf";
  const std::string vocab =
      (*cairn::test::shared_dir() / "tokenizer" / "ggml-vocab-llama-spm.gguf").string();
  Proc made =
      run_cairn({"make-model", out.string(), "--dim", "128", "--layers", "1", "--heads", "2",
                 "--kv-heads", "2", "--ffn", "256", "--type", "q8_0", "--vocab-from", vocab});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  Proc ran = run_cairn({"run", "-m", out.string(), "-p", "Hello world", "-n", "8", "--seed", "1"});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
}

}  // namespace

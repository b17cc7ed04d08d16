// Tokenizers of real models against the reference vectors in
// ../shared/tokenizer and the golden prompts in ../shared/golden.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace cairn {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: inputs each followed by "\n__ggml_vocab_test__\n"; .out: one line of
// space-separated ids per input (no BOS).
struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<Token>> ids;
};

Vectors read_vectors(const fs::path& gguf_path) {
  Vectors v;
  const std::string inp = read_all(gguf_path.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    v.inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_all(gguf_path.string() + ".out"));
  std::string line;
  while (std::getline(out, line)) {
    std::istringstream ls(line);
    std::vector<Token> ids;
    Token t;
    while (ls >> t) ids.push_back(t);
    v.ids.push_back(std::move(ids));
  }
  return v;
}

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, EncodeMatchesReferenceAndDecodeRoundTrips) {
  const std::string name = std::string("ggml-vocab-") + GetParam() + ".gguf";
  CAIRN_REQUIRE_SHARED("tokenizer/" + name);
  const fs::path path = *test::shared_dir() / "tokenizer" / name;

  auto file = gguf::File::open(path.string());
  ASSERT_TRUE(file) << file.status().message();
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::from_gguf(**file);
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(tok) << tok.status().message();
  const Tokenizer& t = **tok;

  const Vectors v = read_vectors(path);
  ASSERT_GT(v.inputs.size(), 40u);
  ASSERT_EQ(v.inputs.size(), v.ids.size()) << ".inp and .out disagree on the count";
  int exact = 0;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const std::vector<Token> got = t.encode(v.inputs[i], /*add_special=*/false,
                                            /*parse_special=*/false);
    EXPECT_EQ(got, v.ids[i]) << name << " input #" << i << " '" << show(v.inputs[i]) << "'";
    exact += got == v.ids[i];
    // Every vocabulary here is lossless on valid UTF-8 without special tokens.
    EXPECT_EQ(t.decode(v.ids[i]), v.inputs[i]) << name << " input #" << i;
    // With BOS (and EOS) added, decoding still gives the text back.
    EXPECT_EQ(t.decode(t.encode(v.inputs[i], true, false)), v.inputs[i]) << name << " #" << i;
  }
  std::printf("  %-32s %d/%zu vectors exact, %d tokens, loaded in %.0f ms\n", name.c_str(), exact,
              v.inputs.size(), t.vocab_size(), load_ms);
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2",
                                           "deepseek-llm", "deepseek-coder", "falcon", "starcoder"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

// bert-bge is WordPiece (tokenizer.ggml.model = "bert"): lowercased and
// accent-stripped, so decoding is not lossless and is checked on its own.
TEST(VocabVectors, BertBgeWordPiece) {
  const std::string name = "ggml-vocab-bert-bge.gguf";
  CAIRN_REQUIRE_SHARED("tokenizer/" + name);
  const fs::path path = *test::shared_dir() / "tokenizer" / name;
  auto file = gguf::File::open(path.string());
  ASSERT_TRUE(file) << file.status().message();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.status().message();
  const Tokenizer& t = **tok;
  const Vectors v = read_vectors(path);
  ASSERT_GT(v.inputs.size(), 40u);
  ASSERT_EQ(v.inputs.size(), v.ids.size()) << ".inp and .out disagree on the count";
  int exact = 0;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const std::vector<Token> got = t.encode(v.inputs[i], false, false);
    EXPECT_EQ(got, v.ids[i]) << name << " input #" << i << " '" << show(v.inputs[i]) << "'";
    exact += got == v.ids[i];
  }
  std::printf("  %-32s %d/%zu vectors exact\n", name.c_str(), exact, v.inputs.size());
  // [CLS] and [SEP] around the text; pieces joined by spaces, continuations glued.
  const std::vector<Token> ids = t.encode("Hello, Führer's unaffable world", true, false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 101);
  EXPECT_EQ(ids.back(), 102);
  EXPECT_EQ(t.bos(), 101);
  EXPECT_EQ(t.eos(), 102);
  EXPECT_EQ(t.decode(ids), "hello , fuhrer ' s unaffable world");
}

// Special tokens of real vocabularies come out whole and are never split.
TEST(VocabVectors, ChatSpecialTokensAreMatchedWhole) {
  CAIRN_REQUIRE_SHARED("tokenizer/ggml-vocab-qwen2.gguf");
  auto file = gguf::File::open((*test::shared_dir() / "tokenizer/ggml-vocab-qwen2.gguf").string());
  ASSERT_TRUE(file) << file.status().message();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.status().message();
  const Tokenizer& t = **tok;
  const Token im_start = t.find_token("<|im_start|>"), im_end = t.find_token("<|im_end|>");
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  const std::string text = "<|im_start|>user\nHi<|im_end|>\n";
  const std::vector<Token> ids = t.encode(text, false, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 1);
  EXPECT_EQ(t.decode(ids, /*render_special=*/true), text);
  EXPECT_EQ(t.decode(ids, false), "user\nHi\n");
  EXPECT_TRUE(t.is_eog(im_end));
  EXPECT_FALSE(t.is_eog(im_start));
  // Without parse_special the same text is plain characters.
  const std::vector<Token> plain = t.encode(text, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_end), 0);
  EXPECT_EQ(t.decode(plain), text);
  // User-defined (added) tokens are matched even without parse_special.
  const Token think = t.find_token("<think>");
  ASSERT_GE(think, 0);
  EXPECT_EQ(t.encode("a<think>b", false, false)[1], think);
  EXPECT_FALSE(t.add_bos());
  // FIM tokens are recognized by their text, as llama.cpp does: control (not
  // matched in plain text), and the repo / file separators end generation.
  const Token fim_prefix = t.find_token("<|fim_prefix|>"), file_sep = t.find_token("<|file_sep|>");
  EXPECT_EQ(t.attr(fim_prefix), TokenAttr::Control);
  EXPECT_TRUE(t.is_eog(file_sep));
  EXPECT_FALSE(t.is_eog(fim_prefix));
  EXPECT_NE(t.encode("<|fim_prefix|>", false, false), (std::vector<Token>{fim_prefix}));
  EXPECT_EQ(t.encode("<|fim_prefix|>", false, true), (std::vector<Token>{fim_prefix}));
}

TEST(VocabVectors, Llama3AddsBosAndKnowsEog) {
  CAIRN_REQUIRE_SHARED("tokenizer/ggml-vocab-llama-bpe.gguf");
  auto file =
      gguf::File::open((*test::shared_dir() / "tokenizer/ggml-vocab-llama-bpe.gguf").string());
  ASSERT_TRUE(file) << file.status().message();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.status().message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.bos(), 128000);
  const std::vector<Token> ids = t.encode("Hello world", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 128000);
  EXPECT_TRUE(t.is_eog(t.find_token("<|eot_id|>")));
  EXPECT_TRUE(t.is_eog(128001));
  const std::vector<Token> hdr = t.encode("<|start_header_id|>user<|end_header_id|>", false);
  EXPECT_EQ(hdr.front(), t.find_token("<|start_header_id|>"));
  EXPECT_EQ(hdr.back(), t.find_token("<|end_header_id|>"));
}

// 600 random mixes of awkward pieces (scripts, emoji with joiners, odd
// whitespace, digits, contractions) per vocabulary, tokenized by Hugging
// Face's `tokenizers` (data/make_hf_vectors.js); the vocabularies are shared.
class HfVectors : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(HfVectors, MatchHuggingFace) {
  const auto [vocab, data] = GetParam();
  CAIRN_REQUIRE_SHARED(std::string("tokenizer/") + vocab);
  auto file = gguf::File::open((*test::shared_dir() / "tokenizer" / vocab).string());
  ASSERT_TRUE(file) << file.status().message();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.status().message();
  std::ifstream in(fs::path(CAIRN_TESTS_DIR) / "tokenizer" / "data" / data);
  ASSERT_TRUE(in) << "missing test data " << data;
  std::string line;
  int n = 0, exact = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string text = j["text"].get<std::string>();
    const std::vector<Token> want = j["ids"].get<std::vector<Token>>();
    const std::vector<Token> got = (*tok)->encode(text, false, false);
    EXPECT_EQ(got, want) << vocab << ": '" << show(text) << "'";
    EXPECT_EQ((*tok)->decode(got), text);
    exact += got == want;
    ++n;
  }
  EXPECT_EQ(n, 600);
  std::printf("  %-28s %d/%d texts as Hugging Face tokenizes them\n", vocab, exact, n);
}

INSTANTIATE_TEST_SUITE_P(Shared, HfVectors,
                         ::testing::Values(std::pair{"ggml-vocab-llama-bpe.gguf",
                                                     "hf-llama3.jsonl"},
                                           std::pair{"ggml-vocab-qwen2.gguf", "hf-qwen3.jsonl"}));

// The prompts of the golden files, with BOS, as the reference tokenized them.
TEST(GoldenPrompts, MatchPromptTokens) {
  CAIRN_REQUIRE_SHARED("golden");
  const fs::path shared = *test::shared_dir();
  int files = 0;
  for (const auto& entry : fs::directory_iterator(shared / "golden")) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json g = nlohmann::json::parse(read_all(entry.path()), nullptr, false);
    if (g.is_discarded() || !g.contains("model") || !g.contains("cases")) continue;
    const fs::path model = shared / "models" / g["model"].get<std::string>();
    if (!fs::exists(model)) continue;
    auto file = gguf::File::open(model.string());
    ASSERT_TRUE(file) << file.status().message();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok) << model << ": " << tok.status().message();
    for (const auto& c : g["cases"]) {
      const std::string prompt = c["prompt"].get<std::string>();
      const auto want = c["prompt_tokens"].get<std::vector<Token>>();
      EXPECT_EQ((*tok)->encode(prompt, true), want) << model.filename() << ": " << prompt;
      EXPECT_EQ((*tok)->decode(want), prompt);
    }
    ++files;
  }
  EXPECT_GT(files, 0) << "no golden file named a model in ../shared/models";
}

TEST(GoldenPrompts, StoriesOnceUponATime) {
  CAIRN_REQUIRE_SHARED("models/stories260K.gguf");
  auto file = gguf::File::open((*test::shared_dir() / "models/stories260K.gguf").string());
  ASSERT_TRUE(file) << file.status().message();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.status().message();
  EXPECT_EQ((*tok)->encode("Once upon a time", true), (std::vector<Token>{1, 403, 407, 261, 378}));
  EXPECT_EQ((*tok)->bos(), 1);
  EXPECT_EQ((*tok)->eos(), 2);
  EXPECT_TRUE((*tok)->is_eog(2));
}

// Generated text as the reference printed it: each continuation streamed
// token by token (not at the start of the text) equals the golden text.
TEST(GoldenPrompts, StreamedContinuationMatchesGoldenText) {
  CAIRN_REQUIRE_SHARED("golden/stories260K.json");
  const fs::path shared = *test::shared_dir();
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(shared / "golden")) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json g = nlohmann::json::parse(read_all(entry.path()), nullptr, false);
    if (g.is_discarded() || !g.contains("model") || !g.contains("cases")) continue;
    const fs::path model = shared / "models" / g["model"].get<std::string>();
    if (!fs::exists(model)) continue;
    auto file = gguf::File::open(model.string());
    ASSERT_TRUE(file) << file.status().message();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok) << tok.status().message();
    for (const auto& c : g["cases"]) {
      StreamingDetokenizer d(**tok);
      std::string text;
      for (Token t : c["tokens"].get<std::vector<Token>>()) text += d.push(t);
      text += d.flush();
      EXPECT_EQ(text, c["text"].get<std::string>()) << model.filename();
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace cairn
